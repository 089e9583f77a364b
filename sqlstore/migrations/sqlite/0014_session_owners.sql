-- Which node of a cluster owns each MQTT session (broker.SessionOwners):
-- the latest claim of a session key (bytes: a key holds NUL), its node and
-- its epoch (from session_epochs: a later claim has a greater one).
CREATE TABLE session_epochs (id INTEGER PRIMARY KEY CHECK (id = 1), last INTEGER NOT NULL);
INSERT INTO session_epochs (id, last) VALUES (1, 0);
CREATE TABLE session_owners (
	key BLOB PRIMARY KEY,
	node TEXT NOT NULL,
	epoch INTEGER NOT NULL
);
