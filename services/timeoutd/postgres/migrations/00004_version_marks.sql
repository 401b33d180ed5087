-- +goose Up
-- Latest wins forever (issue 14, item 2.5): the janitor no longer deletes
-- an expired tombstone, which let a stale set (a dead letter replayed, a
-- relay republishing after the duplicate window) resurrect its key. It
-- retires it in place into a version mark (state 3): key and version only,
-- the payload, fire subject and misfire bound gone. The upsert's
-- "version is newer" condition then rejects stale commands as before, at
-- no extra cost per command. Version marks leave the tombstone index, so
-- the janitor's sweep stays as cheap as the live tombstones.
CREATE INDEX timeouts_tombstones_live ON timeouts (deadline_ns) WHERE state IN (1, 2);
DROP INDEX timeouts_tombstones;
ALTER INDEX timeouts_tombstones_live RENAME TO timeouts_tombstones;

-- +goose Down
DELETE FROM timeouts WHERE state = 3;
CREATE INDEX timeouts_tombstones_any ON timeouts (deadline_ns) WHERE state <> 0;
DROP INDEX timeouts_tombstones;
ALTER INDEX timeouts_tombstones_any RENAME TO timeouts_tombstones;
