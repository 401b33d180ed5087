package wheel

import (
	"math"
	"time"
)

// drive is the driver goroutine: it advances every shard to the clock's
// current reading, moves the expired timers to the outbox, prepares the next
// tick, and sleeps until the earliest work across shards (a sub-slot's end,
// or a tick before an occupied slot starts), or until a Schedule lands
// earlier (wake) or Stop. With nothing pending it sleeps without a timer: no
// periodic wake-ups. It never waits for the consumer.
func (w *Wheel[T]) drive() {
	defer close(w.driven)
	timer := w.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var cut []Expired[T] // one shard's cut, before it joins the outbox
	for {
		w.wakeups.Add(1)
		// From here until nextWake is stored below, every Schedule pokes
		// wake: a timer added to a shard after the scan below passed it
		// makes the driver scan again instead of being slept over.
		w.nextWake.Store(scanning)
		now := w.clock.Now()
		nowNs := max(0, int64(now.Sub(w.origin)))
		target := nowNs / w.tick
		// First cut what is due from every shard, handing each shard's
		// timers to the delivery goroutine as soon as they are cut...
		for i := range w.shards {
			s := &w.shards[i]
			s.mu.Lock()
			cut = s.t.advance(target, nowNs, cut[:0], now, w.origin)
			n := len(cut)
			if n > 0 {
				// Cut into the driver's own buffer and copied here, so
				// the delivery goroutine waits on outMu for a copy only.
				w.outMu.Lock()
				w.out = append(w.out, cut...)
				w.outOwed[i] += n
				w.outMu.Unlock()
			}
			s.mu.Unlock()
			if n > 0 {
				clear(cut) // drop the values' references
				w.expired.Add(uint64(n))
				select {
				case w.outReady <- struct{}{}:
				default:
				}
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

// deliver is the delivery goroutine: it takes everything the driver cut
// since the last call (so a slow consumer gets fewer, larger batches while
// the driver keeps cutting), uncharges it from the shards (an atomic add,
// no shard lock), and calls
// onExpire with it. Two buffers alternate, so steady state allocates
// nothing; a buffer much larger than its last use is dropped for the GC.
func (w *Wheel[T]) deliver() {
	var spare []Expired[T]
	owed := make([]int, len(w.shards))
	for {
		select {
		case <-w.outReady:
		case <-w.stop:
			return
		}
		w.outMu.Lock()
		if w.outDone {
			w.outMu.Unlock()
			return
		}
		batch := w.out
		w.out = spare[:0]
		copy(owed, w.outOwed)
		clear(w.outOwed)
		w.outMu.Unlock()
		if len(batch) == 0 {
			spare = batch
			continue
		}
		for i, n := range owed {
			if n != 0 {
				w.shards[i].handed.Add(int64(n))
			}
		}
		w.batches.Add(1)
		w.onExpire(batch)
		clear(batch)
		spare = batch[:0]
		if cap(batch) > 4096 && len(batch) < cap(batch)/4 {
			spare = nil
		}
	}
}
