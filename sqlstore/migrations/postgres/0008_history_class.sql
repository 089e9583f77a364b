-- Stored history by class: the PostgreSQL twin of
-- migrations/sqlite/0007_history_class.sql.
CREATE INDEX history_class_time ON history (account_id, class, received_us, id);
