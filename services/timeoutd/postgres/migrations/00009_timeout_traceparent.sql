-- +goose Up
-- The W3C trace context of the span that stored a pending timeout (its
-- ingest span, a child of the producer's), so that its fire, minutes
-- later, links back to it. NULL for a timeout set untraced, which is
-- nearly all of them: a NULL costs a bit of the row's null bitmap.
ALTER TABLE timeouts ADD COLUMN traceparent text;

-- +goose Down
ALTER TABLE timeouts DROP COLUMN traceparent;
