package wheel

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a Clock whose time moves only through Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c     *fakeClock
	ch    chan time.Time
	when  time.Time
	armed bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// Advance moves the time forward and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.armed && !t.when.After(c.now) {
			t.armed = false
			select {
			case t.ch <- c.now:
			default:
			}
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.drain()
	t.when, t.armed = t.c.now.Add(d), true
}

func (t *fakeTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.drain()
	t.armed = false
}

func (t *fakeTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}

// collector records what onExpire receives.
type collector struct {
	mu    sync.Mutex
	got   []Expired[int]
	calls int
}

func (c *collector) onExpire(batch []Expired[int]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, batch...)
	c.calls++
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func newTestWheel(t *testing.T, cfg Config) (*Wheel[int], *fakeClock, *collector) {
	t.Helper()
	clock := newFakeClock()
	cfg.Clock = clock
	col := &collector{}
	w, err := New(cfg, col.onExpire)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop() })
	return w, clock, col
}

// expectFired advances clock step by step and checks after each how many
// timers col has received, waiting for the driver when more are expected.
func expectFired(t *testing.T, w *Wheel[int], clock *fakeClock, col *collector, total int, steps []fireStep) {
	t.Helper()
	start := clock.Now()
	for _, s := range steps {
		clock.Advance(s.advance)
		now := clock.Now()
		if s.want > 0 {
			waitFor(t, "expiries", func() bool { return col.len() >= s.want })
		}
		if got := col.len(); got != s.want {
			t.Fatalf("at %v: %d fired, want %d", now.Sub(start), got, s.want)
		}
		if got := w.Len(); got != total-s.want {
			t.Fatalf("at %v: Len = %d, want %d", now.Sub(start), got, total-s.want)
		}
	}
}

// fireStep is a clock advance and the number of timers fired by then.
type fireStep struct {
	advance time.Duration
	want    int
}

// checkLateness fails for a timer fired before its deadline or max or more
// after it.
func checkLateness(t *testing.T, col *collector, max time.Duration) {
	t.Helper()
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, e := range col.got {
		if e.Fired.Before(e.Deadline) {
			t.Errorf("timer %d fired early: %v < %v", e.Value, e.Fired, e.Deadline)
		}
		if e.Fired.Sub(e.Deadline) >= max {
			t.Errorf("timer %d fired %v late, want under %v", e.Value, e.Fired.Sub(e.Deadline), max)
		}
	}
}

func TestPrecisionWithinTick(t *testing.T) {
	t.Parallel()
	// A 10 ms tick of 1 ms sub-slots (the default Precision for it).
	w, clock, col := newTestWheel(t, Config{Tick: 10 * time.Millisecond})
	start := clock.Now()
	ms := time.Millisecond
	deadlines := []time.Duration{10*ms + 1, 12*ms + ms/2, 20*ms - 1, 20 * ms, 35 * ms}
	for i, d := range deadlines {
		if _, err := w.Schedule(start.Add(d), i); err != nil {
			t.Fatal(err)
		}
	}
	expectFired(t, w, clock, col, len(deadlines), []fireStep{
		{10 * ms, 0}, // the driver lays out the tick (10, 20] ms
		{ms, 1},      // 11 ms: the sub-slot (10, 11] ms
		{ms, 1},      // 12 ms
		{ms, 2},      // 13 ms: 12.5 ms
		{6 * ms, 2},  // 19 ms
		{ms, 4},      // 20 ms: 20 ms - 1 ns and 20 ms
		{14 * ms, 4}, // 34 ms
		{ms, 5},      // 35 ms
	})
	checkLateness(t, col, time.Millisecond)
}

func TestFakeClockFiresAtDeadlineNeverEarly(t *testing.T) {
	t.Parallel()
	// Precision = Tick: every tick fires whole at its end.
	w, clock, col := newTestWheel(t, Config{Tick: 10 * time.Millisecond, Precision: 10 * time.Millisecond})
	start := clock.Now()
	deadlines := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 10*time.Millisecond + 1, time.Hour, 30 * 24 * time.Hour}
	for i, d := range deadlines {
		if _, err := w.Schedule(start.Add(d), i); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.Len(); n != len(deadlines) {
		t.Fatalf("Len = %d, want %d", n, len(deadlines))
	}
	expectFired(t, w, clock, col, len(deadlines), []fireStep{
		{9 * time.Millisecond, 0},
		{time.Millisecond, 2},     // t=10ms: the 5 ms and 10 ms timers
		{9 * time.Millisecond, 2}, // t=19ms: 10ms+1ns waits for the tick at 20 ms
		{time.Millisecond, 3},     // t=20ms
		{time.Hour - 20*time.Millisecond - 1, 3},
		{1, 4}, // exactly one hour
		{30*24*time.Hour - time.Hour, 5},
	})
	checkLateness(t, col, 10*time.Millisecond)
}

