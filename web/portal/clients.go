package portal

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/platform"
)

// clientRow is a registered client with its live state.
type clientRow struct {
	*fleetmq.MQTTClient
	Live  platform.PublisherLive
	Known bool // the broker's view has the client (it lags a new one by a reload)
}

// Status is "connected", "offline" or "never".
func (r clientRow) Status() string {
	switch {
	case r.Live.Connected:
		return "connected"
	case r.Live.LastSeen.IsZero():
		return "never"
	}
	return "offline"
}

// MixTotal is the client's messages today.
func (r clientRow) MixTotal() int64 { return r.Live.Today[0] + r.Live.Today[1] + r.Live.Today[2] }

// MixPct is the client's QoS shares today.
func (r clientRow) MixPct() [3]float64 { _, p := mixPct(r.Live.Today); return p }

// URL is the client's device page.
func (r clientRow) URL() string { return clientURL(r.ClientID) }

func clientURL(id string) string { return "/clients/" + url.PathEscape(id) }

// clientsData is the MQTT Clients page.
type clientsData struct {
	Clients []clientRow
	Max     int // the plan's max_publisher_clients (0 without a plan)
	CanAdd  bool
	Reason  string // why no client can be registered now
	QoS2    bool   // the QoS 2 add-on is active
}

func (p *Portal) clientsData(c *call) (*clientsData, error) {
	cs, err := p.deps.Store.Clients(c.ctx, c.acc.ID)
	if err != nil {
		return nil, err
	}
	live := map[string]platform.PublisherLive{}
	if p.deps.Policy != nil {
		for _, l := range p.deps.Policy.LivePublishers(c.acc.ID, c.now) {
			live[l.ClientID] = l
		}
	}
	d := &clientsData{QoS2: c.acc.HasAddOn(fleetmq.AddOnQoS2)}
	for _, cl := range cs {
		l, ok := live[cl.ClientID]
		d.Clients = append(d.Clients, clientRow{MQTTClient: cl, Live: l, Known: ok})
	}
	switch {
	case c.plan == nil:
		d.Reason = "Registering MQTT clients needs a base plan. Your account has none yet: ask your operator to assign one."
	case len(cs) >= c.plan.MaxPublisherClients:
		d.Max = c.plan.MaxPublisherClients
		d.Reason = "All " + strconv.Itoa(d.Max) + " clients of the " + c.plan.Name + " plan are registered. Delete one to register another."
	default:
		d.Max = c.plan.MaxPublisherClients
		d.CanAdd = true
	}
	return d, nil
}

func (p *Portal) clients(c *call) {
	d, err := p.clientsData(c)
	if err != nil {
		c.fail(err)
		return
	}
	c.render(http.StatusOK, "clients", "MQTT Clients", "clients", "clients", d)
}

// maxQoSOf reads the Max QoS of a client form: the select (0 or 1), or 2
// when the "QoS 2 guaranteed delivery" box is ticked.
func maxQoSOf(f url.Values) (int, bool) {
	if f.Get("qos2") != "" {
		return 2, true
	}
	switch f.Get("max_qos") {
	case "0":
		return 0, true
	case "1", "":
		return 1, true
	case "2":
		return 2, true
	}
	return 0, false
}

// clientErrors maps an error of the control service to form messages;
// false when it is not the user's to fix.
func clientErrors(err error) (map[string]string, bool) {
	switch fleetmq.CodeOf(err) {
	case fleetmq.CodeValidation:
		errs := fieldErrors(err)
		if m, ok := errs["max_publish_qos"]; ok {
			delete(errs, "max_publish_qos")
			errs["max_qos"] = m
		}
		return errs, true
	case fleetmq.CodeAddOnRequired:
		return map[string]string{"qos2": "QoS 2 needs the Guaranteed delivery (QoS 2) add-on. Enable it under Subscriptions first."}, true
	case fleetmq.CodeConflict, fleetmq.CodeBasePlanRequired:
		return map[string]string{"form": sentence(err.Error())}, true
	}
	return nil, false
}

