-- The running "fleetmq serve" processes: the PostgreSQL twin of
-- migrations/sqlite/0005_nodes.sql. Times are Unix microseconds (UTC).

CREATE TABLE nodes (
	id        TEXT COLLATE "C" PRIMARY KEY,
	host      TEXT NOT NULL,
	pid       INTEGER NOT NULL,
	started   BIGINT NOT NULL,
	heartbeat BIGINT NOT NULL,
	applied   BIGINT NOT NULL
);
