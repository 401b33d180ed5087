-- +goose Up
-- One row per key. Pending rows (state 0) hold a deadline; cleared (1) and
-- fired (2) rows are tombstones that keep the key's version so stale
-- commands are rejected, and their deadline_ns holds the time of the clear
-- or the fire, from which the janitor ages them out. Columns are ordered by
-- alignment (8, 8, 4, 2, 2, then variable) so a pending row with the
-- default fire subject and no payload is about 64 bytes of heap.
CREATE TABLE timeouts (
    version         bigint   NOT NULL,
    -- Unix nanoseconds: the exact deadline of the command, no rounding.
    deadline_ns     bigint   NOT NULL,
    max_lateness_ms integer  NOT NULL DEFAULT 0,
    -- Key partition (PartitionOf), for scale-out by partition leases.
    part            smallint NOT NULL,
    state           smallint NOT NULL,
    key             text COLLATE "C" NOT NULL PRIMARY KEY,
    -- NULL when it is the default orders.cancel.<key>.
    fire_subject    text,
    payload         bytea
) WITH (fillfactor = 90);

-- The API's pending list in (deadline, key) order and the upcoming counts.
CREATE INDEX timeouts_pending ON timeouts (deadline_ns, key) WHERE state = 0;
-- The janitor's sweep of expired tombstones.
CREATE INDEX timeouts_tombstones ON timeouts (deadline_ns) WHERE state <> 0;

-- The outbox of expiry events: internal/outbox's migrations.

-- +goose Down
DROP TABLE timeouts;
