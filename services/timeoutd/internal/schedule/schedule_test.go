package schedule

import (
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/wheel"
)

// recorder collects what the schedule hands to OnDue.
type recorder struct {
	mu  sync.Mutex
	due []Due
}

func (r *recorder) onDue(d []Due) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.due = append(r.due, d...)
}

func (r *recorder) got() []Due {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Due(nil), r.due...)
}

// waitDue polls until n timeouts were handed out, or fails after 5s.
func (r *recorder) waitDue(t *testing.T, n int) []Due {
	t.Helper()
	for limit := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if got := r.got(); len(got) >= n {
			return got
		} else if time.Now().After(limit) {
			t.Fatalf("%d timeouts handed out within 5s, want %d: %+v", len(got), n, got)
		}
	}
}

func fnvPartition(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % 8)
}

// newTest returns a Schedule whose wall clock is *now (guarded by mu) and
// its recorder.
func newTest(t *testing.T, maxPending int, now func() time.Time) (*Schedule, *recorder) {
	t.Helper()
	r := &recorder{}
	s, err := New(Config{Tick: time.Millisecond, MaxPending: maxPending, Partitions: 8, Partition: fnvPartition,
		OnDue: r.onDue, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, r
}

func set(key string, version int64, deadline time.Time) Change {
	return Change{Entry: Entry{Key: key, Version: version, Deadline: deadline}}
}

func TestConfigValidated(t *testing.T) {
	t.Parallel()
	nop := func([]Due) {}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no OnDue", Config{MaxPending: 1}, "OnDue"},
		{"no MaxPending", Config{OnDue: nop}, "MaxPending"},
		{"partitions without a function", Config{MaxPending: 1, OnDue: nop, Partitions: 4}, "Partition"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// TestDueAtTheDeadlineNeverBefore: a due timeout is handed out once, in
// flight until Done; one whose wall-clock deadline has not passed when the
// wheel expires it (the clock was stepped back) is re-armed, not handed out.
func TestDueAtTheDeadlineNeverBefore(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	skew := time.Hour // the wall clock lags the wheel's by an hour at first
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(-skew) }
	s, r := newTest(t, 10, now)
	s.Apply([]Change{set("k", 1, time.Now().Add(5*time.Millisecond))})
	time.Sleep(50 * time.Millisecond) // the wheel expires k, by its clock, many times over
	if got := r.got(); len(got) != 0 {
		t.Fatalf("handed out before the wall-clock deadline: %+v", got)
	}
	mu.Lock()
	skew = 0
	mu.Unlock()
	due := r.waitDue(t, 1)
	if due[0].Key != "k" || due[0].Version != 1 || now().Before(due[0].Deadline) {
		t.Fatalf("due = %+v", due)
	}
	if s.Len() != 1 {
		t.Fatalf("len = %d while in flight, want 1 (it keeps its room)", s.Len())
	}
	s.Done([]Ref{due[0].Ref})
	if s.Len() != 0 {
		t.Fatalf("len = %d after Done, want 0", s.Len())
	}
}

// TestStaleRefsAreIgnored: a newer command while a timeout is in flight
// makes its Ref stale, for the wheel's batch, Done and Rearm alike.
func TestStaleRefsAreIgnored(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		then    Change
		wantLen int
	}{
		{"cleared in flight", Change{Entry: Entry{Key: "k", Version: 2}, Clear: true}, 0},
		{"moved in flight", set("k", 2, time.Now().Add(time.Hour)), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, r := newTest(t, 10, time.Now)
			s.Apply([]Change{set("k", 1, time.Now())})
			due := r.waitDue(t, 1)
			s.Apply([]Change{tt.then})
			s.Done([]Ref{due[0].Ref})
			s.Rearm([]Ref{due[0].Ref}, time.Now())
			s.expire([]wheel.Expired[Ref]{{Value: due[0].Ref}})
			time.Sleep(20 * time.Millisecond)
			if got := r.got(); len(got) != 1 || s.Len() != tt.wantLen {
				t.Fatalf("handed out %+v, len %d; want k once, len %d", got, s.Len(), tt.wantLen)
			}
		})
	}
}

// TestRearmAfterAFailedFire: a re-armed timeout is handed out again.
func TestRearmAfterAFailedFire(t *testing.T) {
	t.Parallel()
	s, r := newTest(t, 1, time.Now)
	s.Apply([]Change{set("k", 1, time.Now())})
	first := r.waitDue(t, 1)
	s.Rearm([]Ref{first[0].Ref}, time.Now().Add(10*time.Millisecond))
	second := r.waitDue(t, 2)[1]
	if second.Key != "k" || second.Ref == first[0].Ref {
		t.Fatalf("second hand-out = %+v, first %+v", second, first[0])
	}
}

// TestAdmitFindsNoRoomWhileAppliedSetsHoldTheirs: the sets a batch
// applied keep their reservation until the batch gives it back, so the
// schedule's count and the reservations together may exceed MaxPending
// for a while; a set admitted meanwhile must find no room (it did: a
// negative room never equalled the count reserved, and every set passed).
func TestAdmitFindsNoRoomWhileAppliedSetsHoldTheirs(t *testing.T) {
	t.Parallel()
	s, _ := newTest(t, 2, time.Now)
	far := time.Now().Add(time.Hour)
	_, _, room := s.Admit([]events.Command{{Kind: events.KindSet, Key: "a", Version: 1, Deadline: far}, {Kind: events.KindSet, Key: "b", Version: 1, Deadline: far}})
	s.Apply([]Change{set("a", 1, far), set("b", 1, far)}) // held 2, reserved 2
	if got, deferred, r := s.Admit([]events.Command{{Kind: events.KindSet, Key: "c", Version: 1, Deadline: far}}); len(got) != 0 || !deferred["c"] {
		s.Unreserve(r)
		t.Errorf("c admitted (%+v) into a full schedule whose applied sets still hold their reservations", r)
	}
	s.Unreserve(room)
	if _, deferred, _ := s.Admit([]events.Command{{Kind: events.KindSet, Key: "c", Version: 1, Deadline: far}}); !deferred["c"] {
		t.Error("c admitted into a full schedule")
	}
}

func TestAdmitReservesRoomForNewSetsOnly(t *testing.T) {
	t.Parallel()
	s, _ := newTest(t, 3, time.Now)
	far := time.Now().Add(time.Hour)
	s.Apply([]Change{set("held", 1, far)})
	cmds := []events.Command{
		{Kind: events.KindSet, Key: "held", Version: 2, Deadline: far},
		{Kind: events.KindSet, Key: "a", Version: 1, Deadline: far},
		{Kind: events.KindClear, Key: "x", Version: 1},
		{Kind: events.KindSet, Key: "b", Version: 1, Deadline: far},
		{Kind: events.KindSet, Key: "c", Version: 1, Deadline: far},
	}
	admitted, deferred, room := s.Admit(cmds)
	if len(admitted) != 4 || room.reserved != 2 || len(deferred) != 1 || !deferred["c"] {
		t.Fatalf("admitted %d, reserved %d, deferred %v; want 4, 2, [c]", len(admitted), room.reserved, deferred)
	}
	// A concurrent lane finds no room until the reservation is given back.
	if _, d, _ := s.Admit([]events.Command{{Kind: events.KindSet, Key: "d", Version: 1}}); !d["d"] {
		t.Fatal("a second lane was admitted into reserved room")
	}
	s.Unreserve(room)
	if _, d, n := s.Admit([]events.Command{{Kind: events.KindSet, Key: "d", Version: 1}}); d["d"] || n.reserved != 1 {
		t.Fatal("room was not given back")
	}
}

// TestLoadHoldsTheOverdueUntilRelease: overdue rows are held without a
// timer until Release, which skips the ones a newer command replaced.
func TestLoadHoldsTheOverdueUntilRelease(t *testing.T) {
	t.Parallel()
	s, r := newTest(t, 10, time.Now)
	now := time.Now()
	held, err := s.Load([]Entry{
		{Key: "a", Version: 1, Deadline: now.Add(-time.Minute)},
		{Key: "b", Version: 1, Deadline: now.Add(-time.Second)},
		{Key: "later", Version: 1, Deadline: now.Add(time.Hour)},
	}, now)
	if err != nil || len(held) != 2 || s.Len() != 3 {
		t.Fatalf("held %d, len %d, err %v; want 2, 3", len(held), s.Len(), err)
	}
	time.Sleep(20 * time.Millisecond)
	if got := r.got(); len(got) != 0 {
		t.Fatalf("held timeouts handed out before Release: %+v", got)
	}
	s.Apply([]Change{set("b", 2, now.Add(time.Hour))})
	if n := s.Release(held, time.Now(), 1000); n != 1 {
		t.Fatalf("released %d, want 1 (b was replaced)", n)
	}
	if due := r.waitDue(t, 1); due[0].Key != "a" {
		t.Fatalf("due = %+v, want a", due)
	}
}

func TestLoadFailsWhenFull(t *testing.T) {
	t.Parallel()
	s, _ := newTest(t, 2, time.Now)
	far := time.Now().Add(time.Hour)
	_, err := s.Load([]Entry{{Key: "a", Version: 1, Deadline: far}, {Key: "b", Version: 1, Deadline: far}, {Key: "c", Version: 1, Deadline: far}}, time.Now())
	if err == nil {
		t.Fatal("loaded three timeouts into room for two")
	}
}

// count returns the number of timeouts held per partition.
func count(s *Schedule) []int {
	out := make([]int, s.cfg.Partitions)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.x.slots.used {
		if s.x.slots.at(i).keyLen() != 0 {
			out[s.partition(s.x.key(i))]++
		}
	}
	return out
}

// TestDropTakesWholePartitions: Drop removes every timeout of the dropped
// partitions (armed, held and in flight) and nothing else.
func TestDropTakesWholePartitions(t *testing.T) {
	t.Parallel()
	s, r := newTest(t, 1000, time.Now)
	now := time.Now()
	var changes []Change
	want := make([]int, 8)
	for i := range 200 {
		k := fmt.Sprintf("ord-%d", i)
		changes = append(changes, set(k, 1, now.Add(time.Hour)))
		want[fnvPartition(k)]++
	}
	s.Apply(changes)
	held, _ := s.Load([]Entry{{Key: "overdue", Version: 1, Deadline: now.Add(-time.Second)}}, now)
	want[fnvPartition("overdue")]++
	s.Apply([]Change{set("due", 1, now)})
	inFlight := r.waitDue(t, 1)[0]
	want[fnvPartition("due")]++
	if got := count(s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("count = %v, want %v", got, want)
	}
	odd := func(p int) bool { return p%2 == 1 }
	dropped := 0
	for p, n := range want {
		if odd(p) {
			dropped += n
			want[p] = 0
		}
	}
	if n := s.Drop(odd); n != dropped {
		t.Fatalf("dropped %d, want %d", n, dropped)
	}
	if got := count(s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("count after drop = %v, want %v", got, want)
	}
	// The dropped timeouts' Refs are stale: they never come back.
	s.Release(held, now, 1000)
	s.Rearm([]Ref{inFlight.Ref}, now)
	time.Sleep(20 * time.Millisecond)
	if fnvPartition("due")%2 == 1 && len(r.got()) != 1 {
		t.Fatalf("a dropped in-flight timeout was re-armed: %+v", r.got())
	}
	if s.Len() != 201-dropped+1 {
		t.Fatalf("len = %d, want %d", s.Len(), 201-dropped+1)
	}
}

// TestLoadNeverReplacesANewerVersion: an overdue row that a load reads
// after a newer command was applied (a commit landing mid-load) does not
// replace the newer version, armed or held.
func TestLoadNeverReplacesANewerVersion(t *testing.T) {
	t.Parallel()
	s, r := newTest(t, 10, time.Now)
	now := time.Now()
	s.Apply([]Change{set("k", 5, now.Add(50*time.Millisecond))})
	held, err := s.Load([]Entry{
		{Key: "k", Version: 3, Deadline: now.Add(-time.Minute)}, // overdue, older
		{Key: "j", Version: 2, Deadline: now.Add(-time.Second)}, // overdue, new key
		{Key: "j", Version: 1, Deadline: now.Add(-time.Hour)},   // overdue, older than j's
		{Key: "k", Version: 4, Deadline: now.Add(time.Hour)},    // armed, older
	}, now)
	if err != nil || len(held) != 1 || s.Len() != 2 {
		t.Fatalf("held %d, len %d, err %v; want 1 held (j), 2 in all", len(held), s.Len(), err)
	}
	s.Release(held, now, 1000)
	due := r.waitDue(t, 2)
	got := map[string]int64{}
	for _, d := range due {
		got[d.Key] = d.Version
	}
	if got["k"] != 5 || got["j"] != 2 {
		t.Fatalf("due versions %v, want k 5 and j 2", got)
	}
}

// TestCutTimersNeverFillTheWheel: timers the wheel cut but could not yet
// deliver (the fire path is busy, by design) never make the wheel refuse a
// set the index has room for, nor a re-arm.
func TestCutTimersNeverFillTheWheel(t *testing.T) {
	t.Parallel()
	proceed := make(chan struct{})
	var s *Schedule
	r := &recorder{}
	first := true
	rearmAt := time.Now().Add(time.Hour)
	var err error
	s, err = New(Config{Tick: time.Millisecond, MaxPending: 3, OnDue: func(d []Due) {
		if first { // the fire path, busy with a's batch, then its fire fails
			first = false
			<-proceed
			s.Rearm([]Ref{d[0].Ref}, rearmAt)
			return
		}
		r.onDue(d)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	now := time.Now()
	s.Apply([]Change{set("a", 1, now)})
	waitCut := func(n uint64) {
		t.Helper()
		for limit := time.Now().Add(5 * time.Second); s.w.Stats().Expired < n; time.Sleep(time.Millisecond) {
			if time.Now().After(limit) {
				t.Fatalf("the wheel cut %d timers within 5s, want %d", s.w.Stats().Expired, n)
			}
		}
	}
	waitCut(1)
	// b and c fall due while a's batch is being fired: cut, waiting.
	s.Apply([]Change{set("b", 1, now), set("c", 1, now)})
	waitCut(3)
	// Moved before delivery: each gets a new timer beside its cut one.
	rearmAt = time.Now().Add(30 * time.Millisecond)
	later := time.Now().Add(30 * time.Millisecond)
	if n, _ := s.Apply([]Change{set("b", 2, later), set("c", 2, later)}); n != 2 {
		t.Fatalf("scheduled %d of 2 sets the index had room for", n)
	}
	close(proceed)
	due := r.waitDue(t, 3)
	got := map[string]int64{}
	for _, d := range due {
		got[d.Key] = d.Version
	}
	if got["a"] != 1 || got["b"] != 2 || got["c"] != 2 {
		t.Fatalf("due %v, want a re-armed (1), b and c at 2", got)
	}
}

// TestReleaseInDeadlineOrder: the overdue timeouts of a takeover are
// released oldest deadline first, whatever order the load read them in
// (key order), so a large backlog publishes the longest overdue first.
func TestReleaseInDeadlineOrder(t *testing.T) {
	t.Parallel()
	s, r := newTest(t, 10, time.Now)
	now := time.Now()
	held, err := s.Load([]Entry{
		{Key: "a", Version: 1, Deadline: now.Add(-time.Second)},
		{Key: "b", Version: 1, Deadline: now.Add(-3 * time.Second)},
		{Key: "c", Version: 1, Deadline: now.Add(-2 * time.Second)},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(held, time.Now(), 100) // 10 ms apart
	var order []string
	for _, d := range r.waitDue(t, 3) {
		order = append(order, d.Key)
	}
	if strings.Join(order, "") != "bca" {
		t.Fatalf("released in order %v, want b c a (oldest deadline first)", order)
	}
}

// TestPlainIsHandedOutAsHeld: a timeout is handed out as plain as the last
// change or load of its key said, whichever path put it in (Apply, Load's
// timer, Load's hold and Release), and as many generations of its slot
// as a wrap of the generation leave the flag as it was.
func TestPlainIsHandedOutAsHeld(t *testing.T) {
	t.Parallel()
	base := time.Now()
	s, r := newTest(t, 100, time.Now)
	plain := func(key string, v int64, d time.Time) Change {
		c := set(key, v, d)
		c.Plain = true
		return c
	}
	soon := base.Add(20 * time.Millisecond)
	s.Apply([]Change{plain("applied-plain", 1, soon), set("applied-read", 1, soon),
		plain("became-read", 1, soon), set("became-plain", 1, soon)})
	s.Apply([]Change{set("became-read", 2, soon), plain("became-plain", 2, soon)})
	held, err := s.Load([]Entry{{Key: "loaded-plain", Version: 1, Deadline: soon, Plain: true},
		{Key: "held-plain", Version: 1, Deadline: base.Add(-time.Second), Plain: true},
		{Key: "held-read", Version: 1, Deadline: base.Add(-time.Second)}}, base)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(held, time.Now(), 1000)
	want := map[string]bool{"applied-plain": true, "applied-read": false, "became-read": false, "became-plain": true,
		"loaded-plain": true, "held-plain": true, "held-read": false}
	for _, d := range r.waitDue(t, len(want)) {
		if d.Plain != want[d.Key] {
			t.Errorf("%s handed out with Plain %v, want %v", d.Key, d.Plain, want[d.Key])
		}
	}

	x := newIndex()
	i, err := x.add("k")
	if err != nil {
		t.Fatal(err)
	}
	sl := x.slots.at(i)
	sl.setPlain(true)
	for range 1 << 23 {
		sl.bumpGen()
	}
	if !sl.plain() || sl.gen() != 0 || sl.keyLen() != 1 {
		t.Fatalf("after a wrap of the generation: plain %v, generation %d, key length %d; want true, 0, 1", sl.plain(), sl.gen(), sl.keyLen())
	}
	x.remove(x.pos(i), i)
	if j, _ := x.add("k2"); j != i || x.slots.at(j).plain() {
		t.Fatalf("a reused slot (%d, was %d) keeps its former key's Plain", j, i)
	}
}
