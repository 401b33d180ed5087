package timeoutd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// leaseTable is the scripted Leases fake of the membership tests: a lease
// table of its own, which the test changes between rounds as other
// instances would (steal, free), with the errors and live counts it
// scripts. It records the calls that give leases up.
type leaseTable struct {
	mu       sync.Mutex
	owner    [events.Partitions]string
	epoch    [events.Partitions]int64
	live     int
	failBeat error // Heartbeat fails with it while set
	failRnew error // Renew fails with it while set
	failProb error // Probe fails with it while set
	acquires int
	released []Lease
	left     bool
	serving  bool // as the last heartbeat said
}

func newLeaseTable() *leaseTable { return &leaseTable{live: 1} }

func (l *leaseTable) Heartbeat(_ context.Context, _ string, _ time.Duration, _ []byte, serving bool) (Beat, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.serving = serving
	if l.failBeat != nil {
		return Beat{}, l.failBeat
	}
	return Beat{Live: l.live, DBTime: time.Now()}, nil
}

func (l *leaseTable) Probe(context.Context, string, time.Duration) (int, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live, 0, l.failProb
}

func (l *leaseTable) Acquire(_ context.Context, id string, n int, held []int, _ time.Duration) ([]Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquires++
	var out []Lease
	for p := 0; p < events.Partitions && len(out) < n; p++ {
		if (l.owner[p] == "" || l.owner[p] == id) && !slices.Contains(held, p) {
			l.owner[p] = id
			l.epoch[p]++
			out = append(out, Lease{Partition: p, Epoch: l.epoch[p]})
		}
	}
	return out, nil
}

func (l *leaseTable) Renew(_ context.Context, id string, held []Lease, _ time.Duration) ([]Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failRnew != nil {
		return nil, l.failRnew
	}
	var out []Lease
	for _, h := range held {
		if l.owner[h.Partition] == id && l.epoch[h.Partition] == h.Epoch {
			out = append(out, h)
		}
	}
	return out, nil
}

func (l *leaseTable) Release(_ context.Context, id string, leases []Lease) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range leases {
		if l.owner[r.Partition] == id && l.epoch[r.Partition] == r.Epoch {
			l.owner[r.Partition] = ""
		}
	}
	l.released = append(l.released, leases...)
	return nil
}

func (l *leaseTable) Leave(context.Context, string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.left = true
	return nil
}

func (l *leaseTable) Instances(context.Context) ([]Instance, error) { return nil, nil }

// steal gives partition p to another instance (its epoch grows); free
// releases it.
func (l *leaseTable) steal(p int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owner[p] = "other"
	l.epoch[p]++
}

func (l *leaseTable) free(p int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owner[p] = ""
}

func (l *leaseTable) set(f func(*leaseTable)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// trackingSource is a Source that records which partitions it consumes.
type trackingSource struct {
	nopSource
	mu       sync.Mutex
	consumed map[int]bool
}

func (s *trackingSource) Add(_ context.Context, p int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.consumed[p] = true
	return nil
}

func (s *trackingSource) Remove(p int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.consumed, p)
}

func (s *trackingSource) consumes(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consumed[p]
}

// gatedStore is a fakeStore whose LoadPending of partition gatedPart, at
// the first call only, waits for gate to close: a takeover's load that
// outlives its lease. loads counts the LoadPending calls.
type gatedStore struct {
	*fakeStore
	gatedPart int
	gate      chan struct{}
	once      sync.Once
	mu        sync.Mutex
	loads     int
}

func (g *gatedStore) LoadPending(ctx context.Context, p int, after string, limit int) ([]Timeout, error) {
	g.mu.Lock()
	g.loads++
	g.mu.Unlock()
	if p == g.gatedPart && g.gate != nil {
		g.once.Do(func() { <-g.gate })
	}
	return g.fakeStore.LoadPending(ctx, p, after, limit)
}

func (g *gatedStore) loadCalls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.loads
}

