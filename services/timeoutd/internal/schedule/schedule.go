// Package schedule is timeoutd's in-memory set of pending timeouts: a
// compact key index (index.go) and the pkg/wheel wheel that expires them,
// behind one type, [Schedule]. The service's loops call its methods and
// nothing else: ingest admits and applies committed changes, recovery loads
// rows and releases the held ones, the fire path receives due timeouts and
// reports their outcome.
//
// A timeout handed out for firing stays in memory, keeping its room, until
// the fire's outcome comes back (Done or Rearm), so a failed fire can always
// be re-armed. Every handed-out timeout carries a [Ref]; a newer command
// for the key makes the Ref stale, and a stale Ref is ignored everywhere.
// The fire path claims the Refs it publishes ([Schedule.Claim]); Apply
// returns only once no claim of an older version of its keys is left, so
// that no event of a version is published after the command that replaced
// it is acknowledged.
package schedule

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/wheel"
)

// Ref identifies one pending timeout at one generation: it goes stale when a
// newer command replaces or clears the timeout, or when it fired.
type Ref uint64

// Entry is a pending timeout: its key, version and deadline, and whether
// its stored row holds nothing else its expiry event needs (timeoutd's
// Timeout.Plain), so that it fires without a read of the row.
type Entry struct {
	Key      string
	Version  int64
	Deadline time.Time
	Plain    bool
}

// Due is a timeout whose deadline passed by the clock Schedule.Now, handed to the
// Config.OnDue callback, in flight until Done or Rearm is called with Ref.
type Due struct {
	Entry
	Ref Ref
}

// Change is a committed change of a key: a set of Entry, or a clear when
// Clear is true (then only Key and Version count).
type Change struct {
	Entry
	Clear bool
}

// ErrFull is returned when a timeout of a key not held would take the
// schedule beyond Config.MaxPending.
var ErrFull = errors.New("schedule: full")

// Config configures a Schedule.
type Config struct {
	// Tick is the wheel's resolution; default wheel.TickDefault.
	Tick time.Duration
	// MaxPending bounds the timeouts held, in flight ones included;
	// required.
	MaxPending int
	// Partitions is the number of key partitions (see Partition);
	// default 1.
	Partitions int
	// Partition returns the partition of a key, in [0, Partitions);
	// required when Partitions is above 1.
	Partition func(key string) int
	// OnDue receives the timeouts whose deadline passed, by the clock
	// Schedule.Now, in batches; it is never called concurrently with itself, and the
	// wheel gathers the next batch while it runs. Each timeout is in flight
	// until Done or Rearm. Required.
	OnDue func([]Due)
	// Now is the schedule's clock, which the wheel's Clock must follow;
	// deadlines are judged by Now less the hold (see Hold, and
	// Schedule.Now): a timer the wheel expires before that reaches its
	// deadline is re-armed, never handed out early. Default time.Now.
	Now func() time.Time
	// Logger receives the timeouts that could not be re-armed; default
	// slog.Default().
	Logger *slog.Logger
	// Clock is the wheel's clock; nil means the real monotonic clock.
	Clock wheel.Clock
}

// Schedule holds the pending timeouts in memory and hands them to
// Config.OnDue when due. Its mutex guards the index; the wheel has its own
// locks and never calls back under them. All methods are safe for
// concurrent use. Costs: Apply, Load and Release are O(1) per timeout
// (amortised hash-table and wheel operations); CountBefore is
// O(distinct deadline hours + bounds); Drop is O(timeouts held).
type Schedule struct {
	cfg Config
	w   *wheel.Wheel[Ref]

	mu sync.Mutex
	x  index
	// deadlines counts the timeouts held by deadline second, minute and
	// hour, for CountBefore (census.go).
	deadlines deadlineCounts
	// reserved counts the slots reserved by Admit for sets being
	// committed, so that concurrent ingest lanes never overfill memory,
	// and the slots kept for sets of keys that left the schedule after
	// they were admitted (see pinned).
	reserved int
	// pinned counts, by key, the admitted sets of a key that was held at
	// Admit and needed no room then; kept counts the slots such a key
	// left to its set when a fire's Done or a Drop took it out before the
	// set was applied (reserved for it until Unreserve).
	pinned, kept map[string]int
	// claims counts, by key, the claims (Claim) of timeouts whose event is
	// being published; released signals each Unclaim, under mu.
	claims   map[string]int
	released *sync.Cond
	// hold is how far, in nanoseconds, Config.Now may run ahead of the
	// clock the deadlines are kept by (see Hold).
	hold atomic.Int64
}

