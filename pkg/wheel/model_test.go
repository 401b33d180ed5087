package wheel

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// model is the reference: a heap of live timers ordered by deadline, driven
// by the same ticks as the wheel under test.
type model struct {
	items []*modelTimer
}

type modelTimer struct {
	id    int
	when  int64
	index int // in the heap, -1 when gone
}

func (m *model) Len() int           { return len(m.items) }
func (m *model) Less(i, j int) bool { return m.items[i].when < m.items[j].when }
func (m *model) Swap(i, j int) {
	m.items[i], m.items[j] = m.items[j], m.items[i]
	m.items[i].index, m.items[j].index = i, j
}
func (m *model) Push(x any) {
	t := x.(*modelTimer)
	t.index = len(m.items)
	m.items = append(m.items, t)
}
func (m *model) Pop() any {
	t := m.items[len(m.items)-1]
	m.items = m.items[:len(m.items)-1]
	t.index = -1
	return t
}

// checker runs one operation sequence against the unsynchronized wheel of a
// shard and the model, failing on the first divergence.
type checker struct {
	tb      testing.TB
	tick    int64
	prec    int64
	t       timers[int]
	m       model
	handles []struct{ i, gen uint32 }
	timers  []*modelTimer
	nowNs   int64
	out     []cut[int]
}

func newChecker(tb testing.TB, tick, prec time.Duration) *checker {
	c := &checker{tb: tb, tick: int64(tick), prec: int64(prec)}
	c.t.ticks = newTicks(tick, prec)
	return c
}

func (c *checker) schedule(when int64) {
	id := len(c.timers)
	i, gen, ok := c.t.add(when, c.t.tickOf(when), id)
	if !ok {
		c.tb.Fatalf("add failed")
	}
	mt := &modelTimer{id: id, when: when}
	heap.Push(&c.m, mt)
	c.timers = append(c.timers, mt)
	c.handles = append(c.handles, struct{ i, gen uint32 }{i, gen})
}

func (c *checker) cancel(id int) {
	h, mt := c.handles[id], c.timers[id]
	got := c.t.remove(h.i, h.gen)
	want := mt.index >= 0
	if got != want {
		c.tb.Fatalf("cancel(%d) = %v, want %v", id, got, want)
	}
	if want {
		heap.Remove(&c.m, mt.index)
	}
}

func (c *checker) reset(id int, when int64) {
	h, mt := c.handles[id], c.timers[id]
	got := c.t.reset(h.i, h.gen, when, c.t.tickOf(when))
	want := mt.index >= 0
	if got != want {
		c.tb.Fatalf("reset(%d) = %v, want %v", id, got, want)
	}
	if want {
		mt.when = when
		heap.Fix(&c.m, mt.index)
	}
}