// memberTest is one membership driven a round at a time: its monotonic
// clock is clk, which only the test moves.
type memberTest struct {
	s      *Service
	m      *membership
	leases *leaseTable
	src    *trackingSource
	store  *gatedStore
	clk    *fakeClock
}

// pendingOfEveryPartition returns a pending timeout of each partition,
// due in an hour.
func pendingOfEveryPartition() []Timeout {
	var out []Timeout
	seen := map[int]bool{}
	for i := 0; len(seen) < events.Partitions; i++ {
		k := fmt.Sprintf("k-%d", i)
		if p := events.PartitionOf(k); !seen[p] {
			seen[p] = true
			out = append(out, Timeout{Key: k, Version: 1, Deadline: time.Now().Add(time.Hour)})
		}
	}
	return out
}

func newMemberTest(t *testing.T, cfg Config, store *gatedStore) *memberTest {
	t.Helper()
	if store == nil {
		store = &gatedStore{fakeStore: &fakeStore{rows: map[string]Timeout{}}}
	}
	if store.pending == nil {
		store.pending = pendingOfEveryPartition()
	}
	mt := &memberTest{leases: newLeaseTable(), src: &trackingSource{consumed: map[int]bool{}}, store: store,
		clk: newClock(time.Now())}
	cfg.InstanceID = "me"
	s, err := New(cfg, Deps{Store: store, Source: mt.src, DeadLetters: &fakeDLQ{}, Publisher: store.fakeStore, Leases: mt.leases})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.sched.Stop)
	mt.s, mt.m = s, s.membership
	started := time.Now()
	s.startedAt.Store(&started) // as Run does
	mt.m.now, s.own.now = mt.clk.Now, mt.clk.Now
	mt.m.signals.taken.init()
	return mt
}

// probe moves the clock on by d, as the probes between rounds would see
// it: one that reaches the database every LeaseProbeInterval.
func (mt *memberTest) probe(d time.Duration) {
	for end := mt.clk.Now().Add(d); mt.clk.Now().Before(end); {
		mt.clk.Set(mt.clk.Now().Add(LeaseProbeIntervalDefault))
		mt.s.own.contacted(mt.clk.Now(), nil)
	}
}

// round runs one round and returns the partitions owned after it.
func (mt *memberTest) round(t *testing.T) []int {
	t.Helper()
	mt.m.round(t.Context())
	return mt.s.own.owned()
}

// taken waits for the next takeover to be over and returns its leases.
func (mt *memberTest) taken(t *testing.T) []Lease {
	t.Helper()
	return mt.m.signals.taken.wait(t, 5*time.Second)
}

// holds reports whether the schedule holds a timeout of partition p.
func (mt *memberTest) holds(p int) bool {
	for _, k := range mt.store.pending {
		if events.PartitionOf(k.Key) == p {
			if _, ok := mt.s.sched.Version(k.Key); ok {
				return true
			}
		}
	}
	return false
}

// TestMembershipDropsWhatARenewalDidNotReturn: a partition taken by
// another instance (the renewal no longer returns it) stops here at once:
// not owned, not consumed, its timeouts out of the schedule; the others
// stay.
func TestMembershipDropsWhatARenewalDidNotReturn(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{}, nil)
	if got := mt.round(t); len(got) != events.Partitions {
		t.Fatalf("a sole instance owns %d partitions, want all", len(got))
	}
	mt.taken(t)
	if !mt.holds(5) || !mt.src.consumes(5) || mt.s.Pending() != events.Partitions {
		t.Fatalf("after the takeover: holds %v, consumes %v, pending %d", mt.holds(5), mt.src.consumes(5), mt.s.Pending())
	}
	mt.leases.steal(5)
	got := mt.round(t)
	if slices.Contains(got, 5) || len(got) != events.Partitions-1 {
		t.Fatalf("owned after the loss: %v", got)
	}
	if mt.holds(5) || mt.src.consumes(5) || !mt.holds(6) || !mt.src.consumes(6) {
		t.Fatalf("partition 5: held %v, consumed %v; partition 6: held %v, consumed %v; want 5 gone, 6 kept",
			mt.holds(5), mt.src.consumes(5), mt.holds(6), mt.src.consumes(6))
	}
	if st := mt.s.Stats(); st.PartitionsLost != 1 || st.PartitionsGained != events.Partitions {
		t.Fatalf("stats: %d lost, %d gained; want 1 and %d", st.PartitionsLost, st.PartitionsGained, events.Partitions)
	}
}

