package lease

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// leaseTable is the scripted Table fake of the membership tests: a lease
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
	serving  bool   // as the last heartbeat said
	onBeat   func() // called by Heartbeat before it answers, when set
	// hangBeats is how many of the next heartbeats hang, as on a
	// connection whose flow a firewall dropped, until their context ends;
	// abandoned receives each once ended.
	hangBeats int
	abandoned chan struct{}
}

func newLeaseTable() *leaseTable { return &leaseTable{live: 1} }

func (l *leaseTable) Heartbeat(ctx context.Context, _ string, _ time.Duration, _ []byte, serving bool) (Beat, error) {
	l.mu.Lock()
	if l.hangBeats > 0 {
		l.hangBeats--
		l.mu.Unlock()
		<-ctx.Done()
		l.abandoned <- struct{}{}
		return Beat{}, ctx.Err()
	}
	defer l.mu.Unlock()
	if l.onBeat != nil {
		l.onBeat()
	}
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

func (l *leaseTable) Ownership(context.Context, time.Duration) ([]PartitionLease, error) {
	return nil, nil
}

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

// partitions is the fake Partitions of the membership tests: it records
// which partitions a takeover loaded (their timeouts held, their commands
// consumed) until Forget. Its Load of partition gatedPart, at the first
// call only, waits for gate to close (a takeover's load that outlives its
// lease); failLoad makes every Load fail (the partitions do not fit).
type partitions struct {
	own       *Ownership
	mu        sync.Mutex
	loaded    map[int]bool
	loads     int
	failLoad  error
	gatedPart int
	gate      chan struct{}
	once      sync.Once
}

// pending is the number of timeouts each partition holds once loaded.
const pending = 1

func (f *partitions) Load(_ context.Context, leases []Lease) (Takeover, error) {
	f.mu.Lock()
	f.loads++
	fail := f.failLoad
	f.mu.Unlock()
	t := &takeover{f: f, leases: leases}
	for _, l := range leases {
		if l.Partition == f.gatedPart && f.gate != nil {
			f.once.Do(func() { <-f.gate })
		}
		if f.own.Epoch(l.Partition) != l.Epoch {
			continue // lost meanwhile: not ours to load
		}
		f.mu.Lock()
		f.loaded[l.Partition] = true
		f.mu.Unlock()
		t.n += pending
	}
	if fail != nil {
		return t, fail
	}
	return t, nil
}

func (f *partitions) Forget(parts []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range parts {
		delete(f.loaded, p)
	}
}

// holds reports whether partition p is loaded (held and consumed).
func (f *partitions) holds(p int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loaded[p]
}

// count returns the number of partitions loaded, and of Load calls.
func (f *partitions) count() (loaded, loads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.loaded), f.loads
}

type takeover struct {
	f      *partitions
	leases []Lease
	n      int
}

func (t *takeover) Loaded() int { return t.n }

func (t *takeover) Open(context.Context) bool {
	for _, l := range t.leases {
		t.f.own.OpenAt(l.Partition, l.Epoch)
	}
	return true
}

// clock is the tests' monotonic clock, which only the test moves.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// memberTest is one membership driven a round at a time on clk.
type memberTest struct {
	m        *Membership
	own      *Ownership
	leases   *leaseTable
	parts    *partitions
	counters *Counters
	clk      *clock
	healthy  atomic.Bool // what BrokerHealthy reports
}

// probeInterval is the tests' ProbeInterval.
const probeInterval = 100 * time.Millisecond

