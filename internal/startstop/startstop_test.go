package startstop_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
)

// ticker is a component whose loop counts its runs and waits for ctx.
type ticker struct {
	startstop.Base
	runs atomic.Int32
}

func (c *ticker) Start(ctx context.Context) {
	c.Base.Start(ctx, func(ctx context.Context) {
		c.runs.Add(1)
		<-ctx.Done()
	})
}

var _ startstop.Service = (*ticker)(nil)

func TestStartStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		do       func(c *ticker, ctx context.Context, cancel context.CancelFunc)
		wantRuns int32
		running  bool
	}{
		{"stop before start is a no-op", func(c *ticker, _ context.Context, _ context.CancelFunc) { c.Stop() }, 0, false},
		{"start twice runs once", func(c *ticker, ctx context.Context, _ context.CancelFunc) { c.Start(ctx); c.Start(ctx) }, 1, true},
		{"stop waits and stop twice is a no-op", func(c *ticker, ctx context.Context, _ context.CancelFunc) {
			c.Start(ctx)
			c.Stop()
			c.Stop()
		}, 1, false},
		{"restart after stop", func(c *ticker, ctx context.Context, _ context.CancelFunc) {
			c.Start(ctx)
			c.Stop()
			c.Start(ctx)
		}, 2, true},
		{"the parent context ends the loop", func(c *ticker, ctx context.Context, cancel context.CancelFunc) {
			c.Start(ctx)
			cancel()
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				panic("loop still running after its context ended")
			}
			c.Stop()
		}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := &ticker{}
			tt.do(c, ctx, cancel)
			// A loop that started has counted its run once it is stopped.
			running := c.Done() != nil
			c.Stop()
			if got := c.runs.Load(); got != tt.wantRuns || running != tt.running {
				t.Fatalf("runs = %d, running = %v; want %d, %v", got, running, tt.wantRuns, tt.running)
			}
		})
	}
}