// Hold makes the schedule judge deadlines by Config.Now less d from now
// on: d bounds how far Config.Now runs ahead of the clock the deadlines
// are kept by, and may be negative (it runs behind). A timer expiring
// before is re-armed for the rest. Safe to call at any time; 0 (the
// default) holds nothing.
func (s *Schedule) Hold(d time.Duration) { s.hold.Store(int64(d)) }

// Now returns the clock the deadlines are judged by: Config.Now less the
// hold. Every time the methods take (Load, Release, Rearm) is by it.
func (s *Schedule) Now() time.Time { return s.cfg.Now().Add(-time.Duration(s.hold.Load())) }

// New returns a Schedule; its wheel's goroutines run until Stop.
func New(cfg Config) (*Schedule, error) {
	cfg.Partitions = cmp.Or(cfg.Partitions, 1)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.OnDue == nil:
		return nil, errors.New("schedule: OnDue is nil")
	case cfg.MaxPending < 1:
		return nil, fmt.Errorf("schedule: MaxPending must be positive, got %d", cfg.MaxPending)
	case cfg.Partitions > 1 && cfg.Partition == nil:
		return nil, errors.New("schedule: Partition is nil")
	}
	s := &Schedule{cfg: cfg, x: newIndex(), deadlines: newDeadlineCounts(), claims: make(map[string]int), pinned: make(map[string]int), kept: make(map[string]int)}
	s.released = sync.NewCond(&s.mu)
	// The index bounds the timeouts held; the wheel is left unbounded. It
	// holds one live timer per armed timeout plus the timers it cut and has
	// not delivered yet (delivery waits for the fire path, by design): were
	// those counted against MaxPending, a set the index had admitted, or a
	// failed fire's re-arm, could find the wheel full and be lost.
	w, err := wheel.New(wheel.Config{Tick: cfg.Tick, Clock: cfg.Clock}, s.expire)
	if err != nil {
		return nil, fmt.Errorf("schedule: new wheel: %w", err)
	}
	s.w = w
	return s, nil
}

// Len returns the number of timeouts held: armed, held and in flight.
func (s *Schedule) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.x.len()
}

// Version returns the version of key's timeout held, armed, held or in
// flight, and whether one is.
func (s *Schedule) Version(key string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, i, ok := s.x.find(key); ok {
		return s.x.slots.at(i).version, true
	}
	return 0, false
}

// Admission is the room Admit granted a batch of commands, given back by
// Unreserve once they are committed and applied, or given up.
type Admission struct {
	reserved int      // slots reserved for sets of keys not held
	pinned   []string // keys held at Admit that sets were admitted for
}

// Admit grants room to the sets of cmds and returns the commands to apply,
// the keys of the sets that found none (to be retried later) and the
// Admission, to be given back with Unreserve once the admitted commands
// are committed and applied (however many attempts that takes). A set of
// a key not held reserves a slot. A set of a key held (armed, in flight,
// or held for Release) needs none and always passes, as clears do, so a
// full schedule never stops the commands that free it or move what it
// holds: its key is pinned instead, and should a fire's Done or a Drop take
// the key out before the set is applied, its slot stays reserved for the
// set until Unreserve.
func (s *Schedule) Admit(cmds []events.Command) (admitted []events.Command, deferred map[string]bool, a Admission) {
	s.mu.Lock()
	defer s.mu.Unlock()
	room := s.cfg.MaxPending - s.x.len() - s.reserved
	admitted = cmds[:0]
	for _, c := range cmds {
		if c.Kind == events.KindSet {
			if _, _, held := s.x.find(c.Key); held {
				s.pinned[c.Key]++
				a.pinned = append(a.pinned, c.Key)
			} else {
				if a.reserved >= room { // room is negative while applied sets still hold their reservations
					if deferred == nil {
						deferred = make(map[string]bool)
					}
					deferred[c.Key] = true
					continue
				}
				a.reserved++
			}
		}
		admitted = append(admitted, c)
	}
	s.reserved += a.reserved
	return admitted, deferred, a
}

// Unreserve gives back the room of a: its reservations, its pins and the
// slots kept for its pinned keys.
func (s *Schedule) Unreserve(a Admission) {
	if a.reserved == 0 && len(a.pinned) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved -= a.reserved
	for _, k := range a.pinned {
		if s.pinned[k]--; s.pinned[k] <= 0 {
			delete(s.pinned, k)
		}
		if s.kept[k] > 0 {
			if s.kept[k]--; s.kept[k] == 0 {
				delete(s.kept, k)
			}
			s.reserved--
		}
	}
}

