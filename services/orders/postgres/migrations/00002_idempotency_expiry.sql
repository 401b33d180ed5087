-- +goose Up
-- The janitor deletes idempotency keys older than their TTL by created_at.
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);

-- +goose Down
DROP INDEX idempotency_keys_created_at;
