-- When the day's QoS 2 pool of an account ran out (Unix microseconds;
-- 0: it did not), so that the demotion's start survives a restart.
ALTER TABLE usage_daily ADD COLUMN demoted_since BIGINT NOT NULL DEFAULT 0;