// leaveLocked takes key, at slot i and position pos, out of the schedule
// outside Apply (a fire's Done, a Drop): when admitted sets of it are
// pinned, their slot stays reserved for them.
func (s *Schedule) leaveLocked(pos uint64, i uint32) {
	if len(s.pinned) > 0 {
		if k := s.x.key(i); s.pinned[k] > s.kept[k] {
			s.kept[k]++
			s.reserved++
		}
	}
	s.removeLocked(pos, i)
}

// Apply brings the schedule in line with committed changes: a set arms
// (or moves) the key's timer at its deadline, a clear removes the key; a
// change whose version is not newer than the one held is ignored. It
// returns how many sets and clears it saw, once no event of its keys is
// being published (Claim): the caller acknowledges the commands after it,
// so no event of a replaced version is published after the command that
// replaced it is acknowledged. A set Admit did not grant room to may find
// the schedule full: it is logged and skipped, pending in Postgres for the
// next load.
func (s *Schedule) Apply(changes []Change) (set, cleared int) {
	return s.ApplyOwned(changes, nil)
}

// ApplyOwned is Apply for ingest: a change whose partition owned reports
// no longer owned at the epoch it was committed under is skipped, as
// checked under the lock Drop takes (see LoadOwned): its partition's
// takeover loads what is current. owned nil applies every change.
func (s *Schedule) ApplyOwned(changes []Change, owned func(partition int) bool) (set, cleared int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range changes {
		if owned != nil && !owned(s.partition(c.Key)) {
			continue
		}
		if c.Clear {
			s.clearLocked(c.Key, c.Version)
			cleared++
			continue
		}
		if err := s.setLocked(c.Entry, c.Deadline, s.cfg.MaxPending); err != nil {
			s.cfg.Logger.Error("timeout committed but not scheduled in memory", "key", c.Key, "err", err, "held", s.x.len(), "reserved", s.reserved)
			continue
		}
		set++
	}
	for len(s.claims) > 0 && slices.ContainsFunc(changes, func(c Change) bool { return s.claims[c.Key] > 0 }) {
		s.released.Wait()
	}
	return set, cleared
}

// Claim marks the in-flight timeouts of refs as being published and
// reports, for each, whether it is still current (claimed): a stale Ref (a
// newer command replaced or cleared the timeout since it was handed out)
// is not claimed, and its event must not be published. Every claimed Ref
// is given back with Unclaim once its publish returned; meanwhile Apply of
// its key waits.
func (s *Schedule) Claim(refs []Ref, keys []string) (claimed []bool) {
	claimed = make([]bool, len(refs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, r := range refs {
		if _, sl := s.inFlight(r); sl != nil {
			claimed[n] = true
			s.claims[keys[n]]++
		}
	}
	return claimed
}

// Unclaim gives back the claims of keys (those Claim reported claimed).
func (s *Schedule) Unclaim(keys []string) {
	if len(keys) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if s.claims[k]--; s.claims[k] <= 0 {
			delete(s.claims, k)
		}
	}
	s.released.Broadcast()
}

// Load puts pending rows read from the store into the schedule: those due by
// now are held (in memory, without a timer) and their Refs returned for
// Release; the others are armed. A row replaces what the schedule holds for
// its key at an older version only: a command committed while the rows were
// read stays. It fails when the schedule is full, the room Admit reserved
// for sets being committed counted as taken.
func (s *Schedule) Load(rows []Entry, now time.Time) (held []Ref, err error) {
	return s.LoadOwned(rows, now, nil)
}

// LoadOwned is Load for a takeover: a row whose partition owned reports
// no longer owned (lost since the takeover began, or taken again by a
// newer one) is skipped, as checked under the lock Drop takes. A
// membership that marks a partition lost before it drops it thus never
// finds rows of a former takeover landing after the drop: read before
// another owner changed them, they would outlive it (a cleared key fired
// at its old version). owned nil keeps every row.
func (s *Schedule) LoadOwned(rows []Entry, now time.Time, owned func(partition int) bool) (held []Ref, err error) {
	nowNs := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.cfg.MaxPending - s.reserved // the room Admit granted stays theirs
	full := func(err error) error {
		return fmt.Errorf("%w (%d held, %d reserved for sets being committed)", err, s.x.len(), s.reserved)
	}
	for _, r := range rows {
		if owned != nil && !owned(s.partition(r.Key)) {
			continue
		}
		if r.Deadline.UnixNano() > nowNs {
			if err := s.setLocked(r, r.Deadline, limit); err != nil {
				return held, full(err)
			}
			continue
		}
		h, ok, err := s.holdLocked(r, limit)
		if err != nil {
			return held, full(err)
		}
		if ok {
			held = append(held, h)
		}
	}
	return held, nil
}

// Release arms the held timeouts of refs spread at rate per second from
// now, oldest deadline first (a load reads them in key order), and returns
// how many it armed: a Ref made stale by a newer command meanwhile is
// skipped. It costs O(n log n) for n refs.
func (s *Schedule) Release(refs []Ref, now time.Time, rate int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	type heldSlot struct {
		i  uint32
		sl *slot
	}
	live := make([]heldSlot, 0, len(refs))
	for _, r := range refs {
		if i, sl := s.x.valid(uint64(r)); sl != nil && sl.h == 0 {
			live = append(live, heldSlot{i, sl})
		}
	}
	slices.SortStableFunc(live, func(a, b heldSlot) int { return cmp.Compare(a.sl.deadline, b.sl.deadline) })
	released := 0
	for _, h := range live {
		at := now.Add(time.Duration(released) * time.Second / time.Duration(rate))
		if err := s.arm(h.i, h.sl, at); err != nil {
			// Only after Stop: still pending in Postgres; the next load takes it.
			s.removeLocked(s.x.pos(h.i), h.i)
			continue
		}
		released++
	}
	return released
}

// Done takes the fired timeouts of refs out of the schedule; stale Refs are
// ignored (a newer command already replaced or cleared the timeout).
func (s *Schedule) Done(refs []Ref) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range refs {
		if i, sl := s.inFlight(r); sl != nil {
			s.leaveLocked(s.x.pos(i), i)
		}
	}
}

