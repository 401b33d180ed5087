package jetstream_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/internal/testinfra/jscluster"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
	tjs "github.com/ordertimeout/ordertimeout/services/timeoutd/jetstream"
)

// TestStoredFindsAnEventAnywhereOnItsSubject: Stored finds an event by its
// Nats-Msg-Id among every event of its subject, not only the last: on a
// fire subject shared by several keys, or after a deposed owner's late
// event, the fired event is still found, so no missed event follows it.
func TestStoredFindsAnEventAnywhereOnItsSubject(t *testing.T) {
	t.Parallel()
	js := testinfra.NATS(t).JetStream(t)
	if err := streams.Ensure(t.Context(), js, streams.Config{FireSubjectPrefixes: []string{"orders.cancel.", "shop.expired."}}); err != nil {
		t.Fatal(err)
	}
	p := tjs.NewPublisher(js, 0)
	const shared = "shop.expired.all"
	if _, err := p.Publish(t.Context(), []timeoutd.Event{
		{Subject: shared, MsgID: "fired:a:1", Data: []byte(`{}`)},
		{Subject: shared, MsgID: "fired:b:1", Data: []byte(`{}`)},
		{Subject: shared, MsgID: "fired:c:1", Data: []byte(`{}`)},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		subject, id string
		want        bool
	}{
		{shared, "fired:a:1", true},
		{shared, "fired:b:1", true},
		{shared, "fired:c:1", true},
		{shared, "fired:a:2", false},
		{"shop.expired.none", "fired:a:1", false},
	} {
		got, err := p.Stored(t.Context(), tc.subject, tc.id)
		if err != nil || got != tc.want {
			t.Errorf("Stored(%s, %s) = %v, %v; want %v", tc.subject, tc.id, got, err, tc.want)
		}
	}
}

// jetStreams are the two kinds of JetStream the publisher meets: one
// server (the image, as the single stack runs it), whose stream checks a
// fence as it stores each event, and a cluster of three with the streams
// replicated (R3, as the HA stack runs them), whose leader admits one
// message at a time per fence, so that the publisher sends atomic batches.
var jetStreams = []struct {
	name     string
	replicas int
	start    func(t *testing.T) jetstream.JetStream
}{
	{"one server", 1, func(t *testing.T) jetstream.JetStream { return testinfra.NATS(t).JetStream(t) }},
	{"three servers, R3", 3, func(t *testing.T) jetstream.JetStream { return jscluster.Start(t).JetStream(t) }},
}

// TestTheFenceRefusesAFormerOwnersLatePublish is the fence, shown on
// JetStream: once a new owner fenced a partition, an event that names the
// former owner's fence is refused, however late it arrives, while the new
// owner's are stored; a fence that aged out of the stream refuses every
// event until the owner fences again, which it may only where no fence is
// left or over an older one (expect), never over a newer one.
func TestTheFenceRefusesAFormerOwnersLatePublish(t *testing.T) {
	t.Parallel()
	for _, j := range jetStreams {
		t.Run(j.name, func(t *testing.T) {
			t.Parallel()
			theFenceRefusesAFormerOwnersLatePublish(t, j.start(t), j.replicas)
		})
	}
}

func theFenceRefusesAFormerOwnersLatePublish(t *testing.T, js jetstream.JetStream, replicas int) {
	const maxAge = 2 * time.Second
	if err := streams.Ensure(t.Context(), js, streams.Config{Replicas: replicas, MaxAge: maxAge, DuplicateWindow: maxAge}); err != nil {
		t.Fatal(err)
	}
	p := tjs.NewPublisher(js, 0)
	const part = 7
	fence := func(owner string, epoch int64, expect []uint64) uint64 {
		t.Helper()
		seqs, err := p.Fence(t.Context(), lease.Fence{Owner: owner, Leases: []lease.Lease{{Partition: part, Epoch: epoch}}}, expect)
		if err != nil || len(seqs) != 1 {
			t.Fatalf("%s fences at epoch %d: %v, %v", owner, epoch, seqs, err)
		}
		return seqs[0]
	}
	n := 0
	publish := func(fence uint64) error {
		n++
		_, err := p.Publish(t.Context(), []timeoutd.Event{{Subject: "orders.cancel.k", MsgID: fmt.Sprintf("fired:k:%d", n), Data: []byte(`{}`),
			Partition: part, Fence: fence}})
		return err
	}
	a := fence("a", 1, nil)
	if err := publish(a); err != nil {
		t.Fatalf("a's publish under its fence: %v", err)
	}
	b := fence("b", 2, nil)
	if err := publish(a); !errors.Is(err, timeoutd.ErrFenced) {
		t.Fatalf("a's late publish after b fenced: %v, want ErrFenced", err)
	}
	if err := publish(b); err != nil {
		t.Fatalf("b's publish under its fence: %v", err)
	}
	if got := fence("a", 1, []uint64{a}); got != 0 {
		t.Fatalf("a fences again, expecting its own fence last, over b's: sequence %d, want 0 (refused)", got)
	}
	if last, err := p.LastFence(t.Context(), part); err != nil || last != (timeoutd.StreamFence{Seq: b, Owner: "b", Epoch: 2}) {
		t.Fatalf("the last fence = %+v, %v; want b's, %d at epoch 2", last, err, b)
	}
	if err := publish(b); err != nil {
		t.Fatalf("b's publish after a's refused fence: %v", err)
	}
	time.Sleep(maxAge + time.Second) // b's fence ages out of the stream
	if err := publish(b); !errors.Is(err, timeoutd.ErrFenced) {
		t.Fatalf("b's publish once its fence aged out: %v, want ErrFenced", err)
	}
	if last, err := p.LastFence(t.Context(), part); err != nil || last != (timeoutd.StreamFence{}) {
		t.Fatalf("the last fence once aged out = %+v, %v; want none", last, err)
	}
	again := fence("b", 2, []uint64{0})
	if again == 0 {
		t.Fatal("b fences again, expecting none, where none is left: refused")
	}
	if err := publish(again); err != nil {
		t.Fatalf("b's publish under its new fence: %v", err)
	}
}

// TestEveryPartitionsFencedEventsAreStoredAtOnce: fenced events of every
// partition, published by batches side by side and several to one
// partition at once (the fire path's FireConcurrency), are all stored,
// each once, on one server and on a replicated stream, whose leader
// refuses a second message expecting a fence still in process: there a
// partition's events go as one atomic batch at a time, answered once. A retry of a batch
// already stored (its PubAck lost) is deduplicated.
func TestEveryPartitionsFencedEventsAreStoredAtOnce(t *testing.T) {
	t.Parallel()
	for _, j := range jetStreams {
		t.Run(j.name, func(t *testing.T) {
			t.Parallel()
			js := j.start(t)
			if err := streams.Ensure(t.Context(), js, streams.Config{Replicas: j.replicas}); err != nil {
				t.Fatal(err)
			}
			p := tjs.NewPublisher(js, 30*time.Second)
			leases := make([]lease.Lease, events.Partitions)
			for i := range leases {
				leases[i] = lease.Lease{Partition: i, Epoch: 1}
			}
			fences, err := p.Fence(t.Context(), lease.Fence{Owner: "a", Leases: leases}, nil)
			if err != nil {
				t.Fatal(err)
			}
			const batches, perPartition = 4, 10
			batch := func(b int) []timeoutd.Event {
				var evs []timeoutd.Event
				for part := range events.Partitions {
					for i := range perPartition {
						evs = append(evs, timeoutd.Event{Subject: fmt.Sprintf("orders.cancel.p%d-%d-%d", part, b, i),
							MsgID: fmt.Sprintf("fired:p%d-%d-%d:1", part, b, i), Data: []byte(`{}`), Partition: part, Fence: fences[part]})
					}
				}
				return evs
			}
			before := js.Conn().Stats().InMsgs
			var g errgroup.Group
			for b := range batches {
				g.Go(func() error {
					_, err := p.Publish(t.Context(), batch(b))
					return err
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatalf("publish %d batches of every partition at once: %v", batches, err)
			}
			// Replicated, a partition's share of a batch is answered once,
			// not once per event: a few retries while a fence is in
			// process are allowed, one round trip per event is not.
			if replies := js.Conn().Stats().InMsgs - before; j.replicas > 1 && replies > 2*batches*events.Partitions {
				t.Errorf("%d replies to %d batches of %d partitions' %d events each; want one per partition's batch, at most %d with retries",
					replies, batches, events.Partitions, perPartition, 2*batches*events.Partitions)
			}
			if _, err := p.Publish(t.Context(), batch(0)); err != nil {
				t.Fatalf("publish a stored batch again: %v", err)
			}
			const want = batches * perPartition * events.Partitions
			s, err := js.Stream(t.Context(), events.StreamExpiries)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("orders.cancel.>"))
			if err != nil {
				t.Fatal(err)
			}
			var got uint64
			for _, n := range info.State.Subjects {
				got += n
			}
			if got != want {
				t.Fatalf("stored %d events; want %d, each once", got, want)
			}
		})
	}
}
