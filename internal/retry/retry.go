// Package retry is the one way both services retry a failed call:
// exponential backoff with jitter (github.com/cenkalti/backoff/v5).
package retry

import (
	"context"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// StartupTimeout bounds how long a service waits for a dependency at
// start: Postgres, NATS or the streams may come up after it.
const StartupTimeout = 30 * time.Second

// Startup calls op until it succeeds, StartupTimeout passes (op's last
// error is returned) or ctx ends, waiting 100 ms doubling up to 2 s between
// calls, each ±50% (jitter: instances starting together spread out).
// Each failure is logged at info, naming what.
func Startup(ctx context.Context, log *slog.Logger, what string, op func(context.Context) error) error {
	_, err := backoff.Retry(ctx, func() (struct{}, error) { return struct{}{}, op(ctx) },
		backoff.WithBackOff(Backoff(2*time.Second)), backoff.WithMaxElapsedTime(StartupTimeout),
		backoff.WithNotify(func(err error, next time.Duration) {
			log.InfoContext(ctx, "waiting for a dependency", "what", what, "err", err, "retry_in", next.Round(time.Millisecond))
		}))
	return err
}

// Backoff returns the backoff of a loop's failures: 100 ms doubling up to
// maxWait, each ±50%, never giving up; call Reset after a success.
func Backoff(maxWait time.Duration) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{InitialInterval: min(100*time.Millisecond, maxWait),
		RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: maxWait}
	b.Reset()
	return b
}

// Sleep waits d, or until ctx ends, and reports whether ctx is still
// alive (false: it ended first).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
