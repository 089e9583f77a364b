-- The client index is built behind the writer. An index ordered by client
-- puts each client's new entries on a page of their own, so a commit of
-- records from many clients rewrote a page of it per client (and one of
-- history_latest per topic), and SQLite writes every page a commit
-- changes, whole, to the WAL. Now a commit appends the rows, which land on
-- the last pages of the table and of the time-ordered indexes; once a few
-- thousand have gathered, commits fold the oldest of them into
-- history_client (the client index as a table) and history_latest, sorted,
-- so each page is rewritten once for all the records it gains. Queries by
-- client read history_client and the few unfolded rows.
--
-- An existing store builds history_client from the old index in this
-- migration: sorted input, tens of seconds for ten million records.

CREATE TABLE history_client (
	account_id  TEXT NOT NULL,
	client_id   TEXT NOT NULL,
	received_us INTEGER NOT NULL,
	id          INTEGER NOT NULL,
	PRIMARY KEY (account_id, client_id, received_us, id)
) WITHOUT ROWID;

INSERT INTO history_client (account_id, client_id, received_us, id)
	SELECT account_id, client_id, received_us, id FROM history INDEXED BY history_client_time
	ORDER BY account_id, client_id, received_us, id;

DROP INDEX history_client_time;

-- Every row up to this id is in history_client and history_latest; the
-- rows after it are not yet.
INSERT INTO meta (key, value) VALUES ('history_folded', (SELECT COALESCE(MAX(id), 0) FROM history));

CREATE TRIGGER history_client_delete AFTER DELETE ON history BEGIN
	DELETE FROM history_client
		WHERE account_id = old.account_id AND client_id = old.client_id AND received_us = old.received_us AND id = old.id;
END;
