package sqlstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestErrorsNameTheOperation: a failure of the store says which operation
// failed ("sqlstore: create client: ...") and keeps its cause for
// errors.Is; a domain error (not found, conflict) is returned as it is, its
// message the one users see; and an error of QueryHistory's callback comes
// back as the callback returned it.
func TestErrorsNameTheOperation(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		must(t, s.AppendHistory(ctx, []*fleetmq.Record{{AccountID: accA, ClientID: "c1", Topic: accA + "/c1/state/s", Class: "state",
			QoS: 1, PublishedQoS: 1, Payload: []byte("x"), Received: t0}}))

		canceled, cancel := context.WithCancel(ctx)
		cancel()
		for _, c := range []struct {
			op  string
			err error
		}{
			{"create client", s.CreateClient(canceled, client(accA, "d1", 1), 10)},
			{"accounts", func() error { _, err := s.Accounts(canceled); return err }()},
			{"query history", s.QueryHistory(canceled, &fleetmq.HistoryQuery{AccountID: accA}, func(*fleetmq.Record) error { return nil })},
		} {
			if c.err == nil || !errors.Is(c.err, context.Canceled) || !strings.HasPrefix(c.err.Error(), "sqlstore: "+c.op+": ") ||
				strings.Count(c.err.Error(), "sqlstore: ") != 1 {
				t.Errorf("%s with a canceled context: %v, want \"sqlstore: %s: \" once, wrapping context.Canceled", c.op, c.err, c.op)
			}
		}

		_, err := s.Account(ctx, "no-such-account")
		if !errors.Is(err, fleetmq.ErrNotFound) || err.Error() != `account "no-such-account" not found` {
			t.Errorf("a missing account: %v, want the not_found error as it is", err)
		}
		err = s.CreateAccount(ctx, &fleetmq.Account{ID: accA, Name: "A again", OwnerEmail: "a@example.com", CreatedAt: t0}, "h")
		if !errors.Is(err, fleetmq.ErrConflict) || strings.HasPrefix(err.Error(), "sqlstore:") {
			t.Errorf("a duplicate account: %v, want the conflict error as it is", err)
		}

		stop := errors.New("the callback's own error")
		if err := s.QueryHistory(ctx, &fleetmq.HistoryQuery{AccountID: accA}, func(*fleetmq.Record) error { return stop }); err != stop {
			t.Errorf("QueryHistory returned %v, want the callback's error itself", err)
		}
	})
}
