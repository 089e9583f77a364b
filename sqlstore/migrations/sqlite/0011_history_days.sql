-- History in one table per UTC day, history_dYYYYMMDD, each with its own
-- indexes and folded client index (history_dYYYYMMDD_client), so that
-- retention drops a day's tables whole instead of deleting its rows. The
-- tables are made by the store as days come (sqlstore/history_days_sqlite.go).
--
-- The table history keeps the records it holds: it is the partition of
-- every time before the UTC midnight after its newest record
-- (history_days_from), and retention deletes its rows, or drops it once
-- no account keeps any of them. An empty history covers no time at all.
--
-- Record ids come from a counter (history_last_id) instead of each
-- table's largest rowid, so they stay unique and increasing across days
-- and are never used twice.

INSERT INTO meta (key, value) VALUES ('history_last_id', (SELECT COALESCE(MAX(id), 0) FROM history));

-- The newest record's time, account by account on the (account, time)
-- index: history has no index on the time alone, and reading the table
-- took 40 s on a store of ten million records.
INSERT INTO meta (key, value) VALUES ('history_days_from', COALESCE(
	(WITH RECURSIVE accounts (id) AS (
		SELECT MIN(account_id) FROM history
		UNION ALL
		SELECT (SELECT MIN(account_id) FROM history WHERE account_id > accounts.id) FROM accounts WHERE accounts.id IS NOT NULL)
	SELECT (MAX((SELECT MAX(received_us) FROM history WHERE account_id = accounts.id)) / 86400000000 + 1) * 86400000000
	FROM accounts WHERE accounts.id IS NOT NULL),
	-9223372036854775808));

-- Every id up to the counter is folded or after the mark: a store whose
-- newest rows retention deleted had its mark above the largest id.
UPDATE meta SET value = MIN(value, (SELECT value FROM meta WHERE key = 'history_last_id')) WHERE key = 'history_folded';

-- Days that ended are rewritten in client order by one process at a time:
-- history_reorder is when its lease ends (Unix seconds; 0: free), and
-- history_reorder_owner the token of the process that holds it. (Each day
-- table counts the rows deleted from it in history_deleted_<table>, so
-- that a rewrite sees a row deleted while it copied the day.)
INSERT INTO meta (key, value) VALUES ('history_reorder', 0), ('history_reorder_owner', 0);
