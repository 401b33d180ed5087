package streams_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

// TestEnsureIsIdempotentAndKeepsEveryCommand checks that Ensure can run
// twice (the bootstrap runs at every deployment), keeps subjects another service added, and
// that the command stream does not let a later command of a key evict an
// earlier one not consumed yet: a stale republish must never replace the
// newer command.
func TestEnsureIsIdempotentAndKeepsEveryCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(testinfra.NATS(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	// A service with an extra fire subject prefix adds it; one with the
	// default configuration does not take it away.
	if err := streams.Ensure(ctx, js, streams.Config{FireSubjectPrefixes: []string{events.OrderCancelSubjectPrefix, "carts.expire."}}); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	exp, err := js.Stream(ctx, events.StreamExpiries)
	if err != nil {
		t.Fatal(err)
	}
	if subs := exp.CachedInfo().Config.Subjects; !slices.Contains(subs, "carts.expire.>") {
		t.Fatalf("expiry stream subjects = %v, lost carts.expire.>", subs)
	}

	newer := events.Command{Schema: 1, Kind: events.KindClear, Key: "o-1", Version: 2}
	stale := events.Command{Schema: 1, Kind: events.KindSet, Key: "o-1", Version: 1,
		Deadline: time.Now().Add(time.Minute).UTC(), FireSubject: events.OrderCancelSubject("o-1")}
	for _, c := range []events.Command{newer, stale} {
		msg := nats.NewMsg(c.Subject())
		msg.Header.Set(jetstream.MsgIDHeader, c.MsgID())
		msg.Data = []byte(`{}`)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("publish %s: %v", c.MsgID(), err)
		}
	}
	s, err := js.Stream(ctx, events.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("command stream holds %d messages of key o-1, want both (2)", info.State.Msgs)
	}
	if info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Duplicates != streams.DuplicateWindowDefault {
		t.Fatalf("command stream config = %+v, want a work queue with the default duplicate window", info.Config)
	}
}

// TestVerifyOnlyReadsAndNamesWhatIsMissing checks the services' start-up
// check: before the bootstrap step it fails naming the missing stream and
// creates nothing; after it, it passes; a fire subject prefix the bootstrap
// did not declare is named.
func TestVerifyOnlyReadsAndNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(testinfra.NATS(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Verify(ctx, js, streams.Config{}, events.StreamExpiries); err == nil || !strings.Contains(err.Error(), events.StreamExpiries) {
		t.Fatalf("Verify before the bootstrap: %v, want an error naming %s", err, events.StreamExpiries)
	}
	if _, err := js.Stream(ctx, events.StreamExpiries); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after Verify, stream lookup: %v, want not found (Verify must not create)", err)
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	all := []string{events.StreamCommands, events.StreamExpiries, events.StreamOrderEvents, events.StreamDeadLetters}
	if err := streams.Verify(ctx, js, streams.Config{}, all...); err != nil {
		t.Fatalf("Verify after the bootstrap: %v", err)
	}
	err = streams.Verify(ctx, js, streams.Config{FireSubjectPrefixes: []string{"carts.expire."}}, events.StreamExpiries)
	if err == nil || !strings.Contains(err.Error(), "carts.expire.>") {
		t.Fatalf("Verify with an undeclared fire prefix: %v, want an error naming carts.expire.>", err)
	}
}
