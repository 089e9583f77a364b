-- The running "fleetmq serve" processes: each writes the control-plane
-- version it has in force and a heartbeat, so an operator command can wait
-- until its change is enforced everywhere. Times are Unix microseconds
-- (UTC). Writes here do not move the control-plane version.

CREATE TABLE nodes (
	id        TEXT PRIMARY KEY,
	host      TEXT NOT NULL,
	pid       INTEGER NOT NULL,
	started   INTEGER NOT NULL,
	heartbeat INTEGER NOT NULL,
	applied   INTEGER NOT NULL
);
