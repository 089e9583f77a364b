-- The usage writes applied, by id: the PostgreSQL twin of
-- migrations/sqlite/0010_usage_flushes.sql. (PostgreSQL has no 0009: that
-- migration is SQLite's history layout.)
CREATE TABLE usage_flushes (
	id TEXT COLLATE "C" PRIMARY KEY,
	at BIGINT NOT NULL
);
CREATE INDEX usage_flushes_at ON usage_flushes (at);
