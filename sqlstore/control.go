package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
)

// us stores a time as Unix microseconds; the zero time is NULL.
func us(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func fromUS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// Version implements fleetmq.ControlStore.
func (s *Store) Version(ctx context.Context) (_ int64, err error) {
	defer wrap(&err, "version")
	var v int64
	err = s.db.QueryRowContext(ctx, s.rebind(`SELECT value FROM meta WHERE key = 'control_version'`)).Scan(&v)
	return v, err
}

// CreateAccount implements fleetmq.ControlStore.
func (s *Store) CreateAccount(ctx context.Context, a *fleetmq.Account, ownerPasswordHash string) (err error) {
	defer wrap(&err, "create account")
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO accounts (id, name, owner_email, owner_password_hash, suspended, plan, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
			a.ID, a.Name, a.OwnerEmail, ownerPasswordHash, a.Suspended, nullString(a.Plan), a.CreatedAt.UnixMicro())
		if isUnique(err) {
			return fleetmq.Conflictf("an account with owner e-mail %q or id %q already exists", a.OwnerEmail, a.ID)
		}
		if err != nil {
			return err
		}
		if a.Plan != "" {
			if _, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO subscription_changes (account_id, at, kind, value) VALUES (?, ?, 'plan', ?)`), a.ID, a.CreatedAt.UnixMicro(), a.Plan); err != nil {
				return err
			}
		}
		return nil
	})
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const accountCols = `id, name, owner_email, suspended, COALESCE(plan, ''), created_at`

func scanAccount(sc interface{ Scan(...any) error }) (*fleetmq.Account, error) {
	var a fleetmq.Account
	var created int64
	if err := sc.Scan(&a.ID, &a.Name, &a.OwnerEmail, &a.Suspended, &a.Plan, &created); err != nil {
		return nil, err
	}
	a.CreatedAt = time.UnixMicro(created).UTC()
	a.AddOns = map[fleetmq.AddOn]bool{}
	return &a, nil
}

// Account implements fleetmq.ControlStore.
func (s *Store) Account(ctx context.Context, id string) (_ *fleetmq.Account, err error) {
	defer wrap(&err, "account")
	a, err := scanAccount(s.db.QueryRowContext(ctx, s.rebind(`SELECT `+accountCols+` FROM accounts WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fleetmq.NotFound("account", id)
	}
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT addon FROM account_addons WHERE account_id = ?`), id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var x string
		if err := rows.Scan(&x); err != nil {
			return nil, err
		}
		a.AddOns[fleetmq.AddOn(x)] = true
	}
	return a, rows.Err()
}

// Accounts implements fleetmq.ControlStore.
func (s *Store) Accounts(ctx context.Context) (_ []*fleetmq.Account, err error) {
	defer wrap(&err, "accounts")
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT `+accountCols+` FROM accounts ORDER BY created_at, id`))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*fleetmq.Account
	byID := map[string]*fleetmq.Account{}
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
		byID[a.ID] = a
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	ar, err := s.db.QueryContext(ctx, s.rebind(`SELECT account_id, addon FROM account_addons`))
	if err != nil {
		return nil, err
	}
	defer ar.Close()
	for ar.Next() {
		var id, x string
		if err := ar.Scan(&id, &x); err != nil {
			return nil, err
		}
		if a := byID[id]; a != nil {
			a.AddOns[fleetmq.AddOn(x)] = true
		}
	}
	return out, ar.Err()
}

// SetSuspended implements fleetmq.ControlStore.
func (s *Store) SetSuspended(ctx context.Context, id string, suspended bool) (err error) {
	defer wrap(&err, "set suspended")
	return s.write(ctx, func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(ctx, s.rebind(`UPDATE accounts SET suspended = ? WHERE id = ?`), suspended, id))("account", id)
	})
}

// mustAffect turns "no row changed" into not_found.
func mustAffect(r sql.Result, err error) func(what, id string) error {
	return func(what, id string) error {
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fleetmq.NotFound(what, id)
		}
		return nil
	}
}