func newMemberTest(t *testing.T, cfg Config) *memberTest {
	t.Helper()
	mt := &memberTest{leases: newLeaseTable(), counters: &Counters{}, clk: &clock{}}
	mt.clk.Set(time.Now())
	mt.healthy.Store(true)
	mt.own = NewOwnership("me", mt.clk.Now, 200*time.Millisecond)
	mt.parts = &partitions{own: mt.own, loaded: map[int]bool{}, gatedPart: -1}
	cfg.InstanceID = "me"
	cfg.TTL = cmpOr(cfg.TTL, 3*time.Second)
	cfg.RenewInterval = cmpOr(cfg.RenewInterval, time.Second)
	cfg.ProbeInterval = cmpOr(cfg.ProbeInterval, probeInterval)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	mt.m = NewMembership(cfg, Deps{Table: mt.own.Watch(mt.leases), Own: mt.own, Partitions: mt.parts,
		Clock: time.Now, Hold: func(time.Duration) {}, Info: func() []byte { return nil },
		BrokerHealthy: mt.healthy.Load, View: func([]Instance, []PartitionLease) {}, Ready: func(int) {}, CaughtUp: func() {},
		Counters: mt.counters})
	mt.m.Signals.Taken.Init()
	return mt
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// probe moves the clock on by d, as the probes between rounds would see
// it: one that reaches the database every probe interval.
func (mt *memberTest) probe(d time.Duration) {
	for end := mt.clk.Now().Add(d); mt.clk.Now().Before(end); {
		mt.clk.Set(mt.clk.Now().Add(probeInterval))
		mt.own.Contacted(mt.clk.Now(), nil)
	}
}

// round runs one round and returns the partitions owned after it.
func (mt *memberTest) round(t *testing.T) []int {
	t.Helper()
	mt.m.round(t.Context())
	return mt.own.Owned()
}

// taken waits for the next takeover to be over and returns its leases.
func (mt *memberTest) taken(t *testing.T) []Lease {
	t.Helper()
	return mt.m.Signals.Taken.Wait(t, 5*time.Second)
}

// pending returns the number of timeouts held: one per partition loaded.
func (mt *memberTest) pending() int {
	n, _ := mt.parts.count()
	return n * pending
}

// TestMembershipDropsWhatARenewalDidNotReturn: a partition taken by
// another instance (the renewal no longer returns it) stops here at once:
// not owned, not consumed, its timeouts out of the schedule; the others
// stay.
func TestMembershipDropsWhatARenewalDidNotReturn(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{})
	if got := mt.round(t); len(got) != events.Partitions {
		t.Fatalf("a sole instance owns %d partitions, want all", len(got))
	}
	mt.taken(t)
	if !mt.parts.holds(5) || mt.pending() != events.Partitions {
		t.Fatalf("after the takeover: holds %v, pending %d", mt.parts.holds(5), mt.pending())
	}
	mt.leases.steal(5)
	got := mt.round(t)
	if slices.Contains(got, 5) || len(got) != events.Partitions-1 {
		t.Fatalf("owned after the loss: %v", got)
	}
	if mt.parts.holds(5) || !mt.parts.holds(6) {
		t.Fatalf("partition 5 held %v, partition 6 held %v; want 5 gone, 6 kept", mt.parts.holds(5), mt.parts.holds(6))
	}
	if lost, gained := mt.counters.Lost.Load(), mt.counters.Gained.Load(); lost != 1 || gained != events.Partitions {
		t.Fatalf("counters: %d lost, %d gained; want 1 and %d", lost, gained, events.Partitions)
	}
}

// TestMembershipLapseKeepsThePartitionsLoaded: renewals that fail past the
// renew deadline stop the fires (the leases are not trusted) but keep the
// partitions loaded and consumed; the next renewal at the same epochs
// resumes them without a reload.
func TestMembershipLapseKeepsThePartitionsLoaded(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{})
	mt.round(t)
	mt.taken(t)
	_, loads := mt.parts.count()
	if !mt.own.Trusted() {
		t.Fatal("leases not trusted after the first round")
	}
	mt.leases.set(func(l *leaseTable) { l.failRnew = errors.New("connection reset") })
	mt.probe(time.Second)
	mt.round(t) // within the renew deadline: nothing changes
	if !mt.own.Trusted() || mt.counters.Lapses.Load() != 0 {
		t.Fatal("a failed renewal within the renew deadline lapsed")
	}
	mt.probe(2 * time.Second) // past it
	got := mt.round(t)
	if mt.own.Trusted() || mt.counters.Lapses.Load() != 1 {
		t.Fatalf("past the renew deadline: trusted %v, %d lapses; want untrusted, 1", mt.own.Trusted(), mt.counters.Lapses.Load())
	}
	if len(got) != events.Partitions || mt.pending() != events.Partitions || !mt.parts.holds(0) {
		t.Fatalf("a lapse dropped partitions: owned %d, pending %d", len(got), mt.pending())
	}
	mt.round(t) // still failing: counted once
	mt.leases.set(func(l *leaseTable) { l.failRnew = nil })
	got = mt.round(t)
	if !mt.own.Trusted() || len(got) != events.Partitions || mt.pending() != events.Partitions {
		t.Fatalf("after the renewal: trusted %v, owned %d, pending %d", mt.own.Trusted(), len(got), mt.pending())
	}
	if _, again := mt.parts.count(); again != loads || mt.counters.Lapses.Load() != 1 || mt.counters.Lost.Load() != 0 {
		t.Fatalf("resumed with %d loads (want %d), %d lapses, %d lost", again, loads,
			mt.counters.Lapses.Load(), mt.counters.Lost.Load())
	}
}