func (p *Portal) createClient(c *call) {
	f := c.r.PostForm
	form := map[string]string{"client_id": strings.TrimSpace(f.Get("client_id")), "label": strings.TrimSpace(f.Get("label")),
		"max_qos": f.Get("max_qos"), "qos2": f.Get("qos2")}
	q, ok := maxQoSOf(f)
	var err error
	errs := map[string]string{}
	if !ok {
		errs["max_qos"] = "Choose QoS 0 or 1."
	} else {
		label := form["label"]
		_, err = p.deps.Service.CreateClient(c.ctx, c.acc.ID, control.ClientInput{ClientID: form["client_id"], Label: &label, MaxPublishQoS: &q})
		if err != nil {
			if errs, ok = clientErrors(err); !ok {
				c.fail(err)
				return
			}
		}
	}
	if len(errs) > 0 {
		d, derr := p.clientsData(c)
		if derr != nil {
			c.fail(derr)
			return
		}
		status := http.StatusUnprocessableEntity
		if fleetmq.CodeOf(err) == fleetmq.CodeConflict || fleetmq.CodeOf(err) == fleetmq.CodeBasePlanRequired {
			status = http.StatusConflict
		}
		c.renderForm(status, "clients", "MQTT Clients", "clients", "clients", d, form, errs)
		return
	}
	p.changed(c.ctx)
	c.setFlash("success", "Client "+form["client_id"]+" was registered. Devices connect with it as their MQTT client id and a fleet publisher credential.")
	c.redirect(clientURL(form["client_id"]))
}

// clientOf loads the client of the path's id in the account; it answers
// 404 itself and returns nil when there is none.
func (p *Portal) clientOf(c *call) *fleetmq.MQTTClient {
	cl, err := p.deps.Store.Client(c.ctx, c.acc.ID, c.r.PathValue("id"))
	if fleetmq.CodeOf(err) == fleetmq.CodeNotFound {
		c.notFound("MQTT client")
		return nil
	}
	if err != nil {
		c.fail(err)
		return nil
	}
	return cl
}

// editData is the edit page of a client.
type editData struct {
	Client *fleetmq.MQTTClient
	QoS2   bool
}

func (p *Portal) editClientPage(c *call) {
	cl := p.clientOf(c)
	if cl == nil {
		return
	}
	form := map[string]string{"label": cl.Label, "max_qos": strconv.Itoa(min(cl.MaxPublishQoS, 1))}
	if cl.MaxPublishQoS == 2 {
		form["qos2"] = "1"
	}
	c.renderForm(http.StatusOK, "client-edit", "Edit "+cl.ClientID, "clients", "clients", editData{Client: cl, QoS2: c.acc.HasAddOn(fleetmq.AddOnQoS2)}, form, nil)
}

func (p *Portal) editClient(c *call) {
	cl := p.clientOf(c)
	if cl == nil {
		return
	}
	f := c.r.PostForm
	form := map[string]string{"label": strings.TrimSpace(f.Get("label")), "max_qos": f.Get("max_qos"), "qos2": f.Get("qos2")}
	errs := map[string]string{}
	q, ok := maxQoSOf(f)
	if !ok {
		errs["max_qos"] = "Choose QoS 0 or 1."
	} else {
		label := form["label"]
		_, err := p.deps.Service.UpdateClient(c.ctx, c.acc.ID, control.ClientInput{ClientID: cl.ClientID, Label: &label, MaxPublishQoS: &q})
		if err != nil {
			if errs, ok = clientErrors(err); !ok {
				if fleetmq.CodeOf(err) == fleetmq.CodeNotFound {
					c.notFound("MQTT client")
					return
				}
				c.fail(err)
				return
			}
		}
	}
	if len(errs) > 0 {
		c.renderForm(http.StatusUnprocessableEntity, "client-edit", "Edit "+cl.ClientID, "clients", "clients",
			editData{Client: cl, QoS2: c.acc.HasAddOn(fleetmq.AddOnQoS2)}, form, errs)
		return
	}
	p.changed(c.ctx)
	c.setFlash("success", "Client "+cl.ClientID+" was saved.")
	c.redirect(clientURL(cl.ClientID))
}

func (p *Portal) deleteClientPage(c *call) {
	cl := p.clientOf(c)
	if cl == nil {
		return
	}
	c.render(http.StatusOK, "confirm", "Delete "+cl.ClientID, "clients", "clients", confirmData{
		Heading: "Delete this MQTT client?", What: cl.ClientID,
		Message: "A device connected with this client id is disconnected at once and can no longer connect. Its stored history is kept until the plan's retention removes it.",
		Action:  clientURL(cl.ClientID) + "/delete", Button: "Delete client", Cancel: clientURL(cl.ClientID), TestID: "delete-client"})
}

func (p *Portal) deleteClient(c *call) {
	cl := p.clientOf(c)
	if cl == nil {
		return
	}
	if err := p.deps.Service.DeleteClient(c.ctx, c.acc.ID, cl.ClientID); err != nil {
		if fleetmq.CodeOf(err) == fleetmq.CodeNotFound {
			c.notFound("MQTT client")
			return
		}
		c.fail(err)
		return
	}
	p.changed(c.ctx)
	c.setFlash("success", "Client "+cl.ClientID+" was deleted.")
	c.redirect("/clients")
}
