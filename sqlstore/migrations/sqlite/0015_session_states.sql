-- The state of a cluster's persistent sessions (broker.SessionStates),
-- beside their claims: the JSON the broker saves (NULL: nothing to
-- resume), and the epoch of the claim that saved or took it last (a claim
-- older than that can no longer save).
ALTER TABLE session_owners ADD COLUMN state BLOB;
ALTER TABLE session_owners ADD COLUMN state_epoch INTEGER NOT NULL DEFAULT 0;
