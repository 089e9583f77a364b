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
		{"heavy beside a waiting node: an equal part at most", rateLoad{Rate: 700}, []rateLoad{{Rate: 50, Waited: true}}, 0.5},
		{"idle here, busy elsewhere: almost nothing", rateLoad{}, []rateLoad{{Rate: 1000, Waited: true}}, idleShare},
		{"three waiting beside one light: a third each of the rest", rateLoad{Rate: 300, Waited: true},
			[]rateLoad{{Rate: 300, Waited: true}, {Rate: 300, Waited: true}, {Rate: 40}}, (1 - (40*1.25+20)/plan) / 3},
		{"no one waits but the needs pass the plan: scaled to it", rateLoad{Rate: 700}, []rateLoad{{Rate: 700}}, 0.5},
		{"uneven needs past the plan: in proportion", rateLoad{Rate: 300}, []rateLoad{{Rate: 900}}, (300*1.25 + 20) / plan / (1 + (300*1.25+20)/plan)},
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
// against demands (a node waits when its demand passes its share; a node
// may start late) and checks where the account's rate settles: at most
// the plan; the whole demand when it fits; and otherwise the max-min fair
// split (each node what it asks up to an equal part, the others sharing
// the rest), whatever node started first, give or take the room a node
// that does not wait keeps to grow.
func TestSharesSettleWithinThePlan(t *testing.T) {
	const plan = 1000.0
	rate := func(l rateLoad) float64 { return l.Rate }
	for _, c := range []struct {
		demand []float64
		start  []int // the round each node starts publishing
	}{
		{[]float64{700, 700}, []int{0, 0}},
		{[]float64{700, 700}, []int{0, 3}},
		{[]float64{500, 500, 500}, []int{0, 0, 0}},
		{[]float64{900, 300}, []int{0, 0}},
		{[]float64{200, 300}, []int{0, 2}},
		{[]float64{50, 2000}, []int{0, 0}},
		{[]float64{790, 2000}, []int{0, 5}},
		{[]float64{1000, 0, 0}, []int{0, 0, 0}},
		{[]float64{400, 400, 400, 400}, []int{0, 1, 2, 3}},
	} {
		n := len(c.demand)
		shares := make([]float64, n)
		for i := range shares {
			shares[i] = 1 // before the first report, each node has all
		}
		used := make([]float64, n)
		for round := range 30 {
			loads := make([]rateLoad, n)
			for i, d := range c.demand {
				if round < c.start[i] {
					d = 0
				}
				used[i] = min(d, shares[i]*plan)
				loads[i] = rateLoad{Rate: used[i], Waited: d > shares[i]*plan}
			}
			for i := range shares {
				var others []rateLoad
				for j, l := range loads {
					if j != i && (l.Rate > 0 || l.Waited) {
						others = append(others, l)
					}
				}
				shares[i] = share(plan, loads[i].Rate, loads[i].Waited, others, rate)
			}
		}
		total, want := 0.0, 0.0
		for i, d := range c.demand {
			total += used[i]
			want += d
		}
		if total > plan*1.001 {
			t.Errorf("demands %v from rounds %v: %.0f/s in all for a plan of %.0f (used %.0f)", c.demand, c.start, total, plan, used)
		}
		if want <= plan && total < want*0.999 {
			t.Errorf("demands %v from rounds %v: %.0f/s of the %.0f asked, within the plan (used %.0f)", c.demand, c.start, total, want, used)
		}
		if want > plan {
			// The max-min fair split, less the room to grow of the nodes
			// that do not wait.
			fair := maxMin(c.demand, plan)
			for i := range used {
				if used[i] < fair[i]*0.75-plan*0.02 {
					t.Errorf("demands %v from rounds %v: node %d gets %.0f/s, its fair part is %.0f (used %.0f)", c.demand, c.start, i, used[i], fair[i], used)
				}
			}
		}
	}
}

// TestIdleNodesHoldLittle: nodes where an account is idle hold 1% of its
// plan each, beside the node where its devices publish.
func TestIdleNodesHoldLittle(t *testing.T) {
	rate := func(l rateLoad) float64 { return l.Rate }
	busy := share(1000, 900, true, nil, rate) // alone among the reporting nodes
	total := busy
	for range 9 {
		total += share(1000, 0, false, []rateLoad{{Rate: 900, Waited: true}}, rate)
	}
	if total > 1.1 {
		t.Fatalf("ten nodes, one active: the shares sum to %.2f of the plan", total)
	}
}

// maxMin is the max-min fair split of plan between demands.
func maxMin(demand []float64, plan float64) []float64 {
	out := make([]float64, len(demand))
	left, open := plan, 0
	for _, d := range demand {
		if d > 0 {
			open++
		}
	}
	for open > 0 {
		part := left / float64(open)
		done := true
		for i, d := range demand {
			if d > 0 && out[i] == 0 && d <= part {
				out[i], left, open, done = d, left-d, open-1, false
			}
		}
		if done {
			for i, d := range demand {
				if d > 0 && out[i] == 0 {
					out[i] = part
				}
			}
			break
		}
	}
	return out
}
