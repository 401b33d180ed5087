package migrate_test

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/internal/migrate"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// twoTables fails when applied twice: neither statement tolerates an
// existing table.
var twoTables = migrate.Set{Name: "two", Dir: "m", Table: "two_migrations", FS: fstest.MapFS{
	"m/00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nDROP TABLE a;\n")},
	"m/00002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id int);\nSELECT pg_sleep(0.2);\n-- +goose Down\nDROP TABLE b;\n")},
}}

// TestUpConcurrently: instances starting together (a cluster) on a database
// never migrated each call Up; the advisory lock makes one create the
// version tables and apply the migrations and the others find them applied.
// No statement of any instance may fail, not even one goose retries: two
// sessions creating a version table at once make Postgres report a
// duplicate key in pg_class or pg_type. Each round is a fresh database
// (advisory locks are per database, so the rounds run in parallel).
func TestUpConcurrently(t *testing.T) {
	t.Parallel()
	const rounds, instances = 8, 8
	sets := []migrate.Set{outbox.Migrations, twoTables}
	for round := range rounds {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := testinfra.Postgres(t)
			var failed failedStatements
			pools := make([]*pgxpool.Pool, instances)
			for i := range pools {
				cfg, err := pgxpool.ParseConfig(url)
				if err != nil {
					t.Fatal(err)
				}
				cfg.ConnConfig.Tracer = &failed
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				if err := pool.Ping(ctx); err != nil {
					t.Fatal(err)
				}
				pools[i] = pool
			}
			start := make(chan struct{})
			var g errgroup.Group
			for _, pool := range pools {
				g.Go(func() error {
					<-start
					return migrate.Up(ctx, pool, sets...)
				})
			}
			close(start)
			if err := g.Wait(); err != nil {
				t.Fatalf("concurrent Up: %v", err)
			}
			for _, f := range failed.list() {
				t.Errorf("a statement failed: %s", f)
			}
			for _, s := range sets {
				files, err := fs.Glob(s.FS, s.Dir+"/*.sql")
				if err != nil {
					t.Fatal(err)
				}
				var versions, rows int
				q := `SELECT count(DISTINCT version_id), count(*) FROM ` + s.Table + ` WHERE version_id > 0 AND is_applied`
				if err := pools[0].QueryRow(ctx, q).Scan(&versions, &rows); err != nil {
					t.Fatalf("%s: %v", s.Table, err)
				}
				if versions != len(files) || rows != len(files) {
					t.Errorf("%s records %d versions in %d rows, want each of %d once", s.Table, versions, rows, len(files))
				}
			}
		})
	}
}

// failedStatements is a pgx tracer that records the statements that fail.
type failedStatements struct {
	mu     sync.Mutex
	failed []string
}

type sqlKey struct{}

func (f *failedStatements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, data.SQL)
}

func (f *failedStatements) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err == nil {
		return
	}
	sql, _ := ctx.Value(sqlKey{}).(string)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = append(f.failed, fmt.Sprintf("%q: %v", strings.Join(strings.Fields(sql), " "), data.Err))
}

func (f *failedStatements) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.failed)
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

// TestUpNeedsTwoConnections: Up holds the lock on one connection while goose
// migrates on another, so a one-connection pool would wait forever; Up
// refuses it before connecting.
func TestUpNeedsTwoConnections(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://u:p@127.0.0.1:1/db?pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrate.Up(context.Background(), pool, twoTables); err == nil || !strings.Contains(err.Error(), "need 2") {
		t.Fatalf("Up on a one-connection pool = %v, want an error naming the 2 connections", err)
	}
}

// TestUpWaitsLongerThanTheStatementTimeout: an instance waiting for
// another's migrations waits as long as its context allows, not only its
// session's statement_timeout (the services set one on every session): a
// migration slower than it must not fail the instances starting beside it.
func TestUpWaitsLongerThanTheStatementTimeout(t *testing.T) {
	t.Parallel()
	url := testinfra.Postgres(t)
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	// Another instance migrating: it holds the lock for 1 s.
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrate.LockID); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(time.Second)
		_, _ = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrate.LockID)
	}()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "200"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	quick := migrate.Set{Name: "quick", Dir: "m", Table: "quick_migrations", FS: fstest.MapFS{
		"m/00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nDROP TABLE a;\n")},
	}}
	if err := migrate.Up(ctx, pool, quick); err != nil {
		t.Fatalf("Up waiting 1 s with a 200 ms statement_timeout: %v", err)
	}
}

// TestUpConcurrentlyWithAConcurrentIndex: a migration that builds an index
// CONCURRENTLY waits for every transaction holding an older snapshot; an
// instance waiting for the lock must hold none, or the two wait for each
// other until a statement_timeout (here 3 s) ends one.
func TestUpConcurrentlyWithAConcurrentIndex(t *testing.T) {
	t.Parallel()
	url := testinfra.Postgres(t)
	ctx := context.Background()
	indexed := migrate.Set{Name: "indexed", Dir: "m", Table: "indexed_migrations", FS: fstest.MapFS{
		"m/00001_t.sql": {Data: []byte("-- +goose Up\nCREATE TABLE t (id int);\nSELECT pg_sleep(0.3);\n-- +goose Down\nDROP TABLE t;\n")},
		"m/00002_i.sql": {Data: []byte("-- +goose NO TRANSACTION\n-- +goose Up\nCREATE INDEX CONCURRENTLY t_id ON t (id);\n-- +goose Down\nDROP INDEX CONCURRENTLY t_id;\n")},
	}}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "3000"
	var g errgroup.Group
	for range 3 {
		g.Go(func() error {
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			return migrate.Up(ctx, pool, indexed)
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("three instances migrating a concurrent index: %v", err)
	}
}