// TestMembershipLapseKeepsThePartitionsLoaded: renewals that fail past the
// renew deadline stop the fires (the leases are not trusted) but keep the
// partitions loaded and consumed; the next renewal at the same epochs
// resumes them without a reload.
func TestMembershipLapseKeepsThePartitionsLoaded(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{}, nil)
	mt.round(t)
	mt.taken(t)
	loads := mt.store.loadCalls()
	if !mt.s.own.trusted() {
		t.Fatal("leases not trusted after the first round")
	}
	mt.leases.set(func(l *leaseTable) { l.failRnew = errors.New("connection reset") })
	mt.probe(time.Second)
	mt.round(t) // within the renew deadline: nothing changes
	if !mt.s.own.trusted() || mt.s.Stats().LeaseLapses != 0 {
		t.Fatal("a failed renewal within the renew deadline lapsed")
	}
	mt.probe(2 * time.Second) // past it
	got := mt.round(t)
	if mt.s.own.trusted() || mt.s.Stats().LeaseLapses != 1 {
		t.Fatalf("past the renew deadline: trusted %v, %d lapses; want untrusted, 1", mt.s.own.trusted(), mt.s.Stats().LeaseLapses)
	}
	if len(got) != events.Partitions || mt.s.Pending() != events.Partitions || !mt.src.consumes(0) {
		t.Fatalf("a lapse dropped partitions: owned %d, pending %d", len(got), mt.s.Pending())
	}
	mt.round(t) // still failing: counted once
	mt.leases.set(func(l *leaseTable) { l.failRnew = nil })
	got = mt.round(t)
	if !mt.s.own.trusted() || len(got) != events.Partitions || mt.s.Pending() != events.Partitions {
		t.Fatalf("after the renewal: trusted %v, owned %d, pending %d", mt.s.own.trusted(), len(got), mt.s.Pending())
	}
	if mt.store.loadCalls() != loads || mt.s.Stats().LeaseLapses != 1 || mt.s.Stats().PartitionsLost != 0 {
		t.Fatalf("resumed with %d loads (want %d), %d lapses, %d lost", mt.store.loadCalls(), loads,
			mt.s.Stats().LeaseLapses, mt.s.Stats().PartitionsLost)
	}
}

// TestAStaleTakeoverNeverTouchesANewerOne: a takeover whose load outlives
// its lease (the partition lost, then acquired again at a newer epoch by a
// second takeover that finished first) undoes nothing of the newer one:
// the partition stays owned, consumed and scheduled.
func TestAStaleTakeoverNeverTouchesANewerOne(t *testing.T) {
	t.Parallel()
	store := &gatedStore{fakeStore: &fakeStore{rows: map[string]Timeout{}}, gatedPart: 0, gate: make(chan struct{})}
	mt := newMemberTest(t, Config{}, store)
	mt.round(t) // takeover A: its load waits at partition 0
	const p = 7
	mt.leases.steal(p)
	mt.round(t) // A's partition 7 is lost
	if mt.s.own.owns(p) {
		t.Fatal("partition 7 still owned after its loss")
	}
	mt.leases.free(p)
	mt.round(t) // takeover B: partition 7 again, at a newer epoch
	if b := mt.taken(t); len(b) != 1 || b[0].Partition != p {
		t.Fatalf("takeover B took %v, want partition %d", b, p)
	}
	if !mt.holds(p) || !mt.src.consumes(p) {
		t.Fatal("takeover B did not load or consume partition 7")
	}
	close(store.gate) // A's load finishes, after B
	if a := mt.taken(t); len(a) != events.Partitions {
		t.Fatalf("takeover A took %d partitions, want %d", len(a), events.Partitions)
	}
	if !mt.s.own.owns(p) || !mt.holds(p) || !mt.src.consumes(p) {
		t.Fatalf("after the stale takeover: partition 7 owned %v, scheduled %v, consumed %v; want all",
			mt.s.own.owns(p), mt.holds(p), mt.src.consumes(p))
	}
}