func TestCancelResetStale(t *testing.T) {
	t.Parallel()
	w, clock, col := newTestWheel(t, Config{})
	h, _ := w.ScheduleAfter(time.Second, 1)
	if !w.Reset(h, clock.Now().Add(2*time.Millisecond)) {
		t.Fatal("Reset of a pending timer = false")
	}
	clock.Advance(2 * time.Millisecond)
	waitFor(t, "fire", func() bool { return col.len() == 1 })
	if w.Cancel(h) {
		t.Error("Cancel after fire = true")
	}
	if w.Reset(h, clock.Now().Add(time.Second)) {
		t.Error("Reset after fire = true")
	}
	h2, _ := w.ScheduleAfter(time.Second, 2) // likely reuses h's slab entry
	if w.Cancel(h) {
		t.Error("stale Cancel cancelled the entry's new timer")
	}
	if !w.Cancel(h2) || w.Cancel(h2) {
		t.Error("Cancel twice: want true then false")
	}
	if w.Cancel(0) || w.Cancel(^Handle(0)) || w.Reset(0, clock.Now()) {
		t.Error("invalid handle accepted")
	}
	if w.Len() != 0 {
		t.Errorf("Len = %d, want 0", w.Len())
	}
}

func TestWallDeadlineWithoutMonotonic(t *testing.T) {
	t.Parallel()
	// The wall clock is read inside the callback: read after waiting for
	// the callback, it would be late enough to hide an early fire.
	fired := make(chan time.Time, 1)
	w, err := New(Config{}, func(batch []Expired[int]) {
		now := time.Now().Round(0)
		for range batch {
			fired <- now
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deadline := time.Now().Add(30 * time.Millisecond).Round(0) // as if parsed from JSON
	if _, err := w.Schedule(deadline, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-fired:
		if at.Before(deadline) {
			t.Fatalf("fired at wall %v, %v before the wall deadline %v", at, deadline.Sub(at), deadline)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the fire")
	}
}

func TestMaxPending(t *testing.T) {
	t.Parallel()
	w, clock, col := newTestWheel(t, Config{MaxPending: 5, Shards: 4})
	var hs []Handle
	for i := range 5 {
		h, err := w.ScheduleAfter(time.Millisecond, i)
		if err != nil {
			t.Fatalf("Schedule %d: %v", i, err)
		}
		hs = append(hs, h)
	}
	if _, err := w.ScheduleAfter(time.Millisecond, 5); !errors.Is(err, ErrFull) {
		t.Fatalf("Schedule beyond MaxPending: %v, want ErrFull", err)
	}
	w.Cancel(hs[0])
	if _, err := w.ScheduleAfter(time.Millisecond, 5); err != nil {
		t.Fatalf("Schedule after Cancel: %v", err)
	}
	clock.Advance(time.Millisecond)
	waitFor(t, "fire", func() bool { return col.len() == 5 && w.Len() == 0 })
	if _, err := w.ScheduleAfter(time.Millisecond, 6); err != nil {
		t.Fatalf("Schedule after delivery: %v", err)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	w, clock, col := newTestWheel(t, Config{})
	for i := range 100 {
		w.ScheduleAfter(time.Duration(i)*time.Minute, i)
	}
	clock.Advance(30*time.Minute + time.Second)
	waitFor(t, "fire", func() bool { return col.len() == 31 })
	var wg sync.WaitGroup
	results := make([][]Pending[int], 4)
	for i := range results {
		wg.Go(func() { results[i] = w.Stop() })
	}
	wg.Wait()
	total := 0
	for _, r := range results {
		total += len(r)
		for _, p := range r {
			if p.Value < 31 {
				t.Errorf("Stop returned fired timer %d", p.Value)
			}
		}
	}
	if total != 69 {
		t.Fatalf("Stop returned %d timers in all, want 69", total)
	}
	if _, err := w.ScheduleAfter(time.Second, 1); !errors.Is(err, ErrStopped) {
		t.Fatalf("Schedule after Stop: %v", err)
	}
	if w.Len() != 0 || w.Stop() != nil {
		t.Fatal("stopped wheel not empty")
	}
}

func TestStopFromOnExpire(t *testing.T) {
	t.Parallel()
	var w *Wheel[int]
	stopped := make(chan []Pending[int], 1)
	var once sync.Once
	w, err := New(Config{}, func(batch []Expired[int]) { once.Do(func() { stopped <- w.Stop() }) })
	if err != nil {
		t.Fatal(err)
	}
	w.ScheduleAfter(0, 1)
	w.ScheduleAfter(time.Hour, 2)
	select {
	case p := <-stopped:
		if len(p) != 1 || p[0].Value != 2 {
			t.Fatalf("Stop from onExpire returned %v", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop from onExpire deadlocked")
	}
}

// TestConcurrentExactlyOnce runs Schedule, Cancel and Reset from many
// goroutines on the real clock and checks every timer is accounted exactly
// once: cancelled, delivered, or returned by Stop.
func TestConcurrentExactlyOnce(t *testing.T) {
	t.Parallel()
	var delivered, early atomic.Int64
	w, err := New(Config{Tick: time.Millisecond}, func(batch []Expired[int]) {
		delivered.Add(int64(len(batch)))
		for _, e := range batch {
			if e.Fired.Before(e.Deadline) {
				early.Add(1)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, perG = 8, 3000
	var scheduled, cancelled atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			var hs []Handle
			for i := range perG {
				h, err := w.ScheduleAfter(time.Duration(i%40)*time.Millisecond, g)
				if err != nil {
					t.Error(err)
					return
				}
				scheduled.Add(1)
				hs = append(hs, h)
				switch i % 3 {
				case 0:
					if w.Cancel(hs[i/2]) {
						cancelled.Add(1)
					}
				case 1:
					w.Reset(hs[i/3], time.Now().Add(time.Duration(i%7)*time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	rest := w.Stop()
	waitFor(t, "accounting", func() bool {
		return scheduled.Load() == cancelled.Load()+delivered.Load()+int64(len(rest))
	})
	if early.Load() != 0 {
		t.Fatalf("%d timers fired early", early.Load())
	}
}

func TestZeroAllocs(t *testing.T) {
	w, _, _ := newTestWheel(t, Config{})
	deadline := time.Now().Add(time.Hour)
	for range 1000 { // grow the slabs
		h, _ := w.Schedule(deadline, 1)
		w.Cancel(h)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		h, _ := w.Schedule(deadline, 1)
		w.Reset(h, deadline.Add(time.Second))
		w.Cancel(h)
	})
	if allocs != 0 {
		t.Fatalf("Schedule+Reset+Cancel: %v allocs, want 0", allocs)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	noop := func([]Expired[int]) {}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"negative tick", Config{Tick: -1}},
		{"negative max pending", Config{MaxPending: -1}},
		{"shards not power of two", Config{Shards: 3}},
		{"too many shards", Config{Shards: 2 * MaxShards}},
		{"negative precision", Config{Precision: -1}},
		{"precision above tick", Config{Tick: time.Millisecond, Precision: 2 * time.Millisecond}},
		{"precision not dividing tick", Config{Tick: 10 * time.Millisecond, Precision: 3 * time.Millisecond}},
		{"more than 64 sub-slots", Config{Tick: time.Second, Precision: time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tt.cfg, noop); err == nil {
				t.Fatal("New accepted invalid config")
			}
		})
	}
	if _, err := New[int](Config{}, nil); err == nil {
		t.Fatal("New accepted nil onExpire")
	}
}

func TestDefaultPrecision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tick, want time.Duration
	}{
		{time.Millisecond, time.Millisecond},
		{7, 7},
		{10 * time.Millisecond, time.Millisecond},
		{100 * time.Millisecond, 1562500},
		{time.Second, 15625 * time.Microsecond},
		{1500 * time.Microsecond, 1500 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.tick.String(), func(t *testing.T) {
			t.Parallel()
			if got := defaultPrecision(tt.tick); got != tt.want {
				t.Fatalf("defaultPrecision(%v) = %v, want %v", tt.tick, got, tt.want)
			}
		})
	}
}

// TestPileDeliveredWholeNeverEarly schedules a pile of timers on one
// deadline, several chunks' worth from several goroutines, and checks that
// onExpire receives every one exactly once, in calls of at most BatchMax,
// none before the deadline by the clock, and that Len falls to 0; with a
// consumer that keeps up, and with one that holds its first call until the
// whole pile is cut (so the rest waits queued). How fast a pile is delivered
// is the benchmarks' business (BenchmarkPile, wheelbench pile).
func TestPileDeliveredWholeNeverEarly(t *testing.T) {
	t.Parallel()
	const n = 5*BatchMax + 123
	ms := time.Millisecond
	tests := []struct {
		name string
		cfg  Config
		at   time.Duration // the deadline, after the clock's start
		fire []fireStep    // clock steps: nothing before the deadline's tick or sub-slot ends
		slow bool
	}{
		{"1ms tick", Config{}, 10*ms + ms/3, []fireStep{{10 * ms, 0}, {ms/3 - 1, 0}, {1, 0}, {ms, n}}, false},
		{"1ms tick, slow consumer", Config{}, 10*ms + ms/3, []fireStep{{10 * ms, 0}, {ms/3 - 1, 0}, {1, 0}, {ms, n}}, true},
		{"10ms tick, 1ms sub-slots", Config{Tick: 10 * ms}, 12*ms + ms/2, []fireStep{{12 * ms, 0}, {ms/2 - 1, 0}, {1, 0}, {ms / 2, n}}, false},
		{"10ms tick, 1ms sub-slots, slow consumer", Config{Tick: 10 * ms}, 12*ms + ms/2, []fireStep{{12 * ms, 0}, {ms/2 - 1, 0}, {1, 0}, {ms / 2, n}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			deadline := clock.Now().Add(tt.at)
			col := &collector{}
			var w *Wheel[int]
			var bad atomic.Int64 // calls over BatchMax, timers early or with another deadline
			tt.cfg.Clock = clock
			w, err := New(tt.cfg, func(batch []Expired[int]) {
				if tt.slow && col.calls == 0 {
					waitFor(t, "the whole pile cut", func() bool { return w.Stats().Expired == n })
				}
				if len(batch) == 0 || len(batch) > BatchMax {
					t.Errorf("onExpire got %d timers, want 1 to %d", len(batch), BatchMax)
					bad.Add(1)
				}
				now := clock.Now()
				for _, e := range batch {
					if now.Before(deadline) || e.Fired.Before(e.Deadline) || !e.Deadline.Equal(deadline) {
						bad.Add(1)
					}
				}
				col.onExpire(batch)
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Stop() })
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := g; i < n; i += 4 {
						if _, err := w.Schedule(deadline, i); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			expectFired(t, w, clock, col, n, tt.fire)
			if bad.Load() != 0 {
				t.Fatalf("%d bad deliveries (early, wrong deadline, or a call over BatchMax)", bad.Load())
			}
			seen := make([]bool, n)
			for _, e := range col.got {
				if seen[e.Value] {
					t.Fatalf("timer %d delivered twice", e.Value)
				}
				seen[e.Value] = true
			}
			if st := w.Stats(); st.Expired != n || st.Batches < n/BatchMax+1 {
				t.Fatalf("Stats %+v: want %d expired in at least %d batches", st, n, n/BatchMax+1)
			}
		})
	}
}

// TestStopDuringPile stops the wheel while onExpire holds its first call of
// a pile: the queued rest is returned by Stop, so every timer is reported
// exactly once, to onExpire or to Stop, and no call follows the held one.
func TestStopDuringPile(t *testing.T) {
	t.Parallel()
	const n = 3*BatchMax + 7
	clock := newFakeClock()
	var w *Wheel[int]
	held, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	col := &collector{}
	w, err := New(Config{Clock: clock}, func(batch []Expired[int]) {
		if calls.Add(1) == 1 {
			close(held)
			<-release
		}
		col.onExpire(batch)
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := clock.Now().Add(time.Millisecond)
	for i := range n {
		if _, err := w.Schedule(deadline, i); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Millisecond)
	<-held
	waitFor(t, "the whole pile cut", func() bool { return w.Stats().Expired == n })
	rest := w.Stop()
	close(release)
	waitFor(t, "the held call to return", func() bool { return col.len() > 0 })
	if calls.Load() != 1 {
		t.Fatalf("%d onExpire calls, want only the held one", calls.Load())
	}
	delivered := col.got
	seen := make([]bool, n)
	for _, e := range delivered {
		seen[e.Value] = true
	}
	for _, p := range rest {
		if seen[p.Value] {
			t.Fatalf("timer %d both delivered and returned by Stop", p.Value)
		}
		seen[p.Value] = true
	}
	if got := len(delivered) + len(rest); got != n {
		t.Fatalf("%d delivered + %d returned by Stop, want %d in all", len(delivered), len(rest), n)
	}
}
