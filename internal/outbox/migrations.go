package outbox

import (
	"embed"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations creates and tunes the outbox table, named TableDefault; a
// service applies them with migrate.Up before its own, whose migrations
// may refer to the table.
var Migrations = migrate.Set{Name: "outbox", FS: migrationFiles, Dir: "migrations", Table: "outbox_migrations"}
