package wheel

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// TickDefault is the default resolution: a timer fires at most one tick after
// its deadline when the consumer keeps up (the last timers of a large pile
// due at once later: see the package doc, Delivery).
const TickDefault = time.Millisecond

// BatchMax is the most timers handed to onExpire in one call. The driver
// cuts expired timers into chunks of BatchMax and hands each chunk over as
// soon as it is full, so the first timers of a large pile due at once reach
// onExpire while the rest are still being cut.
const BatchMax = 4096

// spareMax is how many chunks onExpire is done with the wheel keeps for
// reuse; the ones a pile needed beyond it are left to the GC.
const spareMax = 4

// MaxShards bounds Config.Shards; the shard number lives in the low
// shardBits bits of a Handle.
const MaxShards = 1 << shardBits

const shardBits = 6

// Errors returned by Schedule and New.
var (
	// ErrFull is returned by Schedule when Config.MaxPending timers are
	// pending (or a shard's slab reached its 2^26 entries).
	ErrFull = errors.New("wheel: full")
	// ErrStopped is returned by Schedule after Stop.
	ErrStopped = errors.New("wheel: stopped")
)

// Config configures a Wheel. The zero value is valid.
type Config struct {
	// Tick is the resolution of the levels; default TickDefault. A timer
	// fires at most one tick after its deadline (plus the driver's wake-up
	// latency) when the consumer keeps up, and within Precision once its
	// tick is prepared; a large pile due at once is handed out chunk by
	// chunk, its last timers later (package doc, Delivery).
	Tick time.Duration
	// Precision is the resolution within a tick. A tick ahead of each
	// occupied tick the driver lays that tick's timers out by deadline into
	// Tick/Precision sub-slots and hands each sub-slot out when its end
	// passes, so a timer scheduled before its tick begins fires within
	// Precision of its deadline, never before it (a timer scheduled into a
	// tick already under way joins its sub-slot). It must divide Tick, with
	// at most 64 sub-slots a tick; Precision equal to Tick fires each tick at
	// its end. Default: the finest divisor of Tick of at least 1ms, and at
	// least Tick/64 (1ms for a 10ms tick, Tick itself for the default tick).
	Precision time.Duration
	// MaxPending bounds Len: 0 means unlimited; beyond it Schedule returns
	// ErrFull. The limit is split evenly across shards; a full shard makes
	// Schedule try the others, so ErrFull means all are full.
	MaxPending int
	// Shards is the number of independently locked shards, a power of two
	// up to MaxShards. Default: 4×GOMAXPROCS rounded up to a power of two
	// (8 on 2 cores), so that concurrent callers rarely pick the same shard.
	Shards int
	// Clock is the source of time; nil means the real monotonic clock.
	Clock Clock
}

// Handle identifies a scheduled timer. It encodes the shard, the slab index
// and the entry's generation, so a handle whose timer fired or was
// cancelled never matches the entry's reuse. The zero Handle is never valid.
type Handle uint64

func makeHandle(shard, i, gen uint32) Handle {
	return Handle(uint64(gen)<<32 | uint64(i)<<shardBits | uint64(shard))
}

func (h Handle) split() (shard, i, gen uint32) {
	return uint32(h) & (MaxShards - 1), uint32(h) >> shardBits, uint32(h >> 32)
}

// Expired is a timer handed to onExpire.
type Expired[T any] struct {
	Value T
	// Deadline is the deadline the wheel used, on the wheel's clock: its
	// origin plus the deadline's offset from it.
	Deadline time.Time
	// Fired is the clock time at which the driver cut the timer, measured
	// the same way; it is never before Deadline.
	Fired time.Time
}

// Pending is a timer that never fired, returned by Stop.
type Pending[T any] struct {
	Value    T
	Deadline time.Time
}

// Stats are cumulative counters of a Wheel.
type Stats struct {
	// Wakeups counts iterations of the driver's run loop: each is a wake-up
	// from its sleep (or the first run).
	Wakeups uint64
	// Expired counts timers cut from the wheel by the driver.
	Expired uint64
	// Batches counts onExpire calls.
	Batches uint64
}

// Wheel is a sharded hierarchical hashed timing wheel. All methods are safe
// for concurrent use.
type Wheel[T any] struct {
	clock  Clock
	origin time.Time // deadlines are stored as nanoseconds since origin
	ticks
	shards []shard[T]
	mask   uint32
	// home hands each P (through sync.Pool's per-P cache) the shard its
	// goroutines schedule on, so a shard's cache lines stay on one core.
	home     sync.Pool
	homeNext atomic.Uint32

	// nextWake is when the driver sleeps until, in nanoseconds since origin
	// (math.MaxInt64: no timer); scanning while it scans the shards. A
	// Schedule or Reset that needs the driver earlier, or comes during a
	// scan, wakes it through wake.
	nextWake atomic.Int64
	wake     chan struct{}

	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{} // closed when the first Stop has finished
	driven   chan struct{} // closed when the driver goroutine has returned

	onExpire func([]Expired[T])
	outMu    sync.Mutex
	out      []*chunk[T] // cut and not yet handed to onExpire, from outHead on
	outHead  int
	spare    []*chunk[T] // chunks onExpire is done with, for reuse
	outDone  bool        // Stop took the outbox
	outReady chan struct{}

	wakeups, expired, batches atomic.Uint64
}