// TestARenewalAfterASlowHeartbeatTrustsTheLeases: a round whose
// heartbeat took longer than the renew deadline (sent to a frozen
// database, answered when it thawed) trusts the leases from its renewal's
// send time, which bounds their new expiry: the fires resume with it, not
// a round later.
func TestARenewalAfterASlowHeartbeatTrustsTheLeases(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{})
	mt.round(t)
	mt.taken(t)
	mt.leases.set(func(l *leaseTable) {
		l.onBeat = func() { mt.clk.Set(mt.clk.Now().Add(mt.m.cfg.RenewDeadline() + 500*time.Millisecond)) }
	})
	got := mt.round(t)
	if !mt.own.Trusted() || len(got) != events.Partitions {
		t.Fatalf("after a round whose heartbeat took %v: trusted %v, owned %d; want trusted, all",
			mt.m.cfg.RenewDeadline()+500*time.Millisecond, mt.own.Trusted(), len(got))
	}
}

// TestAHungLeaseConnectionCostsNoLapse: a heartbeat that hangs on its
// connection (a flow dropped without a reset) is sent again on another
// after the hedge delay: the round renews the leases well within the renew
// deadline, and the hung call is abandoned, its connection closed.
func TestAHungLeaseConnectionCostsNoLapse(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{})
	mt.round(t)
	mt.taken(t)
	mt.probe(1500 * time.Millisecond)
	mt.leases.set(func(l *leaseTable) { l.hangBeats, l.abandoned = 1, make(chan struct{}, 1) })
	start := time.Now()
	mt.round(t)
	took := time.Since(start)
	mt.probe(time.Second) // past the first round's renew deadline
	if !mt.own.Trusted() || mt.counters.Lapses.Load() != 0 || took >= mt.m.cfg.RenewDeadline() {
		t.Fatalf("after a round whose first heartbeat hung: trusted %v, %d lapses, round took %v; want trusted, 0, under %v",
			mt.own.Trusted(), mt.counters.Lapses.Load(), took, mt.m.cfg.RenewDeadline())
	}
	select {
	case <-mt.leases.abandoned:
	case <-time.After(5 * time.Second):
		t.Fatal("the hung heartbeat was not abandoned after the round")
	}
}

// TestAStaleTakeoverNeverTouchesANewerOne: a takeover whose load outlives
// its lease (the partition lost, then acquired again at a newer epoch by a
// second takeover that finished first) undoes nothing of the newer one:
// the partition stays owned, consumed and scheduled.
func TestAStaleTakeoverNeverTouchesANewerOne(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{})
	mt.parts.gatedPart, mt.parts.gate = 0, make(chan struct{})
	mt.round(t) // takeover A: its load waits at partition 0
	const p = 7
	mt.leases.steal(p)
	mt.round(t) // A's partition 7 is lost
	if mt.own.Owns(p) {
		t.Fatal("partition 7 still owned after its loss")
	}
	mt.leases.free(p)
	mt.round(t) // takeover B: partition 7 again, at a newer epoch
	if b := mt.taken(t); len(b) != 1 || b[0].Partition != p {
		t.Fatalf("takeover B took %v, want partition %d", b, p)
	}
	if !mt.parts.holds(p) {
		t.Fatal("takeover B did not load partition 7")
	}
	close(mt.parts.gate) // A's load finishes, after B
	if a := mt.taken(t); len(a) != events.Partitions {
		t.Fatalf("takeover A took %d partitions, want %d", len(a), events.Partitions)
	}
	if !mt.own.Owns(p) || !mt.parts.holds(p) {
		t.Fatalf("after the stale takeover: partition 7 owned %v, loaded %v; want both", mt.own.Owns(p), mt.parts.holds(p))
	}
}

