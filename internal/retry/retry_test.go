package retry_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
)

func TestStartupRetriesUntilSuccess(t *testing.T) {
	t.Parallel()
	calls := 0
	err := retry.Startup(context.Background(), slog.New(slog.DiscardHandler), "flaky", func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Startup = %v after %d calls, want nil after 3", err, calls)
	}
}

func TestStartupStopsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := retry.Startup(ctx, slog.New(slog.DiscardHandler), "down", func(context.Context) error { return errors.New("refused") })
	if err == nil || time.Since(began) > 2*time.Second {
		t.Fatalf("Startup = %v after %v, want an error soon after the context ended", err, time.Since(began))
	}
}

func TestBackoffGrowsToItsBound(t *testing.T) {
	t.Parallel()
	b := retry.Backoff(time.Second)
	var last time.Duration
	for range 20 {
		last = b.NextBackOff()
		if last < 50*time.Millisecond || last > 1500*time.Millisecond {
			t.Fatalf("wait %v outside [50ms, 1.5s]", last)
		}
	}
	if last < 500*time.Millisecond {
		t.Fatalf("after 20 failures the wait is %v, want it near the 1s bound", last)
	}
	b.Reset()
	if w := b.NextBackOff(); w > 150*time.Millisecond {
		t.Fatalf("after Reset the wait is %v, want about 100ms", w)
	}
}
