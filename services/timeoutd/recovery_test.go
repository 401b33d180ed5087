package timeoutd

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// lateBacklogSource holds one clear in its backlog at start and delivers it
// only once Consumed has been asked three times (a slow catch-up); Consumed
// reports the backlog consumed once the clear is acked.
type lateBacklogSource struct {
	nopSource
	clear *fakeMsg
	acked atomic.Bool
	calls atomic.Int32
	ready chan struct{} // closed at the third Consumed call
	sent  bool
}

type ackSpy struct {
	*fakeMsg
	acked *atomic.Bool
}

func (m ackSpy) Ack() error { m.acked.Store(true); return nil }

func (b *lateBacklogSource) Next(ctx context.Context) ([]Message, error) {
	if !b.sent {
		select {
		case <-b.ready:
			b.sent = true
			return []Message{ackSpy{b.clear, &b.acked}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (b *lateBacklogSource) Mark(context.Context, int) (uint64, error) { return 1, nil }

func (b *lateBacklogSource) Consumed(context.Context, int, uint64) (bool, error) {
	if b.calls.Add(1) == 3 {
		close(b.ready)
	}
	return b.acked.Load(), nil
}

// TestRecoveryHoldsFiresDueDuringCatchup is issue 14 item 2.4: recovery
// used to hold only the rows overdue when loaded; a row due a moment later
// was armed at once and fired before the clear queued for it during the
// outage was consumed. Now no timeout fires before the backlog present at
// start is consumed.
func TestRecoveryHoldsFiresDueDuringCatchup(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(200 * time.Millisecond).UTC() // not yet due when loaded
	st := &fakeStore{rows: map[string]Timeout{}, pending: []Timeout{{Key: "k", Version: 1, Deadline: deadline}}}
	src := &lateBacklogSource{clear: cmdMsg(t, 1, clearCmd("k", 2)), ready: make(chan struct{})}
	s, err := New(Config{RecoveryCatchupMax: time.Minute},
		Deps{Store: st, Source: src, DeadLetters: &fakeDLQ{}, Publisher: st, Leases: soleLeases{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-s.Ready()
	// k leaves memory either by the clear or by firing.
	for limit := time.Now().Add(5 * time.Second); s.Pending() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("k still pending after 5s")
		}
	}
	s.fire.mu.Lock() // an onDue call in progress has started its fires
	//lint:ignore SA2001 a barrier: taking the lock is the point.
	s.fire.mu.Unlock()
	s.fire.inFlight.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.fired) != 0 {
		t.Fatalf("k fired before the clear queued at start was consumed: %+v", st.fired)
	}
	if !src.acked.Load() {
		t.Fatal("the queued clear was not applied")
	}
}
