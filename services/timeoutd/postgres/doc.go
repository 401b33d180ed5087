// Package postgres is timeoutd's Postgres adapter: the [Store] holding every
// SQL statement of the service (the timeouts table, which is also the fire
// path's outbox, and the partition leases) on a
// pgxpool, and [Migrate], which applies the embedded goose migrations.
//
// A pending timeout costs a 64-byte heap tuple plus two index entries (the
// primary key and the partial index of pending deadlines); a UUID key is
// stored in 17 bytes (key.go), the fire subject only when it differs from
// orders.cancel.<key>.
package postgres
