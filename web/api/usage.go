package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/fleetmq/fleetmq"
)

// PoolStatus is the account's daily QoS 2 pool now.
type PoolStatus struct {
	AddOnActive  bool       `json:"addon_active" doc:"Whether the Guaranteed delivery (QoS 2) add-on is on."`
	Size         int64      `json:"size" doc:"Effective QoS 2 messages per UTC day (the plan's pool)."`
	UsedToday    int64      `json:"used_today"`
	Remaining    int64      `json:"remaining"`
	Demoted      bool       `json:"demoted" doc:"The pool is used up: state/ and event/ QoS 2 publishes count as QoS 1 until it resets."`
	DemotedSince *time.Time `json:"demoted_since,omitempty"`
	ResetsAt     time.Time  `json:"resets_at" doc:"The next UTC midnight."`
}

// DayUsage is one UTC day of metered usage.
type DayUsage struct {
	Day       string           `json:"day" example:"2026-11-22"`
	Messages  QoSMix           `json:"messages" doc:"Accepted messages by effective QoS."`
	PoolUsed  int64            `json:"qos2_pool_used"`
	Demotions int64            `json:"demotions" doc:"QoS 2 publishes counted as QoS 1 because the pool was used up."`
	Refused   int64            `json:"refused" doc:"Publishes refused by the platform's rules."`
	Drops     map[string]int64 `json:"drops,omitempty" doc:"Messages not delivered to a subscriber session, by reason."`
}

// Usage is the account's metered usage.
type Usage struct {
	AccountID string     `json:"account_id"`
	Plan      string     `json:"plan" doc:"The base plan; empty when none."`
	Pool      PoolStatus `json:"qos2_pool"`
	Total     QoSMix     `json:"total" doc:"All days of the range."`
	Days      []DayUsage `json:"days" doc:"Days with traffic, oldest first."`
}

type usageInput struct {
	From string `query:"from" format:"date" doc:"First UTC day (YYYY-MM-DD); default 29 days before to."`
	To   string `query:"to" format:"date" doc:"Last UTC day (YYYY-MM-DD); default today."`
}

// maxUsageDays bounds a usage range.
const maxUsageDays = 366

func (a *API) registerUsage() {
	huma.Register(a.huma, op("getUsage", http.MethodGet, "/usage", "Usage and the QoS 2 pool",
		"Messages by effective QoS (the QoS mix), QoS 2 pool use and demotions per UTC day, and the pool's state now. "+
			"Metering reaches the store within a second or two.",
		fleetmq.AddOnMgmtREST, http.StatusOK, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *usageInput) (*struct{ Body Usage }, error) {
			p := caller(ctx)
			now := a.deps.Now().UTC()
			to, from := now, now.AddDate(0, 0, -29)
			var fields []*FieldError
			if in.To != "" {
				t, err := time.Parse(time.DateOnly, in.To)
				if err != nil {
					fields = append(fields, &FieldError{Location: "query.to", Message: "must be a date YYYY-MM-DD", Value: in.To})
				}
				to, from = t, t.AddDate(0, 0, -29)
			}
			if in.From != "" {
				t, err := time.Parse(time.DateOnly, in.From)
				if err != nil {
					fields = append(fields, &FieldError{Location: "query.from", Message: "must be a date YYYY-MM-DD", Value: in.From})
				}
				from = t
			}
			if len(fields) == 0 && from.After(to) {
				fields = append(fields, &FieldError{Location: "query.from", Message: "must not be after to"})
			}
			if len(fields) == 0 && to.Sub(from) > maxUsageDays*24*time.Hour {
				fields = append(fields, &FieldError{Location: "query.from", Message: "a range is at most 366 days"})
			}
			if len(fields) > 0 {
				pr := newProblem(http.StatusUnprocessableEntity, fleetmq.CodeValidation, "validation failed")
				pr.Errors = fields
				return nil, pr
			}
			days, err := a.deps.Store.Usage(ctx, p.account.ID, from.Format(time.DateOnly), to.Format(time.DateOnly))
			if err != nil {
				return nil, a.fail(ctx, err, "")
			}
			out := &struct{ Body Usage }{Body: Usage{AccountID: p.account.ID, Plan: p.account.Plan, Days: []DayUsage{}}}
			var total [3]int64
			for _, d := range days {
				for i := range total {
					total[i] += d.Messages[i]
				}
				out.Body.Days = append(out.Body.Days, DayUsage{Day: d.Day, Messages: mixOf(d.Messages), PoolUsed: d.PoolUsed,
					Demotions: d.Demotions, Refused: d.Refused, Drops: d.Drops})
			}
			out.Body.Total = mixOf(total)
			var size int64
			if p.account.Plan != "" {
				if pl, err := a.deps.Store.Plan(ctx, p.account.Plan); err == nil {
					size = pl.QoS2DailyPool
				}
			}
			st := a.deps.Policy.PoolState(p.account.ID, now, size)
			addOn := p.account.HasAddOn(fleetmq.AddOnQoS2)
			out.Body.Pool = PoolStatus{AddOnActive: addOn, Size: size, UsedToday: st.Used, Remaining: max(size-st.Used, 0),
				Demoted: st.Demoted && addOn, ResetsAt: st.ResetsAt}
			if out.Body.Pool.Demoted {
				out.Body.Pool.DemotedSince = timePtr(a.demotedSince(ctx, p.account.ID, st.Day, st.Since, days))
			}
			return out, nil
		})
}

// demotedSince is when the account's pool of day ran out: the earliest of
// this node's time (since) and the one stored with the day's usage (days
// when they hold the day, else read), which on a cluster is the earliest
// any node saw and flushed; a node whose own devices never met the
// demotion only knows the time of the request.
func (a *API) demotedSince(ctx context.Context, account, day string, since time.Time, days []fleetmq.DailyUsage) time.Time {
	var stored time.Time
	found := false
	for _, d := range days {
		if d.Day == day {
			stored, found = d.DemotedSince, true
		}
	}
	if !found {
		if u, err := a.deps.Store.Usage(ctx, account, day, day); err == nil && len(u) == 1 {
			stored = u[0].DemotedSince
		}
	}
	if !stored.IsZero() && (since.IsZero() || stored.Before(since)) {
		return stored
	}
	return since
}
