package jetstream_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
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

// TestTheFenceRefusesAFormerOwnersLatePublish is the fence, shown on
// JetStream: once a new owner fenced a partition, an event that names the
// former owner's fence is refused, however late it arrives, while the new
// owner's are stored; a fence that aged out of the stream refuses every
// event until the owner fences again, which it may only where no fence is
// left or over an older one (expect), never over a newer one.
func TestTheFenceRefusesAFormerOwnersLatePublish(t *testing.T) {
	t.Parallel()
	js := testinfra.NATS(t).JetStream(t)
	const maxAge = 2 * time.Second
	if err := streams.Ensure(t.Context(), js, streams.Config{MaxAge: maxAge, DuplicateWindow: maxAge}); err != nil {
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
	if seq, epoch, err := p.LastFence(t.Context(), part); err != nil || seq != b || epoch != 2 {
		t.Fatalf("the last fence = %d at epoch %d, %v; want b's, %d at epoch 2", seq, epoch, err, b)
	}
	if err := publish(b); err != nil {
		t.Fatalf("b's publish after a's refused fence: %v", err)
	}
	time.Sleep(maxAge + time.Second) // b's fence ages out of the stream
	if err := publish(b); !errors.Is(err, timeoutd.ErrFenced) {
		t.Fatalf("b's publish once its fence aged out: %v, want ErrFenced", err)
	}
	if seq, epoch, err := p.LastFence(t.Context(), part); err != nil || seq != 0 || epoch != 0 {
		t.Fatalf("the last fence once aged out = %d at epoch %d, %v; want none", seq, epoch, err)
	}
	again := fence("b", 2, []uint64{0})
	if again == 0 {
		t.Fatal("b fences again, expecting none, where none is left: refused")
	}
	if err := publish(again); err != nil {
		t.Fatalf("b's publish under its new fence: %v", err)
	}
}
