-- Which node of a cluster owns each MQTT session (broker.SessionOwners):
-- the latest claim of a session key (bytes: a key holds NUL), its node and
-- its epoch (from session_epochs: a later claim has a greater one).
CREATE SEQUENCE session_epochs;
CREATE TABLE session_owners (
	key BYTEA PRIMARY KEY,
	node TEXT NOT NULL,
	epoch BIGINT NOT NULL
);
