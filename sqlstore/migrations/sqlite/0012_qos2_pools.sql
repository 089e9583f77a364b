-- The daily QoS 2 pools that several nodes take from (platform.QoS2Pools):
-- the units of an account's pool taken on one UTC day, by any node.
CREATE TABLE qos2_pools (
	account_id TEXT NOT NULL,
	day TEXT NOT NULL,
	used INTEGER NOT NULL,
	PRIMARY KEY (account_id, day)
);
