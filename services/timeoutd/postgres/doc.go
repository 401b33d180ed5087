// Package postgres is timeoutd's Postgres adapter: the [Store] holding every
// SQL statement of the service (the timeouts table and its outbox) on a
// pgxpool, and [Migrate], which applies the embedded goose migrations.
//
// A pending timeout costs about 64 bytes of heap plus two index entries
// (the primary key and the partial (deadline, key) index); the fire subject
// is stored only when it differs from orders.cancel.<key>.
package postgres
