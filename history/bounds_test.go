package history_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestBoundsBetweenMicroseconds: records are stored to the microsecond;
// a from or to between two microseconds (RFC 3339 with nanoseconds) keeps
// from inclusive and to exclusive: a record at t0 is before both
// from = to = t0+500ns, so to keeps it and from leaves it out.
func TestBoundsBetweenMicroseconds(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		appendAll(t, st, rec(accA, "c1", "state/x", t0, "at-t0"), rec(accA, "c1", "state/x", t0.Add(time.Microsecond), "at-t0+1us"))
		half := t0.Add(500 * time.Nanosecond).Format(time.RFC3339Nano)
		equal(t, "to="+half, query(t, st, accA, history.Params{To: half}), "c1/state/x at-t0")
		equal(t, "from="+half, query(t, st, accA, history.Params{From: half}), "c1/state/x at-t0+1us")
		exact := t0.Add(time.Microsecond).Format(time.RFC3339Nano)
		equal(t, "to="+exact, query(t, st, accA, history.Params{To: exact}), "c1/state/x at-t0")
		equal(t, "from="+exact, query(t, st, accA, history.Params{From: exact}), "c1/state/x at-t0+1us")
	})
}

// TestBoundsBeforeTheEpochRefused: a from or to before 1970 (no record is)
// is refused with a validation error naming the field, not taken as "no
// bound" (the zero time, 0001-01-01T00:00:00Z, in any offset).
func TestBoundsBeforeTheEpochRefused(t *testing.T) {
	for _, p := range []history.Params{
		{From: "2026-01-01T00:00:00Z", To: "0001-01-01T00:00:00Z"},
		{To: "0001-01-01T01:00:00+01:00"},
		{From: "1969-12-31T23:59:59Z"},
	} {
		_, err := history.Build(accA, p, true)
		var fe *fleetmq.Error
		if !errors.As(err, &fe) || fe.Code != fleetmq.CodeValidation || (fe.Fields["to"] == "" && fe.Fields["from"] == "") {
			t.Errorf("from %q to %q: %v, want a validation error on the bound", p.From, p.To, err)
		}
	}
	if _, err := history.Build(accA, history.Params{From: "1970-01-01T00:00:00Z"}, true); err != nil {
		t.Errorf("from the epoch: %v", err)
	}
}
