package wheel

import (
	"math"
	"math/bits"
	"time"
)

// The hierarchy: numLevels levels of levelSlots slots each. Level L slot s
// holds the timers whose expiry tick differs from the current tick first in
// base-64 digit L and has digit s there. 11 levels of 6 bits cover every
// non-negative int64 tick, so no overflow list is needed.
const (
	levelBits  = 6
	levelSlots = 1 << levelBits
	levelMask  = levelSlots - 1
	numLevels  = 11
	// subLevel follows the levels: while the next tick is prepared, its
	// timers wait in up to levelSlots sub-slots of Config.Precision each,
	// by deadline, so they fire within Precision of it.
	subLevel = numLevels
	// dueSlot is the list of timers whose tick had already passed when they
	// were scheduled or reset; the next advance fires them.
	dueSlot = (subLevel + 1) * levelSlots
	// freeSlot marks a slab entry on the free list.
	freeSlot = 0xFFFF

	chunkBits = 10
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1

	// maxIndex bounds a shard's slab so that an index fits the handle.
	maxIndex = 1<<(32-shardBits) - 1
)

// entry is one timer in a shard's slab: 32 bytes with an 8-byte T. Links are
// slab indices; index 0 is never used, so 0 means "none".
type entry[T any] struct {
	when  int64  // deadline in nanoseconds since the wheel's origin
	next  uint32 // next in the slot list, or in the free list when free
	prev  uint32 // previous in the slot list; 0 when first
	gen   uint32 // bumped when the entry is freed; part of the handle
	slot  uint16 // level*levelSlots+slot (subLevel for a sub-slot), dueSlot, or freeSlot
	value T
}

// timers is the hierarchical timing wheel of one shard. It is not
// synchronized: the shard's mutex guards it. Every operation is O(1) except
// advance and prepare, which are O(slots visited + timers fired or moved);
// each timer cascades at most numLevels-1 times over its life and moves into
// the sub-level once.
type timers[T any] struct {
	ticks
	now int64 // the last tick processed by advance: every timer due by it fired
	// ref is the tick the levels are laid out against: now, or now+1 once
	// prepare (or a cascade in advance) has laid out the next tick ahead of
	// its boundary, or now+2 while a cascade runs ahead (pend).
	ref int64
	// sub is set while subTick = now+1 is prepared: every timer due at
	// subTick is in the sub-level, sub-slot j firing at subAt(j), until
	// advance reaches subTick; the levels hold only later ticks. Otherwise
	// the sub-level is empty.
	sub     bool
	subTick int64
	// pend, when not 0, is a coarse slot that starts at ref = subTick+1 and
	// is being cascaded in parts by cascadeSome while subTick's sub-slots
	// fire: its list holds the timers not moved yet, and its occupancy bit is
	// clear so that nextTick does not see it. advance finishes it before it
	// looks at the levels.
	pend int

	chunks []*[chunkSize]entry[T] // fixed-size chunks: growth never copies
	used   uint32                 // highest slab index ever allocated
	free   uint32                 // head of the free list
	n      int                    // timers in the wheel

	occupied [subLevel + 1]uint64 // bit s of level L set iff heads[L*64+s] != 0
	heads    [dueSlot + 1]uint32
}

// ticks converts nanoseconds to ticks and sub-slots.
type ticks struct {
	tick  int64  // nanoseconds per tick
	magic uint64 // floor((2^64-1)/tick), for division by multiplication
	prec  int64  // nanoseconds per sub-slot; it divides tick
}

func newTicks(tick, prec time.Duration) ticks {
	return ticks{tick: int64(tick), magic: ^uint64(0) / uint64(tick), prec: int64(prec)}
}

// tickOf returns the first tick at or after when: ceil(when/tick), and 0 for
// when <= 0. It divides by multiplying with magic; the estimate is at most
// one too small and is corrected.
func (t ticks) tickOf(when int64) int64 {
	if when <= 0 {
		return 0
	}
	x := uint64(when - 1)
	q, _ := bits.Mul64(x, t.magic)
	if x-q*uint64(t.tick) >= uint64(t.tick) {
		q++
	}
	return int64(q) + 1
}

func (t *timers[T]) at(i uint32) *entry[T] {
	return &t.chunks[i>>chunkBits][i&chunkMask]
}

