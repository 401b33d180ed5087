package wheel

import (
	"math"
	"slices"
	"time"
)

// drive is the driver goroutine: it advances every shard to the clock's
// current reading, hands the expired timers to delivery in chunks, prepares
// the next tick, and sleeps until the earliest work across shards (a
// sub-slot's end, or a tick before an occupied slot starts), or until a
// Schedule lands earlier (wake) or Stop. With nothing pending it sleeps
// without a timer: no periodic wake-ups. It never waits for the consumer.
func (w *Wheel[T]) drive() {
	defer close(w.driven)
	timer := w.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	p := w.newPass()
	for {
		w.wakeups.Add(1)
		// From here until nextWake is stored below, every Schedule pokes
		// wake: a timer added to a shard after the scan below passed it
		// makes the driver scan again instead of being slept over.
		w.nextWake.Store(scanning)
		now := w.clock.Now()
		nowNs := max(0, int64(now.Sub(w.origin)))
		p.cutDue(nowNs/w.tick, nowNs)
		next := w.prepareNext()
		w.nextWake.Store(next)
		if !w.sleep(timer, next) {
			return
		}
	}
}

// pass is the driver's cutting state, kept across its passes: the chunk it
// cuts into, the shard being cut and the cutter.
type pass[T any] struct {
	w     *Wheel[T]
	cur   *chunk[T]
	shard int
	c     cutter[T]
}

// newPass returns the driver's cutting state. The driver cuts into cur, a
// chunk of its own, and hands it over after each shard and whenever it is
// full, so a pile is handed over as it is cut, in chunks of BatchMax,
// without growing a buffer by copying.
func (w *Wheel[T]) newPass() *pass[T] {
	p := &pass[T]{w: w, cur: &chunk[T]{owed: make([]int, len(w.shards))}, c: cutter[T]{max: BatchMax}}
	p.c.flush = p.flush
	return p
}

// flush hands a full chunk over and returns the buffer to cut into next.
func (p *pass[T]) flush(full []cut[T]) []cut[T] {
	p.cur.cuts = full
	p.cur.owed[p.shard] += len(full)
	p.cur = p.w.handOff(p.cur)
	if cap(p.cur.cuts) < BatchMax { // a pile is being cut: no growth
		p.cur.cuts = make([]cut[T], 0, BatchMax)
	}
	return p.cur.cuts
}

// cutDue cuts what is due at tick target (the clock read nowNs since the
// origin) from every shard, handing each shard's timers to the delivery
// goroutine as soon as they are cut.
func (p *pass[T]) cutDue(target, nowNs int64) {
	w := p.w
	p.c.fired = nowNs
	for i := range w.shards {
		s := &w.shards[i]
		p.shard, p.c.buf = i, p.cur.cuts
		s.mu.Lock()
		s.t.advance(target, nowNs, &p.c)
		s.mu.Unlock()
		if n := len(p.c.buf); n > 0 {
			p.cur.cuts = p.c.buf
			p.cur.owed[i] += n
			p.cur = w.handOff(p.cur)
		}
	}
}

// prepareNext, off the critical path, prepares the next tick of every
// shard (cascade, sub-slots), moves a part of any cascade running ahead of
// its tick, and returns the earliest work (nanoseconds since the origin;
// 0: at once; math.MaxInt64: none). A long cascade must not hold up the
// work found so far: once the clock has reached it, it stops preparing so
// the driver cuts again (the next pass prepares the rest).
func (w *Wheel[T]) prepareNext() int64 {
	next := int64(math.MaxInt64)
	for i := range w.shards {
		if i > 0 && w.sinceOrigin() >= next {
			return 0 // at once
		}
		s := &w.shards[i]
		s.mu.Lock()
		s.t.prepare()
		if !s.t.cascadeSome(cascadeChunk) {
			next = 0 // more of it on the next pass
		}
		if t, ok := s.t.nextAt(); ok {
			next = min(next, t)
		}
		s.mu.Unlock()
	}
	return next
}

