-- A cluster's retained messages (fleetmq.RetainedStore): one row per
-- topic, the newest by created (Unix microseconds); message is the
-- broker's encoding of it. expiry 0: never.
CREATE TABLE retained_messages (
	topic TEXT COLLATE "C" PRIMARY KEY,
	created BIGINT NOT NULL,
	expiry BIGINT NOT NULL,
	message BYTEA NOT NULL
);
-- An empty message is a clear of the topic at created (a tombstone, swept
-- after an hour). Sweeps go by age.
CREATE INDEX retained_messages_created ON retained_messages (created);
