-- +goose Up
-- The outbox's autovacuum tuning moved to internal/outbox's migrations
-- (00002_autovacuum.sql), which timeoutd's outbox now gets too. This
-- version stays, empty, so that databases it was applied to stay in step.
SELECT 1;

-- +goose Down
SELECT 1;
