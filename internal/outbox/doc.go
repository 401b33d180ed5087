// Package outbox is the transactional outbox of the orders service (timeoutd's
// timeout rows are their own outbox: its fire path publishes first and marks
// the row after the PubAck): a writer inserts messages with [Insert] in the same Postgres
// transaction as the state change they announce, and a [Relay] publishes them
// to JetStream with their Nats-Msg-Id, waits for every PubAck, and only then
// deletes them.
//
// The table is created by the package's own migrations, [Migrations],
// which the service applies with internal/migrate before its own:
//
//	CREATE TABLE outbox (
//	    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
//	    subject    text        NOT NULL,
//	    msg_id     text        NOT NULL,
//	    data       bytea       NOT NULL,
//	    created_at timestamptz NOT NULL DEFAULT now()
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
