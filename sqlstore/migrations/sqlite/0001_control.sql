-- Control plane: accounts, plans, subscriptions, clients, credentials,
-- vendor layouts, metered usage. Times are Unix microseconds (UTC).

CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value INTEGER NOT NULL
);
INSERT INTO meta (key, value) VALUES ('control_version', 1);

CREATE TABLE plans (
	name                   TEXT PRIMARY KEY,
	max_publisher_clients  INTEGER NOT NULL,
	qos2_daily_pool        INTEGER NOT NULL,
	history_retention_days INTEGER NOT NULL
);
INSERT INTO plans VALUES ('starter', 10, 10000, 7), ('growth', 100, 100000, 30), ('scale', 1000, 1000000, 90);

CREATE TABLE accounts (
	id                  TEXT PRIMARY KEY,
	name                TEXT NOT NULL,
	owner_email         TEXT NOT NULL UNIQUE,
	owner_password_hash TEXT NOT NULL,
	suspended           INTEGER NOT NULL DEFAULT 0,
	plan                TEXT REFERENCES plans (name),
	created_at          INTEGER NOT NULL
);

CREATE TABLE account_addons (
	account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	addon      TEXT NOT NULL,
	PRIMARY KEY (account_id, addon)
);

CREATE TABLE subscription_changes (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	at         INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	value      TEXT NOT NULL
);
CREATE INDEX subscription_changes_account ON subscription_changes (account_id, at);

CREATE TABLE mqtt_clients (
	account_id      TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	client_id       TEXT NOT NULL,
	label           TEXT NOT NULL,
	max_publish_qos INTEGER NOT NULL,
	created_at      INTEGER NOT NULL,
	PRIMARY KEY (account_id, client_id)
);

CREATE TABLE credentials (
	id          TEXT PRIMARY KEY,
	account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
	kind        TEXT NOT NULL,
	username    TEXT NOT NULL UNIQUE,
	label       TEXT NOT NULL,
	secret_hash TEXT NOT NULL,
	filters     TEXT NOT NULL, -- JSON array of strings
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER,
	revoked_at  INTEGER
);
CREATE INDEX credentials_account ON credentials (account_id, kind);

CREATE TABLE layouts (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL UNIQUE,
	wire_root  TEXT NOT NULL,
	rules      TEXT NOT NULL, -- JSON array of strings
	fanout     INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);

CREATE TABLE usage_daily (
	account_id TEXT NOT NULL,
	day        TEXT NOT NULL,
	messages0  INTEGER NOT NULL DEFAULT 0,
	messages1  INTEGER NOT NULL DEFAULT 0,
	messages2  INTEGER NOT NULL DEFAULT 0,
	bytes0     INTEGER NOT NULL DEFAULT 0,
	bytes1     INTEGER NOT NULL DEFAULT 0,
	bytes2     INTEGER NOT NULL DEFAULT 0,
	pool_used  INTEGER NOT NULL DEFAULT 0,
	demotions  INTEGER NOT NULL DEFAULT 0,
	refused    INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (account_id, day)
);

CREATE TABLE usage_drops (
	account_id TEXT NOT NULL,
	day        TEXT NOT NULL,
	reason     TEXT NOT NULL,
	count      INTEGER NOT NULL,
	PRIMARY KEY (account_id, day, reason)
);

CREATE TABLE usage_client (
	account_id TEXT NOT NULL,
	client_id  TEXT NOT NULL,
	day        TEXT NOT NULL,
	messages0  INTEGER NOT NULL DEFAULT 0,
	messages1  INTEGER NOT NULL DEFAULT 0,
	messages2  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (account_id, client_id, day)
);
