-- +goose Up
-- The W3C traceparent of the span that wrote a message, published as its
-- traceparent header; NULL when it was written untraced (it then costs no
-- byte of the row).
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS traceparent text;

-- +goose Down
ALTER TABLE outbox DROP COLUMN traceparent;
