// Package postgres is the Postgres adapter of the orders service: the Store
// (every order change and its outbox rows in one transaction, idempotency
// keys, cursor pagination), the Janitor that forgets idempotency keys after
// their TTL, and the embedded goose migrations.
//
// Creating an order without an Idempotency-Key is one round trip: the order
// insert and the outbox insert are sent as one pgx batch, which Postgres runs
// as one implicit transaction; statements are prepared once per connection by
// pgx's statement cache.
package postgres
