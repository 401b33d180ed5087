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
}

func newSchedule(cfg wheel.Config, onExpire func([]wheel.Expired[*slot])) (*schedule, error) {
	w, err := wheel.New(cfg, onExpire)
	if err != nil {
		return nil, fmt.Errorf("new wheel: %w", err)
	}
	return &schedule{keys: make(map[string]*slot), w: w}, nil
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
		old.version, old.deadline = version, deadline.UnixNano()
		if s.w.Reset(old.h, at) {
			return nil
		}
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
	return nil
}

// clearLocked removes key when its version is older than version. Caller
// holds s.mu.
func (s *schedule) clearLocked(key string, version int64) {
	if old, ok := s.keys[key]; ok && old.version < version {
		s.w.Cancel(old.h)
		delete(s.keys, key)
	}
}

// stop stops the wheel; the timeouts in memory stay pending in Postgres.
func (s *schedule) stop() { s.w.Stop() }