// sleep waits on timer until next (nanoseconds since the origin;
// math.MaxInt64: no timer) or a wake, returning at once when next has
// passed; it reports false when the wheel stops.
func (w *Wheel[T]) sleep(timer Timer, next int64) bool {
	var fire <-chan time.Time
	if next != math.MaxInt64 {
		d := time.Duration(next - w.sinceOrigin())
		if d <= 0 {
			select {
			case <-w.stop:
				return false
			default:
				return true
			}
		}
		timer.Reset(d)
		fire = timer.C()
	}
	select {
	case <-fire:
	case <-w.wake:
		timer.Stop()
	case <-w.stop:
		return false
	}
	return true
}

// cascadeChunk is how many timers of a cascade running ahead of its tick a
// driver pass moves per shard (about 0.1 ms of work), so that sub-slots due
// meanwhile are cut between parts.
const cascadeChunk = 4096

// sinceOrigin returns the clock's reading in nanoseconds since the origin.
func (w *Wheel[T]) sinceOrigin() int64 { return int64(w.clock.Now().Sub(w.origin)) }

// handOff queues the driver's chunk c for onExpire and returns the chunk to
// cut into next. If the last queued chunk has not been taken yet and c fits
// into it, c is appended to it instead (a copy of at most BatchMax timers),
// so a slow consumer gets fewer, larger batches, up to BatchMax each.
func (w *Wheel[T]) handOff(c *chunk[T]) *chunk[T] {
	n := len(c.cuts)
	next := c
	w.outMu.Lock()
	if k := len(w.out); k > w.outHead && len(w.out[k-1].cuts)+n <= BatchMax {
		tail := w.out[k-1]
		tail.cuts = append(tail.cuts, c.cuts...)
		for i, o := range c.owed {
			tail.owed[i] += o
		}
		clear(c.cuts)
		c.cuts = c.cuts[:0]
		clear(c.owed)
	} else {
		w.out = append(w.out, c)
		if k := len(w.spare); k > 0 {
			next, w.spare = w.spare[k-1], w.spare[:k-1]
		} else {
			next = &chunk[T]{owed: make([]int, len(w.shards))}
		}
	}
	w.outMu.Unlock()
	w.expired.Add(uint64(n))
	select {
	case w.outReady <- struct{}{}:
	default:
	}
	return next
}

// deliver is the delivery goroutine: it takes the queued chunks one at a
// time, oldest first (under a slow consumer they are full or were merged by
// handOff, so batches grow up to BatchMax while the driver keeps cutting),
// uncharges each from the shards (an atomic add, no shard lock), converts it
// into batch, its one buffer of Expired, and calls onExpire with that. Chunks
// come back for reuse, so steady state allocates nothing; those a pile
// needed beyond spareMax are left to the GC.
func (w *Wheel[T]) deliver() {
	var done *chunk[T] // the chunk last handed to onExpire, to recycle
	var batch []Expired[T]
	for {
		select {
		case <-w.outReady:
		case <-w.stop:
			return
		}
		for {
			w.outMu.Lock()
			if done != nil && len(w.spare) < spareMax && !w.outDone {
				w.spare = append(w.spare, done)
			}
			done = nil
			if w.outDone || w.outHead == len(w.out) {
				stopped := w.outDone
				w.outMu.Unlock()
				if stopped {
					return
				}
				break
			}
			c := w.out[w.outHead]
			w.out[w.outHead] = nil
			if w.outHead++; w.outHead == len(w.out) {
				w.out, w.outHead = w.out[:0], 0
			}
			w.outMu.Unlock()
			for i, n := range c.owed {
				if n != 0 {
					w.shards[i].handed.Add(int64(n))
					c.owed[i] = 0
				}
			}
			batch = slices.Grow(batch, len(c.cuts))
			firedNs, fired := int64(-1), time.Time{}
			for _, e := range c.cuts {
				if e.fired != firedNs { // one per driver pass in the chunk
					firedNs, fired = e.fired, w.origin.Add(time.Duration(e.fired))
				}
				batch = append(batch, Expired[T]{Value: e.value, Deadline: w.origin.Add(time.Duration(e.when)), Fired: fired})
			}
			clear(c.cuts) // drop the values' references
			c.cuts = c.cuts[:0]
			done = c
			w.batches.Add(1)
			w.onExpire(batch)
			clear(batch)
			batch = batch[:0]
			select {
			case <-w.stop:
				return // Stop reports what is still queued
			default:
			}
		}
	}
}