// advance moves the clock to nowNs and checks that exactly the timers due by
// the current tick boundary fire, and when the next tick was prepared, also
// those of its timers whose sub-slot has ended: none early, none skipped.
func (c *checker) advance(nowNs int64) {
	c.nowNs = max(c.nowNs, nowNs)
	target := c.nowNs / c.tick
	due := target * c.tick
	if st := c.t.subTick; c.t.sub && target < st {
		// Sub-slots of prec each, counted from the prepared tick's start.
		start := (st - 1) * c.tick
		due = max(due, min(addSat(start, c.tick), start+(c.nowNs-start)/c.prec*c.prec))
		if c.nowNs == math.MaxInt64 { // sub-slot ends saturate there
			due = math.MaxInt64
		}
	}
	// Chunks of 1 to 3 timers, so that the cut is flushed mid-slot often.
	c.out = c.out[:0]
	ct := cutter[int]{max: 1 + int(c.nowNs%3), fired: c.nowNs}
	ct.flush = func(full []cut[int]) []cut[int] {
		if len(full) != ct.max {
			c.tb.Fatalf("flushed %d timers, want %d", len(full), ct.max)
		}
		c.out = append(c.out, full...)
		return full[:0]
	}
	c.t.advance(target, c.nowNs, &ct)
	c.out = append(c.out, ct.buf...)
	var want []int
	for c.m.Len() > 0 && c.m.items[0].when <= due {
		want = append(want, heap.Pop(&c.m).(*modelTimer).id)
	}
	got := make([]int, len(c.out))
	for k, e := range c.out {
		got[k] = e.value
		mt := c.timers[e.value]
		if e.when != mt.when {
			c.tb.Fatalf("timer %d: deadline %d ns, want %d ns", e.value, e.when, mt.when)
		}
		if e.fired != c.nowNs || e.fired < e.when {
			c.tb.Fatalf("timer %d fired early or stamped wrong: at %d ns (now %d ns), deadline %d ns", e.value, e.fired, c.nowNs, mt.when)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		c.tb.Fatalf("advance to %d ns (tick %d, due by %d ns): fired %v, want %v", c.nowNs, target, due, got, want)
	}
	if c.t.n != c.m.Len() {
		c.tb.Fatalf("wheel holds %d timers, model %d", c.t.n, c.m.Len())
	}
	// As the driver does: prepare the next tick right after advancing, so
	// later operations run against a wheel laid out a tick ahead, and move
	// part of a cascade begun ahead of its tick (0 to 3 timers, so that
	// operations also run while one is under way).
	c.t.prepare()
	c.t.cascadeSome(int(c.nowNs % 4))
	if c.t.n != c.m.Len() {
		c.tb.Fatalf("after prepare the wheel holds %d timers, model %d", c.t.n, c.m.Len())
	}
}

// run interprets data as operations: each is 1 opcode byte and 8 bytes of
// argument. Deadlines mix near, far, tick-aligned and level-boundary values.
func (c *checker) run(data []byte) {
	for len(data) >= 9 {
		op, arg := data[0], binary.LittleEndian.Uint64(data[1:9])
		data = data[9:]
		switch op % 6 {
		case 0, 1:
			c.schedule(c.deadline(op, arg))
		case 2:
			if len(c.timers) > 0 {
				c.cancel(int(arg % uint64(len(c.timers))))
			}
		case 3:
			if len(c.timers) > 0 {
				c.reset(int(arg%uint64(len(c.timers))), c.deadline(op>>3, arg>>20))
			}
		case 4:
			c.advance(addSat(c.nowNs, int64(arg%uint64(3*c.tick))))
		case 5: // jump to a deadline, but not centuries ahead
			if (op>>3)%6 == 4 {
				op -= 8
			}
			c.advance(c.deadline(op, arg))
		}
	}
	c.advance(math.MaxInt64) // all fire but deadlines past the last whole tick
}

func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// deadline derives a deadline from op and arg relative to the current time.
func (c *checker) deadline(op byte, arg uint64) int64 {
	now := c.nowNs
	switch (op >> 3) % 6 {
	case 0: // near: within 200 ticks, possibly in the past
		return now - 5*c.tick + int64(arg%uint64(205*c.tick))
	case 1: // exactly on a tick boundary
		return (now/c.tick + int64(arg%130)) * c.tick
	case 2: // on or next to a level boundary
		lvl := arg % 8
		b := (now/c.tick>>(6*lvl) + 1 + int64(arg>>8%3)) << (6 * lvl)
		if b > math.MaxInt64/c.tick-1 {
			return math.MaxInt64
		}
		return b*c.tick + int64(arg>>16%3) - 1
	case 3: // far future: up to ~2^50 ns (13 days)
		return addSat(now, int64(arg%(1<<50)))
	case 4: // very far: up to 2^62 ns
		return addSat(now, int64(arg>>2))
	default: // pile-up on a handful of deadlines
		return now + int64(arg%4)*7*c.tick
	}
}

func TestModelRandom(t *testing.T) {
	t.Parallel()
	for _, res := range []struct{ tick, prec time.Duration }{
		{time.Millisecond, time.Millisecond},
		{10 * time.Millisecond, time.Millisecond},
		{10 * time.Millisecond, 10 * time.Millisecond},
		{7, 7},
		{64, 1},
		{12, 4},
	} {
		tick, prec := res.tick, res.prec
		for seed := range 20 {
			t.Run(fmt.Sprintf("tick=%v/precision=%v/seed=%d", tick, prec, seed), func(t *testing.T) {
				t.Parallel()
				data := make([]byte, 9*3000)
				x := uint64(seed)*0x9E3779B97F4A7C15 + uint64(tick)
				for i := range data {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					data[i] = byte(x >> 32)
				}
				newChecker(t, tick, prec).run(data)
			})
		}
	}
}

func TestModelCases(t *testing.T) {
	t.Parallel()
	ms := int64(time.Millisecond)
	op := func(code byte, arg int64) []byte {
		return binary.LittleEndian.AppendUint64([]byte{code}, uint64(arg))
	}
	tests := []struct {
		name       string
		tick, prec time.Duration
		ops        [][]byte
	}{
		// opcode 0 with kind 0 (near): deadline = now - 5 ticks + arg.
		{"past deadline fires at once", time.Millisecond, time.Millisecond, [][]byte{op(0, 0), op(4, 0)}},
		{"exact tick boundary", time.Millisecond, time.Millisecond, [][]byte{op(8, 64), op(4, 64*ms), op(4, ms-1), op(4, 1)}},
		{"one ns after boundary waits a tick", time.Millisecond, time.Millisecond, [][]byte{op(0, 5*ms+1), op(4, ms), op(4, 1), op(4, ms-1)}},
		{"level boundary", time.Millisecond, time.Millisecond, [][]byte{op(16, 1<<8), op(5|16, 0)}},
		{"cancel then stale cancel", time.Millisecond, time.Millisecond, [][]byte{op(0, 100*ms), op(2, 0), op(2, 0), op(4, 2*ms)}},
		{"reset after fire is stale", time.Millisecond, time.Millisecond, [][]byte{op(0, 0), op(4, 0), op(3, 0)}},
		// 10 ms ticks of 1 ms sub-slots: a deadline at 12.5 ms fires at 13 ms.
		{"prepared tick fires by sub-slot", 10 * time.Millisecond, time.Millisecond,
			[][]byte{op(0, 62*ms+ms/2), op(4, 10*ms), op(4, 2*ms), op(4, ms/2), op(4, ms/2)}},
		// Deadline 18 ms prepares tick 2 at 10 ms; one at 14.2 ms, scheduled
		// then, joins its sub-slot and fires at 15 ms.
		{"schedule into a prepared tick", 10 * time.Millisecond, time.Millisecond,
			[][]byte{op(0, 68*ms), op(4, 10*ms), op(0, 54*ms+ms/5), op(4, 5*ms), op(4, 3*ms)}},
		{"sub-slot end on the deadline", 10 * time.Millisecond, 2 * time.Millisecond,
			[][]byte{op(0, 64*ms), op(4, 10*ms), op(4, 3*ms), op(4, ms)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			newChecker(t, tt.tick, tt.prec).run(slices.Concat(tt.ops...))
		})
	}
}

func FuzzWheel(f *testing.F) {
	f.Add([]byte{})
	f.Add(binary.LittleEndian.AppendUint64([]byte{0}, 12345))
	f.Add(slices.Concat(
		binary.LittleEndian.AppendUint64([]byte{24}, 1<<40),
		binary.LittleEndian.AppendUint64([]byte{16}, 3),
		binary.LittleEndian.AppendUint64([]byte{3}, 0),
		binary.LittleEndian.AppendUint64([]byte{5}, 1<<30),
	))
	f.Fuzz(func(t *testing.T, data []byte) {
		newChecker(t, 10*time.Millisecond, time.Millisecond).run(data)
	})
}
