package cluster

import (
	"math"
	"testing"
)

// TestShare: how a node splits an account's plan rate with the others.
func TestShare(t *testing.T) {
	const plan = 1000.0
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
		{"many light nodes leave nothing: the floor", rateLoad{Rate: 10, Waited: true},
			[]rateLoad{{Rate: 900}, {Rate: 900}}, 0.1 / 3},
	} {
		if got := share(plan, c.mine, c.others); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: share %.4f, want %.4f", c.name, got, c.want)
		}
	}
}
