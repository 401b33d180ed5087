// Package postgres is the Postgres adapter of the orders service: the Store
// (every order change and its outbox rows in one transaction, idempotency
// keys, cursor pagination), the Janitor that forgets idempotency keys after
// their TTL, and the embedded goose migrations.
//
// Every Store operation passes a gate (gate.go) that refuses it at once,
// with orders.ErrUnavailable, while the database is known to be down, and
// lets one probe through per GateConfig.ProbeInterval.
//
// Creating an order without an Idempotency-Key goes through a create
// batcher: concurrent creates are inserted together, the orders and their
// outbox rows in one pgx batch that Postgres runs as one implicit
// transaction, so one round trip and one commit serve many requests (one
// order per batch at low load; up to CreateBatchMax under load). Statements
// are prepared once per connection by pgx's statement cache.
package postgres
