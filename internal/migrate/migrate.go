// Package migrate applies embedded goose migrations to a Postgres database,
// holding a Postgres advisory lock so that instances starting together
// create each version table and apply each migration once. Every component
// that owns tables ships its migrations as a [Set] (pkg/outbox ships the
// outbox's, each service its own) and each service applies the sets it uses
// with [Up] at start.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// Set is one component's migrations.
type Set struct {
	// Name names the set in errors, e.g. "outbox".
	Name string
	// FS holds the goose SQL files (NNNNN_name.sql) in directory Dir.
	FS  fs.FS
	Dir string
	// Table records which of the set's migrations are applied; each set
	// sharing a database needs its own.
	Table string
}

// lockID is the key of the session-level advisory lock Up holds. It is
// goose's own default key, which earlier releases locked through goose, so
// an instance of an earlier release and one of this release exclude each
// other during a rolling upgrade.
const lockID = lock.DefaultLockID

// lockPoll is how often a migrator waiting for another's lock tries it.
const lockPoll = 50 * time.Millisecond

// lockPolling takes the lock on conn, trying every lockPoll until ctx ends.
// It polls rather than waits in Postgres: a statement blocked in
// pg_advisory_lock holds a snapshot, and CREATE INDEX CONCURRENTLY in the
// holder's migrations waits for every transaction with an older snapshot,
// so the two would wait for each other until a statement_timeout ended one
// (two orders instances starting together did just that). Each try is a
// statement of microseconds, which the session's statement_timeout never
// cuts short.
func lockPolling(ctx context.Context, conn *pgxpool.Conn) error {
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", lockID).Scan(&got); err != nil {
			return err
		}
		if got {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// unlockTimeout bounds the release of the lock once the sets are applied;
// past it Up closes the connection, which releases the lock too.
const unlockTimeout = 10 * time.Second

// Up applies, set by set in the order given, the migrations pool's
// database lacks. It holds a session-level advisory lock, on a connection of
// its own, from before the first set's version table is looked for or
// created until the last set is applied: a second instance waits for the
// first and then finds nothing to do. (goose's own session locker is not
// used: goose creates a missing version table before it takes that lock, so
// instances starting together on a new database raced on the CREATE TABLE;
// and its lock is polled every 5 s, which delayed every instance but the
// first by that much.)
// Up uses two of pool's connections at once, so pool must allow two.
func Up(ctx context.Context, pool *pgxpool.Pool, sets ...Set) error {
	if n := pool.Config().MaxConns; n < 2 {
		return fmt.Errorf("migrate: pool allows %d connection(s); the lock and the migrations need 2", n)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Release()
	if err := lockPolling(ctx, conn); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", lockID); err != nil {
			// Ending the session releases the lock; the pool drops a
			// closed connection on Release.
			_ = conn.Conn().Close(uctx)
		}
	}()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	for _, s := range sets {
		p, err := Provider(db, s)
		if err != nil {
			return err
		}
		if _, err := p.Up(ctx); err != nil {
			return fmt.Errorf("migrate %s: %w", s.Name, err)
		}
	}
	return nil
}

// Provider returns the goose provider of s on db. It takes no lock, so
// only a caller alone on the database may apply migrations with it; tests
// step through a set's versions with it. Up holds the lock around it.
func Provider(db *sql.DB, s Set) (*goose.Provider, error) {
	files, err := fs.Sub(s.FS, s.Dir)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.Name, err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithDisableGlobalRegistry(true), goose.WithTableName(s.Table))
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.Name, err)
	}
	return p, nil
}
