-- The recent problems of each MQTT client: the PostgreSQL twin of
-- migrations/sqlite/0006_client_problems.sql. Repeats of one problem are
-- one row with a count. Times are Unix microseconds (UTC) in BIGINT.

CREATE TABLE client_problems (
	account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	client_id  TEXT COLLATE "C" NOT NULL,
	kind       TEXT COLLATE "C" NOT NULL,
	topic      TEXT COLLATE "C" NOT NULL,
	reason     TEXT COLLATE "C" NOT NULL,
	qos        INTEGER NOT NULL,
	code       INTEGER NOT NULL,
	detail     TEXT NOT NULL,
	count      BIGINT NOT NULL,
	first_at   BIGINT NOT NULL,
	last_at    BIGINT NOT NULL,
	PRIMARY KEY (account_id, client_id, kind, topic, reason)
);
CREATE INDEX client_problems_account_last ON client_problems (account_id, last_at);
CREATE INDEX client_problems_client_last ON client_problems (account_id, client_id, last_at);
