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
	// The driver cuts into cur, a chunk of its own, and hands it over after
	// each shard and whenever it is full, so a pile is handed over as it is
	// cut, in chunks of BatchMax, without growing a buffer by copying.
	cur := &chunk[T]{owed: make([]int, len(w.shards))}
	shard := 0
	c := cutter[T]{max: BatchMax}
	c.flush = func(full []cut[T]) []cut[T] {
		cur.cuts = full
		cur.owed[shard] += len(full)
		cur = w.handOff(cur)
		if cap(cur.cuts) < BatchMax { // a pile is being cut: no growth
			cur.cuts = make([]cut[T], 0, BatchMax)
		}
		return cur.cuts
	}
	for {
		w.wakeups.Add(1)
		// From here until nextWake is stored below, every Schedule pokes
		// wake: a timer added to a shard after the scan below passed it
		// makes the driver scan again instead of being slept over.
		w.nextWake.Store(scanning)
		now := w.clock.Now()
		nowNs := max(0, int64(now.Sub(w.origin)))
		target := nowNs / w.tick
		c.fired = nowNs
		// First cut what is due from every shard, handing each shard's
		// timers to the delivery goroutine as soon as they are cut...
		for i := range w.shards {
			s := &w.shards[i]
			shard, c.buf = i, cur.cuts
			s.mu.Lock()
			s.t.advance(target, nowNs, &c)
			s.mu.Unlock()
			if n := len(c.buf); n > 0 {
				cur.cuts = c.buf
				cur.owed[i] += n
				cur = w.handOff(cur)
			}
		}
		// ...then, off the critical path, prepare the next tick (cascade,
		// sub-slots), move a part of any cascade running ahead of its tick,
		// and find the earliest work. A long cascade must not hold up the
		// work found so far: once the clock has reached it, stop preparing
		// and cut again (the next pass prepares the rest).
		next := int64(math.MaxInt64)
		for i := range w.shards {
			if i > 0 && w.sinceOrigin() >= next {
				next = 0 // at once
				break
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
		w.nextWake.Store(next)
		var fire <-chan time.Time
		if next != math.MaxInt64 {
			d := time.Duration(next - w.sinceOrigin())
			if d <= 0 {
				select {
				case <-w.stop:
					return
				default:
					continue
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
			return
		}
	}
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
