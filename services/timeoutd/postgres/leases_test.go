package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// TestFencingRefusesAFormerOwner is the fence, shown on Postgres: once
// another instance holds a partition's lease (a new epoch), every write the
// former owner makes for it with its old epoch is refused in its own
// transaction, whatever the former owner believes: no upsert, no fired row,
// no outbox row; its writes for partitions it still holds go through.
func TestFencingRefusesAFormerOwner(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := context.Background()
	leases := NewLeases(pool)
	a, err := leases.Acquire(ctx, "a", events.Partitions, nil, time.Hour)
	if err != nil || len(a) != events.Partitions {
		t.Fatalf("a acquires every partition: %d, %v", len(a), err)
	}
	fenceA := lease.Fence{Owner: "a", Leases: a}
	lost, kept := "k-lost", "k-kept"
	for i := 0; events.PartitionOf(kept) == events.PartitionOf(lost); i++ {
		kept = fmt.Sprintf("k-kept-%d", i)
	}
	deadline := time.Now().Add(-time.Second).UTC()
	if _, refused, err := s.Apply(ctx, fenceA, []events.Command{setCmd(lost, 1, deadline, 0), setCmd(kept, 1, deadline, 0)}, time.Now()); err != nil || len(refused) != 0 {
		t.Fatalf("a's first writes: refused %v, %v", refused, err)
	}
	// a pauses; the lease of lost's partition expires by Postgres's clock
	// (set here, as the time a pause would take); b takes it (epoch + 1).
	pLost := events.PartitionOf(lost)
	if _, err := pool.Exec(ctx, `UPDATE timeout_leases SET expires_at = now() - interval '1 second' WHERE part = $1`, pLost); err != nil {
		t.Fatal(err)
	}
	b, err := leases.Acquire(ctx, "b", events.Partitions, nil, time.Hour)
	if err != nil || len(b) != 1 || b[0].Partition != pLost || b[0].Epoch != a[pLost].Epoch+1 {
		t.Fatalf("b acquires %v, %v; want partition %d at epoch %d", b, err, pLost, a[pLost].Epoch+1)
	}
	// a wakes up: its renewal no longer returns the lost partition, but a
	// writes before it notices, with every lease it believes it holds.
	if renewed, err := leases.Renew(ctx, "a", a, time.Hour); err != nil || len(renewed) != events.Partitions-1 {
		t.Fatalf("a renews %d leases, %v; want all but one", len(renewed), err)
	}
	stale := fenceA
	changes, refused, err := s.Apply(ctx, stale, []events.Command{
		{Schema: 1, Kind: events.KindClear, Key: lost, Version: 2},
		setCmd(kept, 2, deadline, 0),
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || refused[0] != pLost || len(changes) != 1 || changes[0].Key != kept {
		t.Fatalf("stale apply: changes %+v, refused %v; want only %s written, partition %d refused", changes, refused, kept, pLost)
	}
	if st, v := stateOf(t, s, lost); st != timeoutd.StatePending || v != 1 {
		t.Fatalf("%s after a's stale clear: state %d version %d, want pending at 1", lost, st, v)
	}
	due := []timeoutd.Due{{Key: lost, Version: 1, Deadline: deadline}, {Key: kept, Version: 2, Deadline: deadline}}
	refused, err = s.MarkFired(ctx, stale, due, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || refused[0] != pLost {
		t.Fatalf("stale mark refused %v, want partition %d", refused, pLost)
	}
	if st, _ := stateOf(t, s, lost); st != timeoutd.StatePending {
		t.Fatalf("%s after a's stale mark: state %d, want pending", lost, st)
	}
	if st, _ := stateOf(t, s, kept); st != timeoutd.StateFired {
		t.Fatalf("%s after a's mark: state %d, want fired", kept, st)
	}
	// The owner of the new epoch marks it.
	fenceB := lease.Fence{Owner: "b", Leases: b}
	if refused, err := s.MarkFired(ctx, fenceB, due[:1], time.Now()); err != nil || len(refused) != 0 {
		t.Fatalf("b marks %s: refused %v, %v", lost, refused, err)
	}
	if st, _ := stateOf(t, s, lost); st != timeoutd.StateFired {
		t.Fatalf("%s after b's mark: state %d, want fired", lost, st)
	}
}

// TestAcquireWaitsForTheOwnersWriteInFlight: a fenced write holds its lease
// rows until it commits, so a takeover of an expired lease neither skips
// past a write in flight nor sees the partition before it.
func TestAcquireSkipsALeaseWithAWriteInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, leases, a := acquiredByA(t, 1, 100*time.Millisecond)
	// a's write in flight: the fence's key-share lock, taken while the
	// lease was valid.
	tx := writeInFlight(t, pool, a)
	time.Sleep(150 * time.Millisecond) // the lease expires meanwhile
	got, err := leases.Acquire(ctx, "b", events.Partitions, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range got {
		if l.Partition == a[0].Partition {
			t.Fatalf("b took partition %d while a's write held it", l.Partition)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = leases.Acquire(ctx, "b", 1, lease.PartitionsOf(got), time.Hour)
	if err != nil || len(got) != 1 || got[0].Partition != a[0].Partition || got[0].Epoch != a[0].Epoch+1 {
		t.Fatalf("after a's commit b acquires %v, %v; want partition %d at epoch %d", got, err, a[0].Partition, a[0].Epoch+1)
	}
}

// TestRenewDoesNotWaitForFencedWrites: the owner's renewal goes through
// while its own fenced writes hold the lease rows (under load they always
// do: with share locks, the renewal starved until the leases lapsed).
func TestRenewDoesNotWaitForFencedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, leases, a := acquiredByA(t, events.Partitions, time.Hour)
	writeInFlight(t, pool, a) // two writes in flight, as ingest and fire
	writeInFlight(t, pool, a)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	renewed, err := leases.Renew(rctx, "a", a, time.Hour)
	if err != nil || len(renewed) != len(a) {
		t.Fatalf("renew with fenced writes in flight: %d of %d leases, %v", len(renewed), len(a), err)
	}
}

func TestMembership(t *testing.T) {
	t.Parallel()
	_, pool := newStore(t)
	ctx := context.Background()
	l := NewLeases(pool)
	for _, id := range []string{"a", "b"} {
		if _, err := l.Heartbeat(ctx, id, time.Hour, []byte(`{"pending":1}`), true); err != nil {
			t.Fatal(err)
		}
	}
	// c is live for a second: long enough for the checks of three live
	// instances on a loaded machine, short enough to wait out below.
	beat, err := l.Heartbeat(ctx, "c", time.Second, []byte(`{}`), true)
	if err != nil || beat.Live != 3 || beat.NextExpiry != 0 || beat.Takeable != events.Partitions {
		t.Fatalf("heartbeat = %+v, %v; want 3 live, no next expiry, every partition free", beat, err)
	}
	if d := time.Since(beat.DBTime); d < -time.Minute || d > time.Minute {
		t.Fatalf("the database's time %v is not now", beat.DBTime)
	}
	if again, err := l.Heartbeat(ctx, "c", time.Second, []byte(`{}`), true); err != nil || beat.Server == "" || again.Server != beat.Server {
		t.Fatalf("the server is named %q, then %q (%v): want one name, while it runs", beat.Server, again.Server, err)
	}
	// b cannot reach NATS: it is not serving, and the others' share counts
	// it out, so that the partitions it hands over find room.
	if _, err := l.Heartbeat(ctx, "b", time.Hour, []byte(`{"pending":1}`), false); err != nil {
		t.Fatal(err)
	}
	if live, _, err := l.Probe(ctx, "a", time.Hour); err != nil || live != 2 {
		t.Fatalf("with b not serving, a probes %d live, %v; want 2", live, err)
	}
	if _, err := l.Heartbeat(ctx, "b", time.Hour, []byte(`{"pending":1}`), true); err != nil {
		t.Fatal(err)
	}
	if live, _, err := l.Probe(ctx, "a", time.Hour); err != nil || live != 3 {
		t.Fatalf("with b serving again, a probes %d live, %v; want 3", live, err)
	}
	got, err := l.Acquire(ctx, "a", 5, nil, time.Hour)
	if err != nil || len(got) != 5 {
		t.Fatalf("a acquires %v, %v", got, err)
	}
	if _, err := l.Acquire(ctx, "b", 1, nil, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// The first lease of another instance to expire is b's, in about 2 s;
	// a's own leases (an hour) do not count.
	if b, err := l.Heartbeat(ctx, "a", time.Hour, []byte(`{"pending":1}`), true); err != nil || b.NextExpiry <= time.Second || b.NextExpiry > 2*time.Second {
		t.Fatalf("a's next expiry = %v, %v; want b's lease, within (1s, 2s]", b.NextExpiry, err)
	}
	if b, err := l.Heartbeat(ctx, "b", time.Hour, []byte(`{"pending":1}`), true); err != nil || b.NextExpiry < 59*time.Minute {
		t.Fatalf("b's next expiry = %v, %v; want a's, about an hour", b.NextExpiry, err)
	}
	if err := l.Release(ctx, "a", got[3:]); err != nil {
		t.Fatal(err)
	}
	if err := l.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// c's heartbeat expires (by the database's clock) within its second.
	var in []lease.Instance
	for deadline := time.Now().Add(10 * time.Second); ; {
		if in, err = l.Instances(ctx); err != nil || len(in) <= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || len(in) != 1 || in[0].ID != "a" || len(in[0].Partitions) != 3 || string(in[0].Info) != `{"pending": 1}` {
		t.Fatalf("instances = %+v, %v; want a with 3 partitions", in, err)
	}
	if b, err := l.Heartbeat(ctx, "a", time.Hour, []byte(`{}`), true); err != nil || b.Live != 1 {
		t.Fatalf("live = %d, %v; want 1", b.Live, err)
	}
}

// acquiredByA returns a fresh database's pool, its lease table, and n
// leases instance "a" acquired there for ttl.
func acquiredByA(t *testing.T, n int, ttl time.Duration) (*pgxpool.Pool, Leases, []lease.Lease) {
	t.Helper()
	_, pool := newStore(t)
	leases := NewLeases(pool)
	a, err := leases.Acquire(context.Background(), "a", n, nil, ttl)
	if err != nil || len(a) != n {
		t.Fatalf("a acquires %d of %d: %v", len(a), n, err)
	}
	return pool, leases, a
}

// writeInFlight begins a transaction that holds the fence of "a"'s leases
// as a fenced write in flight does (key-share locks), until the test
// commits or rolls it back.
func writeInFlight(t *testing.T, pool *pgxpool.Pool, leases []lease.Lease) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	fp, fe := fenceArrays(lease.Fence{Leases: leases})
	if _, err := tx.Exec(ctx, fenceSQL, fp, fe, "a"); err != nil {
		t.Fatal(err)
	}
	return tx
}

// stateOf returns key's stored state and version.
func stateOf(t *testing.T, s *Store, key string) (timeoutd.State, int64) {
	t.Helper()
	var st int16
	var v int64
	if err := s.pool.QueryRow(context.Background(), `SELECT state, version FROM timeouts WHERE key = $1`, encodeKey(key)).Scan(&st, &v); err != nil {
		t.Fatal(err)
	}
	return timeoutd.State(st), v
}

func appPool(t testing.TB, url, app string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	LeasePoolConfig(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