// add stores a timer and returns its slab index and generation; ok is false
// when the slab is at maxIndex.
func (t *timers[T]) add(when, tick int64, v T) (i, gen uint32, ok bool) {
	if t.free != 0 {
		i = t.free
		t.free = t.at(i).next
	} else {
		if t.used >= maxIndex {
			return 0, 0, false
		}
		t.used++
		i = t.used
		if int(i>>chunkBits) == len(t.chunks) {
			t.chunks = append(t.chunks, new([chunkSize]entry[T]))
		}
	}
	e := t.at(i)
	e.when = when
	e.value = v
	t.link(i, e, tick)
	t.n++
	return i, e.gen, true
}

// get returns the live entry for (i, gen), or nil if the handle is stale.
func (t *timers[T]) get(i, gen uint32) *entry[T] {
	if i == 0 || i > t.used {
		return nil
	}
	e := t.at(i)
	if e.gen != gen || e.slot == freeSlot {
		return nil
	}
	return e
}

// remove cancels the timer (i, gen) and frees its entry at once; it reports
// false for a stale handle.
func (t *timers[T]) remove(i, gen uint32) bool {
	e := t.get(i, gen)
	if e == nil {
		return false
	}
	t.unlink(e)
	t.release(i, e)
	return true
}

// reset moves the timer (i, gen) to a new deadline; false for a stale handle.
func (t *timers[T]) reset(i, gen uint32, when, tick int64) bool {
	e := t.get(i, gen)
	if e == nil {
		return false
	}
	t.unlink(e)
	e.when = when
	t.link(i, e, tick)
	return true
}

func (t *timers[T]) release(i uint32, e *entry[T]) {
	var zero T
	e.value = zero // drop references held by the value now, not at a later tick
	e.gen++
	e.slot = freeSlot
	e.prev = 0
	e.next = t.free
	t.free = i
	t.n--
}

// link puts entry i, expiring at tick, at the head of its slot's list: the
// due list when tick has already been processed; its sub-slot when tick is
// the prepared tick; else the slot of the highest base-64 digit in which
// tick and ref differ (level 0 when tick is ref itself); tick's digit there
// is greater than ref's.
func (t *timers[T]) link(i uint32, e *entry[T], tick int64) {
	s := dueSlot
	switch {
	case tick <= t.now:
	case t.sub && tick == t.subTick:
		// e.when is in (base, base+tick]; sub-slot j ends at base+(j+1)*prec,
		// at or after it.
		j := int((e.when - (t.subTick-1)*t.tick - 1) / t.prec)
		s = subLevel*levelSlots + j
		t.occupied[subLevel] |= 1 << j
	default:
		lvl := 0
		if x := uint64(tick ^ t.ref); x != 0 {
			lvl = (63 - bits.LeadingZeros64(x)) / levelBits
		}
		d := int(tick>>(lvl*levelBits)) & levelMask
		s = lvl*levelSlots + d
		t.occupied[lvl] |= 1 << d
	}
	e.slot = uint16(s)
	e.prev = 0
	h := t.heads[s]
	e.next = h
	if h != 0 {
		t.at(h).prev = i
	}
	t.heads[s] = i
}

func (t *timers[T]) unlink(e *entry[T]) {
	if e.prev != 0 {
		t.at(e.prev).next = e.next
	} else {
		s := int(e.slot)
		t.heads[s] = e.next
		if e.next == 0 && s != dueSlot {
			t.occupied[s>>levelBits] &^= 1 << (s & levelMask)
		}
	}
	if e.next != 0 {
		t.at(e.next).prev = e.prev
	}
}

// nextTick returns the start of the earliest occupied slot of the levels
// (not counting the due list and the sub-level). The lowest non-empty
// level always holds the earliest slot, because a level-L slot starts after
// the current level-(L+1) digit's range (of ref) in which all lower levels
// lie.
func (t *timers[T]) nextTick() (int64, bool) {
	for lvl, occ := range t.occupied[:numLevels] {
		if occ != 0 {
			shift := uint(lvl * levelBits)
			high := t.ref >> (shift + levelBits) << (shift + levelBits)
			return high | int64(bits.TrailingZeros64(occ))<<shift, true
		}
	}
	return 0, false
}