// TestATakeoverBeyondMaxPendingGivesItsLeasesUp: partitions whose rows do
// not fit in MaxPending are given up (released, for another instance),
// and the next round acquires nothing rather than taking them again.
func TestATakeoverBeyondMaxPendingGivesItsLeasesUp(t *testing.T) {
	t.Parallel()
	store := &gatedStore{fakeStore: &fakeStore{rows: map[string]Timeout{}}}
	store.pending = pendingOfEveryPartition()
	mt := newMemberTest(t, Config{MaxPending: 10}, store)
	mt.round(t)
	mt.taken(t)
	if owned := mt.s.own.owned(); len(owned) != 0 {
		t.Fatalf("owned %d partitions whose rows do not fit", len(owned))
	}
	mt.leases.mu.Lock()
	released, acquires := len(mt.leases.released), mt.leases.acquires
	mt.leases.mu.Unlock()
	if released != events.Partitions {
		t.Fatalf("released %d leases, want %d", released, events.Partitions)
	}
	mt.round(t)
	mt.leases.mu.Lock()
	defer mt.leases.mu.Unlock()
	if mt.leases.acquires != acquires {
		t.Fatal("acquired again at once the partitions just given up")
	}
}

// TestMembershipHandsTheExtraOverAndReleasesAllOnShutdown: when more
// instances are live, the partitions beyond the share are released at
// once; on shutdown every lease is released and the instance leaves.
func TestMembershipHandsTheExtraOverAndReleasesAllOnShutdown(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{}, nil)
	mt.round(t)
	mt.taken(t)
	mt.leases.set(func(l *leaseTable) { l.live = 2 })
	if got := mt.round(t); len(got) != events.Partitions/2 {
		t.Fatalf("owned %d with two live instances, want %d", len(got), events.Partitions/2)
	}
	if mt.holds(events.Partitions-1) || mt.src.consumes(events.Partitions-1) {
		t.Fatal("a partition handed over is still scheduled or consumed")
	}
	mt.m.releaseAll(t.Context())
	mt.leases.mu.Lock()
	defer mt.leases.mu.Unlock()
	if len(mt.leases.released) != events.Partitions || !mt.leases.left || len(mt.s.own.owned()) != 0 || mt.s.Pending() != 0 {
		t.Fatalf("after releaseAll: %d released, left %v, %d owned, %d pending", len(mt.leases.released), mt.leases.left,
			len(mt.s.own.owned()), mt.s.Pending())
	}
}

// TestALeaseConnectionFailureHoldsTheFires: when the probe's connection
// fails (a reset: every session of this instance may be gone, which the
// others read as a crash), the fires stop at once and a round runs at
// once; its renewal trusts the leases again.
func TestALeaseConnectionFailureHoldsTheFires(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{LeaseProbeInterval: time.Millisecond}, nil)
	mt.round(t)
	mt.taken(t)
	mt.leases.set(func(l *leaseTable) { l.failProb = errors.New("connection reset by peer") })
	if !mt.m.wait(t.Context(), time.Hour) {
		t.Fatal("wait ended with its context")
	}
	if mt.s.own.trusted() {
		t.Fatal("the leases are still trusted after the lease connection failed")
	}
	mt.leases.set(func(l *leaseTable) { l.failProb = nil })
	mt.round(t)
	if !mt.s.own.trusted() || len(mt.s.own.owned()) != events.Partitions {
		t.Fatalf("after the round: trusted %v, %d owned", mt.s.own.trusted(), len(mt.s.own.owned()))
	}
}

