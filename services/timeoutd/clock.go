package timeoutd

import (
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/wheel"
)

// monoClock is the clock the schedule and its wheel run on: one reading of
// the host's wall clock (Config.Now) taken at start, moved on by the
// process's monotonic clock, so that a later step of the wall clock (an NTP
// step, a resumed VM), forward or back, moves nothing. The heartbeats
// measure it against Postgres's clock, and the schedule holds every
// deadline by the least upper bound measured of how far it runs ahead
// (lease.Membership's measureClock, Schedule.Hold): deadlines are judged by an
// estimate of Postgres's clock that never runs ahead of it. It implements
// wheel.Clock.
type monoClock struct {
	base  time.Time // the wall reading at start, with the monotonic reading of its moment
	start time.Time // time.Now() at the same moment
}

// newMonoClock returns the clock, started from wall's reading now.
func newMonoClock(wall func() time.Time) *monoClock {
	start := time.Now()
	return &monoClock{base: start.Add(wall().Round(0).Sub(start.Round(0))), start: start}
}

// Now returns the wall reading at start moved on by the monotonic clock.
func (c *monoClock) Now() time.Time { return c.base.Add(time.Since(c.start)) }

// NewTimer implements wheel.Clock with the runtime's timers.
func (c *monoClock) NewTimer(d time.Duration) wheel.Timer { return wheel.OffsetClock(0).NewTimer(d) }
