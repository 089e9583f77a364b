package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq"
)

// DefaultRetentionDays applies to accounts without a base plan (they cannot
// publish, but may hold history from before their plan ended).
const DefaultRetentionDays = 7

// Retention deletes history older than each account's plan allows, in
// small batches so that ingest, which shares the database, never waits for
// more than one batch. On a store that keeps history in days
// (fleetmq.HistoryDays), it first drops whole the days in which no account
// keeps a record and reorders the days that ended by client, then deletes
// rows of the others.
type Retention struct {
	Control interface {
		fleetmq.AccountReader
		fleetmq.PlanReader
	}
	History fleetmq.HistoryStore
	Now     func() time.Time
	Logger  *slog.Logger
	// Batch is the most records one DELETE removes (default 250: on
	// SQLite each delete holds the one write lock, which history commits
	// and the acknowledgements they carry wait for; 250 records take about
	// 5 ms, 2,000 about 28, BenchmarkDeleteHistory).
	Batch int
	// Pause between batches of one account (default 5 ms), so a backlog
	// of deletions is spread out rather than taking the database.
	Pause time.Duration

	deleted       atomic.Int64
	daysDropped   atomic.Int64
	daysReordered atomic.Int64
	runs          atomic.Int64
}

// Deleted returns the records deleted so far (for metrics), not counting
// those of the days dropped whole.
func (r *Retention) Deleted() int64 { return r.deleted.Load() }

// DaysDropped returns the days of history dropped whole so far (for
// metrics).
func (r *Retention) DaysDropped() int64 { return r.daysDropped.Load() }

// DaysReordered returns the days of history reordered by client so far
// (for metrics).
func (r *Retention) DaysReordered() int64 { return r.daysReordered.Load() }

// Runs returns the completed passes (for metrics).
func (r *Retention) Runs() int64 { return r.runs.Load() }

// Run makes a pass every interval until ctx ends.
func (r *Retention) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.logger().Warn("history retention", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass deletes every account's expired history and returns how many
// records it deleted.
func (r *Retention) Pass(ctx context.Context) (int64, error) {
	accounts, err := r.Control.Accounts(ctx)
	if err != nil {
		return 0, err
	}
	plans, err := r.Control.Plans(ctx)
	if err != nil {
		return 0, err
	}
	days := make(map[string]int, len(plans))
	for _, p := range plans {
		days[p.Name] = p.HistoryRetentionDays
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	batch := r.Batch
	if batch <= 0 {
		batch = 250
	}
	pause := r.Pause
	if pause <= 0 {
		pause = 5 * time.Millisecond
	}
	keep := func(a *fleetmq.Account) int {
		if d, ok := days[a.Plan]; ok {
			return d
		}
		return DefaultRetentionDays
	}
	// A failure of the days' upkeep (a drop that timed out waiting for a
	// reader, say) does not hold up the rows' deletion, nor does one
	// account's failure hold up the next account's.
	errs := []error{r.upkeepDays(ctx, now(), accounts, keep)}
	var total int64
	for _, a := range accounts {
		before := now().Add(-time.Duration(keep(a)) * 24 * time.Hour)
		for {
			n, err := r.History.DeleteHistory(ctx, a.ID, before, batch)
			total += n
			r.deleted.Add(n)
			if err != nil {
				if ctx.Err() != nil {
					return total, err
				}
				errs = append(errs, fmt.Errorf("account %s: %w", a.ID, err))
				break
			}
			if n < int64(batch) {
				break
			}
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(pause):
			}
		}
	}
	r.runs.Add(1)
	return total, errors.Join(errs...)
}

// upkeepDays, on a store that keeps history in days, creates today's and
// tomorrow's days, drops the days that no account still keeping them has
// records in, and reorders those that ended ReorderAfter ago, each step
// whatever the one before did. Records of accounts that no longer exist
// expire as those of an account without a plan do.
func (r *Retention) upkeepDays(ctx context.Context, now time.Time, accounts []*fleetmq.Account, keep func(*fleetmq.Account) int) error {
	d, ok := r.History.(fleetmq.HistoryDays)
	if !ok {
		return nil
	}
	prepErr := d.PrepareHistoryDays(ctx, now)
	expired := make(map[string]time.Time, len(accounts))
	for _, a := range accounts {
		expired[a.ID] = now.Add(-time.Duration(keep(a)) * 24 * time.Hour)
	}
	n, dropErr := d.DropHistoryDays(ctx, now.Add(-DefaultRetentionDays*24*time.Hour), expired)
	r.daysDropped.Add(int64(n))
	n, reorderErr := d.ReorderHistoryDays(ctx, now.Add(-ReorderAfter))
	r.daysReordered.Add(int64(n))
	if err := errors.Join(prepErr, dropErr, reorderErr); err != nil {
		return fmt.Errorf("history days: %w", err)
	}
	return nil
}

// ReorderAfter is how long after its end a day of history is reordered by
// client (fleetmq.HistoryDays): records of a day arrive until shortly
// after its end.
const ReorderAfter = time.Hour

func (r *Retention) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}