// Rearm gives the in-flight timeouts of refs, whose fire failed, a timer
// expiring at at; stale Refs are ignored. It cannot meet a full wheel: an
// in-flight timeout kept its room.
func (s *Schedule) Rearm(refs []Ref, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range refs {
		if i, sl := s.inFlight(r); sl != nil {
			if err := s.arm(i, sl, at); err != nil {
				// Only after Stop: the row stays pending in Postgres.
				s.cfg.Logger.Error("re-arm timeout after a failed fire", "key", s.x.key(i), "err", err)
			}
		}
	}
}

// Drop takes every timeout of the partitions for which drop reports true
// out of the schedule, armed, held and in flight alike (an in-flight fire's
// Done or Rearm then finds a stale Ref), and returns how many it dropped.
// It is for a partition this process no longer owns: its rows stay in
// the store for the new owner.
func (s *Schedule) Drop(drop func(partition int) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := range s.x.slots.used {
		sl := s.x.slots.at(i)
		if sl.keyLen() == 0 {
			continue // free
		}
		if !drop(s.partition(s.x.key(i))) {
			continue
		}
		if sl.h != 0 {
			s.w.Cancel(wheel.Handle(sl.h))
		}
		s.leaveLocked(s.x.pos(i), i)
		n++
	}
	return n
}

// partition returns key's partition.
func (s *Schedule) partition(key string) int {
	if s.cfg.Partitions == 1 {
		return 0
	}
	return s.cfg.Partition(key)
}

// Stop stops the wheel: no timeout is handed out after it returns (the
// timeouts held stay pending in the store).
func (s *Schedule) Stop() { s.w.Stop() }

// expire is the wheel's callback: it checks every expired timer against the
// clock Now, re-arms the ones not yet due, marks the due ones in flight and
// hands them to OnDue.
func (s *Schedule) expire(batch []wheel.Expired[Ref]) {
	nowNs := s.Now().UnixNano()
	due := make([]Due, 0, len(batch))
	s.mu.Lock()
	for _, e := range batch {
		i, sl := s.x.valid(uint64(e.Value))
		if sl == nil {
			continue // replaced or cleared after the wheel cut it
		}
		if sl.deadline > nowNs {
			if err := s.arm(i, sl, time.Unix(0, sl.deadline)); err != nil {
				s.cfg.Logger.Error("reschedule early timer", "key", s.x.key(i), "err", err)
				s.removeLocked(s.x.pos(i), i)
			}
			continue
		}
		// In flight: the slot stays (keeping its room) without a timer,
		// under a new Ref that the fire's outcome is applied to.
		sl.bumpGen()
		sl.h = 0
		due = append(due, Due{Entry: Entry{Key: s.x.key(i), Version: sl.version, Deadline: time.Unix(0, sl.deadline).UTC(), Plain: sl.plain()},
			Ref: Ref(ref(i, sl))})
	}
	s.mu.Unlock()
	if len(due) > 0 {
		s.cfg.OnDue(due)
	}
}

