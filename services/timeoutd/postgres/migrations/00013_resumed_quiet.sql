-- +goose Up
-- The grace after a silence of the cluster (or a restart of Postgres) is
-- for the instances that were live when it began: quiet_at is the last
-- time any instance was seen before it, recorded with resumed_at by the
-- statement that ends it. An instance row or lease that had expired by
-- then gets no grace: a dead instance whose sessions linger is not
-- brought back by a lone survivor's pause. '-infinity', as for rows
-- written before this column, gives every row the grace, as before.
ALTER TABLE timeoutd_instances ADD COLUMN quiet_at timestamptz NOT NULL DEFAULT '-infinity';

-- +goose Down
ALTER TABLE timeoutd_instances DROP COLUMN quiet_at;
