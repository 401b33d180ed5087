-- +goose Up
-- serving is whether an instance can take partitions: false while it
-- cannot reach NATS (it can neither ingest nor publish) or while it shuts
-- down. The others count only serving instances in their share, so that
-- the partitions it hands over find room.
ALTER TABLE timeoutd_instances ADD COLUMN serving boolean NOT NULL DEFAULT true;

-- +goose Down
ALTER TABLE timeoutd_instances DROP COLUMN serving;
