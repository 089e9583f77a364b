-- History in one partition per UTC day (PostgreSQL only: SQLite keeps one
-- table and folds its indexes behind the writer, 0009).
--
-- history becomes a table partitioned by range of received_us. A day is
-- the table history_dYYYYMMDD, which the store creates before the day's
-- first record (and a retention pass a day ahead) and attaches without
-- blocking readers. Retention drops a day whole once every plan's
-- retention has passed its end, instead of deleting its rows one by one.
--
-- The table this migration finds becomes one partition,
-- history_before_days, holding every time before the UTC midnight after
-- both now and its newest record; retention drops it like a day once that
-- midnight is older than every plan's retention. Attaching it reads it
-- once (to check the bound) and rewrites nothing: its indexes become the
-- partitions' of the new ones. An empty one is dropped instead.
--
-- Partitioned tables have no identity columns before PostgreSQL 17, so ids
-- come from the sequence history_ids, which continues after the old
-- identity's.
ALTER TABLE history RENAME TO history_before_days;
ALTER INDEX history_pkey RENAME TO history_before_days_pkey;
ALTER INDEX history_account_time RENAME TO history_before_days_account_time;
ALTER INDEX history_client_time RENAME TO history_before_days_client_time;
ALTER INDEX history_device_time RENAME TO history_before_days_device_time;
ALTER INDEX history_class_time RENAME TO history_before_days_class_time;

CREATE SEQUENCE history_ids AS BIGINT;
SELECT setval('history_ids', GREATEST(
	(SELECT last_value FROM history_id_seq),
	(SELECT COALESCE(MAX(id), 0) FROM history_before_days)));
ALTER TABLE history_before_days ALTER COLUMN id DROP IDENTITY;

CREATE TABLE history (
	id              BIGINT NOT NULL DEFAULT nextval('history_ids'),
	account_id      TEXT COLLATE "C" NOT NULL,
	client_id       TEXT COLLATE "C" NOT NULL,
	topic           TEXT COLLATE "C" NOT NULL,
	class           TEXT COLLATE "C" NOT NULL,
	qos             SMALLINT NOT NULL,
	published_qos   SMALLINT NOT NULL,
	retain          BOOLEAN NOT NULL,
	payload         BYTEA NOT NULL,
	content_type    TEXT NOT NULL DEFAULT '',
	payload_format  SMALLINT NOT NULL DEFAULT 0,
	user_properties TEXT, -- JSON array of {"key","value"}, NULL when none
	station_controller_device_id TEXT COLLATE "C" NOT NULL DEFAULT '',
	received_us     BIGINT NOT NULL
) PARTITION BY RANGE (received_us);
ALTER SEQUENCE history_ids OWNED BY history.id;
CREATE INDEX history_account_time ON history (account_id, received_us, id);
CREATE INDEX history_client_time ON history (account_id, client_id, received_us, id);
CREATE INDEX history_device_time ON history (account_id, station_controller_device_id, received_us, id)
	WHERE station_controller_device_id <> '';
CREATE INDEX history_class_time ON history (account_id, class, received_us, id);

DO $$
DECLARE
	day CONSTANT BIGINT := 86400000000;
	bound BIGINT;
BEGIN
	IF EXISTS (SELECT 1 FROM history_before_days) THEN
		SELECT (GREATEST(extract(epoch FROM now())::BIGINT * 1000000, MAX(received_us)) / day + 1) * day
			INTO bound FROM history_before_days;
		EXECUTE format('ALTER TABLE history ATTACH PARTITION history_before_days FOR VALUES FROM (MINVALUE) TO (%s)', bound);
	ELSE
		DROP TABLE history_before_days;
	END IF;
END $$;

-- A day being reordered (see sqlstore/history_days.go) is closed with a
-- trigger that refuses changes, so that its copy misses none.
CREATE FUNCTION history_day_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'history day % is being reordered; try again', TG_TABLE_NAME USING ERRCODE = 'object_in_use';
END $$;
