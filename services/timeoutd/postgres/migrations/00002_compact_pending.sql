-- +goose Up
-- Fewer bytes per pending timeout (issue 3), measured with 1M pending rows
-- of the load tool's 18-character keys: 207 B before, 149 B after.
--
-- The pending index no longer carries the key (20 B a row instead of 44 B
-- with 18-character keys, 60 B with UUIDs): ListPending reads it as an
-- index range on deadline_ns and orders the keys of equal deadlines with an
-- incremental sort. Built before the old one is dropped, under a write
-- lock for the build (0.25 s per million rows on the 2-core machine).
CREATE INDEX timeouts_pending_deadline ON timeouts (deadline_ns) WHERE state = 0;
DROP INDEX timeouts_pending;
ALTER INDEX timeouts_pending_deadline RENAME TO timeouts_pending;

-- Updates are not HOT: a clear or a fire changes state and deadline_ns, a
-- set moves deadline_ns (only a set that keeps the deadline could be), and
-- the partial indexes key on or filter by both, so the 10% of each heap
-- page that fillfactor 90 kept free bought nothing. Applies to pages
-- written from now on.
ALTER TABLE timeouts RESET (fillfactor);

-- NULL for "fire however late" (the default): 0 took 4 bytes, a NULL none
-- (with eight columns the null bitmap fits in the tuple header's padding).
-- Existing rows keep their 0, read the same, until their next set.
ALTER TABLE timeouts ALTER COLUMN max_lateness_ms DROP NOT NULL,
    ALTER COLUMN max_lateness_ms DROP DEFAULT;

-- +goose Down
UPDATE timeouts SET max_lateness_ms = 0 WHERE max_lateness_ms IS NULL;
ALTER TABLE timeouts ALTER COLUMN max_lateness_ms SET DEFAULT 0,
    ALTER COLUMN max_lateness_ms SET NOT NULL;
ALTER TABLE timeouts SET (fillfactor = 90);
CREATE INDEX timeouts_pending_deadline_key ON timeouts (deadline_ns, key) WHERE state = 0;
DROP INDEX timeouts_pending;
ALTER INDEX timeouts_pending_deadline_key RENAME TO timeouts_pending;
