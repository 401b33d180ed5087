package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/services/orders"
	"github.com/ordertimeout/ordertimeout/services/orders/postgres"
)

// BenchmarkCreate measures creating an order through the Store (order row
// and two outbox rows in one round trip) at 64 concurrent clients, beside
// the peer the issue compares with: a single-row insert, as pgbench runs it,
// on the same database and pool. Compare the ns/op of the two. The testinfra
// container runs with fsync off, so this compares CPU cost, not WAL flushes.
//
//	go test -run '^$' -bench Create -benchtime 5s ./services/orders/postgres
func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testinfra.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = 64
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_insert (id bigserial PRIMARY KEY, v int NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	store, err := postgres.NewStore(pool, postgres.StoreConfig{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := orders.NewService(store, orders.ServiceConfig{})
	if err != nil {
		b.Fatal(err)
	}
	req := createReq("c-bench")
	b.Run("store", func(b *testing.B) {
		b.SetParallelism(32) // 64 goroutines on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := svc.Create(ctx, req, ""); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("peer_single_row_insert", func(b *testing.B) {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := pool.Exec(ctx, `INSERT INTO bench_insert (v) VALUES (1)`); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
