package cluster

import (
	"math"
	"testing"
)

// TestShare: how a node splits an account's plan rate with the others.
func TestShare(t *testing.T) {
	const plan = 1000.0
	rate := func(l rateLoad) float64 { return l.Rate }
	for _, c := range []struct {
		name   string
		mine   rateLoad
		others []rateLoad
		want   float64
	}{
		{"alone: all of it", rateLoad{Rate: 900, Waited: true}, nil, 1},
		{"two nodes waiting: half each", rateLoad{Rate: 500, Waited: true}, []rateLoad{{Rate: 500, Waited: true}}, 0.5},
		{"waiting beside a light node: what it leaves", rateLoad{Rate: 800, Waited: true}, []rateLoad{{Rate: 100}}, 1 - (100*1.25+20)/plan},
		{"light beside a waiting node: its use and room to grow", rateLoad{Rate: 100}, []rateLoad{{Rate: 800, Waited: true}}, (100*1.25 + 20) / plan},
		{"idle here, busy elsewhere: a little", rateLoad{}, []rateLoad{{Rate: 1000, Waited: true}}, 0.05},
		{"three waiting beside one light: a third each of the rest", rateLoad{Rate: 300, Waited: true},
			[]rateLoad{{Rate: 300, Waited: true}, {Rate: 300, Waited: true}, {Rate: 40}}, (1 - (40*1.25+20)/plan) / 3},
		{"no one waits but the needs pass the plan: scaled to it", rateLoad{Rate: 700}, []rateLoad{{Rate: 700}}, 0.5},
		{"uneven needs past the plan: in proportion", rateLoad{Rate: 300}, []rateLoad{{Rate: 900}}, (300*1.25 + 20) / plan / (1 + (300*1.25+20)/plan)},
		{"needs past the plan beside a waiting node: scaled to what its floor leaves", rateLoad{Rate: 900},
			[]rateLoad{{Rate: 900}, {Rate: 10, Waited: true}}, 0.5 * (1 - 0.1/3)},
		{"unlimited plan", rateLoad{Rate: 5}, []rateLoad{{Rate: 5}}, 1},
	} {
		p := plan
		if c.name == "unlimited plan" {
			p = 0
		}
		if got := share(p, c.mine.Rate, c.mine.Waited, c.others, rate); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: share %.4f, want %.4f", c.name, got, c.want)
		}
	}
}

// TestSharesSettleWithinThePlan runs nodes' shares round after round
// against steady demands (a node waits when its demand passes its share)
// and checks where the account's rate settles: at most the plan, and the
// whole demand when it fits.
func TestSharesSettleWithinThePlan(t *testing.T) {
	const plan = 1000.0
	rate := func(l rateLoad) float64 { return l.Rate }
	for _, demand := range [][]float64{{700, 700}, {500, 500, 500}, {900, 300}, {200, 300}, {50, 2000}, {1000, 0, 0}} {
		shares := make([]float64, len(demand))
		for i := range shares {
			shares[i] = 1 // before the first report, each node has all
		}
		var loads []rateLoad
		for range 20 {
			loads = loads[:0]
			for i, d := range demand {
				used := min(d, shares[i]*plan)
				loads = append(loads, rateLoad{Rate: used, Waited: d > shares[i]*plan})
			}
			for i := range shares {
				var others []rateLoad
				for j, l := range loads {
					if j != i && demand[j] > 0 {
						others = append(others, l)
					}
				}
				shares[i] = share(plan, loads[i].Rate, loads[i].Waited, others, rate)
			}
		}
		total, want := 0.0, 0.0
		for i, d := range demand {
			total += min(d, shares[i]*plan)
			want += d
		}
		if total > plan*1.001 {
			t.Errorf("demands %v: the account publishes %.0f/s in all for a plan of %.0f (shares %.3f)", demand, total, plan, shares)
		}
		if want <= plan && total < want*0.999 {
			t.Errorf("demands %v: the account publishes %.0f/s of the %.0f it asks, within its plan (shares %.3f)", demand, total, want, shares)
		}
		if want > plan && total < plan*0.85 {
			t.Errorf("demands %v: the account publishes %.0f/s, well under its plan of %.0f (shares %.3f)", demand, total, plan, shares)
		}
	}
}
