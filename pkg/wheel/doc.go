// Package wheel is a sharded, hierarchical hashed timing wheel holding
// millions of pending deadlines in memory, with O(1) Schedule, Cancel and
// Reset and no allocation per operation in steady state. It depends on the
// standard library only.
//
// # Structure
//
// Each shard has its own mutex, a slab of 32-byte entries (with an 8-byte
// value) in fixed 1024-entry chunks, and 11 levels of 64 slots, each slot a
// doubly linked list of slab indices, each level with a uint64 occupancy
// bitmap. Level L slot s holds the timers whose expiry tick first differs
// from the current tick in base-64 digit L, with digit s there (as in Linux's
// and tokio's wheels), so a 30-day deadline costs the same as a 100 ms one.
// When the current tick reaches the start of a slot of level L > 0, its
// timers cascade to finer levels, so every timer fires from level 0 (or its
// sub-slots, below) at or after its deadline: never early, less than one
// tick late (plus wake-up latency), never expired in place from a coarse
// level (for the last timers of a large pile, see Delivery). A level-0 slot
// or sub-slot holds timers of one tick, so firing it
// reads no deadline and divides nothing.
//
// The levels are laid out against a reference tick, the last tick processed
// or the next one. Right after each advance, the driver prepares the next
// tick if it holds timers: if a coarser slot starts there it cascades it at
// once (a cascade only moves timers to finer levels and fires nothing, so
// this cannot fire early), and it moves that tick's level-0 list into a
// sub-level of Tick/Config.Precision sub-slots, by deadline. A timer
// scheduled into a prepared tick goes straight to its sub-slot. The driver
// wakes at the end of each occupied sub-slot and hands it out, so a timer
// fires within Precision of its deadline (1 ms for a 10 ms tick) rather than
// at the end of its tick, and never before its deadline: a sub-slot ends at
// or after every deadline in it. To prepare in time, the driver wakes a tick
// before each occupied slot starts (with Precision equal to Tick, when the
// slot starts: its tick then fires whole at its end); with no timer at all
// it does not wake.
// Moving the list also brings its entries into the cache a tick before they
// fire. A coarse slot that starts right after the prepared tick (the next
// 64-tick block, 320k timers in a 500k/s storm) is cascaded during the
// prepared tick, a few thousand timers per driver pass, with the due
// sub-slots cut between the parts, rather than in one piece while the
// block's first timers are due. Should preparing run past the earliest work it has found, the driver
// stops between shards and cuts again first; advance cascades whatever was
// not prepared, and such a tick fires whole at its end, within one tick.
//
// A Handle carries the shard, the slab index and the entry's generation; a
// freed entry's generation is bumped, so a stale handle is a no-op that
// reports false. Cancel frees the entry at once (its value is zeroed so the
// GC can reclaim what it referenced) and puts it on the shard's free list.
//
// # Concurrency
//
// Schedule uses a home shard per P (handed out through sync.Pool's per-P
// cache, no shared counter on the fast path) and tries the others only when
// it is full; Cancel and Reset go to the shard in the handle. Callers on different shards share
// no lock and no written cache line, so throughput grows with goroutines.
// One driver goroutine advances all shards: it finds the next occupied slot
// with bits.TrailingZeros on the bitmaps and sleeps on one timer until then;
// a Schedule or Reset earlier than its planned wake-up wakes it through a
// 1-buffered channel. With nothing due, it does not wake at all.
//
// # Delivery, large piles and a slow consumer
//
// The driver cuts expired timers into chunks of at most BatchMax and frees
// their entries. A chunk holds each timer's value, deadline and cut time in
// nanoseconds since the origin, not as time.Time (which holds a pointer), so
// with a pointer-free T the GC neither scans a chunk nor records write
// barriers while one is filled. The driver hands a chunk to the delivery
// goroutine as soon as it is full and after each shard (before it prepares
// the next boundary), then goes back to sleep; it never waits for the
// consumer. The delivery goroutine takes the chunks one at a time, oldest
// first, converts each into its one reused []Expired buffer and calls
// onExpire with it. Chunks are recycled, so a pile is never gathered into a
// buffer that grows by copying, and a consumer that keeps up costs no
// allocation; beyond 4 spare chunks, those a pile needed are left to the GC.
// Delivery never waits for the driver: the driver holds the outbox lock only
// to queue a chunk, and delivery uncharges the shards with an atomic counter
// instead of their locks. If onExpire is slow, the driver keeps cutting and
// the chunks queue up; a small chunk joins the last queued one while
// delivery has not taken it, so a slow consumer receives fewer, larger
// batches, up to BatchMax. Such timers still count in Len, and so against
// Config.MaxPending, until onExpire is called with them, so memory stays
// bounded by MaxPending. Their Fired time is when they were cut, so lateness
// caused by the consumer is visible to it.
//
// The one-tick bound is for the first chunk. A pile of n timers due in one
// tick (or sub-slot) reaches onExpire in about n/BatchMax calls, one after
// another: the first within the bound above plus the cut of one chunk (tens
// of microseconds), the last once the driver has cut all n and onExpire has
// returned from every call before it. So the last timer of a pile is late
// by the bound plus about n times the cut and delivery cost per timer plus
// the consumer's own time for the n timers before it (docs/BENCHMARKS.md
// gives the measured pile; wheelbench pile reproduces it). A
// pile parked in a coarse slot is also cascaded in one piece when that
// slot's 64-tick block starts, which can delay its first chunk when the
// deadline falls in the block's first ticks.
//
// # Time
//
// Deadlines are stored as nanoseconds since the wheel's creation, measured
// with the Clock's monotonic reading. A deadline without a monotonic reading
// (parsed from JSON, built with time.Date) is converted against the clock's
// current wall and monotonic readings. Config.Clock lets tests drive time.
package wheel