// setLocked schedules e, to be handed to the wheel at at (the deadline). A
// positive hold is applied when its timer expires (expire re-arms it by the
// hold of that moment), not now: a hold measured during a burst of load
// (the heartbeat's statement slow) would otherwise delay every timer armed
// meanwhile by it; a negative one moves the timer earlier now. A version not newer than the one held is ignored. A key not
// held is added while fewer than limit are.
func (s *Schedule) setLocked(e Entry, at time.Time, limit int) error {
	at = at.Add(time.Duration(min(s.hold.Load(), 0)))
	pos, i, ok := s.x.find(e.Key)
	if ok {
		sl := s.x.slots.at(i)
		if sl.version >= e.Version {
			return nil
		}
		s.count(sl.deadline, -1)
		sl.version, sl.deadline = e.Version, e.Deadline.UnixNano()
		sl.setPlain(e.Plain)
		s.count(sl.deadline, 1)
		if s.w.Reset(wheel.Handle(sl.h), at) {
			return nil
		}
		// No live timer (held, or in flight): the old Ref becomes stale and
		// the slot gets a new timer.
		sl.bumpGen()
		if err := s.armWheel(i, sl, at); err != nil {
			s.removeLocked(pos, i)
			return err
		}
		return nil
	}
	i, err := s.addLocked(e.Key, limit)
	if err != nil {
		return fmt.Errorf("schedule %s: %w", e.Key, err)
	}
	sl := s.x.slots.at(i)
	sl.version, sl.deadline = e.Version, e.Deadline.UnixNano()
	sl.setPlain(e.Plain)
	s.count(sl.deadline, 1)
	if err := s.armWheel(i, sl, at); err != nil {
		s.removeLocked(s.x.pos(i), i)
		return err
	}
	return nil
}

// addLocked adds key, not held, to the index while fewer than limit are
// held.
func (s *Schedule) addLocked(key string, limit int) (uint32, error) {
	if s.x.len() >= limit {
		return 0, ErrFull
	}
	return s.x.add(key)
}

// arm gives slot i a wheel timer expiring when Now reaches at.
func (s *Schedule) arm(i uint32, sl *slot, at time.Time) error {
	return s.armWheel(i, sl, at.Add(time.Duration(s.hold.Load())))
}

// armWheel gives slot i a wheel timer expiring when Config.Now reaches at.
func (s *Schedule) armWheel(i uint32, sl *slot, at time.Time) error {
	h, err := s.w.Schedule(at, Ref(ref(i, sl)))
	if err != nil {
		return fmt.Errorf("schedule %s: %w", s.x.key(i), err)
	}
	sl.h = uint64(h)
	return nil
}

// holdLocked puts e in the index without a wheel timer (held: h is 0, which
// the wheel treats as stale), replacing what the key held at an older
// version, and returns its Ref for Release; ok is false when the key is
// held at e's version or a newer one (a commit that landed while a takeover
// loaded), which stays as it is.
func (s *Schedule) holdLocked(e Entry, limit int) (_ Ref, ok bool, _ error) {
	if pos, i, found := s.x.find(e.Key); found {
		sl := s.x.slots.at(i)
		if sl.version >= e.Version {
			return 0, false, nil
		}
		s.w.Cancel(wheel.Handle(sl.h))
		s.removeLocked(pos, i)
	}
	i, err := s.addLocked(e.Key, limit)
	if err != nil {
		return 0, false, fmt.Errorf("hold %s: %w", e.Key, err)
	}
	sl := s.x.slots.at(i)
	sl.version, sl.deadline = e.Version, e.Deadline.UnixNano()
	sl.setPlain(e.Plain)
	s.count(sl.deadline, 1)
	return Ref(ref(i, sl)), true, nil
}

// inFlight returns the slot of an in-flight Ref, or nil when a newer command
// replaced or cleared it.
func (s *Schedule) inFlight(r Ref) (uint32, *slot) {
	i, sl := s.x.valid(uint64(r))
	if sl == nil || sl.h != 0 {
		return 0, nil
	}
	return i, sl
}

// clearLocked removes key when its version is older than version.
func (s *Schedule) clearLocked(key string, version int64) {
	if pos, i, ok := s.x.find(key); ok && s.x.slots.at(i).version < version {
		s.w.Cancel(wheel.Handle(s.x.slots.at(i).h))
		s.removeLocked(pos, i)
	}
}

// removeLocked takes slot i, at table position pos, out of the index.
func (s *Schedule) removeLocked(pos uint64, i uint32) {
	s.count(s.x.slots.at(i).deadline, -1)
	s.x.remove(pos, i)
}

// count adds d to the count of deadlineNs's second.
func (s *Schedule) count(deadlineNs int64, d int64) { s.deadlines.add(deadlineNs/1e9, d) }