// chunk is one batch for onExpire: at most BatchMax timers, and how many of
// them are still charged to each shard.
type chunk[T any] struct {
	cuts []cut[T]
	owed []int // per shard
}

// shard is one independently locked part of the wheel, padded so that two
// shards' locks never share a cache line.
type shard[T any] struct {
	mu      sync.Mutex
	stopped bool
	charged int // timers scheduled and not yet cancelled
	// handed counts, of the timers in charged, those the delivery goroutine
	// handed to onExpire. It adds to it without taking mu, so delivery never
	// waits for a driver busy in this shard; pending is charged - handed.
	handed atomic.Int64
	limit  int // bound on pending
	t      timers[T]
	_      [64]byte
}

// pending returns the shard's timers not yet cancelled or handed to
// onExpire; mu must be held.
func (s *shard[T]) pending() int {
	return s.charged - int(s.handed.Load())
}

// New returns a running Wheel. onExpire receives the expired timers in
// batches of 1 to BatchMax from one delivery goroutine: never concurrently
// with itself, never while a wheel lock is held (it may call Schedule,
// Cancel, Reset and Stop); the slice is valid only during the call. New
// starts two goroutines, the driver and the delivery goroutine, that Stop
// ends.
func New[T any](cfg Config, onExpire func(batch []Expired[T])) (*Wheel[T], error) {
	if onExpire == nil {
		return nil, errors.New("wheel: onExpire is nil")
	}
	if cfg.Tick < 0 {
		return nil, fmt.Errorf("wheel: Tick %v is negative", cfg.Tick)
	}
	if cfg.MaxPending < 0 {
		return nil, fmt.Errorf("wheel: MaxPending %d is negative", cfg.MaxPending)
	}
	if cfg.Shards < 0 || cfg.Shards > MaxShards || cfg.Shards&(cfg.Shards-1) != 0 {
		return nil, fmt.Errorf("wheel: Shards %d is not a power of two in [1, %d]", cfg.Shards, MaxShards)
	}
	if cfg.Tick == 0 {
		cfg.Tick = TickDefault
	}
	if cfg.Precision == 0 {
		cfg.Precision = defaultPrecision(cfg.Tick)
	}
	if cfg.Precision < 0 || cfg.Precision > cfg.Tick || cfg.Tick%cfg.Precision != 0 || cfg.Tick/cfg.Precision > levelSlots {
		return nil, fmt.Errorf("wheel: Precision %v does not divide Tick %v into 1 to %d sub-slots", cfg.Precision, cfg.Tick, levelSlots)
	}
	if cfg.Shards == 0 {
		cfg.Shards = min(MaxShards, 1<<bits.Len(uint(4*runtime.GOMAXPROCS(0)-1)))
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	w := &Wheel[T]{
		clock:    cfg.Clock,
		origin:   cfg.Clock.Now(),
		ticks:    newTicks(cfg.Tick, cfg.Precision),
		shards:   make([]shard[T], cfg.Shards),
		mask:     uint32(cfg.Shards - 1),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
		driven:   make(chan struct{}),
		onExpire: onExpire,
		outReady: make(chan struct{}, 1),
	}
	for i := range w.shards {
		s := &w.shards[i]
		s.t.ticks = w.ticks
		s.limit = math.MaxInt
		if cfg.MaxPending > 0 {
			s.limit = cfg.MaxPending / cfg.Shards
			if i < cfg.MaxPending%cfg.Shards {
				s.limit++
			}
		}
	}
	w.home.New = func() any { return &homeShard{w.homeNext.Add(1) - 1} }
	w.nextWake.Store(scanning)
	go w.drive()
	go w.deliver()
	return w, nil
}

// scanning is Wheel.nextWake while the driver scans the shards.
const scanning = math.MinInt64

// defaultPrecision returns the finest divisor of tick into at most
// levelSlots sub-slots of at least a millisecond, or tick itself.
func defaultPrecision(tick time.Duration) time.Duration {
	for n := min(levelSlots, tick/time.Millisecond); n > 1; n-- {
		if tick%n == 0 {
			return tick / n
		}
	}
	return tick
}

// offset converts a deadline to nanoseconds since the wheel's origin. A
// deadline without a monotonic reading (parsed, or built with time.Date) is
// measured from the clock's current reading, so that it fires at or after
// the wall-clock deadline as long as the wall clock does not jump.
func (w *Wheel[T]) offset(deadline time.Time) int64 {
	if deadline == deadline.Round(0) {
		now := w.clock.Now()
		base, ahead := int64(now.Sub(w.origin)), int64(deadline.Sub(now))
		if ahead > 0 && base > math.MaxInt64-ahead {
			return math.MaxInt64
		}
		return base + ahead
	}
	return int64(deadline.Sub(w.origin))
}

// Schedule adds a timer that hands v to onExpire at or after deadline, at
// most one tick late when the consumer keeps up (for the last timers of a
// large pile due at once, see the package doc). A deadline already passed
// fires at the driver's next run. It costs O(1) and allocates nothing once
// the shard's slab has grown. It returns ErrFull beyond Config.MaxPending
// and ErrStopped after Stop.
func (w *Wheel[T]) Schedule(deadline time.Time, v T) (Handle, error) {
	return w.schedule(w.offset(deadline), v)
}

// ScheduleAfter is Schedule with the deadline d after the clock's Now.
func (w *Wheel[T]) ScheduleAfter(d time.Duration, v T) (Handle, error) {
	return w.Schedule(w.clock.Now().Add(d), v)
}

// homeShard is a shard number cached per P in Wheel.home.
type homeShard struct{ i uint32 }

func (w *Wheel[T]) schedule(when int64, v T) (Handle, error) {
	home := w.home.Get().(*homeShard)
	start := home.i
	w.home.Put(home)
	for k := uint32(0); k <= w.mask; k++ {
		si := (start + k) & w.mask
		s := &w.shards[si]
		tick := w.tickOf(when)
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return 0, ErrStopped
		}
		if s.pending() >= s.limit {
			s.mu.Unlock()
			continue
		}
		i, gen, ok := s.t.add(when, tick, v)
		if !ok {
			s.mu.Unlock()
			continue
		}
		s.charged++
		s.mu.Unlock()
		w.poke(when)
		return makeHandle(si, i, gen), nil
	}
	return 0, ErrFull
}

