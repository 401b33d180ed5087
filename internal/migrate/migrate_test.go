package migrate_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// twoTables fails when applied twice: neither statement tolerates an
// existing table.
var twoTables = migrate.Set{Name: "two", Dir: "m", Table: "two_migrations", FS: fstest.MapFS{
	"m/00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nDROP TABLE a;\n")},
	"m/00002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id int);\nSELECT pg_sleep(0.2);\n-- +goose Down\nDROP TABLE b;\n")},
}}

// TestUpConcurrently: instances starting together (a cluster) each call Up;
// the advisory lock makes one apply the migrations and the others find
// them applied, so none fails on a table another just created.
func TestUpConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var g errgroup.Group
	var pools []*pgxpool.Pool
	url := testinfra.Postgres(t)
	for range 4 {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		pools = append(pools, pool)
	}
	for _, pool := range pools {
		g.Go(func() error { return migrate.Up(ctx, pool, twoTables) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("concurrent Up: %v", err)
	}
	var applied int
	if err := pools[0].QueryRow(ctx, `SELECT count(*) FROM two_migrations WHERE version_id > 0 AND is_applied`).Scan(&applied); err != nil || applied != 2 {
		t.Fatalf("two_migrations records %d applied (%v), want 2", applied, err)
	}
}

// TestSetsKeepTheirOwnVersions: two sets in one database record their
// versions apart, so each set's 00001 is applied.
func TestSetsKeepTheirOwnVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	other := migrate.Set{Name: "other", Dir: ".", Table: "other_migrations", FS: fstest.MapFS{
		"00001_c.sql": {Data: []byte("-- +goose Up\nCREATE TABLE c (id int);\n-- +goose Down\nDROP TABLE c;\n")},
	}}
	if err := migrate.Up(ctx, pool, twoTables, other); err != nil {
		t.Fatal(err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('a', 'b', 'c')`).Scan(&tables); err != nil || tables != 3 {
		t.Fatalf("%d of the tables a, b, c exist (%v), want 3", tables, err)
	}
	if err := migrate.Up(ctx, pool, twoTables, other); err != nil {
		t.Fatalf("Up again: %v", err)
	}
}
