-- +goose Up
-- Version marks may be forgotten (issue 15): with TIMEOUTD_MARK_RETENTION
-- set, timeoutd refuses commands issued before the retention
-- (events.ReasonCommandTooOld) and the janitor deletes the marks older than
-- it, so the table stops growing by a row per key ever seen. This index
-- finds the oldest marks without reading the pending rows or the live
-- tombstones; it costs about 30 bytes a mark, retention or not.
CREATE INDEX timeouts_marks ON timeouts (deadline_ns) WHERE state = 3;

-- +goose Down
DROP INDEX timeouts_marks;
