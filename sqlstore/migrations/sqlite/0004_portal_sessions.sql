-- Portal sessions of account owners. The session id is only in the
-- owner's cookie; id_hash is its SHA-256 (hex). Times are Unix
-- microseconds (UTC): a session ends idle after last_seen_at, and at the
-- latest a fixed time after created_at (the portal's options).

CREATE TABLE portal_sessions (
	id_hash      TEXT PRIMARY KEY,
	account_id   TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	created_at   INTEGER NOT NULL,
	last_seen_at INTEGER NOT NULL
);
CREATE INDEX portal_sessions_account ON portal_sessions (account_id);
CREATE INDEX portal_sessions_last_seen ON portal_sessions (last_seen_at);
CREATE INDEX portal_sessions_created ON portal_sessions (created_at);
