// Package migrate applies embedded goose migrations to a Postgres database,
// holding a Postgres advisory lock so that instances starting together
// apply each migration once. Every component that owns tables ships its
// migrations as a [Set] (internal/outbox ships the outbox's, each service
// its own) and each service applies the sets it uses with [Up] at start.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

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

// Up applies, set by set in the order given, the migrations pool's
// database lacks. Each set is applied under the advisory lock: a second
// instance waits for the first and then finds nothing to do.
func Up(ctx context.Context, pool *pgxpool.Pool, sets ...Set) error {
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

// Provider returns the goose provider of s on db, locking as Up does; tests
// step through a set's versions with it.
func Provider(db *sql.DB, s Set) (*goose.Provider, error) {
	files, err := fs.Sub(s.FS, s.Dir)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.Name, err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrate %s: lock: %w", s.Name, err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true), goose.WithTableName(s.Table))
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.Name, err)
	}
	return p, nil
}
