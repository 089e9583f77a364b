-- Stored history: one row per accepted message (platform topic, no
-- topic_prefix). Times are Unix microseconds (UTC). The rowid (id) is the
-- last column of every index, so (received_us, id) keyset pages walk an
-- index whatever their depth.

CREATE TABLE history (
	id              INTEGER PRIMARY KEY,
	account_id      TEXT NOT NULL,
	client_id       TEXT NOT NULL,
	topic           TEXT NOT NULL,
	class           TEXT NOT NULL,
	qos             INTEGER NOT NULL,
	published_qos   INTEGER NOT NULL,
	retain          INTEGER NOT NULL,
	payload         BLOB NOT NULL,
	content_type    TEXT NOT NULL DEFAULT '',
	payload_format  INTEGER NOT NULL DEFAULT 0,
	user_properties TEXT, -- JSON array of {"key","value"}, NULL when none
	station_controller_device_id TEXT NOT NULL DEFAULT '',
	received_us     INTEGER NOT NULL
);
CREATE INDEX history_account_time ON history (account_id, received_us);
CREATE INDEX history_client_time ON history (account_id, client_id, received_us);
CREATE INDEX history_device_time ON history (account_id, station_controller_device_id, received_us)
	WHERE station_controller_device_id <> '';

-- The newest record of each topic of a client (live views), kept by ingest.
CREATE TABLE history_latest (
	account_id  TEXT NOT NULL,
	client_id   TEXT NOT NULL,
	topic       TEXT NOT NULL,
	record_id   INTEGER NOT NULL,
	received_us INTEGER NOT NULL,
	PRIMARY KEY (account_id, client_id, topic)
);
