// Package outbox is a transactional outbox for pgx and NATS JetStream, the
// one the orders service and any producer of deadlines use (pkg/timeouts
// writes its commands through it; timeoutd's timeout rows are their own
// outbox): a writer inserts messages with [Insert] in the same Postgres
// transaction as the state change they announce, and a [Relay] publishes
// them to JetStream with their Nats-Msg-Id, waits for every PubAck, and only
// then deletes them. Its API is stable: it only grows.
//
// The table is created by the package's own migrations: [Migrate] applies
// them (the services of this module apply [Migrations] with their own sets):
//
//	CREATE TABLE outbox (
//	    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
//	    subject    text        NOT NULL,
//	    msg_id     text        NOT NULL,
//	    data       bytea       NOT NULL,
//	    created_at timestamptz NOT NULL DEFAULT now(),
//	    traceparent text        -- the writer's span, or NULL
//	);
//
// with autovacuum after a fixed number of dead rows (it is a queue).
//
// Delivery is at least once: a crash after a PubAck and before the delete
// commits republishes the batch, which JetStream drops inside its duplicate
// window (the Nats-Msg-Id) and idempotent consumers absorb beyond it.
//
// A batch is claimed with DELETE … FOR UPDATE SKIP LOCKED … RETURNING inside a
// transaction that commits only after all PubAcks arrived, so several relays
// may share a table without publishing the same row concurrently, and a
// failed publish rolls the rows back for the next attempt.
package outbox
