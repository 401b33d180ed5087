package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// TestATakeoverIsNotHeldByAFrozenOwner: a previous owner that is paused (its
// connection alive, its process frozen) left a pull request and commands it
// fetched and never acked; the new owner's Add must get every command at
// once, not after AckWait: neither the commands the frozen owner holds nor
// the new ones may go to its pull request.
func TestATakeoverIsNotHeldByAFrozenOwner(t *testing.T) {
	t.Parallel()
	nats := testinfra.NATS(t)
	js := nats.JetStream(t)
	if err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	const p = 30
	cfg := tjs.ConsumerConfig{AckWait: time.Minute, Linger: -1}
	old, err := tjs.NewConsumer(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	// The old owner freezes: it acks nothing, and its consumption (pull
	// requests with a prefetch) stays registered on the server, as a paused
	// process's would. The new owner takes over.
	c, err := tjs.NewConsumer(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Add(t.Context(), p); err != nil {
		t.Fatal(err)
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
		t.Fatalf("the new owner got %v within 5 s, want both commands (the frozen owner's unacked one and a new one)", got)
	}
}
