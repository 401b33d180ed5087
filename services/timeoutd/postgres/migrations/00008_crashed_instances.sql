-- +goose Up
-- A crashed instance is dead at once: its partitions are orphaned, and
-- taken over without waiting for their leases to expire. app is the
-- application_name of the instance's database sessions; once none of them
-- is left in pg_stat_activity (the database saw its connections close)
-- the instance is dead. beat_at is its last heartbeat: an instance whose
-- last heartbeat came before the database (re)started lost its sessions to
-- the restart, not to a crash, and is judged by its lease's expiry alone.
-- gone_at is when another instance first saw it without a session: it is
-- dead once that lasted the crash grace (a connection reset, after which a
-- live instance reconnects at once, moves nothing).
ALTER TABLE timeoutd_instances
    ADD COLUMN app     text        NOT NULL DEFAULT '',
    ADD COLUMN beat_at timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN gone_at timestamptz;

-- +goose Down
ALTER TABLE timeoutd_instances DROP COLUMN app, DROP COLUMN beat_at, DROP COLUMN gone_at;
