package timeoutd

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
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

// gatedLoads is a fakeStore whose LoadPending waits for gate.
type gatedLoads struct {
	*fakeStore
	gate chan struct{}
}

func (g gatedLoads) LoadPending(ctx context.Context, p int, after string, limit int) ([]Timeout, error) {
	<-g.gate
	return g.fakeStore.LoadPending(ctx, p, after, limit)
}

// TestNothingOfAFormerEpochLandsAfterItsDrop: what was read or committed
// for a partition at one epoch never reaches the schedule after the
// partition was lost (dropped), even once it is owned again at a newer
// epoch: a takeover's page read before the loss, a change committed before
// it. Another owner may have cleared the key meanwhile, and the newer
// takeover, which never removes keys, would fire it at its old version
// (found by the simulation's hour-long run, seed 202354: a load slowed by
// the database outlived a handover and a retake).
func TestNothingOfAFormerEpochLandsAfterItsDrop(t *testing.T) {
	for _, tt := range []struct {
		name  string
		stale func(s *Service, st *fakeStore, l lease.Lease, lostAndRetaken func()) // delivers the former epoch's row after lostAndRetaken
	}{
		{"a takeover's page", func(s *Service, st *fakeStore, l lease.Lease, lostAndRetaken func()) {
			g := gatedLoads{fakeStore: st, gate: make(chan struct{})}
			s.recovery.store = g
			done := make(chan error, 1)
			go func() { _, err := s.recovery.load(context.Background(), []lease.Lease{l}); done <- err }()
			lostAndRetaken()
			close(g.gate)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}},
		{"a committed change", func(s *Service, _ *fakeStore, l lease.Lease, lostAndRetaken func()) {
			fence := lease.Fence{Owner: "me", Leases: []lease.Lease{l}}
			lostAndRetaken()
			s.ingest.apply([]Change{{Key: "k", Version: 1, Deadline: time.Now().Add(time.Hour)}}, fence)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &fakeStore{rows: map[string]Timeout{}, pending: []Timeout{{Key: "k", Version: 1, Deadline: time.Now().Add(time.Hour)}}}
			s, err := New(Config{}, Deps{Store: st, Source: nopSource{}, DeadLetters: &fakeDLQ{}, Publisher: st, Leases: soleLeases{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.sched.Stop)
			p := events.PartitionOf("k")
			l := lease.Lease{Partition: p, Epoch: 1}
			s.own.Gain(l)
			tt.stale(s, st, l, func() {
				// Lost, as the membership drops it; then taken again, and
				// its new takeover's rows no longer hold k (cleared by the
				// owner in between).
				s.own.Lose(p)
				s.recovery.Forget([]int{p})
				s.own.Gain(lease.Lease{Partition: p, Epoch: 2})
			})
			if v, held := s.sched.Version("k"); held {
				t.Fatalf("k held at v%d after its partition was lost and taken again", v)
			}
		})
	}
}

// failingStarts fails the first fails starts of a partition's consumption,
// as a NATS without its JetStream quorum does, and counts the starts; lose,
// when set, runs at the first failure.
type failingStarts struct {
	nopSource
	fails  int32
	starts atomic.Int32
	lose   func()
}

var errNoJetStream = errors.New("nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable")

func (f *failingStarts) Add(context.Context, int) error {
	n := f.starts.Add(1)
	if n == 1 && f.lose != nil {
		f.lose()
	}
	if n <= f.fails {
		return errNoJetStream
	}
	return nil
}

// TestATakeoverWaitsOutASourceThatCannotStart: a consumption that cannot
// start (NATS down, or without its quorum: every instance alike) is tried
// again while the lease is held, instead of failing the takeover, which
// gave the lease up and took none for a TTL (a chaos run: deadlines 19 s
// late across two NATS faults). A lease lost meanwhile ends the retries.
func TestATakeoverWaitsOutASourceThatCannotStart(t *testing.T) {
	for _, tt := range []struct {
		name       string
		lost       bool
		wantStarts int32
	}{
		{"held", false, 4},
		{"lost while it retries", true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &fakeStore{rows: map[string]Timeout{}}
			src := &failingStarts{fails: 3}
			s, err := New(Config{RetryDelay: time.Millisecond}, Deps{Store: st, Source: src, DeadLetters: &fakeDLQ{}, Publisher: st, Leases: soleLeases{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.sched.Stop)
			l := lease.Lease{Partition: 7, Epoch: 1}
			s.own.Gain(l)
			if tt.lost {
				src.lose = func() { s.own.Lose(l.Partition) }
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := s.recovery.load(ctx, []lease.Lease{l}); err != nil {
				t.Fatalf("takeover failed: %v", err)
			}
			if got := src.starts.Load(); got != tt.wantStarts {
				t.Fatalf("%d starts of the consumption, want %d", got, tt.wantStarts)
			}
		})
	}
}