// lowest returns the lowest occupied level and its lowest occupied slot
// digit; the levels must not be empty.
func (t *timers[T]) lowest() (lvl, d int) {
	for t.occupied[lvl] == 0 {
		lvl++
	}
	return lvl, bits.TrailingZeros64(t.occupied[lvl])
}

// subAt returns when sub-slot j of the prepared tick fires, in nanoseconds
// since the origin; the last tick below math.MaxInt64 ends there.
func (t *timers[T]) subAt(j int) int64 {
	start, d := (t.subTick-1)*t.tick, int64(j+1)*t.prec
	if start > math.MaxInt64-d {
		return math.MaxInt64
	}
	return start + d
}

// nextAt returns when the driver next has work in this shard, in
// nanoseconds since the origin: at once when timers are due; the earliest
// occupied sub-slot of the prepared tick; else when the earliest occupied
// slot starts, or with sub-slots finer than a tick one tick before, so that
// prepare lays that tick out into sub-slots before any of its timers is due.
func (t *timers[T]) nextAt() (int64, bool) {
	if t.heads[dueSlot] != 0 {
		return t.now * t.tick, true
	}
	if occ := t.occupied[subLevel]; occ != 0 {
		return t.subAt(bits.TrailingZeros64(occ)), true
	}
	n, ok := t.nextTick()
	if !ok {
		return 0, false
	}
	if t.prec < t.tick {
		n--
	}
	if n > (math.MaxInt64-1)/t.tick { // past the last representable time
		return math.MaxInt64 - 1, true
	}
	return n * t.tick, true
}

// cut is an expired timer as the driver hands it over, in nanoseconds since
// the origin: free of pointers when T is (a time.Time holds a *Location), so
// a chunk of them costs the GC no scan and the driver no write barriers.
// Delivery converts it to an Expired.
type cut[T any] struct {
	value T
	when  int64 // the deadline
	fired int64 // when the driver cut it
}

// cutter collects the timers advance cuts, in chunks of at most max: when
// buf holds max timers, flush hands buf over and returns an empty buffer, so
// a pile due at once is handed over as it is cut, never gathered into one
// buffer that grows by copying. fired is stamped on each timer.
type cutter[T any] struct {
	buf   []cut[T]
	max   int
	flush func(full []cut[T]) []cut[T]
	fired int64 // nanoseconds since the origin
}

// add appends the timer (v, when) to buf, flushing it first when full.
func (c *cutter[T]) add(v T, when int64) {
	if len(c.buf) >= c.max {
		c.buf = c.flush(c.buf)
	}
	c.buf = append(c.buf, cut[T]{value: v, when: when, fired: c.fired})
}

// advance processes every tick up to target, and the sub-slots of the
// prepared tick up to nowNs (nanoseconds since the origin, within tick
// target or later), and adds the timers due by then to c, freeing their
// entries. A level-0 slot or sub-slot holds timers of one tick, so it fires
// without looking at their deadlines; a slot of a coarser level whose range
// has begun cascades toward finer levels first.
func (t *timers[T]) advance(target, nowNs int64, c *cutter[T]) {
	for {
		t.fire(dueSlot, c)
		if t.sub {
			// Every timer due at subTick is in the sub-level and every
			// other one is due later: fire the sub-slots whose time has
			// come, or all of them once subTick itself is reached.
			for occ := t.occupied[subLevel]; occ != 0; occ &= occ - 1 {
				j := bits.TrailingZeros64(occ)
				if target < t.subTick && t.subAt(j) > nowNs {
					break
				}
				t.occupied[subLevel] &^= 1 << j
				t.fire(subLevel*levelSlots+j, c)
			}
			if target < t.subTick {
				return
			}
			t.sub, t.now = false, t.subTick
			t.cascadeSome(math.MaxInt)
			continue
		}
		n, ok := t.nextTick()
		if !ok || n > target {
			if target > t.now {
				// No slot starts in (now, target], so the layout against
				// ref is also the layout against target.
				t.now, t.ref = target, target
			}
			return
		}
		lvl, d := t.lowest()
		if lvl > 0 {
			t.cascade(n, lvl, d)
			continue
		}
		t.occupied[0] &^= 1 << d
		t.fire(d, c)
		t.now, t.ref = n, n
	}
}