// TestAFailedTakeoverGivesItsLeasesUp: partitions whose load fails (their
// rows do not fit in timeoutd's MaxPending) are given up (released, for
// another instance), and the next round acquires nothing rather than
// taking them again.
func TestAFailedTakeoverGivesItsLeasesUp(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{})
	mt.parts.failLoad = errors.New("schedule full")
	mt.round(t)
	mt.taken(t)
	if owned := mt.own.Owned(); len(owned) != 0 || mt.pending() != 0 {
		t.Fatalf("owned %d partitions whose load failed, %d pending", len(owned), mt.pending())
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
	mt := newMemberTest(t, Config{})
	mt.round(t)
	mt.taken(t)
	mt.leases.set(func(l *leaseTable) { l.live = 2 })
	if got := mt.round(t); len(got) != events.Partitions/2 {
		t.Fatalf("owned %d with two live instances, want %d", len(got), events.Partitions/2)
	}
	if mt.parts.holds(events.Partitions - 1) {
		t.Fatal("a partition handed over is still scheduled or consumed")
	}
	mt.m.ReleaseAll(t.Context())
	mt.leases.mu.Lock()
	defer mt.leases.mu.Unlock()
	if len(mt.leases.released) != events.Partitions || !mt.leases.left || len(mt.own.Owned()) != 0 || mt.pending() != 0 {
		t.Fatalf("after ReleaseAll: %d released, left %v, %d owned, %d pending", len(mt.leases.released), mt.leases.left,
			len(mt.own.Owned()), mt.pending())
	}
}

// TestALeaseConnectionFailureHoldsTheFires: when the probe's connection
// fails (a reset: every session of this instance may be gone, which the
// others read as a crash), the fires stop at once and a round runs at
// once; its renewal trusts the leases again.
func TestALeaseConnectionFailureHoldsTheFires(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{ProbeInterval: time.Millisecond})
	mt.round(t)
	mt.taken(t)
	mt.leases.set(func(l *leaseTable) { l.failProb = errors.New("connection reset by peer") })
	if !mt.m.wait(t.Context(), time.Hour) {
		t.Fatal("wait ended with its context")
	}
	if mt.own.Trusted() {
		t.Fatal("the leases are still trusted after the lease connection failed")
	}
	mt.leases.set(func(l *leaseTable) { l.failProb = nil })
	mt.round(t)
	if !mt.own.Trusted() || len(mt.own.Owned()) != events.Partitions {
		t.Fatalf("after the round: trusted %v, %d owned", mt.own.Trusted(), len(mt.own.Owned()))
	}
}

// TestAnInstanceCutOffFromNATSHandsItsPartitionsOver: while NATS does not
// answer, the instance can neither ingest nor publish: it releases every
// partition for the others and takes none; once NATS answers, it takes its
// share again. A lone instance keeps them.
func TestAnInstanceCutOffFromNATSHandsItsPartitionsOver(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{})
	mt.leases.set(func(l *leaseTable) { l.live = 2 }) // another instance could take them
	mt.round(t)
	mt.taken(t)
	mt.healthy.Store(false)
	if got := mt.round(t); len(got) != 0 || mt.pending() != 0 {
		t.Fatalf("cut off from NATS: owns %d partitions, %d pending; want none", len(got), mt.pending())
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
	mt.healthy.Store(true)
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
	mt.healthy.Store(false)
	if got := mt.round(t); len(got) != events.Partitions {
		t.Fatalf("alone and cut off from NATS: owns %d partitions, want every one", len(got))
	}
}

// TestALeavingInstanceKeepsRenewing: on a graceful shutdown the membership
// keeps its leases renewed, and hands nothing over and acquires nothing,
// until ReleaseAll gives every lease up at once: no lease may expire while
// the writes in flight finish, or the survivors would wait for it.
func TestALeavingInstanceKeepsRenewing(t *testing.T) {
	t.Parallel()
	mt := newMemberTest(t, Config{})
	mt.round(t)
	mt.taken(t)
	mt.m.Leave()
	mt.leases.set(func(l *leaseTable) { l.live = 2 })
	mt.clk.Set(mt.clk.Now().Add(time.Second))
	if got := mt.round(t); len(got) != events.Partitions {
		t.Fatalf("leaving: owns %d partitions after a round, want all %d until ReleaseAll", len(got), events.Partitions)
	}
	mt.clk.Set(mt.clk.Now().Add(1500 * time.Millisecond)) // past the first renewal's deadline
	if !mt.own.Trusted() {
		t.Fatal("leaving: the leases were not renewed")
	}
	mt.m.ReleaseAll(t.Context())
	if len(mt.own.Owned()) != 0 {
		t.Fatal("ReleaseAll left partitions owned")
	}
}