// OwnerPasswordHash implements fleetmq.ControlStore.
func (s *Store) OwnerPasswordHash(ctx context.Context, email string) (_, _ string, err error) {
	defer wrap(&err, "owner password hash")
	var id, hash string
	err = s.db.QueryRowContext(ctx, s.rebind(`SELECT id, owner_password_hash FROM accounts WHERE owner_email = ?`), strings.ToLower(email)).Scan(&id, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", fleetmq.NotFound("owner", email)
	}
	return id, hash, err
}

// planColumns are the plans table's columns in planFields order.
const planColumns = `name, max_publisher_clients, qos2_daily_pool, history_retention_days,
	max_publish_rate, max_publish_bytes_rate, max_account_publish_rate, max_account_publish_bytes_rate`

// planFields are the scan destinations of planColumns.
func planFields(p *fleetmq.Plan) []any {
	return []any{&p.Name, &p.MaxPublisherClients, &p.QoS2DailyPool, &p.HistoryRetentionDays,
		&p.MaxPublishRate, &p.MaxPublishBytesRate, &p.MaxAccountPublishRate, &p.MaxAccountPublishBytesRate}
}

// Plans implements fleetmq.ControlStore.
func (s *Store) Plans(ctx context.Context) (_ []fleetmq.Plan, err error) {
	defer wrap(&err, "plans")
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT `+planColumns+` FROM plans ORDER BY max_publisher_clients, name`))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []fleetmq.Plan
	for rows.Next() {
		var p fleetmq.Plan
		if err := rows.Scan(planFields(&p)...); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Plan implements fleetmq.ControlStore.
func (s *Store) Plan(ctx context.Context, name string) (_ *fleetmq.Plan, err error) {
	defer wrap(&err, "plan")
	var p fleetmq.Plan
	err = s.db.QueryRowContext(ctx, s.rebind(`SELECT `+planColumns+` FROM plans WHERE name = ?`), name).
		Scan(planFields(&p)...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fleetmq.NotFound("plan", name)
	}
	return &p, err
}

// PutPlan implements fleetmq.ControlStore (insert or update).
func (s *Store) PutPlan(ctx context.Context, p fleetmq.Plan) (err error) {
	defer wrap(&err, "put plan")
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO plans (`+planColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET max_publisher_clients = excluded.max_publisher_clients, qos2_daily_pool = excluded.qos2_daily_pool,
				history_retention_days = excluded.history_retention_days, max_publish_rate = excluded.max_publish_rate,
				max_publish_bytes_rate = excluded.max_publish_bytes_rate, max_account_publish_rate = excluded.max_account_publish_rate,
				max_account_publish_bytes_rate = excluded.max_account_publish_bytes_rate`),
			p.Name, p.MaxPublisherClients, p.QoS2DailyPool, p.HistoryRetentionDays,
			p.MaxPublishRate, p.MaxPublishBytesRate, p.MaxAccountPublishRate, p.MaxAccountPublishBytesRate)
		return err
	})
}

// SetPlan implements fleetmq.ControlStore.
func (s *Store) SetPlan(ctx context.Context, accountID, plan string, at time.Time) (err error) {
	defer wrap(&err, "set plan")
	return s.write(ctx, func(tx *sql.Tx) error {
		if plan != "" {
			var n int
			if err := tx.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM plans WHERE name = ?`), plan).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fleetmq.NotFound("plan", plan)
			}
		}
		if err := mustAffect(tx.ExecContext(ctx, s.rebind(`UPDATE accounts SET plan = ? WHERE id = ?`), nullString(plan), accountID))("account", accountID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO subscription_changes (account_id, at, kind, value) VALUES (?, ?, 'plan', ?)`), accountID, at.UnixMicro(), plan)
		return err
	})
}

// SetAddOn implements fleetmq.ControlStore.
func (s *Store) SetAddOn(ctx context.Context, accountID string, x fleetmq.AddOn, on bool, at time.Time) (err error) {
	defer wrap(&err, "set add-on")
	return s.write(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM accounts WHERE id = ?`), accountID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fleetmq.NotFound("account", accountID)
		}
		var r sql.Result
		var err error
		kind := "addon_off"
		if on {
			kind = "addon_on"
			r, err = tx.ExecContext(ctx, s.rebind(`INSERT INTO account_addons (account_id, addon) VALUES (?, ?) ON CONFLICT DO NOTHING`), accountID, string(x))
		} else {
			r, err = tx.ExecContext(ctx, s.rebind(`DELETE FROM account_addons WHERE account_id = ? AND addon = ?`), accountID, string(x))
		}
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return nil // already so: nothing to record
		}
		_, err = tx.ExecContext(ctx, s.rebind(`INSERT INTO subscription_changes (account_id, at, kind, value) VALUES (?, ?, ?, ?)`), accountID, at.UnixMicro(), kind, string(x))
		return err
	})
}

