package timeoutd

import (
	"fmt"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/wheel"
)

// slot is one pending timeout in memory: about 40 bytes plus the key, the
// map entry and the wheel's 32-byte entry. The wheel holds a *slot; a slot
// that is no longer the index's value for its key is stale and ignored.
type slot struct {
	key      string
	version  int64
	deadline int64 // Unix nanoseconds, wall clock
	h        wheel.Handle
}

// schedule is the in-memory set of pending timeouts: a key → slot index and
// the wheel that expires them. Its mutex guards the index and the slots'
// fields; the wheel has its own locks and never calls back under them.
type schedule struct {
	mu   sync.Mutex
	keys map[string]*slot
	w    *wheel.Wheel[*slot]
	// perSecond counts the pending timeouts by deadline second (Unix), for
	// the upcoming buckets: one entry per distinct second, so a few
	// thousand for an hour of deadlines, summed once per stats refresh.
	perSecond map[int64]int64
}

func newSchedule(cfg wheel.Config, onExpire func([]wheel.Expired[*slot])) (*schedule, error) {
	w, err := wheel.New(cfg, onExpire)
	if err != nil {
		return nil, fmt.Errorf("new wheel: %w", err)
	}
	return &schedule{keys: make(map[string]*slot), w: w, perSecond: make(map[int64]int64)}, nil
}

// len returns the number of pending timeouts in memory.
func (s *schedule) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// set schedules key at version for deadline, to be handed to the wheel at
// at (normally the deadline; recovery spreads overdue ones). A version not
// newer than the one held is ignored. Caller holds s.mu.
func (s *schedule) setLocked(key string, version int64, deadline, at time.Time) error {
	if old, ok := s.keys[key]; ok {
		if old.version >= version {
			return nil
		}
		s.count(old.deadline, -1)
		old.version, old.deadline = version, deadline.UnixNano()
		s.count(old.deadline, 1)
		if s.w.Reset(old.h, at) {
			return nil
		}
		s.count(old.deadline, -1)
		// The old timer was cut into a batch in flight: that batch sees a
		// stale slot and skips it; the key gets a new slot.
	}
	sl := &slot{key: key, version: version, deadline: deadline.UnixNano()}
	h, err := s.w.Schedule(at, sl)
	if err != nil {
		delete(s.keys, key)
		return fmt.Errorf("schedule %s: %w", key, err)
	}
	sl.h = h
	s.keys[key] = sl
	s.count(sl.deadline, 1)
	return nil
}

// holdLocked puts key in the index without a wheel timer (its handle is
// the zero Handle, which the wheel treats as stale) and returns its slot for
// releaseLocked. Caller holds s.mu.
func (s *schedule) holdLocked(key string, version int64, deadline time.Time) *slot {
	if old, ok := s.keys[key]; ok {
		s.w.Cancel(old.h)
		s.removeLocked(old)
	}
	sl := &slot{key: key, version: version, deadline: deadline.UnixNano()}
	s.keys[key] = sl
	s.count(sl.deadline, 1)
	return sl
}

// releaseLocked hands a held slot to the wheel to expire at at; it reports
// false, doing nothing, when the slot is no longer the key's (a newer
// command replaced or cleared it). Caller holds s.mu.
func (s *schedule) releaseLocked(sl *slot, at time.Time) bool {
	if s.keys[sl.key] != sl {
		return false
	}
	h, err := s.w.Schedule(at, sl)
	if err != nil {
		// Still pending in Postgres; the next recovery loads it.
		s.removeLocked(sl)
		return false
	}
	sl.h = h
	return true
}

// removeLocked takes sl out of the index. Caller holds s.mu.
func (s *schedule) removeLocked(sl *slot) {
	delete(s.keys, sl.key)
	s.count(sl.deadline, -1)
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
	if old, ok := s.keys[key]; ok && old.version < version {
		s.w.Cancel(old.h)
		s.removeLocked(old)
	}
}

// stop stops the wheel; the timeouts in memory stay pending in Postgres.
func (s *schedule) stop() { s.w.Stop() }
