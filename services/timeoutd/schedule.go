package timeoutd

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/wheel"
)

// schedule is the in-memory set of pending timeouts: the compact index
// (index.go) and the wheel that expires them. The wheel's value is a slot
// reference (ref: index and generation), so a reference the wheel cut into
// a batch before the slot was replaced or freed is recognised as stale. Its
// mutex guards the index; the wheel has its own locks and never calls back
// under them.
type schedule struct {
	mu sync.Mutex
	x  index
	w  *wheel.Wheel[uint64]
	// perSecond counts the pending timeouts by deadline second (Unix), for
	// the upcoming buckets: one entry per distinct second, so a few
	// thousand for an hour of deadlines, summed once per stats refresh.
	perSecond map[int64]int64
	// reserved counts the slots ingest reserved for sets being upserted
	// (admit), so that concurrent lanes never overfill memory.
	reserved int
}

func newSchedule(cfg wheel.Config, onExpire func([]wheel.Expired[uint64])) (*schedule, error) {
	w, err := wheel.New(cfg, onExpire)
	if err != nil {
		return nil, fmt.Errorf("new wheel: %w", err)
	}
	return &schedule{x: newIndex(), w: w, perSecond: make(map[int64]int64)}, nil
}

// len returns the number of pending timeouts in memory.
func (s *schedule) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.x.len()
}

// has reports whether key is pending in memory. Caller holds s.mu.
func (s *schedule) has(key string) bool {
	_, _, ok := s.x.find(key)
	return ok
}

// setLocked schedules key at version for deadline, to be handed to the
// wheel at at (normally the deadline; a retry is later). A version not
// newer than the one held is ignored. Caller holds s.mu.
func (s *schedule) setLocked(key string, version int64, deadline, at time.Time) error {
	pos, i, ok := s.x.find(key)
	if ok {
		sl := s.x.slots.at(i)
		if sl.version >= version {
			return nil
		}
		s.count(sl.deadline, -1)
		sl.version, sl.deadline = version, deadline.UnixNano()
		s.count(sl.deadline, 1)
		if s.w.Reset(wheel.Handle(sl.h), at) {
			return nil
		}
		// No live timer (held, or cut into a batch in flight): the old
		// reference becomes stale and the slot gets a new timer.
		sl.bumpGen()
		if err := s.arm(i, sl, at); err != nil {
			s.removeLocked(pos, i)
			return err
		}
		return nil
	}
	i, err := s.x.add(key)
	if err != nil {
		return fmt.Errorf("schedule %s: %w", key, err)
	}
	sl := s.x.slots.at(i)
	sl.version, sl.deadline = version, deadline.UnixNano()
	s.count(sl.deadline, 1)
	if err := s.arm(i, sl, at); err != nil {
		s.removeLocked(s.x.pos(i), i)
		return err
	}
	return nil
}

// arm gives slot i a wheel timer expiring at at.
func (s *schedule) arm(i uint32, sl *slot, at time.Time) error {
	h, err := s.w.Schedule(at, ref(i, sl))
	if err != nil {
		return fmt.Errorf("schedule %s: %w", s.x.key(i), err)
	}
	sl.h = uint64(h)
	return nil
}

// holdLocked puts key in the index without a wheel timer (held: h is 0,
// which the wheel treats as stale) and returns its reference for
// releaseLocked. Caller holds s.mu.
func (s *schedule) holdLocked(key string, version int64, deadline time.Time) (uint64, error) {
	if pos, i, ok := s.x.find(key); ok {
		s.w.Cancel(wheel.Handle(s.x.slots.at(i).h))
		s.removeLocked(pos, i)
	}
	i, err := s.x.add(key)
	if err != nil {
		return 0, fmt.Errorf("hold %s: %w", key, err)
	}
	sl := s.x.slots.at(i)
	sl.version, sl.deadline = version, deadline.UnixNano()
	s.count(sl.deadline, 1)
	return ref(i, sl), nil
}

// releaseLocked hands a held slot to the wheel to expire at at; it reports
// false, doing nothing, when the reference is stale (a newer command
// replaced or cleared the timeout). Caller holds s.mu.
func (s *schedule) releaseLocked(r uint64, at time.Time) bool {
	i, sl := s.x.valid(r)
	if sl == nil || sl.h != 0 {
		return false
	}
	if err := s.arm(i, sl, at); err != nil {
		// Still pending in Postgres; the next recovery loads it.
		s.removeLocked(s.x.pos(i), i)
		return false
	}
	return true
}

// inFlightLocked marks slot i, whose timer the wheel handed to onExpire,
// as being fired: it stays in the index (and so keeps its room), without a
// timer, under a new reference that the fire's outcome is applied to
// (done or rearm). A newer command meanwhile replaces the reference (set)
// or removes the slot (clear). Caller holds s.mu.
func (s *schedule) inFlightLocked(i uint32, sl *slot) uint64 {
	sl.bumpGen()
	sl.h = 0
	return ref(i, sl)
}

// inFlight returns the slot of an in-flight reference, or nil when a newer
// command replaced or cleared it. Caller holds s.mu.
func (s *schedule) inFlight(r uint64) (uint32, *slot) {
	i, sl := s.x.valid(r)
	if sl == nil || sl.h != 0 {
		return 0, nil
	}
	return i, sl
}

// done takes the fired slots of refs out of the index.
func (s *schedule) done(refs []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range refs {
		if i, sl := s.inFlight(r); sl != nil {
			s.removeLocked(s.x.pos(i), i)
		}
	}
}

// rearm gives the in-flight slots of refs, whose fire failed, a timer
// expiring at at. It cannot meet a full wheel: every slot counts against
// MaxPending in the index, and an in-flight slot has no timer.
func (s *schedule) rearm(refs []uint64, at time.Time, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range refs {
		if i, sl := s.inFlight(r); sl != nil {
			if err := s.arm(i, sl, at); err != nil {
				// Only after Stop: the row stays pending in Postgres.
				log.Error("re-arm timeout after a failed fire", "key", s.x.key(i), "err", err)
			}
		}
	}
}

// removeLocked takes slot i, at table position pos, out of the index.
// Caller holds s.mu.
func (s *schedule) removeLocked(pos uint64, i uint32) {
	s.count(s.x.slots.at(i).deadline, -1)
	s.x.remove(pos, i)
}

// count adds d to the deadline second of deadlineNs. Caller holds s.mu.
func (s *schedule) count(deadlineNs int64, d int64) {
	sec := deadlineNs / 1e9
	if n := s.perSecond[sec] + d; n != 0 {
		s.perSecond[sec] = n
	} else {
		delete(s.perSecond, sec)
	}
}

// dueBefore returns, for each horizon, the pending timeouts whose deadline
// is before it (rounded to whole seconds). O(distinct deadline seconds).
func (s *schedule) dueBefore(horizons []time.Time) []int64 {
	out := make([]int64, len(horizons))
	secs := make([]int64, len(horizons))
	for i, h := range horizons {
		secs[i] = h.Unix()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for sec, n := range s.perSecond {
		for i, h := range secs {
			if sec < h {
				out[i] += n
			}
		}
	}
	return out
}

// clearLocked removes key when its version is older than version. Caller
// holds s.mu.
func (s *schedule) clearLocked(key string, version int64) {
	if pos, i, ok := s.x.find(key); ok && s.x.slots.at(i).version < version {
		s.w.Cancel(wheel.Handle(s.x.slots.at(i).h))
		s.removeLocked(pos, i)
	}
}

// stop stops the wheel; the timeouts in memory stay pending in Postgres.
func (s *schedule) stop() { s.w.Stop() }
