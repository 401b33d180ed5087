package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	tjs "github.com/ordertimeout/ordertimeout/services/timeoutd/jetstream"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// keysOf returns n keys of partition p, named after prefix.
func keysOf(prefix string, p, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("%s-%d", prefix, i); events.PartitionOf(k) == p {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestNextLinger checks how a batch is cut, on a real NATS server: Next
// waits Linger (zero: LingerDefault) for more once the arrived commands are
// taken, takes what arrives meanwhile, never waits once the batch is full,
// and a stop during the wait hands the batch back for redelivery at once.
func TestNextLinger(t *testing.T) {
	t.Parallel()
	js := testinfra.NATS(t).JetStream(t)
	if err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     tjs.ConsumerConfig
		publish int           // commands published, one message each
		first   bool          // Next is called before the first is published
		want    int           // messages in the batch
		minWait time.Duration // Next returns no sooner than this after it is called
	}{
		{"alone, it waits Linger", tjs.ConsumerConfig{Linger: 50 * time.Millisecond}, 1, false, 1, 50 * time.Millisecond},
		{"zero waits the default", tjs.ConsumerConfig{}, 1, false, 1, tjs.LingerDefault},
		{"a command arriving within Linger joins", tjs.ConsumerConfig{Linger: 100 * time.Millisecond}, 2, true, 2, 0},
		{"a full batch does not wait", tjs.ConsumerConfig{Linger: 100 * time.Millisecond, BatchSize: 1}, 2, false, 1, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := 10 + i // a partition of the case's own
			c, err := tjs.NewConsumer(js, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			if err := c.Add(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			publish := func() {
				for _, k := range keysOf(t.Name(), p, tt.publish) {
					if _, err := js.Publish(t.Context(), events.CommandSubject(k), []byte(`{}`)); err != nil {
						t.Error(err)
					}
				}
			}
			if !tt.first {
				publish()
				// Both messages reach the buffer before Next is called.
				time.Sleep(200 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			published := make(chan struct{})
			if tt.first {
				go func() {
					defer close(published)
					time.Sleep(20 * time.Millisecond)
					publish()
				}()
			} else {
				close(published)
			}
			defer func() { <-published }()
			batch, err := c.Next(ctx)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) != tt.want {
				t.Errorf("Next returned %d messages, want %d", len(batch), tt.want)
			}
			if took < tt.minWait {
				t.Errorf("Next returned after %v, before Linger %v", took, tt.minWait)
			}
			for _, m := range batch {
				if err := m.Ack(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	t.Run("a stop during the wait hands the batch back", func(t *testing.T) {
		t.Parallel()
		p := 20
		// AckWait a minute: only the negative ack can bring it back soon.
		c, err := tjs.NewConsumer(js, tjs.ConsumerConfig{Linger: 100 * time.Millisecond, AckWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if err := c.Add(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		key := keysOf(t.Name(), p, 1)[0]
		if _, err := js.Publish(t.Context(), events.CommandSubject(key), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // in the buffer before Next
		stop, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if batch, err := c.Next(stop); !errors.Is(err, context.DeadlineExceeded) || batch != nil {
			t.Fatalf("Next stopped during its wait = %d messages, %v; want none and the context's error", len(batch), err)
		}
		ctx, cancel2 := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel2()
		batch, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("the handed-back command was not redelivered: %v", err)
		}
		if len(batch) != 1 || batch[0].Subject() != events.PartitionedCommandSubject(key) {
			t.Fatalf("redelivered %d messages, want the one of %s", len(batch), key)
		}
		if err := batch[0].Ack(); err != nil {
			t.Error(err)
		}
	})
}

// TestTakeover: a previous owner fetched a command and never acked it
// (AckWait is a minute). Whatever became of that owner, the new owner's
// Add must get every command at once, the unacked one and a new one, and
// take the consumer over the cheap way (a reset of the consumer found)
// unless another connection still pulls from it or its settings changed:
//   - crashed: the old owner's connection is closed, its pull requests
//     gone with it: reset;
//   - handed over: the old owner stopped consuming (Remove) and lives on:
//     reset;
//   - frozen: a paused owner's connection is alive and its pull requests
//     (with a prefetch) stay registered on the server, which would deliver
//     to them: recreated, or the new owner would wait for the pause;
//   - settings changed: the new owner's AckWait differs: recreated.
func TestTakeover(t *testing.T) {
	t.Parallel()
	nats := testinfra.NATS(t)
	js := nats.JetStream(t)
	if err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cfg := tjs.ConsumerConfig{AckWait: time.Minute, Linger: -1}
	tests := []struct {
		name      string
		fate      func(old *tjs.Consumer, p int, closeConn func())
		newAck    time.Duration // the new owner's AckWait
		wantReset bool
	}{
		{"crashed", func(_ *tjs.Consumer, p int, closeConn func()) { closeConn(); noPulls(t, js, p) }, time.Minute, true},
		{"handed over", func(old *tjs.Consumer, p int, _ func()) { old.Remove(p); noPulls(t, js, p) }, time.Minute, true},
		{"frozen", func(*tjs.Consumer, int, func()) {}, time.Minute, false},
		{"settings changed", func(old *tjs.Consumer, p int, _ func()) { old.Remove(p); noPulls(t, js, p) }, 2 * time.Minute, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := 30 + i
			oldJS := nats.JetStream(t) // the old owner's connection of its own
			old, err := tjs.NewConsumer(oldJS, cfg)
			if err != nil {
				t.Fatal(err)
			}
			old.KeepWhile(func(int) bool { return false }) // it lost the partition
			if err := old.Add(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			keys := keysOf(t.Name(), p, 2)
			if _, err := js.Publish(t.Context(), events.CommandSubject(keys[0]), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if batch, err := old.Next(ctx); err != nil || len(batch) != 1 {
				t.Fatalf("the old owner fetched %d, %v", len(batch), err)
			}
			tt.fate(old, p, oldJS.Conn().Close)
			c, err := tjs.NewConsumer(js, tjs.ConsumerConfig{AckWait: tt.newAck, Linger: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			if err := c.Add(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			if reset, recreated := c.Takeovers(); (reset == 1) != tt.wantReset || reset+recreated != 1 {
				t.Errorf("Takeovers() = %d reset, %d recreated; want reset %v", reset, recreated, tt.wantReset)
			}
			if _, err := js.Publish(t.Context(), events.CommandSubject(keys[1]), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			deadline := time.Now().Add(5 * time.Second)
			for len(got) < 2 && time.Now().Before(deadline) {
				nctx, ncancel := context.WithDeadline(t.Context(), deadline)
				batch, err := c.Next(nctx)
				ncancel()
				if err != nil {
					break
				}
				for _, m := range batch {
					got[m.Subject()] = true
					_ = m.Ack()
				}
			}
			if !got[events.PartitionedCommandSubject(keys[0])] || !got[events.PartitionedCommandSubject(keys[1])] {
				t.Fatalf("the new owner got %v within 5 s, want both commands (the old owner's unacked one and a new one)", got)
			}
		})
	}
}

// noPulls waits until partition p's consumer has no pull request waiting:
// the server learns of a closed connection, or a stopped consumption's
// unsubscription, on the old owner's connection, not the test's.
func noPulls(t *testing.T, js jetstream.JetStream, p int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := js.Consumer(t.Context(), events.CommandStream(p), tjs.DurableName(p))
		if err == nil && c.CachedInfo().NumWaiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition %d's consumer still has pull requests waiting after 5 s (%v)", p, err)
		}
	}
}

// TestAConsumptionWhoseConsumerIsDeletedIsRestarted: a former owner's
// takeover that was still under way when it lost the partition may delete
// the consumer after the new owner took it over, and create it again. The
// new owner's consumption then ends; it must consume again on its own, and
// get the commands published since (the stream keeps them).
func TestAConsumptionWhoseConsumerIsDeletedIsRestarted(t *testing.T) {
	t.Parallel()
	nats := testinfra.NATS(t)
	js := nats.JetStream(t)
	if err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cfg := tjs.ConsumerConfig{Linger: -1}
	tests := []struct {
		name     string
		recreate bool // the former owner creates the consumer again after deleting it
		lapsed   bool // the owner's leases are not trusted when it happens, and are again 1 s later
	}{
		{"deleted", false, false},
		{"deleted and created again", true, false},
		{"deleted during a lapse", false, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := 40 + i
			c, err := tjs.NewConsumer(js, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			var lapsed atomic.Bool
			c.KeepWhile(func(int) bool { return !lapsed.Load() })
			if err := c.Add(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			keys := keysOf(t.Name(), p, 2)
			next := func(key string) {
				t.Helper()
				if _, err := js.Publish(t.Context(), events.CommandSubject(key), []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				// A command acked just before the delete may come again
				// (its ack raced the delete): applying it twice is a no-op.
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				for {
					batch, err := c.Next(ctx)
					if err != nil {
						t.Fatalf("the command of %s did not come within 10 s: %v", key, err)
					}
					for _, m := range batch {
						_ = m.Ack()
						if m.Subject() == events.PartitionedCommandSubject(key) {
							return
						}
					}
				}
			}
			next(keys[0])
			// The former owner's late takeover.
			lapsed.Store(tt.lapsed)
			if tt.lapsed {
				time.AfterFunc(time.Second, func() { lapsed.Store(false) })
			}
			stream, durable := events.CommandStream(p), tjs.DurableName(p)
			if err := js.DeleteConsumer(t.Context(), stream, durable); err != nil {
				t.Fatal(err)
			}
			if tt.recreate {
				// The owner's restart may be creating the consumer at the
				// same moment, and the server refuses one of two racing
				// creates (its files: "meta.inf.tmp: no such file"); the
				// former owner's create failing is then the "deleted" case.
				if _, err := js.CreateConsumer(t.Context(), stream, tjs.ConsumerSettings(p, cfg)); err != nil {
					t.Logf("the former owner's create: %v", err)
				}
			}
			if tt.lapsed {
				time.Sleep(500 * time.Millisecond)
				if _, err := js.Consumer(t.Context(), stream, durable); !errors.Is(err, jetstream.ErrConsumerNotFound) {
					t.Fatalf("during the lapse the consumer was taken over again (lookup: %v); want it left alone", err)
				}
			}
			next(keys[1])
			if n := c.Restarts(); n != 1 {
				t.Errorf("Restarts() = %d, want 1", n)
			}
		})
	}
}

// stalledReset is a JetStream client whose consumer resets never answer,
// as when the consumer's leader moves after a NATS node restart and the
// reset's proposal is lost with it.
type stalledReset struct{ jetstream.JetStream }

func (stalledReset) ResetConsumer(ctx context.Context, _, _ string) (*jetstream.ConsumerResetResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestATakeoverWhoseResetDoesNotAnswerCreatesTheConsumer: a reset that
// does not answer costs a takeover a second, not the API's timeout (5 s):
// the consumer is then created anew, and delivers what the old owner held.
func TestATakeoverWhoseResetDoesNotAnswerCreatesTheConsumer(t *testing.T) {
	t.Parallel()
	js := testinfra.NATS(t).JetStream(t)
	if err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	const p = 50
	cfg := tjs.ConsumerConfig{Linger: -1}
	if _, err := js.CreateConsumer(t.Context(), events.CommandStream(p), tjs.ConsumerSettings(p, cfg)); err != nil {
		t.Fatal(err) // the old owner's, nobody pulling from it
	}
	key := keysOf(t.Name(), p, 1)[0]
	if _, err := js.Publish(t.Context(), events.CommandSubject(key), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	c, err := tjs.NewConsumer(stalledReset{js}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	start := time.Now()
	if err := c.Add(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Add took %s with a reset that never answers; want about a second", took.Round(time.Millisecond))
	}
	if reset, recreated := c.Takeovers(); reset != 0 || recreated != 1 {
		t.Errorf("Takeovers() = %d reset, %d recreated; want the consumer created anew", reset, recreated)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	batch, err := c.Next(ctx)
	if err != nil || len(batch) != 1 || batch[0].Subject() != events.PartitionedCommandSubject(key) {
		t.Fatalf("Next = %d messages, %v; want the command of %s", len(batch), err, key)
	}
	_ = batch[0].Ack()
}

// failingCreate is a JetStream client whose first consumer creates fail,
// as one right after a delete does while the server still removes the old
// consumer's files.
type failingCreate struct {
	jetstream.JetStream
	failures atomic.Int32
}

func (f *failingCreate) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, errors.New("nats: API error: code=500 err_code=10012 description=open meta.inf.tmp: no such file or directory")
	}
	return f.JetStream.CreateConsumer(ctx, stream, cfg)
}

// TestATakeoverRetriesAFailedCreate: a takeover that must create the
// consumer anew tries the create again rather than give its partitions up
// at the first failure.
func TestATakeoverRetriesAFailedCreate(t *testing.T) {
	t.Parallel()
	js := testinfra.NATS(t).JetStream(t)
	if err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	const p = 51
	fc := &failingCreate{JetStream: js}
	fc.failures.Store(2)
	c, err := tjs.NewConsumer(fc, tjs.ConsumerConfig{Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Add(t.Context(), p); err != nil {
		t.Fatalf("Add after two failed creates: %v", err)
	}
	key := keysOf(t.Name(), p, 1)[0]
	if _, err := js.Publish(t.Context(), events.CommandSubject(key), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	batch, err := c.Next(ctx)
	if err != nil || len(batch) != 1 {
		t.Fatalf("Next = %d messages, %v; want the command", len(batch), err)
	}
	_ = batch[0].Ack()
}

// stalledStream is a JetStream client whose stream lookups never answer,
// as a stream's while its leader is elected after a NATS node restart.
type stalledStream struct{ jetstream.JetStream }

func (stalledStream) Stream(ctx context.Context, _ string) (jetstream.Stream, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestMarkIsBounded: a takeover's read of the command backlog that does
// not answer costs it a second, not the API's timeout (5 s).
func TestMarkIsBounded(t *testing.T) {
	t.Parallel()
	c, err := tjs.NewConsumer(stalledStream{}, tjs.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	start := time.Now()
	if _, err := c.Mark(t.Context(), 7); err == nil {
		t.Fatal("Mark answered from a stream that never does")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Mark took %s; want about a second", took.Round(time.Millisecond))
	}
}
