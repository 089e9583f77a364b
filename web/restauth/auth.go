// Package restauth authenticates subscriber REST API requests and limits
// their rate. An Authenticator checks the "Authorization: Bearer" header
// against an in-memory index of every REST API token (found by the SHA-256
// of the value, as stored), tells missing, malformed, unknown, revoked and
// expired tokens apart with errors that carry the stable codes of
// docs/design.md, and records each token's last use for a periodic Flush. A
// Limiter counts requests per token in fixed UTC-hour windows, with
// in-memory atomic counters on the request path and the counts flushed to
// the store so they survive a restart. Neither takes a global lock or does
// I/O per request. The HTTP middleware that uses both lives in web/api.
package restauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq"
)

// The errors Authenticate returns: domain errors whose Code the API maps to
// its problem responses (fleetmq.CodeOf) and whose Message is meant for
// the caller. Each is returned as is, so errors.Is(err, ErrRevoked) works.
var (
	ErrMissingHeader = &fleetmq.Error{Code: fleetmq.CodeInvalidToken, Message: "missing Authorization header"}
	ErrNotBearer     = &fleetmq.Error{Code: fleetmq.CodeInvalidToken, Message: "Authorization must be 'Bearer <token>'"}
	ErrMalformed     = &fleetmq.Error{Code: fleetmq.CodeInvalidToken, Message: "malformed token"}
	ErrUnknown       = &fleetmq.Error{Code: fleetmq.CodeInvalidToken, Message: "unknown token"}
	// ErrAccountSuspended refuses a valid token of a suspended account.
	ErrAccountSuspended = &fleetmq.Error{Code: fleetmq.CodeInvalidToken, Message: "the token's account is suspended"}
	ErrRevoked          = &fleetmq.Error{Code: fleetmq.CodeTokenRevoked, Message: "token revoked"}
	ErrExpired          = &fleetmq.Error{Code: fleetmq.CodeTokenExpired, Message: "token expired"}
)

// TokenStore is what an Authenticator reads and writes; a
// fleetmq.ControlStore is one.
type TokenStore interface {
	AllRESTTokens(ctx context.Context) ([]*fleetmq.RESTToken, error)
	Accounts(ctx context.Context) ([]*fleetmq.Account, error)
	TouchRESTTokens(ctx context.Context, lastUsed map[string]time.Time) error
}

// Authenticator checks REST API tokens against an in-memory index of the
// store's tokens. It is safe for concurrent use; Authenticate takes no
// lock.
type Authenticator struct {
	// Log, when set, receives a line for each token that a Refresh finds
	// created, revoked or deleted (never the value).
	Log   *slog.Logger
	store TokenStore
	mu    sync.Mutex // serialises Refresh and Flush
	idx   atomic.Pointer[index]
}

// index is one immutable view of the tokens, swapped whole by Refresh.
type index struct {
	byHash map[[sha256.Size]byte]*entry
	byID   map[string]*entry
}

type entry struct {
	token     fleetmq.RESTToken // never modified once indexed
	sum       [sha256.Size]byte // the stored hash, decoded
	accountOK bool              // the account exists
	suspended bool              // the account is suspended
	use       *lastUse          // shared by the entries of one token across refreshes
}

// lastUse is a token's last use (Unix microseconds, 0: none seen) and what
// of it has been flushed. at moves forward only; flushed is written under
// Authenticator.mu.
type lastUse struct {
	at      atomic.Int64
	flushed atomic.Int64
}

