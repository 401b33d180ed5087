package outbox

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations creates and tunes the outbox table, named TableDefault; a
// service of this module applies them with internal/migrate's Up before
// its own, whose migrations may refer to the table. Others call Migrate.
var Migrations = migrate.Set{Name: "outbox", FS: migrationFiles, Dir: "migrations", Table: "outbox_migrations"}

// Migrate creates or upgrades the outbox table, named TableDefault, in
// pool's database, recording the versions applied in the table
// outbox_migrations. Instances starting together apply each migration once:
// they take turns under a Postgres advisory lock. Call it at start, before
// the first Insert.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := migrate.Up(ctx, pool, Migrations); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}
