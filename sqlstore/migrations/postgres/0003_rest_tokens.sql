-- REST API tokens and their hourly request counts: the PostgreSQL twin of
-- migrations/sqlite/0003_rest_tokens.sql. Times are Unix microseconds
-- (UTC) in BIGINT; NULL is "none" (expires_at NULL: never expires). Text
-- columns use the "C" collation, as in 0001. Only the SHA-256 of a token
-- value is kept (hash, hex), unique: the REST authenticator finds a token
-- by it.

CREATE TABLE rest_tokens (
	id           TEXT COLLATE "C" PRIMARY KEY,
	account_id   TEXT COLLATE "C" NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	label        TEXT COLLATE "C" NOT NULL,
	prefix       TEXT COLLATE "C" NOT NULL,
	hash         TEXT COLLATE "C" NOT NULL,
	created_at   BIGINT NOT NULL,
	expires_at   BIGINT,
	revoked_at   BIGINT,
	last_used_at BIGINT
);
CREATE UNIQUE INDEX rest_tokens_hash ON rest_tokens (hash);
CREATE INDEX rest_tokens_account ON rest_tokens (account_id, created_at);

-- Requests counted per token in fixed hourly windows (window_start: the
-- UTC hour, Unix microseconds), so the rate limit survives a restart. Only
-- the last hours are kept. No foreign key: counts are flushed from memory
-- and may outlive their token.
CREATE TABLE rest_requests (
	window_start BIGINT NOT NULL,
	token_id     TEXT COLLATE "C" NOT NULL,
	count        BIGINT NOT NULL,
	PRIMARY KEY (window_start, token_id)
);
