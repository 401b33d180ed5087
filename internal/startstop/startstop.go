// Package startstop is the base of the services' long-running components
// (ingest, recovery, the janitor, the stats sampler, the outbox relay): each
// embeds a [Base] and gets Start and Stop with one contract, after River's
// maintenance services.
//
// A component's Start calls [Base.Start] with its loop; the loop runs in a
// goroutine with a context that Stop cancels, and Stop returns once the
// loop has returned. Start on a started component and Stop on a stopped (or
// never started) one do nothing, so a supervisor may call them freely.
package startstop

import (
	"context"
	"sync"
)

// Service is a component that runs in the background between Start and
// Stop.
type Service interface {
	// Start starts the component's loop, which runs until ctx ends or Stop
	// is called; it does not block.
	Start(ctx context.Context)
	// Stop ends the loop and waits for it to return.
	Stop()
}

// Base implements Start and Stop for a component's loop; its zero value is
// ready to use.
type Base struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in a goroutine with a context derived from ctx that Stop
// cancels. It does nothing when the loop is already running.
func (b *Base) Start(ctx context.Context, run func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		return
	}
	ctx, b.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	b.done = done
	go func() {
		defer close(done)
		run(ctx)
	}()
}

// Stop cancels the loop's context and waits for it to return; afterwards
// Start may run it again.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel, b.done = nil, nil
	b.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
}

// Done returns a channel closed when the running loop returns (on its own,
// when ctx ends, or by Stop); nil when it is not running.
func (b *Base) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}
