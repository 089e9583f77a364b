-- Publish rates of a plan, applied as back-pressure on the publishing
-- connection: PUBLISH packets and bytes (topic and payload) per second, per
-- connected client and for all of an account's clients together. 0 means
-- unlimited. The default catalog gets its documented rates; any other plan
-- gets the starter plan's per-client rates and an account rate of that
-- times its max_publisher_clients, so no account is held below what each of
-- its devices may send.

ALTER TABLE plans ADD COLUMN max_publish_rate INTEGER NOT NULL DEFAULT 0;
ALTER TABLE plans ADD COLUMN max_publish_bytes_rate BIGINT NOT NULL DEFAULT 0;
ALTER TABLE plans ADD COLUMN max_account_publish_rate INTEGER NOT NULL DEFAULT 0;
ALTER TABLE plans ADD COLUMN max_account_publish_bytes_rate BIGINT NOT NULL DEFAULT 0;

UPDATE plans SET max_publish_rate = 100, max_publish_bytes_rate = 262144,
	max_account_publish_rate = 1000, max_account_publish_bytes_rate = 2097152 WHERE name = 'starter';
UPDATE plans SET max_publish_rate = 200, max_publish_bytes_rate = 524288,
	max_account_publish_rate = 5000, max_account_publish_bytes_rate = 16777216 WHERE name = 'growth';
UPDATE plans SET max_publish_rate = 500, max_publish_bytes_rate = 1048576,
	max_account_publish_rate = 20000, max_account_publish_bytes_rate = 67108864 WHERE name = 'scale';
UPDATE plans SET max_publish_rate = 100, max_publish_bytes_rate = 262144,
	max_account_publish_rate = LEAST(100 * max_publisher_clients, 10000000), max_account_publish_bytes_rate = CAST(262144 AS BIGINT) * max_publisher_clients
	WHERE name NOT IN ('starter', 'growth', 'scale');
