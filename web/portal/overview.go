package portal

import (
	"html/template"
	"net/http"
	"sort"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/platform"
)

// OverviewDays is how many days the Overview's chart shows.
const OverviewDays = 14

// overviewData is the Overview page.
type overviewData struct {
	Today      fleetmq.DailyUsage
	Messages   int64
	Mix        [3]float64
	Connected  int
	Clients    int
	MaxClients int
	QoS2       bool
	PoolSize   int64
	Pool       platform.PoolState
	Demoted    bool
	Remaining  int64
	Drops      []dropRow
	DropsTotal int64
	Days       []dayBar
	Chart      template.HTML
	DaysTotal  [3]int64
	Problems   []problemRow
}

// dropRow is one drop reason of today.
type dropRow struct {
	Reason string
	Count  int64
}

func (p *Portal) overview(c *call) {
	d := &overviewData{QoS2: c.acc.HasAddOn(fleetmq.AddOnQoS2)}
	today := c.now.Format(time.DateOnly)
	first := c.now.AddDate(0, 0, -(OverviewDays - 1)).Format(time.DateOnly)
	usage, err := p.deps.Store.Usage(c.ctx, c.acc.ID, first, today)
	if err != nil {
		c.fail(err)
		return
	}
	byDay := map[string]fleetmq.DailyUsage{}
	for _, u := range usage {
		byDay[u.Day] = u
	}
	d.Today = byDay[today]
	for q := range d.Today.Messages {
		d.Messages += d.Today.Messages[q]
	}
	_, d.Mix = mixPct(d.Today.Messages)
	for reason, n := range d.Today.Drops {
		if n > 0 {
			d.Drops = append(d.Drops, dropRow{Reason: reason, Count: n})
			d.DropsTotal += n
		}
	}
	sort.Slice(d.Drops, func(i, j int) bool {
		if d.Drops[i].Count != d.Drops[j].Count {
			return d.Drops[i].Count > d.Drops[j].Count
		}
		return d.Drops[i].Reason < d.Drops[j].Reason
	})
	for i := OverviewDays - 1; i >= 0; i-- {
		day := c.now.AddDate(0, 0, -i).Format(time.DateOnly)
		b := dayBar{Day: day, Messages: byDay[day].Messages}
		for q := range b.Messages {
			d.DaysTotal[q] += b.Messages[q]
		}
		d.Days = append(d.Days, b)
	}
	d.Chart = dailySVG(d.Days)

	cs, err := p.deps.Store.Clients(c.ctx, c.acc.ID)
	if err != nil {
		c.fail(err)
		return
	}
	d.Clients = len(cs)
	problems, err := p.deps.Store.Problems(c.ctx, c.acc.ID, "", problemsSince(c.now), OverviewProblems)
	if err != nil {
		c.fail(err)
		return
	}
	registered := make(map[string]bool, len(cs))
	for _, cl := range cs {
		registered[cl.ClientID] = true
	}
	d.Problems = problemRows(problems, c.acc.ID+"/", func(id string) string {
		if registered[id] {
			return clientURL(id) + "#problems"
		}
		return "" // a subscriber's client id: no device page
	})
	if c.plan != nil {
		d.MaxClients = c.plan.MaxPublisherClients
		d.PoolSize = c.plan.QoS2DailyPool
	}
	if p.deps.Policy != nil {
		for _, l := range p.deps.Policy.LivePublishers(c.acc.ID, c.now) {
			if l.Connected {
				d.Connected++
			}
		}
		d.Pool = p.deps.Policy.PoolState(c.acc.ID, c.now, d.PoolSize)
	}
	d.Demoted = d.QoS2 && d.Pool.Demoted
	d.Remaining = max(d.PoolSize-d.Pool.Used, 0)
	c.render(http.StatusOK, "overview", "Overview", "overview", "", d)
}