// TestTheClockHoldFollowsTheDatabaseServer: the fires are held by the
// least lead over the database's clock of the last heartbeats; when
// another server answers (a failover to a standby whose clock is behind)
// or the clock is proven to have stepped back, the older samples no
// longer bound the lead, and a hold kept from them would fire early by the
// difference. The slowest standby's lag behind the server's clock is
// added, the least of the same heartbeats': fired by the primary's clock
// alone, a deadline would be early by a standby's, the next primary's.
func TestTheClockHoldFollowsTheDatabaseServer(t *testing.T) {
	// A heartbeat sent at the schedule's clock's sent, answered rtt later
	// (2 ms unless set), the database's clock read by server at sent+db,
	// its slowest standby's lag lag.
	type beat struct {
		server            string
		db, rtt, lag, gap time.Duration // gap: since the beat before (1 s unless set)
	}
	for _, tt := range []struct {
		name  string
		beats []beat
		want  time.Duration // the hold after the last beat
	}{
		{"one server: the least lead", []beat{{"a", 0, 0, 0, 0}, {"a", -time.Millisecond, 0, 0, 0}, {"a", 0, 0, 0, 0}}, 2 * time.Millisecond},
		{"one server: a slower round trip keeps the hold", []beat{{"a", 0, 0, 0, 0}, {"a", 50 * time.Millisecond, 100 * time.Millisecond, 0, 0}}, 2 * time.Millisecond},
		{"another server behind by 300 ms", []beat{{"a", 0, 0, 0, 0}, {"a", 0, 0, 0, 0}, {"b", -300 * time.Millisecond, 0, 0, 0}}, 302 * time.Millisecond},
		{"another server ahead by 300 ms: the hold before it stays a floor", []beat{{"a", 0, 0, 0, 0}, {"b", 300 * time.Millisecond, 0, 0, 0}}, 2 * time.Millisecond},
		{"another server ahead by 300 ms, the floor expired", []beat{{"a", 0, 0, 0, 0}, {"b", 300 * time.Millisecond, 0, 0, 0}, {"b", 300 * time.Millisecond, 0, 0, clockFloorFor}}, -298 * time.Millisecond},
		{"the same server's clock stepped back by 300 ms", []beat{{"a", 0, 0, 0, 0}, {"a", 0, 0, 0, 0}, {"a", -300 * time.Millisecond, 0, 0, 0}}, 302 * time.Millisecond},
		{"a standby behind by 250 ms", []beat{{"a", 0, 0, 260 * time.Millisecond, 0}, {"a", 0, 0, 251 * time.Millisecond, 0}, {"a", 0, 0, 400 * time.Millisecond, 0}}, 253 * time.Millisecond},
		{"a standby ahead adds nothing", []beat{{"a", 0, 0, -250 * time.Millisecond, 0}}, 2 * time.Millisecond},
		{"the lag of another server's standby starts over, the floor kept", []beat{{"a", 0, 0, 250 * time.Millisecond, 0}, {"b", 0, 0, 10 * time.Millisecond, 0}}, 252 * time.Millisecond},
		{"two server changes within the floor keep the first one's", []beat{{"a", 0, 0, 250 * time.Millisecond, 0}, {"b", 0, 0, 0, 0}, {"c", 0, 0, 0, 0}}, 252 * time.Millisecond},
		{"the lag of another server's standby starts over, the floor expired", []beat{{"a", 0, 0, 250 * time.Millisecond, 0}, {"b", 0, 0, 10 * time.Millisecond, 0}, {"b", 0, 0, 10 * time.Millisecond, clockFloorFor}}, 12 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var hold time.Duration
			counters := &Counters{}
			m := NewMembership(Config{InstanceID: "me", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
				Deps{Hold: func(d time.Duration) { hold = d }, Counters: counters})
			sent := time.Now()
			for _, b := range tt.beats {
				sent = sent.Add(cmpOr(b.gap, time.Second))
				m.measureClock(sent, sent.Add(cmpOr(b.rtt, 2*time.Millisecond)), Beat{DBTime: sent.Add(b.db), Server: b.server, StandbyLag: b.lag})
			}
			if hold != tt.want {
				t.Errorf("hold %v, want %v", hold, tt.want)
			}
		})
	}
}
