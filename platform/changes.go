package platform

import (
	"log/slog"
	"slices"
	"time"

	"github.com/fleetmq/fleetmq"
)

// logChanges writes the event-log lines for what changed in the control
// plane between two snapshots, whichever process made the change (the
// CLI, the REST API, the portal): credentials created, revoked or given a
// new expiry, MQTT clients added, removed or given a new maximum QoS,
// accounts suspended or resumed, plans and the QoS 2 add-on changed,
// vendor layouts added or removed. Secrets are never logged.
func logChanges(log *slog.Logger, old, cur *Snapshot) {
	if log == nil || old == nil {
		return
	}
	for user, c := range cur.Creds {
		o := old.Creds[user]
		switch {
		case o == nil || o.ID != c.ID:
			log.Info("credential created", credAttrs(c)...)
		case !o.ExpiresAt.Equal(c.ExpiresAt) || !slices.Equal(o.Filters, c.Filters):
			log.Info("credential changed", credAttrs(c)...)
		}
	}
	for user, o := range old.Creds {
		if c := cur.Creds[user]; c == nil || c.ID != o.ID {
			log.Info("credential revoked", credAttrs(o)...)
		}
	}
	for id, a := range cur.Accounts {
		o := old.Accounts[id]
		if o == nil {
			log.Info("account created", slog.String("account", id), slog.String("plan", a.PlanName))
			o = &Account{Clients: map[string]*Client{}}
		} else {
			if o.Suspended != a.Suspended {
				msg := "account resumed"
				if a.Suspended {
					msg = "account suspended"
				}
				log.Info(msg, slog.String("account", id))
			}
			if o.PlanName != a.PlanName || o.MaxPublisherClients != a.MaxPublisherClients || o.QoS2DailyPool != a.QoS2DailyPool ||
				o.PublishRate != a.PublishRate || o.PublishBytesRate != a.PublishBytesRate ||
				o.AccountPublishRate != a.AccountPublishRate || o.AccountPublishBytesRate != a.AccountPublishBytesRate {
				log.Info("account plan changed", slog.String("account", id), slog.String("plan", a.PlanName),
					slog.Int("max_publisher_clients", a.MaxPublisherClients), slog.Int64("qos2_daily_pool", a.QoS2DailyPool),
					slog.Int("max_publish_rate", a.PublishRate), slog.Int64("max_publish_bytes_rate", a.PublishBytesRate),
					slog.Int("max_account_publish_rate", a.AccountPublishRate), slog.Int64("max_account_publish_bytes_rate", a.AccountPublishBytesRate))
			}
			if o.QoS2AddOn != a.QoS2AddOn {
				log.Info("account add-on changed", slog.String("account", id), slog.String("addon", "qos2"), slog.Bool("active", a.QoS2AddOn))
			}
		}
		for cid, c := range a.Clients {
			switch oc := o.Clients[cid]; {
			case oc == nil:
				log.Info("client added", slog.String("account", id), slog.String("client_id", cid), slog.Int("max_publish_qos", int(c.MaxPublishQoS)))
			case oc.MaxPublishQoS != c.MaxPublishQoS:
				log.Info("client changed", slog.String("account", id), slog.String("client_id", cid), slog.Int("max_publish_qos", int(c.MaxPublishQoS)))
			}
		}
		for cid := range o.Clients {
			if a.Clients[cid] == nil {
				log.Info("client removed", slog.String("account", id), slog.String("client_id", cid))
			}
		}
	}
	for id := range old.Accounts {
		if cur.Accounts[id] == nil {
			log.Info("account deleted", slog.String("account", id))
		}
	}
	layoutNames := func(s *Snapshot) map[string]*fleetmq.CompiledLayout {
		m := map[string]*fleetmq.CompiledLayout{}
		for _, ls := range s.Layouts {
			for _, l := range ls {
				m[l.Name] = l
			}
		}
		return m
	}
	ol, cl := layoutNames(old), layoutNames(cur)
	for name, l := range cl {
		if ol[name] == nil {
			log.Info("vendor layout added", slog.String("layout", name), slog.String("wire_root", l.WireRoot), slog.Bool("fanout", l.Fanout))
		}
	}
	for name := range ol {
		if cl[name] == nil {
			log.Info("vendor layout removed", slog.String("layout", name))
		}
	}
}

func credAttrs(c *Credential) []any {
	attrs := []any{slog.String("account", c.AccountID), slog.String("credential", c.ID),
		slog.String("kind", c.Kind), slog.String("username", c.Username)}
	if !c.ExpiresAt.IsZero() {
		attrs = append(attrs, slog.String("expires", c.ExpiresAt.UTC().Format(time.RFC3339)))
	}
	if len(c.Filters) > 0 {
		attrs = append(attrs, slog.Any("filters", c.Filters))
	}
	return attrs
}