// TestAnInstanceCutOffFromNATSHandsItsPartitionsOver: while NATS does not
// answer, the instance can neither ingest nor publish: it releases every
// partition for the others and takes none; once NATS answers, it takes its
// share again. A lone instance keeps them.
func TestAnInstanceCutOffFromNATSHandsItsPartitionsOver(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{}, nil)
	var cut atomic.Bool
	mt.m.brokerHealthy = func() bool { return !cut.Load() }
	mt.leases.set(func(l *leaseTable) { l.live = 2 }) // another instance could take them
	mt.round(t)
	mt.taken(t)
	cut.Store(true)
	if got := mt.round(t); len(got) != 0 || mt.s.Pending() != 0 {
		t.Fatalf("cut off from NATS: owns %d partitions, %d pending; want none", len(got), mt.s.Pending())
	}
	mt.leases.mu.Lock()
	released, acquires := len(mt.leases.released), mt.leases.acquires
	mt.leases.mu.Unlock()
	if released != events.Partitions/2 {
		t.Fatalf("released %d leases, want its share, %d", released, events.Partitions/2)
	}
	mt.round(t)
	mt.leases.mu.Lock()
	again, serving := mt.leases.acquires, mt.leases.serving
	mt.leases.mu.Unlock()
	if again != acquires {
		t.Fatal("acquired partitions while cut off from NATS")
	}
	if serving {
		t.Fatal("the heartbeat says serving while cut off from NATS: the others' share would leave no room for its partitions")
	}
	cut.Store(false)
	if got := mt.round(t); len(got) != events.Partitions/2 {
		t.Fatalf("NATS back: owns %d partitions, want its share, %d", len(got), events.Partitions/2)
	}
	mt.leases.mu.Lock()
	serving = mt.leases.serving
	mt.leases.mu.Unlock()
	if !serving {
		t.Fatal("NATS back: the heartbeat says not serving")
	}
	// Alone, it keeps its partitions: nobody else could fire them.
	mt.leases.set(func(l *leaseTable) { l.live = 1 })
	mt.round(t)
	cut.Store(true)
	if got := mt.round(t); len(got) != events.Partitions {
		t.Fatalf("alone and cut off from NATS: owns %d partitions, want every one", len(got))
	}
}

// TestALeavingInstanceKeepsRenewing: on a graceful shutdown the membership
// keeps its leases renewed, and hands nothing over and acquires nothing,
// until releaseAll gives every lease up at once: no lease may expire while
// the writes in flight finish, or the survivors would wait for it.
func TestALeavingInstanceKeepsRenewing(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{}, nil)
	mt.round(t)
	mt.taken(t)
	mt.m.leave()
	mt.leases.set(func(l *leaseTable) { l.live = 2 })
	mt.clk.Set(mt.clk.Now().Add(time.Second))
	if got := mt.round(t); len(got) != events.Partitions {
		t.Fatalf("leaving: owns %d partitions after a round, want all %d until releaseAll", len(got), events.Partitions)
	}
	mt.clk.Set(mt.clk.Now().Add(1500 * time.Millisecond)) // past the first renewal's deadline
	if !mt.s.own.trusted() {
		t.Fatal("leaving: the leases were not renewed")
	}
	mt.m.releaseAll(t.Context())
	if len(mt.s.own.owned()) != 0 {
		t.Fatal("releaseAll left partitions owned")
	}
}

func TestAppendPartitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		parts, add []int
		want       []int
	}{
		{"nothing to add", []int{3}, nil, []int{3}},
		{"into none", nil, []int{5, 1, 5}, []int{5, 1}},
		{"only the new ones, in order first seen", []int{2, 7}, []int{7, 9, 2, 4, 9}, []int{2, 7, 9, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := appendPartitions(tt.parts, tt.add...); !slices.Equal(got, tt.want) {
				t.Fatalf("appendPartitions(%v, %v) = %v, want %v", tt.parts, tt.add, got, tt.want)
			}
		})
	}
}
