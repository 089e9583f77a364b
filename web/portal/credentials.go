package portal

import (
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// DefaultMQTTPort is the broker port shown when Options.MQTTPublicAddr is
// not set.
const DefaultMQTTPort = "1883"

// credRow is a credential in a table.
type credRow struct {
	*fleetmq.Credential
	Status string // active, expired, revoked
}

// credentialsData is the Credentials page.
type credentialsData struct {
	Publishers  []credRow
	Subscribers []credRow
	Examples    examples
	// Created is a credential just created, with its password (shown once).
	Created  *fleetmq.Credential
	Password string
}

// examples are ready-to-copy mosquitto command lines.
type examples struct {
	Host, Port string
	Sub, Pub   string
}

// mqttAddr is the broker address for examples.
func (p *Portal) mqttAddr(r *http.Request) (host, port string) {
	if a := p.opts.MQTTPublicAddr; a != "" {
		if h, pt, err := net.SplitHostPort(a); err == nil {
			return h, pt
		}
		return a, DefaultMQTTPort
	}
	host = r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	if host == "" {
		host = "localhost"
	}
	return strings.Trim(host, "[]"), DefaultMQTTPort
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// buildExamples fills the mosquitto examples; empty user or password take
// placeholders.
func (p *Portal) buildExamples(c *call, subUser, subPass, pubUser, pubPass, clientID string) examples {
	host, port := p.mqttAddr(c.r)
	if subUser == "" {
		subUser = "<username>"
	}
	if pubUser == "" {
		pubUser = "<username>"
	}
	if subPass == "" {
		subPass = "<password>"
	}
	if pubPass == "" {
		pubPass = "<password>"
	}
	if clientID == "" {
		clientID = "<client_id>"
	}
	acc := c.acc.ID
	e := examples{Host: host, Port: port}
	e.Sub = "mosquitto_sub -h " + shellQuote(host) + " -p " + port + " -V mqttv5 \\\n  -u " + shellQuote(subUser) + " -P " + shellQuote(subPass) +
		" \\\n  -t " + shellQuote(acc+"/#") + " -v"
	e.Pub = "mosquitto_pub -h " + shellQuote(host) + " -p " + port + " -V mqttv5 \\\n  -u " + shellQuote(pubUser) + " -P " + shellQuote(pubPass) +
		" -i " + shellQuote(clientID) + " \\\n  -t " + shellQuote(acc+"/"+clientID+"/telemetry/temp_probe") + " -q 0 \\\n  -m " + shellQuote(`{"temperature": 21.5}`)
	return e
}

func (p *Portal) credentialsData(c *call) (*credentialsData, error) {
	d := &credentialsData{}
	for _, kind := range []string{fleetmq.KindPublisher, fleetmq.KindSubscriber} {
		cs, err := p.deps.Store.Credentials(c.ctx, c.acc.ID, kind)
		if err != nil {
			return nil, err
		}
		for _, cr := range cs {
			r := credRow{Credential: cr, Status: "active"}
			switch {
			case !cr.RevokedAt.IsZero():
				r.Status = "revoked"
			case !cr.Active(c.now):
				r.Status = "expired"
			}
			if kind == fleetmq.KindPublisher {
				d.Publishers = append(d.Publishers, r)
			} else {
				d.Subscribers = append(d.Subscribers, r)
			}
		}
	}
	clientID := ""
	if cs, err := p.deps.Store.Clients(c.ctx, c.acc.ID); err == nil && len(cs) > 0 {
		clientID = cs[0].ClientID
	}
	d.Examples = p.buildExamples(c, firstActive(d.Subscribers), "", firstActive(d.Publishers), "", clientID)
	return d, nil
}

func firstActive(rs []credRow) string {
	for _, r := range rs {
		if r.Status == "active" {
			return r.Username
		}
	}
	return ""
}

func (p *Portal) credentials(c *call) {
	d, err := p.credentialsData(c)
	if err != nil {
		c.fail(err)
		return
	}
	c.render(http.StatusOK, "credentials", "Credentials", "clients", "credentials", d)
}

// createCredential creates a fleet publisher credential or a subscriber
// MQTT password and shows its password, this once.
func (p *Portal) createCredential(c *call) {
	f := c.r.PostForm
	kind := f.Get("kind")
	if kind != fleetmq.KindPublisher && kind != fleetmq.KindSubscriber {
		p.errorPage(c.w, c.r, http.StatusBadRequest, "Bad request", "Unknown kind of credential.")
		return
	}
	pre := kind[:3] + "_" // form fields are pub_* and sub_*
	form := map[string]string{"kind": kind, pre + "label": strings.TrimSpace(f.Get("label")),
		pre + "expires_in_days": strings.TrimSpace(f.Get("expires_in_days")), pre + "filters": f.Get("filters")}
	in := control.NewCredential{Kind: kind, Label: form[pre+"label"]}
	errs := map[string]string{}
	if s := form[pre+"expires_in_days"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			errs[pre+"expires_in_days"] = "Enter a whole number of days from 1, or leave it empty for no expiry."
		}
		in.ExpiresInDays = n
	}
	if kind == fleetmq.KindSubscriber {
		for _, line := range strings.Split(form[pre+"filters"], "\n") {
			if line = strings.TrimSpace(line); line != "" {
				in.Filters = append(in.Filters, line)
			}
		}
	}
	var cred *fleetmq.Credential
	var pw string
	if len(errs) == 0 {
		var err error
		cred, pw, err = p.deps.Service.CreateCredential(c.ctx, c.acc.ID, in)
		if err != nil {
			if fleetmq.CodeOf(err) != fleetmq.CodeValidation {
				c.fail(err)
				return
			}
			for k, v := range fieldErrors(err) {
				errs[pre+k] = v
			}
		}
	}
	d, err := p.credentialsData(c)
	if err != nil {
		c.fail(err)
		return
	}
	if len(errs) > 0 {
		c.renderForm(http.StatusUnprocessableEntity, "credentials", "Credentials", "clients", "credentials", d, form, errs)
		return
	}
	p.changed(c.ctx)
	d.Created, d.Password = cred, pw
	clientID := ""
	if cs, err := p.deps.Store.Clients(c.ctx, c.acc.ID); err == nil && len(cs) > 0 {
		clientID = cs[0].ClientID
	}
	if kind == fleetmq.KindSubscriber {
		d.Examples = p.buildExamples(c, cred.Username, pw, firstActive(d.Publishers), "", clientID)
	} else {
		d.Examples = p.buildExamples(c, firstActive(d.Subscribers), "", cred.Username, pw, clientID)
	}
	c.render(http.StatusCreated, "credential-created", "Credential created", "clients", "credentials", d)
}

// credential returns the account's credential of the request's {id} (a
// fleet publisher credential or a subscriber password), or writes the
// not-found page (or the error) and returns nil: another account's id is
// not found.
func (p *Portal) credential(c *call) *fleetmq.Credential {
	id := c.r.PathValue("id")
	for _, kind := range []string{fleetmq.KindPublisher, fleetmq.KindSubscriber} {
		cs, err := p.deps.Store.Credentials(c.ctx, c.acc.ID, kind)
		if err != nil {
			c.fail(err)
			return nil
		}
		for _, cr := range cs {
			if cr.ID == id {
				return cr
			}
		}
	}
	c.notFound("Credential")
	return nil
}

func credKind(cr *fleetmq.Credential) string {
	if cr.Kind == fleetmq.KindSubscriber {
		return "subscriber MQTT password"
	}
	return "fleet publisher credential"
}

func (p *Portal) revokeCredentialPage(c *call) {
	cr := p.credential(c)
	if cr == nil {
		return
	}
	msg := "Devices connected with it are disconnected at once and can no longer connect."
	if cr.Kind == fleetmq.KindSubscriber {
		msg = "Subscribers connected with it are disconnected at once and can no longer connect."
	}
	c.render(http.StatusOK, "confirm", "Revoke credential", "clients", "credentials", confirmData{
		Heading: "Revoke this " + credKind(cr) + "?", What: cr.Username,
		Message: msg + " It cannot be restored.", Action: "/credentials/" + cr.ID + "/revoke", Button: "Revoke",
		Cancel: "/credentials", TestID: "revoke-credential"})
}

func (p *Portal) revokeCredential(c *call) {
	cr := p.credential(c)
	if cr == nil {
		return
	}
	if err := p.deps.Service.RevokeCredential(c.ctx, c.acc.ID, cr.ID); err != nil {
		if fleetmq.CodeOf(err) == fleetmq.CodeNotFound {
			c.notFound("Credential")
			return
		}
		c.fail(err)
		return
	}
	p.changed(c.ctx)
	c.setFlash("success", "The "+credKind(cr)+" "+cr.Username+" was revoked.")
	c.redirect("/credentials")
}
