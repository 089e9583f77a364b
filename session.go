package fleetmq

import (
	"context"
	"time"
)

// PortalSession is a signed-in portal session of an account's owner. The
// session id itself lives only in the owner's browser cookie; the store
// keeps its SHA-256 (HashSecret), so a copy of the database cannot be
// turned into a signed-in browser.
type PortalSession struct {
	IDHash     string // hex SHA-256 of the cookie's session id
	AccountID  string
	CreatedAt  time.Time // sign-in: the absolute expiry counts from here
	LastSeenAt time.Time // last request (coarsely updated): the idle expiry counts from here
}

// PortalStore keeps portal sessions and the owners' portal passwords.
// None of its writes is a control-plane change: Version does not move.
type PortalStore interface {
	// CreatePortalSession stores a new session. It returns a not_found
	// error when the account does not exist and a conflict error when the
	// id hash is taken.
	CreatePortalSession(ctx context.Context, s *PortalSession) error
	// PortalSession returns the session of an id hash, or a not_found
	// error.
	PortalSession(ctx context.Context, idHash string) (*PortalSession, error)
	// TouchPortalSession moves a session's last-seen time forward (never
	// backwards); an unknown id hash is ignored.
	TouchPortalSession(ctx context.Context, idHash string, at time.Time) error
	// DeletePortalSession deletes a session; an unknown id hash is ignored.
	DeletePortalSession(ctx context.Context, idHash string) error
	// DeletePortalSessions deletes every session of an account except the
	// one of keepIDHash ("" keeps none) and returns how many it deleted.
	DeletePortalSessions(ctx context.Context, accountID, keepIDHash string) (int64, error)
	// DeleteStalePortalSessions deletes the sessions of every account last
	// seen before lastSeenBefore or created before createdBefore (idle and
	// absolute expiry) and returns how many it deleted.
	DeleteStalePortalSessions(ctx context.Context, lastSeenBefore, createdBefore time.Time) (int64, error)
	// SetOwnerPasswordHash replaces the portal password hash of an
	// account's owner and, in the same transaction, deletes every portal
	// session of the account, so no browser signed in with the old password
	// stays signed in whatever happens next; it returns how many sessions it
	// deleted, not_found for an unknown account.
	SetOwnerPasswordHash(ctx context.Context, accountID, hash string) (signedOut int64, err error)
}
