-- The recent problems of each MQTT client, for its account owner: refused
-- CONNECTs, PUBLISHes, SUBSCRIBE filters and wills, connections the server
-- ended, messages not delivered. Repeats of one problem are one row with a
-- count. Times are Unix microseconds (UTC). The store keeps each client's
-- and each account's most recent rows (fleetmq.MaxProblemsPerClient,
-- MaxProblemsPerAccount) and none older than fleetmq.ProblemsKeptFor.

CREATE TABLE client_problems (
	account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	client_id  TEXT NOT NULL,
	kind       TEXT NOT NULL,
	topic      TEXT NOT NULL,
	reason     TEXT NOT NULL,
	qos        INTEGER NOT NULL,
	code       INTEGER NOT NULL,
	detail     TEXT NOT NULL,
	count      INTEGER NOT NULL,
	first_at   INTEGER NOT NULL,
	last_at    INTEGER NOT NULL,
	PRIMARY KEY (account_id, client_id, kind, topic, reason)
);
CREATE INDEX client_problems_account_last ON client_problems (account_id, last_at);
CREATE INDEX client_problems_client_last ON client_problems (account_id, client_id, last_at);
