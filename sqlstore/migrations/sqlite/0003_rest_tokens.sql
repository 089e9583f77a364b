-- REST API tokens and their hourly request counts. Times are Unix
-- microseconds (UTC); NULL is "none" (expires_at NULL: never expires).
-- Only the SHA-256 of a token value is kept (hash, hex), unique: the
-- REST authenticator finds a token by it.

CREATE TABLE rest_tokens (
	id           TEXT PRIMARY KEY,
	account_id   TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	label        TEXT NOT NULL,
	prefix       TEXT NOT NULL,
	hash         TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER,
	revoked_at   INTEGER,
	last_used_at INTEGER
);
CREATE UNIQUE INDEX rest_tokens_hash ON rest_tokens (hash);
CREATE INDEX rest_tokens_account ON rest_tokens (account_id, created_at);

-- Requests counted per token in fixed hourly windows (window_start: the
-- UTC hour, Unix microseconds), so the rate limit survives a restart. Only
-- the last hours are kept. No foreign key: counts are flushed from memory
-- and may outlive their token.
CREATE TABLE rest_requests (
	window_start INTEGER NOT NULL,
	token_id     TEXT NOT NULL,
	count        INTEGER NOT NULL,
	PRIMARY KEY (window_start, token_id)
);
