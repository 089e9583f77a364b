package portal

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// tokenRow is a REST API token in the table.
type tokenRow struct {
	*fleetmq.RESTToken
	Status string // active, expired, revoked
}

// tokensData is the REST API tokens page.
type tokensData struct {
	Tokens  []tokenRow
	Active  int
	Max     int
	CanAdd  bool
	Reason  string // why tokens cannot be created now
	Created *createdToken
	BaseURL string // the portal's own address, for the curl example
}

// createdToken is a token just created, with its value (shown once).
type createdToken struct {
	*fleetmq.RESTToken
	Value string
}

func (p *Portal) tokensData(c *call) (*tokensData, error) {
	ts, err := p.deps.Service.RESTTokens(c.ctx, c.acc.ID)
	if err != nil {
		return nil, err
	}
	d := &tokensData{Max: fleetmq.MaxActiveRESTTokens}
	for _, t := range ts {
		r := tokenRow{RESTToken: t, Status: "active"}
		switch {
		case t.Revoked():
			r.Status = "revoked"
		case t.Expired(c.now):
			r.Status = "expired"
		default:
			d.Active++
		}
		d.Tokens = append(d.Tokens, r)
	}
	switch {
	case c.plan == nil:
		d.Reason = "Creating REST API tokens needs a base plan. Your account has none yet: ask your operator to assign one (see Subscriptions)."
	case d.Active >= d.Max:
		d.Reason = "You have " + strconv.Itoa(d.Max) + " active tokens, the most an account can have. Revoke one you no longer use to create another."
	default:
		d.CanAdd = true
	}
	return d, nil
}

func (p *Portal) tokens(c *call) {
	d, err := p.tokensData(c)
	if err != nil {
		c.fail(err)
		return
	}
	c.render(http.StatusOK, "tokens", "REST API tokens", "settings", "tokens", d)
}

// createToken creates a token and shows its value, this once.
func (p *Portal) createToken(c *call) {
	f := c.r.PostForm
	label := strings.TrimSpace(f.Get("label"))
	in := control.NewRESTToken{Label: label}
	form := map[string]string{"label": label, "expires_in_days": strings.TrimSpace(f.Get("expires_in_days"))}
	errs := map[string]string{}
	if s := form["expires_in_days"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			errs["expires_in_days"] = "Enter a whole number of days, or leave it empty for a token that does not expire."
		} else {
			in.ExpiresInDays = &n
		}
	}
	var tok *fleetmq.RESTToken
	var value string
	var err error
	if len(errs) == 0 {
		tok, value, err = p.deps.Service.CreateRESTToken(c.ctx, c.acc.ID, in)
	}
	if err != nil {
		switch fleetmq.CodeOf(err) {
		case fleetmq.CodeValidation:
			errs = fieldErrors(err)
		case fleetmq.CodeBasePlanRequired, fleetmq.CodeConflict:
			errs["form"] = err.Error()
		default:
			c.fail(err)
			return
		}
	}
	d, derr := p.tokensData(c)
	if derr != nil {
		c.fail(derr)
		return
	}
	if len(errs) > 0 {
		if errs["form"] == "" && !d.CanAdd {
			errs["form"] = d.Reason
		}
		status := http.StatusUnprocessableEntity
		if fleetmq.CodeOf(err) == fleetmq.CodeConflict || fleetmq.CodeOf(err) == fleetmq.CodeBasePlanRequired {
			status = http.StatusConflict
		}
		c.renderForm(status, "tokens", "REST API tokens", "settings", "tokens", d, form, errs)
		return
	}
	d.Created = &createdToken{RESTToken: tok, Value: value}
	scheme := "http"
	if c.p.secure(c.r) {
		scheme = "https"
	}
	d.BaseURL = scheme + "://" + c.r.Host
	c.render(http.StatusCreated, "token-created", "Token created", "settings", "tokens", d)
}

// fieldErrors turns a validation error into messages by form field.
func fieldErrors(err error) map[string]string {
	out := map[string]string{}
	if e, ok := err.(*fleetmq.Error); ok {
		for k, v := range e.Fields {
			out[k] = sentence(v)
		}
	}
	if len(out) == 0 {
		out["form"] = err.Error()
	}
	return out
}

// sentence capitalises a message and ends it with a full stop.
func sentence(s string) string {
	if s == "" {
		return s
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// token returns the account's REST API token of the request's {id}, or
// writes the not-found page (or the error) and returns nil: another
// account's id is not found.
func (p *Portal) token(c *call) *fleetmq.RESTToken {
	ts, err := p.deps.Service.RESTTokens(c.ctx, c.acc.ID)
	if err != nil {
		c.fail(err)
		return nil
	}
	for _, t := range ts {
		if t.ID == c.r.PathValue("id") {
			return t
		}
	}
	c.notFound("REST API token")
	return nil
}

// confirmData is a confirmation page of a destructive action.
type confirmData struct {
	Heading string
	What    string // the thing, shown in the page's monospace
	Message string
	Action  string // the form's action
	Button  string
	Cancel  string // where Cancel goes
	TestID  string
}

func (p *Portal) revokeTokenPage(c *call) {
	t := p.token(c)
	if t == nil {
		return
	}
	c.render(http.StatusOK, "confirm", "Revoke token", "settings", "tokens", confirmData{
		Heading: "Revoke this REST API token?", What: tokenName(t),
		Message: "Scripts and integrations using it stop working at once, and it cannot be restored. Update your secret stores with a new token first.",
		Action:  "/settings/tokens/" + t.ID + "/revoke", Button: "Revoke token", Cancel: "/settings/tokens", TestID: "revoke-token"})
}

func tokenName(t *fleetmq.RESTToken) string {
	if t.Label != "" {
		return t.Label + " (" + t.Prefix + "…)"
	}
	return t.Prefix + "…"
}

func (p *Portal) revokeToken(c *call) {
	t := p.token(c)
	if t == nil {
		return
	}
	if err := p.deps.Service.RevokeRESTToken(c.ctx, c.acc.ID, t.ID); err != nil {
		if fleetmq.CodeOf(err) == fleetmq.CodeNotFound {
			c.notFound("REST API token")
			return
		}
		c.fail(err)
		return
	}
	c.setFlash("success", "Token "+tokenName(t)+" was revoked.")
	c.redirect("/settings/tokens")
}
