package portal

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// problemRow is one recent problem of a client as the portal shows it.
type problemRow struct {
	fleetmq.ClientProblem
	Topic string // relative to the client's prefix when under it
	Link  string // the device page, on the Overview, for registered clients
}

// What is the problem's kind in words.
func (r problemRow) What() string {
	switch r.Kind {
	case fleetmq.ProblemConnectRefused:
		return "Connect refused"
	case fleetmq.ProblemPublishRefused:
		return "Publish refused"
	case fleetmq.ProblemSubscribeRefused:
		return "Subscription refused"
	case fleetmq.ProblemWillRefused:
		return "Will refused"
	case fleetmq.ProblemDisconnected:
		return "Disconnected by the server"
	case fleetmq.ProblemDropped:
		return "Not delivered"
	}
	return r.Kind
}

// Code is the MQTT reason code the client got, "" for drops.
func (r problemRow) Code() string {
	if r.ClientProblem.Code == 0 {
		return ""
	}
	return fmt.Sprintf("0x%02X %s", r.ClientProblem.Code, packet.ReasonCode(r.ClientProblem.Code))
}

// problemRows makes rows of ps; topics under prefix (when set) are shown
// relative to it, and link gives a client's page ("" for none).
func problemRows(ps []fleetmq.ClientProblem, prefix string, link func(clientID string) string) []problemRow {
	rows := make([]problemRow, 0, len(ps))
	for _, p := range ps {
		r := problemRow{ClientProblem: p, Topic: p.Topic}
		if prefix != "" {
			r.Topic = strings.TrimPrefix(p.Topic, prefix)
		}
		if link != nil {
			r.Link = link(p.ClientID)
		}
		rows = append(rows, r)
	}
	return rows
}

// problemsSince is how far back the portal lists problems: as long as
// they are kept.
func problemsSince(now time.Time) time.Time { return now.Add(-fleetmq.ProblemsKeptFor) }

// Problems listed on the device page and the Overview.
const (
	DeviceProblems   = 20
	OverviewProblems = 10
)
