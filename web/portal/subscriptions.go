package portal

import (
	"net/http"
	"strconv"

	"github.com/fleetmq/fleetmq"
)

// addonInfo describes an add-on on the Subscriptions page.
type addonInfo struct {
	ID      string
	Title   string
	Active  bool
	Summary string
	Enables []string
}

// addonDesc says what an add-on is for, in one sentence.
func addonDesc(x fleetmq.AddOn) string {
	switch x {
	case fleetmq.AddOnHistoryDownload:
		return "Read and export stored history from scripts and integrations over the REST API."
	case fleetmq.AddOnLiveREST:
		return "Ask the REST API which devices are connected now, their QoS mix today and their retained state."
	case fleetmq.AddOnMgmtREST:
		return "Manage MQTT clients, credentials and subscriber passwords from scripts and CI/CD over the REST API."
	case fleetmq.AddOnQoS2:
		return "Exactly-once delivery for state/ and event/ messages published at QoS 2, up to the plan's daily pool."
	}
	return ""
}

// addonEnables lists what an add-on switches on.
func addonEnables(x fleetmq.AddOn, plan *fleetmq.Plan) []string {
	switch x {
	case fleetmq.AddOnHistoryDownload:
		return []string{"GET /api/v1/subscriber/history: page through history with filters (client, topic, time range), as JSON",
			"Streamed exports as NDJSON or CSV"}
	case fleetmq.AddOnLiveREST:
		return []string{"GET /api/v1/subscriber/publishers/live: connection status, protocol, last publish and QoS mix of every device",
			"The devices' live retained state/ messages"}
	case fleetmq.AddOnMgmtREST:
		return []string{"GET, POST, DELETE /api/v1/subscriber/publishers and PATCH /publishers/{client_id} (max_publish_qos)",
			"POST /api/v1/subscriber/subscriber-mqtt-passwords and fleet publisher credentials", "Usage and the QoS 2 pool over REST"}
	case fleetmq.AddOnQoS2:
		pool := "the plan's daily pool"
		if plan != nil {
			pool = "the plan's pool of " + num(plan.QoS2DailyPool) + " messages per UTC day"
		}
		return []string{"Max QoS 2 on MQTT clients (the “QoS 2 guaranteed delivery” checkbox)",
			"state/ and event/ publishes at QoS 2 are delivered as QoS 2, up to " + pool,
			"After the pool is used up they count as QoS 1 until UTC midnight; without the add-on every QoS 2 publish counts as QoS 1"}
	}
	return nil
}

// subscriptionsData is the Subscriptions page.
type subscriptionsData struct {
	Plan    *fleetmq.Plan
	Clients int
	AddOns  []addonInfo
	Changes []changeRow
}

// changeRow is one recorded change of the subscription.
type changeRow struct {
	fleetmq.SubscriptionChange
	Text string
}

func (p *Portal) subscriptions(c *call) {
	d := &subscriptionsData{Plan: c.plan}
	cs, err := p.deps.Store.Clients(c.ctx, c.acc.ID)
	if err != nil {
		c.fail(err)
		return
	}
	d.Clients = len(cs)
	for _, x := range fleetmq.AddOns {
		d.AddOns = append(d.AddOns, addonInfo{ID: string(x), Title: x.Title(), Active: c.acc.HasAddOn(x),
			Summary: addonDesc(x), Enables: addonEnables(x, c.plan)})
	}
	changes, err := p.deps.Store.SubscriptionChanges(c.ctx, c.acc.ID)
	if err != nil {
		c.fail(err)
		return
	}
	for i := len(changes) - 1; i >= 0 && len(d.Changes) < 20; i-- {
		ch := changes[i]
		r := changeRow{SubscriptionChange: ch}
		switch ch.Kind {
		case "plan":
			r.Text = "Base plan set to " + ch.Value
			if ch.Value == "" {
				r.Text = "Base plan removed"
			}
		case "addon_on", "addon_off":
			verb := "enabled"
			if ch.Kind == "addon_off" {
				verb = "disabled"
			}
			r.Text = fleetmq.AddOn(ch.Value).Title() + " " + verb
		default:
			r.Text = ch.Kind + " " + ch.Value
		}
		d.Changes = append(d.Changes, r)
	}
	c.render(http.StatusOK, "subscriptions", "Subscriptions", "subscriptions", "", d)
}

// setAddOn switches an add-on on (on=1) or off (on=0).
func (p *Portal) setAddOn(c *call) {
	x, ok := fleetmq.ParseAddOn(c.r.PathValue("addon"))
	if !ok {
		c.notFound("Add-on")
		return
	}
	on, err := strconv.ParseBool(c.r.PostForm.Get("on"))
	if err != nil {
		p.errorPage(c.w, c.r, http.StatusBadRequest, "Bad request", "Say whether to enable or disable the add-on.")
		return
	}
	if err := p.deps.Service.SetAddOn(c.ctx, c.acc.ID, x, on); err != nil {
		c.fail(err)
		return
	}
	p.changed(c.ctx)
	if on {
		c.setFlash("success", x.Title()+" is enabled. It applies at once.")
	} else {
		c.setFlash("success", x.Title()+" is disabled. It applies at once.")
	}
	c.redirect("/subscriptions#addon-" + string(x))
}