// SubscriptionChanges implements fleetmq.ControlStore.
func (s *Store) SubscriptionChanges(ctx context.Context, accountID string) (_ []fleetmq.SubscriptionChange, err error) {
	defer wrap(&err, "subscription changes")
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT at, kind, value FROM subscription_changes WHERE account_id = ? ORDER BY at, id`), accountID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []fleetmq.SubscriptionChange
	for rows.Next() {
		var c fleetmq.SubscriptionChange
		var at int64
		if err := rows.Scan(&at, &c.Kind, &c.Value); err != nil {
			return nil, err
		}
		c.At = time.UnixMicro(at).UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

// CreateClient implements fleetmq.ControlStore. The count and the insert
// run in one control-plane write, and writes take turns (see write), so
// concurrent registrations cannot pass the plan limit together.
func (s *Store) CreateClient(ctx context.Context, c *fleetmq.MQTTClient, max int) (err error) {
	defer wrap(&err, "create client")
	return s.write(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM mqtt_clients WHERE account_id = ?`), c.AccountID).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return fleetmq.Conflictf("the plan allows %d publisher clients and %d are registered", max, n)
		}
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO mqtt_clients (account_id, client_id, label, max_publish_qos, created_at) VALUES (?, ?, ?, ?, ?)`),
			c.AccountID, c.ClientID, c.Label, c.MaxPublishQoS, c.CreatedAt.UnixMicro())
		if isUnique(err) {
			return fleetmq.Conflictf("client id %q is already registered", c.ClientID)
		}
		return err
	})
}

const clientCols = `account_id, client_id, label, max_publish_qos, created_at`

func scanClient(sc interface{ Scan(...any) error }) (*fleetmq.MQTTClient, error) {
	var c fleetmq.MQTTClient
	var created int64
	if err := sc.Scan(&c.AccountID, &c.ClientID, &c.Label, &c.MaxPublishQoS, &created); err != nil {
		return nil, err
	}
	c.CreatedAt = time.UnixMicro(created).UTC()
	return &c, nil
}

// Client implements fleetmq.ControlStore.
func (s *Store) Client(ctx context.Context, accountID, clientID string) (_ *fleetmq.MQTTClient, err error) {
	defer wrap(&err, "client")
	if !fleetmq.ValidClientID(clientID) { // none is registered, and PostgreSQL refuses some (NUL)
		return nil, fleetmq.NotFound("client", clientID)
	}
	c, err := scanClient(s.db.QueryRowContext(ctx, s.rebind(`SELECT `+clientCols+` FROM mqtt_clients WHERE account_id = ? AND client_id = ?`), accountID, clientID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fleetmq.NotFound("client", clientID)
	}
	return c, err
}

func (s *Store) queryClients(ctx context.Context, q string, args ...any) ([]*fleetmq.MQTTClient, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*fleetmq.MQTTClient
	for rows.Next() {
		c, err := scanClient(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Clients implements fleetmq.ControlStore.
func (s *Store) Clients(ctx context.Context, accountID string) (_ []*fleetmq.MQTTClient, err error) {
	defer wrap(&err, "clients")
	return s.queryClients(ctx, `SELECT `+clientCols+` FROM mqtt_clients WHERE account_id = ? ORDER BY client_id`, accountID)
}

// AllClients implements fleetmq.ControlStore.
func (s *Store) AllClients(ctx context.Context) (_ []*fleetmq.MQTTClient, err error) {
	defer wrap(&err, "all clients")
	return s.queryClients(ctx, `SELECT `+clientCols+` FROM mqtt_clients`)
}

// UpdateClient implements fleetmq.ControlStore (label and max QoS).
func (s *Store) UpdateClient(ctx context.Context, c *fleetmq.MQTTClient) (err error) {
	defer wrap(&err, "update client")
	return s.write(ctx, func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(ctx, s.rebind(`UPDATE mqtt_clients SET label = ?, max_publish_qos = ? WHERE account_id = ? AND client_id = ?`),
			c.Label, c.MaxPublishQoS, c.AccountID, c.ClientID))("client", c.ClientID)
	})
}

// DeleteClient implements fleetmq.ControlStore.
func (s *Store) DeleteClient(ctx context.Context, accountID, clientID string) (err error) {
	defer wrap(&err, "delete client")
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := mustAffect(tx.ExecContext(ctx, s.rebind(`DELETE FROM mqtt_clients WHERE account_id = ? AND client_id = ?`), accountID, clientID))("client", clientID); err != nil {
			return err
		}
		// The device's persistent session (namespace the account) ends
		// with it: see endSessionClaims.
		return s.endSessionClaims(ctx, tx, accountID+"\x00"+clientID, false)
	})
}

// endSessionClaims removes the session claims, and the states saved with
// them, of the session key (or, with prefix, of every key starting with
// it) whose owner is gone for good. A node that holds such a session
// running ends it at its next snapshot (Policy.Gone), its release then
// finding nothing; one that is down, or never comes back, no longer
// hands it to another node's resume, nor restores it at its start (no
// claim: ended meanwhile), so a client id added again starts afresh.
func (s *Store) endSessionClaims(ctx context.Context, tx *sql.Tx, key string, prefix bool) error {
	if !prefix {
		_, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM session_owners WHERE key = ?`), []byte(key))
		return err
	}
	_, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM session_owners WHERE substr(key, 1, ?) = ?`), len(key), []byte(key))
	return err
}

// CreateCredential implements fleetmq.ControlStore.
func (s *Store) CreateCredential(ctx context.Context, c *fleetmq.Credential) (err error) {
	defer wrap(&err, "create credential")
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO credentials (id, account_id, kind, username, label, secret_hash, filters, created_at, expires_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			c.ID, c.AccountID, c.Kind, c.Username, c.Label, c.SecretHash, encodeList(c.Filters), c.CreatedAt.UnixMicro(), us(c.ExpiresAt), us(c.RevokedAt))
		if isUnique(err) {
			return fleetmq.Conflictf("username %q is taken", c.Username)
		}
		return err
	})
}

const credCols = `id, account_id, kind, username, label, secret_hash, filters, created_at, expires_at, revoked_at`

func (s *Store) queryCreds(ctx context.Context, q string, args ...any) ([]*fleetmq.Credential, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*fleetmq.Credential
	for rows.Next() {
		var c fleetmq.Credential
		var filters string
		var created int64
		var expires, revoked sql.NullInt64
		if err := rows.Scan(&c.ID, &c.AccountID, &c.Kind, &c.Username, &c.Label, &c.SecretHash, &filters, &created, &expires, &revoked); err != nil {
			return nil, err
		}
		if c.Filters, err = decodeList(filters); err != nil {
			return nil, fmt.Errorf("credential %s filters: %w", c.ID, err)
		}
		c.CreatedAt, c.ExpiresAt, c.RevokedAt = time.UnixMicro(created).UTC(), fromUS(expires), fromUS(revoked)
		out = append(out, &c)
	}
	return out, rows.Err()
}

// Credentials implements fleetmq.ControlStore; kind "" lists both kinds.
func (s *Store) Credentials(ctx context.Context, accountID, kind string) (_ []*fleetmq.Credential, err error) {
	defer wrap(&err, "credentials")
	return s.queryCreds(ctx, `SELECT `+credCols+` FROM credentials WHERE account_id = ? AND (CAST(? AS TEXT) = '' OR kind = ?) ORDER BY created_at, id`, accountID, kind, kind)
}

// ActiveCredentials implements fleetmq.ControlStore.
func (s *Store) ActiveCredentials(ctx context.Context) (_ []*fleetmq.Credential, err error) {
	defer wrap(&err, "active credentials")
	return s.queryCreds(ctx, `SELECT `+credCols+` FROM credentials WHERE revoked_at IS NULL`)
}

// RevokeCredential implements fleetmq.ControlStore. Revoking twice is not
// an error; revoking another account's credential is not_found.
func (s *Store) RevokeCredential(ctx context.Context, accountID, id string, at time.Time) (err error) {
	defer wrap(&err, "revoke credential")
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := mustAffect(tx.ExecContext(ctx, s.rebind(`UPDATE credentials SET revoked_at = COALESCE(revoked_at, ?) WHERE account_id = ? AND id = ?`), at.UnixMicro(), accountID, id))("credential", id); err != nil {
			return err
		}
		// A subscriber password's sessions (namespace account/credential)
		// end with it; a publisher's devices keep theirs (namespace the
		// account: another credential may bring them back).
		return s.endSessionClaims(ctx, tx, accountID+"/"+id+"\x00", true)
	})
}

// PutLayout implements fleetmq.ControlStore (insert or replace by name).
func (s *Store) PutLayout(ctx context.Context, l *fleetmq.Layout) (err error) {
	defer wrap(&err, "put layout")
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO layouts (id, name, wire_root, rules, fanout, created_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET wire_root = excluded.wire_root, rules = excluded.rules, fanout = excluded.fanout`),
			l.ID, l.Name, l.WireRoot, encodeList(l.Rules), l.Fanout, l.CreatedAt.UnixMicro())
		return err
	})
}

