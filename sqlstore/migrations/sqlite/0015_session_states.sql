-- The state of a cluster's persistent sessions (broker.SessionStates),
-- beside their claims: the JSON the broker saves (NULL: nothing to
-- resume), the epoch of the claim that saved or took it last (a claim
-- older than that can no longer save), and the node that saved it.
ALTER TABLE session_owners ADD COLUMN state BLOB;
ALTER TABLE session_owners ADD COLUMN state_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_owners ADD COLUMN state_node TEXT NOT NULL DEFAULT '';
-- When each node last found every session state it holds saved (or
-- unchanged since), in microseconds since the Unix epoch.
CREATE TABLE session_rounds (
	node TEXT PRIMARY KEY,
	saved_at INTEGER NOT NULL
);
