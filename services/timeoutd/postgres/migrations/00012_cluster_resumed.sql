-- +goose Up
-- A silence of the whole cluster: Postgres frozen (a stalled disk, a
-- paused VM) or every instance cut off from it. Every heartbeat and probe
-- records its time in its instance's seen_at; one that finds no instance
-- seen for a third of the lease TTL ends a silence, and records its time
-- in resumed_at. An instance whose last heartbeat came before the latest
-- resumed_at keeps its leases (and counts as live) for one TTL after it,
-- as after a restart of Postgres: every lease expired during the silence
-- by Postgres's clock, and the first instance to run a round would
-- otherwise take the partitions of the others before they renew.
ALTER TABLE timeoutd_instances
    ADD COLUMN seen_at timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN resumed_at timestamptz NOT NULL DEFAULT '-infinity';

-- +goose Down
ALTER TABLE timeoutd_instances DROP COLUMN seen_at, DROP COLUMN resumed_at;
