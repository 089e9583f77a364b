-- The daily QoS 2 pools that several nodes take from: the PostgreSQL
-- twin of migrations/sqlite/0012_qos2_pools.sql.
CREATE TABLE qos2_pools (
	account_id TEXT COLLATE "C" NOT NULL,
	day TEXT COLLATE "C" NOT NULL,
	used BIGINT NOT NULL,
	PRIMARY KEY (account_id, day)
);
