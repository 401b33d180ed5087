-- +goose Up
-- A timeout command's Nats-Msg-Id ends in a nonce, <kind>:<key>:<version>:<nonce>
-- (pkg/events: Command.MsgID), which timeoutd requires. Commands written
-- before it, still waiting here, get one: 32 hex digits of a random UUID.
-- A command row's id has had three parts, and a key has no ':'.
UPDATE outbox SET msg_id = msg_id || ':' || replace(gen_random_uuid()::text, '-', '')
    WHERE subject LIKE 'timeouts.cmd.%' AND msg_id ~ '^(set|clear):[^:]+:[0-9]+$';

-- +goose Down
SELECT 1;
