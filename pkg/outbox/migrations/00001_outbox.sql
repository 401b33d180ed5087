-- +goose Up
-- The transactional outbox. IF NOT EXISTS: databases migrated before the
-- outbox shipped its own migrations got this table from their service's
-- first migration.
CREATE TABLE IF NOT EXISTS outbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subject    text        NOT NULL,
    msg_id     text        NOT NULL,
    data       bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE outbox;
