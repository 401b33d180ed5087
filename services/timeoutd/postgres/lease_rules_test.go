package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease/leasetest"
)

// TestLeaseRules runs the lease table's behaviour suite against Leases
// and Store on Postgres; package sim runs the same suite against the
// simulation's model (TestLeaseRules there).
func TestLeaseRules(t *testing.T) {
	leasetest.Run(t, leasetest.Harness{Parallel: true, New: newLeaseBackend})
}

// pgBackend is a migrated database, on the shared server or, for a case
// that restarts it, on a server of its own.
type pgBackend struct {
	server *testinfra.PostgresServer // nil: the shared server
	mu     sync.Mutex
	url    string
	pools  map[string][]*pgxpool.Pool // each instance's, by id
}

func newLeaseBackend(t *testing.T, o leasetest.Options) leasetest.Backend {
	b := &pgBackend{pools: map[string][]*pgxpool.Pool{}}
	if o.Restarts {
		b.server = testinfra.OwnPostgres(t)
		b.url = b.server.URL()
	} else {
		b.url = testinfra.Postgres(t)
	}
	if err := Migrate(context.Background(), appPool(t, b.url, "migrate")); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *pgBackend) Instance(t *testing.T, id string) lease.Table {
	b.mu.Lock()
	defer b.mu.Unlock()
	pool := appPool(t, b.url, "timeoutd/"+id)
	b.pools[id] = append(b.pools[id], pool)
	return NewLeases(pool)
}

func (b *pgBackend) Crash(_ *testing.T, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pools[id] {
		p.Close()
	}
	b.pools[id] = nil
}

func (b *pgBackend) Restart(t *testing.T) {
	b.server.Restart(t)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.url = b.server.URL()
}

func (b *pgBackend) Now(t *testing.T) time.Time {
	t.Helper()
	b.mu.Lock()
	url := b.url
	b.mu.Unlock()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var now time.Time
	if err := conn.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func (b *pgBackend) CrashGrace() time.Duration { return CrashGrace }

func (b *pgBackend) Write(t *testing.T, kind string, fence lease.Fence, parts []int) []int {
	t.Helper()
	b.mu.Lock()
	url := b.url
	b.mu.Unlock()
	s := NewStore(appPool(t, url, "timeoutd/"+fence.Owner+"/store"), events.OrderCancelSubjectPrefix)
	ctx := context.Background()
	var refused []int
	var err error
	switch kind {
	case "apply":
		_, refused, err = s.Apply(ctx, fence, leasetest.Sets(parts), time.Now())
	case "mark":
		refused, err = s.MarkFired(ctx, fence, leasetest.Dues(parts), time.Now())
	default:
		t.Fatalf("unknown write %q", kind)
	}
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	return refused
}