// prepare does ahead of time the work advance would do at the next tick
// boundary, now+1, without firing anything: it cascades the coarser slot
// that starts there, and moves that tick's level-0 list into the sub-level,
// by deadline, so that its timers fire within Precision of their deadlines
// rather than at the boundary, and the boundary itself has little left to
// do. The driver calls it right after advance, and wakes a tick before an
// occupied slot starts so that it is called in time. A cascade only moves
// timers to finer levels, so preparing early cannot fire early.
func (t *timers[T]) prepare() {
	if !t.sub {
		n, ok := t.nextTick()
		if !ok || n != t.now+1 {
			return
		}
		if lvl, d := t.lowest(); lvl > 0 {
			t.cascade(n, lvl, d)
		}
		// Laid out against now or against n, the levels are the same when
		// no coarser slot starts at n, and the cascade made them so when
		// one did.
		t.ref, t.sub, t.subTick = n, true, n
		d := int(n & levelMask)
		i := t.heads[d]
		t.heads[d] = 0
		t.occupied[0] &^= 1 << d
		for i != 0 {
			e := t.at(i)
			nx := e.next
			t.link(i, e, n)
			i = nx
		}
	}
	// With subTick in the sub-level, the levels hold only later ticks: a
	// coarse slot that starts right after it can be cascaded now, in parts
	// (cascadeSome), instead of in one piece while its first ticks are due.
	if t.pend == 0 && t.ref == t.subTick {
		if n, ok := t.nextTick(); ok && n == t.subTick+1 {
			if lvl, d := t.lowest(); lvl > 0 {
				t.begin(n, lvl, d)
			}
		}
	}
}

// cascade empties slot d of level lvl > 0, which starts at tick n (the
// earliest occupied slot, so every timer due before n has fired), and
// relinks its timers against ref n: those due at n go to level-0 slot
// n&levelMask, the others to finer levels.
func (t *timers[T]) cascade(n int64, lvl, d int) {
	t.now = n - 1
	t.begin(n, lvl, d)
	t.cascadeSome(math.MaxInt)
}

// begin starts the cascade of slot d of level lvl > 0, which starts at tick
// n: the levels are laid out against n from here on, and cascadeSome moves
// the slot's timers.
func (t *timers[T]) begin(n int64, lvl, d int) {
	t.occupied[lvl] &^= 1 << d
	t.ref, t.pend = n, lvl*levelSlots+d
}

// cascadeSome moves up to k timers of the slot being cascaded to finer
// levels and reports whether it is done. A timer scheduled meanwhile is
// linked against the new ref directly; one cancelled leaves the list.
func (t *timers[T]) cascadeSome(k int) bool {
	for ; k > 0 && t.pend != 0; k-- {
		i := t.heads[t.pend]
		if i == 0 {
			t.pend = 0
			break
		}
		e := t.at(i)
		t.heads[t.pend] = e.next
		if e.next != 0 {
			t.at(e.next).prev = 0
		}
		t.link(i, e, t.tickOf(e.when))
	}
	if t.pend != 0 && t.heads[t.pend] == 0 {
		t.pend = 0
	}
	return t.pend == 0
}

// fire adds the timers of slot s to c and frees their entries.
func (t *timers[T]) fire(s int, c *cutter[T]) {
	for i := t.heads[s]; i != 0; {
		e := t.at(i)
		nx := e.next
		c.add(e.value, e.when)
		t.release(i, e)
		i = nx
	}
	t.heads[s] = 0
}

// drain appends every timer still in the wheel to out and empties the wheel,
// releasing its memory.
func (t *timers[T]) drain(out []Pending[T], origin time.Time) []Pending[T] {
	for _, h := range t.heads {
		for i := h; i != 0; {
			e := t.at(i)
			out = append(out, Pending[T]{Value: e.value, Deadline: origin.Add(time.Duration(e.when))})
			i = e.next
		}
	}
	t.chunks, t.used, t.free, t.n, t.sub, t.pend = nil, 0, 0, 0, false, 0
	t.occupied, t.heads = [subLevel + 1]uint64{}, [dueSlot + 1]uint32{}
	return out
}
