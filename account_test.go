package fleetmq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
)

// TestPlanValidateRates: publish rates are 0 (unlimited) or within their
// bounds; the default catalog is valid and limits every plan.
func TestPlanValidateRates(t *testing.T) {
	for _, p := range fleetmq.DefaultPlans {
		if err := p.Validate(); err != nil {
			t.Fatalf("default plan %s: %v", p.Name, err)
		}
		if p.MaxPublishRate == 0 || p.MaxPublishBytesRate == 0 || p.MaxAccountPublishRate == 0 || p.MaxAccountPublishBytesRate == 0 {
			t.Fatalf("default plan %s leaves a publish rate unlimited: %+v", p.Name, p)
		}
	}
	base := fleetmq.Plan{Name: "p", MaxPublisherClients: 1, HistoryRetentionDays: 1}
	for _, tc := range []struct {
		name  string
		set   func(p *fleetmq.Plan)
		field string // "" when valid
	}{
		{"all unlimited", func(p *fleetmq.Plan) {}, ""},
		{"lowest", func(p *fleetmq.Plan) {
			p.MaxPublishRate, p.MaxPublishBytesRate, p.MaxAccountPublishRate, p.MaxAccountPublishBytesRate = 1, 1024, 1, 1024
		}, ""},
		{"highest", func(p *fleetmq.Plan) {
			p.MaxPublishRate, p.MaxPublishBytesRate, p.MaxAccountPublishRate, p.MaxAccountPublishBytesRate = 10_000_000, 1<<40, 10_000_000, 1<<40
		}, ""},
		{"negative rate", func(p *fleetmq.Plan) { p.MaxPublishRate = -1 }, "max_publish_rate"},
		{"rate too high", func(p *fleetmq.Plan) { p.MaxAccountPublishRate = 10_000_001 }, "max_account_publish_rate"},
		{"bytes rate too low", func(p *fleetmq.Plan) { p.MaxPublishBytesRate = 1023 }, "max_publish_bytes_rate"},
		{"negative bytes rate", func(p *fleetmq.Plan) { p.MaxAccountPublishBytesRate = -5 }, "max_account_publish_bytes_rate"},
	} {
		p := base
		tc.set(&p)
		err := p.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)):
			t.Errorf("%s: error %v, want one about %s", tc.name, err, tc.field)
		}
	}
}

// TestPlanMaxQueued: the catch-up bound is three messages per publisher
// client the plan allows; an account without a plan has one client's.
func TestPlanMaxQueued(t *testing.T) {
	for clients, want := range map[int]int{0: 3, 1: 3, 10: 30, 1000: 3000, 1_000_000: 3_000_000} {
		p := fleetmq.Plan{MaxPublisherClients: clients}
		if got := p.MaxQueued(); got != want {
			t.Errorf("MaxQueued with %d publisher clients = %d, want %d", clients, got, want)
		}
	}
}

// TestValidName: catalog names are 1-40 lowercase letters, digits, '-'
// or '_', starting with a letter or digit; a plan's is checked by
// Validate with NameRule.
func TestValidName(t *testing.T) {
	for _, n := range []string{"a", "starter", "plan-2", "x_y", "0", strings.Repeat("a", 40)} {
		if !fleetmq.ValidName(n) {
			t.Errorf("ValidName(%q) = false", n)
		}
	}
	for _, n := range []string{"", "-a", "_a", "Starter", "a b", "a/b", "ä", strings.Repeat("a", 41), "a\n"} {
		if fleetmq.ValidName(n) {
			t.Errorf("ValidName(%q) = true", n)
		}
	}
	p := fleetmq.Plan{Name: "Bad Name", MaxPublisherClients: 1, HistoryRetentionDays: 1}
	var e *fleetmq.Error
	if err := p.Validate(); !errors.As(err, &e) || e.Fields["name"] != fleetmq.NameRule {
		t.Errorf("Validate of a plan named %q: %v, want name: %s", p.Name, err, fleetmq.NameRule)
	}
}
