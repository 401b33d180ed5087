package postgres

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations are the orders tables' migrations (the outbox ships its own).
var Migrations = migrate.Set{Name: "orders", FS: migrationFiles, Dir: "migrations", Table: "goose_db_version"}

// Migrate applies the outbox's migrations, then the orders service's, under
// a Postgres advisory lock so that instances starting together migrate
// once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrate.Up(ctx, pool, outbox.Migrations, Migrations)
}