// Layouts implements fleetmq.ControlStore.
func (s *Store) Layouts(ctx context.Context) (_ []*fleetmq.Layout, err error) {
	defer wrap(&err, "layouts")
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT id, name, wire_root, rules, fanout, created_at FROM layouts ORDER BY name`))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*fleetmq.Layout
	for rows.Next() {
		var l fleetmq.Layout
		var rules string
		var created int64
		if err := rows.Scan(&l.ID, &l.Name, &l.WireRoot, &rules, &l.Fanout, &created); err != nil {
			return nil, err
		}
		if l.Rules, err = decodeList(rules); err != nil {
			return nil, fmt.Errorf("layout %s rules: %w", l.Name, err)
		}
		l.CreatedAt = time.UnixMicro(created).UTC()
		out = append(out, &l)
	}
	return out, rows.Err()
}

// DeleteLayout implements fleetmq.ControlStore.
func (s *Store) DeleteLayout(ctx context.Context, name string) (err error) {
	defer wrap(&err, "delete layout")
	return s.write(ctx, func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(ctx, s.rebind(`DELETE FROM layouts WHERE name = ?`), name))("layout", name)
	})
}

// encodeList stores a list of strings as a JSON array, so no value can be
// mistaken for two (a filter with a line break, say).
func encodeList(v []string) string {
	if len(v) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// decodeList reads encodeList's form.
func decodeList(s string) ([]string, error) {
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, nil
	}
	return v, nil
}
