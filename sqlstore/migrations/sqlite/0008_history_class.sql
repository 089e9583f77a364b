-- Class filters of stored history (class=state, or a topic filter such as
-- {account_id}/+/state/#, whose third level is the class) read the
-- account's records of that class in time order, whatever the other
-- classes hold.
CREATE INDEX history_class_time ON history (account_id, class, received_us);