// poke wakes the driver when a timer due at when (nanoseconds since the
// origin) may need it before its planned wake-up: the driver must lay a
// tick out a tick ahead, and fire a sub-slot at its end.
func (w *Wheel[T]) poke(when int64) {
	if next := w.nextWake.Load(); next == scanning || when < next || when-next < w.tick {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Cancel stops the timer h and frees its memory at once. It reports true
// only if it prevented the timer from reaching onExpire: false when h is
// stale (fired, cancelled, already cut into a batch) or the wheel stopped.
// O(1).
func (w *Wheel[T]) Cancel(h Handle) bool {
	si, i, gen := h.split()
	if si > w.mask {
		return false
	}
	s := &w.shards[si]
	s.mu.Lock()
	ok := !s.stopped && s.t.remove(i, gen)
	if ok {
		s.charged--
	}
	s.mu.Unlock()
	return ok
}

// Reset moves the timer h to a new deadline, keeping h valid. It reports
// false, changing nothing, when h is stale or the wheel stopped. O(1).
func (w *Wheel[T]) Reset(h Handle, deadline time.Time) bool {
	si, i, gen := h.split()
	if si > w.mask {
		return false
	}
	when := w.offset(deadline)
	s := &w.shards[si]
	tick := w.tickOf(when)
	s.mu.Lock()
	ok := !s.stopped && s.t.reset(i, gen, when, tick)
	s.mu.Unlock()
	if ok {
		w.poke(when)
	}
	return ok
}

// Len returns the number of timers scheduled and not yet cancelled or handed
// to onExpire: timers cut into a batch still count until onExpire is called
// with it. It is exact; under concurrent calls it sums the shards one after
// another. O(Shards).
func (w *Wheel[T]) Len() int {
	n := 0
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		if !s.stopped {
			n += s.pending()
		}
		s.mu.Unlock()
	}
	return n
}

// Stats returns the wheel's cumulative counters.
func (w *Wheel[T]) Stats() Stats {
	return Stats{Wakeups: w.wakeups.Load(), Expired: w.expired.Load(), Batches: w.batches.Load()}
}

// Stop stops the wheel and returns the timers that never reached onExpire:
// those still pending and those cut into a batch not yet handed over, so
// that every timer is reported exactly once, to onExpire or here. It frees
// the wheel's memory. Stop is idempotent: later calls wait for the first and
// return nil. It does not wait for an onExpire call in progress (so
// onExpire may call it), and a batch the delivery goroutine took before Stop
// is still delivered, possibly after Stop returns; no other call follows.
func (w *Wheel[T]) Stop() []Pending[T] {
	first := false
	w.stopOnce.Do(func() {
		first = true
		close(w.stop)
	})
	if !first {
		<-w.stopped
		return nil
	}
	<-w.driven
	var out []Pending[T]
	w.outMu.Lock()
	for _, c := range w.out[w.outHead:] {
		for _, e := range c.cuts {
			out = append(out, Pending[T]{Value: e.value, Deadline: w.origin.Add(time.Duration(e.when))})
		}
	}
	w.out, w.spare, w.outDone = nil, nil, true
	w.outMu.Unlock()
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		s.stopped = true
		s.charged = 0
		out = s.t.drain(out, w.origin)
		s.mu.Unlock()
	}
	close(w.stopped)
	return out
}
