-- +goose Up
-- The timeout row is the fire path's outbox (issue 15): an expiry event is
-- published first, and its row is marked fired once JetStream acknowledged
-- it, so a row still pending after its deadline is an event not yet known
-- to be published. The outbox table of earlier releases goes: the events
-- it still held make their timeouts pending again at their (passed)
-- deadline, and recovery publishes them at once under the same
-- Nats-Msg-Id. The deadline is read back from the event to the
-- nanosecond: its RFC 3339 text in UTC, whole seconds and fraction apart
-- (a timestamptz holds microseconds).
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('outbox') IS NULL THEN
        RETURN;
    END IF;
    UPDATE timeouts t SET state = 0, deadline_ns = e.deadline_ns
    FROM (
        SELECT CASE WHEN d->>'key' ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                THEN '\x00'::bytea || decode(replace(d->>'key', '-', ''), 'hex')
                ELSE convert_to(d->>'key', 'UTF8') END AS key,
            (d->>'version')::bigint AS version,
            extract(epoch FROM (substring(d->>'deadline' FROM '^[^.Z]+') || 'Z')::timestamptz)::bigint * 1000000000
                + coalesce(rpad(substring(d->>'deadline' FROM '\.([0-9]+)'), 9, '0')::bigint, 0) AS deadline_ns
        FROM (SELECT convert_from(data, 'UTF8')::jsonb AS d FROM outbox) o
    ) e
    WHERE t.key = e.key AND t.version = e.version AND t.state = 2;
    DROP TABLE outbox;
    DROP TABLE IF EXISTS outbox_migrations;
END $$;
-- +goose StatementEnd

-- +goose Down
-- Nothing to restore: the rows it made pending fire again.
SELECT 1;
