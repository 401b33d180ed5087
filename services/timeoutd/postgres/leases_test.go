package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
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

// appPool returns a pool on url whose sessions are named app, as an
// instance's (timeoutd/<id>).
// twoInstances returns the URL of a migrated database and the lease tables
// of instances a and b on it, each on a pool of its own whose sessions
// are named as timeoutd names them.
func twoInstances(t *testing.T) (url string, a, b Leases) {
	t.Helper()
	url = testinfra.Postgres(t)
	if err := Migrate(context.Background(), appPool(t, url, "migrate")); err != nil {
		t.Fatal(err)
	}
	return url, NewLeases(appPool(t, url, "timeoutd/a")), NewLeases(appPool(t, url, "timeoutd/b"))
}

// halves has a and b beat and acquire half the partitions each, with
// ttl, and returns their leases by instance id.
func halves(t *testing.T, a, b Leases, ttl time.Duration) map[string][]lease.Lease {
	t.Helper()
	ctx := context.Background()
	half := events.Partitions / 2
	held := map[string][]lease.Lease{}
	for _, in := range []struct {
		l  Leases
		id string
	}{{a, "a"}, {b, "b"}} {
		if _, err := in.l.Heartbeat(ctx, in.id, ttl, []byte(`{}`), true); err != nil {
			t.Fatal(err)
		}
		got, err := in.l.Acquire(ctx, in.id, half, nil, ttl)
		if err != nil || len(got) != half {
			t.Fatalf("%s acquires %d, %v; want %d", in.id, len(got), err, half)
		}
		held[in.id] = got
	}
	return held
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

// TestACrashedInstancesPartitionsAreOrphanedAtOnce: once every session of
// an instance is gone (the database saw its connections close: it
// crashed), its partitions are orphaned and taken at once, long before its
// leases expire; while any of its sessions lives (paused, cut off: its
// connections stay open), they wait for the leases to expire.
func TestACrashedInstancesPartitionsAreOrphanedAtOnce(t *testing.T) {
	t.Parallel()
	url := testinfra.Postgres(t)
	ctx := context.Background()
	if err := Migrate(ctx, appPool(t, url, "migrate")); err != nil {
		t.Fatal(err)
	}
	deadPool, bPool := appPool(t, url, "timeoutd/dead"), appPool(t, url, "timeoutd/b")
	dead, b := NewLeases(deadPool), NewLeases(bPool)
	if _, err := dead.Heartbeat(ctx, "dead", time.Hour, []byte(`{}`), true); err != nil {
		t.Fatal(err)
	}
	held, err := dead.Acquire(ctx, "dead", 10, nil, time.Hour)
	if err != nil || len(held) != 10 {
		t.Fatalf("acquire: %v, %v", held, err)
	}
	beat, err := b.Heartbeat(ctx, "b", time.Hour, []byte(`{}`), true)
	if err != nil || beat.Live != 2 || beat.Takeable != events.Partitions-10 {
		t.Fatalf("while dead lives: %+v, %v; want 2 live, only the free partitions takeable", beat, err)
	}
	got, err := b.Acquire(ctx, "b", events.Partitions, nil, time.Hour)
	if err != nil || len(got) != events.Partitions-10 {
		t.Fatalf("b acquires %d, %v; want the %d free ones only", len(got), err, events.Partitions-10)
	}
	deadPool.Close() // the crash: every session closes
	waitOrphaned := time.Now().Add(10 * time.Second)
	for {
		live, takeable, err := b.Probe(ctx, "b", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if live == 1 && takeable == 10 {
			break
		}
		if time.Now().After(waitOrphaned) {
			t.Fatalf("after the crash: %d live, %d takeable; want 1 and 10", live, takeable)
		}
		time.Sleep(10 * time.Millisecond)
	}
	taken, err := b.Acquire(ctx, "b", events.Partitions, lease.PartitionsOf(got), time.Hour)
	if err != nil || len(taken) != 10 {
		t.Fatalf("b takes %d orphaned partitions, %v; want 10", len(taken), err)
	}
	for i, l := range taken {
		if l.Partition != held[i].Partition || l.Epoch != held[i].Epoch+1 {
			t.Fatalf("took %v, want %v at the next epoch", l, held[i])
		}
	}
}

// TestAnInstanceGoneBeforeARestartIsNotOrphaned: sessions lost to a restart
// of the database (the last heartbeat came before it) are not a crash, and
// within a TTL of the database's start an expired lease is not taken: the
// instances renew their own first.
func TestAnInstanceGoneBeforeARestartIsNotOrphaned(t *testing.T) {
	t.Parallel()
	url := testinfra.Postgres(t)
	ctx := context.Background()
	pool := appPool(t, url, "migrate")
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	a := NewLeases(appPool(t, url, "timeoutd/b"))
	// gone's row: no session, its last heartbeat before the database's
	// start, its leases expired.
	if _, err := pool.Exec(ctx, `INSERT INTO timeoutd_instances (id, expires_at, app, beat_at)
		VALUES ('gone', now() - interval '1 second', 'timeoutd/gone', pg_postmaster_start_time() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE timeout_leases SET owner = 'gone', epoch = 7, expires_at = now() - interval '1 second' WHERE part < 4`); err != nil {
		t.Fatal(err)
	}
	// A TTL reaching from the database's start to beyond now: the grace.
	var sinceStart time.Duration
	if err := pool.QueryRow(ctx, `SELECT (extract(epoch FROM now() - pg_postmaster_start_time()) * 1000)::int8`).Scan(&sinceStart); err != nil {
		t.Fatal(err)
	}
	grace := sinceStart*time.Millisecond + time.Hour
	live, takeable, err := a.Probe(ctx, "b", grace)
	if err != nil || live != 2 || takeable != events.Partitions-4 {
		t.Fatalf("within the grace: %d live, %d takeable, %v; want gone live, only the free partitions takeable", live, takeable, err)
	}
	got, err := a.Acquire(ctx, "b", events.Partitions, nil, grace)
	if err != nil || len(got) != events.Partitions-4 || got[0].Partition != 4 {
		t.Fatalf("within the grace b acquires %d from %v, %v; want all but gone's 4", len(got), got, err)
	}
	// Past the grace (a short TTL), gone's expired leases are taken.
	got, err = a.Acquire(ctx, "b", events.Partitions, lease.PartitionsOf(got), time.Millisecond)
	if err != nil || len(got) != 4 || got[0].Epoch != 8 {
		t.Fatalf("past the grace b acquires %v, %v; want gone's 4 at epoch 8", got, err)
	}
}

// TestASilenceOfTheWholeClusterMovesNothing: when no instance reached the
// database for longer than the TTL (Postgres frozen, as by a stalled disk
// or a paused VM, or every instance cut off from it), every lease expired
// by Postgres's clock meanwhile; the first instance back takes none of the
// others' partitions: they count as live and keep their leases for a TTL
// after the silence, and renew them at their epochs. One instance silent
// while another keeps probing is not a silence of the cluster: its leases
// are taken once they expire.
func TestASilenceOfTheWholeClusterMovesNothing(t *testing.T) {
	t.Parallel()
	_, a, b := twoInstances(t)
	ctx := context.Background()
	// Long enough for b's heartbeat and acquisition after the silence on a
	// loaded machine, short enough to wait out twice.
	const ttl = 2 * time.Second
	half := events.Partitions / 2
	held := halves(t, a, b, ttl)
	time.Sleep(ttl + ttl/2) // the silence: no statement of either reaches the database
	beat, err := b.Heartbeat(ctx, "b", ttl, []byte(`{}`), true)
	if err != nil || beat.Live != 2 || beat.Takeable != 0 || beat.NextExpiry <= 0 {
		t.Fatalf("b's first heartbeat after the silence = %+v, %v; want a live, nothing takeable, a's leases expiring later", beat, err)
	}
	if got, err := b.Acquire(ctx, "b", half, lease.PartitionsOf(held["b"]), ttl); err != nil || len(got) != 0 {
		t.Fatalf("after the silence b acquires %v, %v; want none of a's", got, err)
	}
	for id, l := range map[string]Leases{"a": a, "b": b} {
		if renewed, err := l.Renew(ctx, id, held[id], ttl); err != nil || len(renewed) != half {
			t.Fatalf("%s renews %d of its %d leases at their epochs, %v", id, len(renewed), half, err)
		}
	}
	// a alone falls silent; b keeps beating and probing as a live instance
	// does, and takes a's partitions once their leases expire.
	if _, err := a.Heartbeat(ctx, "a", ttl, []byte(`{}`), true); err != nil {
		t.Fatal(err)
	}
	var got []lease.Lease
	for deadline := time.Now().Add(3 * ttl); len(got) == 0; time.Sleep(ttl / 10) {
		if time.Now().After(deadline) {
			t.Fatalf("b took none of silent a's partitions within %v", 3*ttl)
		}
		if _, err := b.Heartbeat(ctx, "b", ttl, []byte(`{}`), true); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Renew(ctx, "b", held["b"], ttl); err != nil {
			t.Fatal(err)
		}
		if got, err = b.Acquire(ctx, "b", half, lease.PartitionsOf(held["b"]), ttl); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != half {
		t.Fatalf("b took %d of silent a's %d partitions at once; want all", len(got), half)
	}
}

// TestALoneSurvivorsSilenceResurrectsNoOne: a falls silent for good with
// its sessions kept (paused, or cut off), and b takes all its partitions
// once their leases expire. Then b, alone, makes no statement for half
// the TTL (a pause, a loaded machine): its next heartbeat records a
// resume, whose grace is for the instances that were live when the
// silence began. a was dead before it: it must not count as live again,
// or b's share would drop to half and it would release 32 partitions
// that nobody takes, on every such hiccup.
func TestALoneSurvivorsSilenceResurrectsNoOne(t *testing.T) {
	t.Parallel()
	_, a, b := twoInstances(t)
	ctx := context.Background()
	const ttl = 2 * time.Second
	held := halves(t, a, b, ttl)["b"]
	// a silent for good; b beats, renews and takes a's partitions once
	// their leases expired, until it holds all and counts itself alone.
	for deadline := time.Now().Add(4 * ttl); ; time.Sleep(ttl / 10) {
		if time.Now().After(deadline) {
			t.Fatalf("b holds %d partitions within %v; want all of silent a's too", len(held), 4*ttl)
		}
		beat, err := b.Heartbeat(ctx, "b", ttl, []byte(`{}`), true)
		if err != nil {
			t.Fatal(err)
		}
		if held, err = b.Renew(ctx, "b", held, ttl); err != nil {
			t.Fatal(err)
		}
		got, err := b.Acquire(ctx, "b", events.Partitions-len(held), lease.PartitionsOf(held), ttl)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, got...)
		if len(held) == events.Partitions && beat.Live == 1 {
			break
		}
	}
	time.Sleep(ttl / 2) // b's silence: no statement reaches the database
	beat, err := b.Heartbeat(ctx, "b", ttl, []byte(`{}`), true)
	if err != nil || beat.Live != 1 {
		t.Fatalf("b's heartbeat after its own silence = %+v, %v; want b alone live (a was dead before the silence)", beat, err)
	}
	if renewed, err := b.Renew(ctx, "b", held, ttl); err != nil || len(renewed) != events.Partitions {
		t.Fatalf("b renews %d of its %d leases, %v", len(renewed), events.Partitions, err)
	}
}

// TestRenewAnExpiredLeaseNobodyTook: a lease that expired (the owner was
// cut off from the database, or the database was down) is renewed at its
// epoch while nobody took it, and refused once somebody did.
func TestRenewAnExpiredLeaseNobodyTook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, l, a := acquiredByA(t, 2, time.Hour)
	if _, err := pool.Exec(ctx, `UPDATE timeout_leases SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(ctx, "b", 1, nil, time.Hour)
	if err != nil || len(b) != 1 || b[0].Partition != a[0].Partition {
		t.Fatalf("b takes %v, %v; want partition %d", b, err, a[0].Partition)
	}
	renewed, err := l.Renew(ctx, "a", a, time.Hour)
	if err != nil || len(renewed) != 1 || renewed[0] != a[1] {
		t.Fatalf("a renews %v, %v; want only %v, which nobody took", renewed, err, a[1])
	}
}

// TestAResetIsNotACrash: an instance whose sessions all vanish and come
// back within CrashGrace (its connections were reset, and it reconnected)
// is not dead: its partitions stay its own.
func TestAResetIsNotACrash(t *testing.T) {
	t.Parallel()
	url, a, b := twoInstances(t)
	ctx := context.Background()
	if _, err := a.Heartbeat(ctx, "a", time.Hour, []byte(`{}`), true); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Acquire(ctx, "a", events.Partitions, nil, time.Hour); err != nil || len(got) != events.Partitions {
		t.Fatalf("a acquires %d, %v", len(got), err)
	}
	a.pool.Close() // the reset
	if _, takeable, err := b.Probe(ctx, "b", time.Hour); err != nil || takeable != 0 {
		t.Fatalf("right after the reset: %d takeable, %v; want none within the grace", takeable, err)
	}
	a = NewLeases(appPool(t, url, "timeoutd/a")) // it reconnects
	if err := a.pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * CrashGrace)
	if _, takeable, err := b.Probe(ctx, "b", time.Hour); err != nil || takeable != 0 {
		t.Fatalf("after it reconnected: %d takeable, %v; want none", takeable, err)
	}
	if got, err := b.Acquire(ctx, "b", events.Partitions, nil, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("b acquires %v, %v; want nothing of a's", got, err)
	}
}
