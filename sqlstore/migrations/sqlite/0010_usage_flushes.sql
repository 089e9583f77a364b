-- The usage writes applied, by the id their writer gave them, so that a
-- write whose outcome was not reported (the connection dropped after the
-- commit) can be sent again without being counted twice. Rows older than
-- a week are removed by later writes.
CREATE TABLE usage_flushes (
	id TEXT PRIMARY KEY,
	at INTEGER NOT NULL
);
CREATE INDEX usage_flushes_at ON usage_flushes (at);
