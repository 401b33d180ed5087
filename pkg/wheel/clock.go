package wheel

import "time"

// Clock is the wheel's source of time. The wheel measures every deadline
// against the times Now returns, and sleeps with the timers NewTimer returns.
// An implementation must never fire a Timer before Now has advanced by the
// Timer's duration.
type Clock interface {
	// Now returns the current time. The real clock's readings carry Go's
	// monotonic clock, which is what the wheel measures with.
	Now() time.Time
	// NewTimer returns a started Timer that sends on its channel once d has
	// elapsed.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock, used by the wheel's driver goroutine
// to sleep until the next occupied slot.
type Timer interface {
	// C returns the channel the Timer sends on when it fires.
	C() <-chan time.Time
	// Reset restarts the Timer to fire after d; no value from an earlier
	// schedule is received after Reset returns.
	Reset(d time.Duration)
	// Stop prevents the Timer from firing; no value is received after Stop
	// returns.
	Stop()
}

// realClock is the default Clock: time.Now and time.Timer, whose Reset and
// Stop discard stale values since Go 1.23.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// OffsetClock returns the real clock moved by d: its readings keep Go's
// monotonic clock, moved as well, as on a host whose clock is set d ahead
// (fault injection: a wheel on it fires d early by the true clock).
func OffsetClock(d time.Duration) Clock { return offsetClock(d) }

type offsetClock time.Duration

func (o offsetClock) Now() time.Time { return time.Now().Add(time.Duration(o)) }

func (offsetClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