// New returns an Authenticator with its index loaded from store.
func New(ctx context.Context, store TokenStore) (*Authenticator, error) {
	a := &Authenticator{store: store}
	if err := a.Refresh(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// Refresh reloads the index from the store: call it when the control-plane
// version moves and after a token is created or revoked in this process
// (control.Service.OnRESTTokenChange). Last uses not yet flushed are kept.
// On error the previous index stays in use.
func (a *Authenticator) Refresh(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	tokens, err := a.store.AllRESTTokens(ctx)
	if err != nil {
		return fmt.Errorf("restauth: load tokens: %w", err)
	}
	accounts, err := a.store.Accounts(ctx)
	if err != nil {
		return fmt.Errorf("restauth: load accounts: %w", err)
	}
	suspended := make(map[string]bool, len(accounts))
	for _, acc := range accounts {
		suspended[acc.ID] = acc.Suspended
	}
	old := a.idx.Load()
	idx := &index{byHash: make(map[[sha256.Size]byte]*entry, len(tokens)), byID: make(map[string]*entry, len(tokens))}
	for _, t := range tokens {
		e := &entry{token: *t}
		// A hash that is not 64 hex digits matches no value: leave it out.
		if len(t.Hash) != hex.EncodedLen(sha256.Size) {
			continue
		}
		if _, err := hex.Decode(e.sum[:], []byte(t.Hash)); err != nil {
			continue
		}
		e.suspended, e.accountOK = suspended[t.AccountID]
		if old != nil && old.byID[t.ID] != nil {
			e.use = old.byID[t.ID].use
		} else {
			e.use = new(lastUse)
		}
		idx.byHash[e.sum] = e
		idx.byID[t.ID] = e
	}
	a.idx.Store(idx)
	a.logChanges(old, idx)
	return nil
}

// logChanges logs the tokens created, revoked or deleted between two
// indexes (not at the first load).
func (a *Authenticator) logChanges(old, cur *index) {
	if a.Log == nil || old == nil {
		return
	}
	attrs := func(t *fleetmq.RESTToken) []any {
		return []any{slog.String("account", t.AccountID), slog.String("token", t.ID), slog.String("prefix", t.Prefix), slog.String("label", t.Label)}
	}
	for id, e := range cur.byID {
		o := old.byID[id]
		switch {
		case o == nil:
			a.Log.Info("REST API token created", attrs(&e.token)...)
		case !o.token.Revoked() && e.token.Revoked():
			a.Log.Info("REST API token revoked", attrs(&e.token)...)
		}
	}
	for id, o := range old.byID {
		if cur.byID[id] == nil {
			a.Log.Info("REST API token deleted", attrs(&o.token)...)
		}
	}
}

// noHash stands in for the stored hash of an unknown token, so an unknown
// value is compared as a known one is.
var noHash [sha256.Size]byte

// Authenticate checks an Authorization header value at now and returns the
// token (a copy; LastUsedAt is now). Errors: ErrMissingHeader, ErrNotBearer,
// ErrMalformed (not a REST token's format or checksum: MQTT passwords and
// usernames end here), ErrUnknown (also for a token whose account no
// longer exists), ErrRevoked, ErrExpired, ErrAccountSuspended.
//
// Every well-formed value takes the same path: its SHA-256, a map lookup
// by it and a constant-time comparison with the stored hash, so an unknown
// value and a wrong one cost the same; only the public format is checked
// before.
func (a *Authenticator) Authenticate(authorizationHeader string, now time.Time) (*fleetmq.RESTToken, error) {
	h := strings.TrimSpace(authorizationHeader)
	if h == "" {
		return nil, ErrMissingHeader
	}
	value, ok := bearer(h)
	if !ok {
		return nil, ErrNotBearer
	}
	if !fleetmq.CheckRESTTokenFormat(value) {
		return nil, ErrMalformed
	}
	sum := sha256.Sum256([]byte(value))
	e, found := a.idx.Load().byHash[sum]
	stored := &noHash
	if found {
		stored = &e.sum
	}
	if subtle.ConstantTimeCompare(stored[:], sum[:]) != 1 || !found || !e.accountOK {
		return nil, ErrUnknown
	}
	switch {
	case e.token.Revoked():
		return nil, ErrRevoked
	case e.token.Expired(now):
		return nil, ErrExpired
	case e.suspended:
		return nil, ErrAccountSuspended
	}
	at := now.UnixMicro()
	for {
		prev := e.use.at.Load()
		if prev >= at || e.use.at.CompareAndSwap(prev, at) {
			break
		}
	}
	t := e.token
	t.LastUsedAt = now
	return &t, nil
}

// bearer returns the credentials of a "Bearer" Authorization value (the
// scheme is case-insensitive, RFC 9110 section 11.1).
func bearer(h string) (string, bool) {
	const scheme = "bearer"
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) || (h[len(scheme)] != ' ' && h[len(scheme)] != '\t') {
		return "", false
	}
	v := strings.TrimLeft(h[len(scheme):], " \t")
	if v == "" || strings.ContainsAny(v, " \t") {
		return "", false
	}
	return v, true
}

// Flush writes the last uses recorded since the previous Flush with
// TouchRESTTokens: call it periodically and at shutdown. On error they stay
// pending for the next Flush.
func (a *Authenticator) Flush(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	idx := a.idx.Load()
	batch := map[string]time.Time{}
	pending := map[*lastUse]int64{}
	for id, e := range idx.byID {
		at := e.use.at.Load()
		if at > e.use.flushed.Load() {
			batch[id] = time.UnixMicro(at).UTC()
			pending[e.use] = at
		}
	}
	if len(batch) == 0 {
		return nil
	}
	if err := a.store.TouchRESTTokens(ctx, batch); err != nil {
		return fmt.Errorf("restauth: flush last use: %w", err)
	}
	for u, at := range pending {
		u.flushed.Store(at)
	}
	return nil
}
