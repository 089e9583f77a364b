package sqlstore_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestProblemsAccumulateAndStayBounded: repeats of one problem add up in
// one row (count, first and last time, the latest detail); each account
// sees only its own; a client keeps its most recent MaxProblemsPerClient,
// an account its most recent MaxProblemsPerAccount, and nothing older than
// ProblemsKeptFor before the newest.
func TestProblemsAccumulateAndStayBounded(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
		wrong := fleetmq.ClientProblem{AccountID: accA, ClientID: "pump-17", Kind: fleetmq.ProblemPublishRefused,
			Topic: accA + "/pump-17/data/level", QoS: 1, Code: 0x90, Reason: "topic_name_invalid",
			Detail: `topic class "data/" is not one of state, event, telemetry, sample`, Count: 3, First: at(10), Last: at(12)}
		full := fleetmq.ClientProblem{AccountID: accA, ClientID: "dash", Kind: fleetmq.ProblemDropped,
			Topic: accA + "/pump-17/state/level", QoS: 1, Reason: "queue_full", Detail: "the session's queue was full", Count: 7, First: at(11), Last: at(11)}
		other := fleetmq.ClientProblem{AccountID: accB, ClientID: "pump-17", Kind: fleetmq.ProblemConnectRefused,
			Code: 0x86, Reason: "bad_user_name_or_password", Detail: "wrong password", Count: 1, First: at(5), Last: at(5)}
		must(t, s.AddProblems(ctx, []fleetmq.ClientProblem{wrong, full, other}))
		again := wrong
		again.Count, again.First, again.Last, again.Detail = 2, at(20), at(21), "the latest detail"
		must(t, s.AddProblems(ctx, []fleetmq.ClientProblem{again}))

		got, err := s.Problems(ctx, accA, "", time.Time{}, 100)
		must(t, err)
		sum := wrong
		sum.Count, sum.Last, sum.Detail = 5, at(21), "the latest detail"
		if want := []fleetmq.ClientProblem{sum, full}; !reflect.DeepEqual(got, want) {
			t.Fatalf("A's problems\n got %+v\nwant %+v", got, want)
		}
		got, err = s.Problems(ctx, accA, "dash", time.Time{}, 100)
		must(t, err)
		if len(got) != 1 || got[0].ClientID != "dash" {
			t.Fatalf("dash's problems: %+v", got)
		}
		if got, _ := s.Problems(ctx, accA, "", at(15), 100); len(got) != 1 || got[0].Kind != fleetmq.ProblemPublishRefused {
			t.Fatalf("A's problems since +15s: %+v, want the refused publish only", got)
		}
		got, err = s.Problems(ctx, accB, "", time.Time{}, 100)
		must(t, err)
		if !reflect.DeepEqual(got, []fleetmq.ClientProblem{other}) {
			t.Fatalf("B's problems: %+v, want only its own", got)
		}

		// One client's flood of distinct topics keeps its newest rows.
		var flood []fleetmq.ClientProblem
		for i := range fleetmq.MaxProblemsPerClient + 30 {
			p := wrong
			p.ClientID, p.Topic, p.Count, p.First, p.Last = "noisy", fmt.Sprintf("%s/noisy/data/%d", accA, i), 1, at(100+i), at(100+i)
			flood = append(flood, p)
		}
		must(t, s.AddProblems(ctx, flood))
		got, err = s.Problems(ctx, accA, "noisy", time.Time{}, 1000)
		must(t, err)
		if len(got) != fleetmq.MaxProblemsPerClient || got[0].Last != at(100+fleetmq.MaxProblemsPerClient+29) || got[len(got)-1].Last != at(130) {
			t.Fatalf("noisy kept %d problems (%v .. %v), want its newest %d", len(got), got[0].Last, got[len(got)-1].Last, fleetmq.MaxProblemsPerClient)
		}
		if got, _ := s.Problems(ctx, accA, "pump-17", time.Time{}, 100); len(got) != 1 {
			t.Fatalf("another client's problems were trimmed with noisy's: %+v", got)
		}

		// Many clients: the account keeps its newest MaxProblemsPerAccount.
		flood = flood[:0]
		for i := range fleetmq.MaxProblemsPerAccount + 10 {
			p := full
			p.ClientID, p.First, p.Last = fmt.Sprintf("sub-%d", i), at(1000+i), at(1000+i)
			flood = append(flood, p)
		}
		must(t, s.AddProblems(ctx, flood))
		got, err = s.Problems(ctx, accA, "", time.Time{}, 5000)
		must(t, err)
		if len(got) != fleetmq.MaxProblemsPerAccount {
			t.Fatalf("A keeps %d problems, want %d", len(got), fleetmq.MaxProblemsPerAccount)
		}
		if got, _ := s.Problems(ctx, accB, "", time.Time{}, 100); len(got) != 1 {
			t.Fatalf("B's problems after A's flood: %+v", got)
		}

		// A week later, the old ones are gone.
		late := full
		late.ClientID, late.First, late.Last = "late", at(3000).Add(fleetmq.ProblemsKeptFor), at(3000).Add(fleetmq.ProblemsKeptFor)
		must(t, s.AddProblems(ctx, []fleetmq.ClientProblem{late}))
		got, err = s.Problems(ctx, accA, "", time.Time{}, 5000)
		must(t, err)
		if len(got) != 1 || got[0].ClientID != "late" {
			t.Fatalf("A's problems a week after the others: %d, want only the late one", len(got))
		}
	})
}
