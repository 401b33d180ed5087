package streams_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
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
	js := testinfra.NATS(t).JetStream(t)
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
		msg.Header.Set(jetstream.MsgIDHeader, c.MsgID(events.NewNonce()))
		msg.Data = []byte(`{}`)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("publish %s %s v%d: %v", c.Kind, c.Key, c.Version, err)
		}
	}
	// Both commands land in the stream of o-1's partition, through the
	// server's subject mapping; no other partition's stream holds one.
	for p, name := range events.CommandStreams() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		want := uint64(0)
		if p == events.PartitionOf("o-1") {
			want = 2
		}
		if info.State.Msgs != want {
			t.Fatalf("command stream %s holds %d messages, want %d (both commands of key o-1 in its partition's)", name, info.State.Msgs, want)
		}
		if info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Duplicates != streams.DuplicateWindowDefault {
			t.Fatalf("command stream %s config = %+v, want a work queue with the default duplicate window", name, info.Config)
		}
	}
}

// TestEnsureRetiresTheLegacyCommandStreamOnlyWhenEmpty checks the upgrade
// from the single command stream: while it holds a command Ensure refuses,
// deleting and creating nothing; once the command is consumed Ensure
// deletes it and creates every partition's stream.
func TestEnsureRetiresTheLegacyCommandStreamOnlyWhenEmpty(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := testinfra.NATS(t).JetStream(t)
	legacy, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events.StreamCommandsLegacy, Subjects: []string{events.CommandSubjects},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, events.CommandSubject("o-1"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); !errors.Is(err, streams.ErrLegacyCommands) {
		t.Fatalf("Ensure with a command in %s: %v, want ErrLegacyCommands", events.StreamCommandsLegacy, err)
	}
	info, err := legacy.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("legacy stream after the refusal: %+v, %v; want it with its command", info, err)
	}
	if _, err := js.Stream(ctx, events.CommandStream(0)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("partition stream after the refusal: %v, want not found", err)
	}
	// The previous timeoutd consumes the command; the stream is empty.
	cons, err := legacy.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "timeoutd-40", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatalf("Ensure with %s empty: %v", events.StreamCommandsLegacy, err)
	}
	if _, err := js.Stream(ctx, events.StreamCommandsLegacy); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("legacy stream after Ensure: %v, want deleted", err)
	}
	if err := streams.Verify(ctx, js, streams.Config{}, events.CommandStreams()...); err != nil {
		t.Fatal(err)
	}
}

// racingProducer is a JetStream client on which a producer publishes a
// command just before the legacy command stream is first updated: between
// Ensure's check that the stream is empty and its closing of the stream.
type racingProducer struct {
	jetstream.JetStream
	t     *testing.T
	raced bool
}

func (r *racingProducer) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if cfg.Name == events.StreamCommandsLegacy && !r.raced {
		r.raced = true
		if _, err := r.Publish(ctx, events.CommandSubject("o-race"), []byte(`{}`)); err != nil {
			r.t.Errorf("the racing producer's publish: %v", err)
		}
	}
	return r.JetStream.UpdateStream(ctx, cfg)
}

// TestEnsureReopensTheLegacyCommandStreamWhenACommandRaces checks the
// retirement's race: a command that lands after the emptiness check and
// before the stream is closed makes Ensure refuse, keep the command, and
// reopen the stream with its old limits, so producers go on.
func TestEnsureReopensTheLegacyCommandStreamWhenACommandRaces(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := testinfra.NATS(t).JetStream(t)
	want := jetstream.StreamConfig{Name: events.StreamCommandsLegacy, Subjects: []string{events.CommandSubjects},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}
	legacy, err := js.CreateStream(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	race := &racingProducer{JetStream: js, t: t}
	err = streams.Ensure(ctx, race, streams.Config{})
	if !race.raced {
		t.Fatal("Ensure never updated the legacy stream: the race was not run")
	}
	if !errors.Is(err, streams.ErrLegacyCommands) || !strings.Contains(err.Error(), "while being retired") {
		t.Fatalf("Ensure with a command racing the retirement: %v, want ErrLegacyCommands received while being retired", err)
	}
	info, err := legacy.Info(ctx)
	if err != nil {
		t.Fatalf("legacy stream after the race: %v, want it kept", err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("legacy stream holds %d commands after the race, want the racing one", info.State.Msgs)
	}
	if info.Config.MaxBytes != -1 || info.Config.Discard != jetstream.DiscardOld {
		t.Errorf("legacy stream after the race: max bytes %d, discard %v; want it reopened (-1, old)", info.Config.MaxBytes, info.Config.Discard)
	}
	if _, err := js.Publish(ctx, events.CommandSubject("o-after"), []byte(`{}`)); err != nil {
		t.Errorf("a producer's publish after the race: %v, want the stream open", err)
	}
	if _, err := js.Stream(ctx, events.CommandStream(0)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("partition stream after the race: %v, want not found", err)
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
	js := testinfra.NATS(t).JetStream(t)
	if err := streams.Verify(ctx, js, streams.Config{}, events.StreamExpiries); err == nil || !strings.Contains(err.Error(), events.StreamExpiries) {
		t.Fatalf("Verify before the bootstrap: %v, want an error naming %s", err, events.StreamExpiries)
	}
	if _, err := js.Stream(ctx, events.StreamExpiries); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after Verify, stream lookup: %v, want not found (Verify must not create)", err)
	}
	if err := streams.VerifyCommandMapping(ctx, js); err == nil || !strings.Contains(err.Error(), events.CommandMappingDestination) {
		t.Fatalf("VerifyCommandMapping before the bootstrap: %v, want an error naming the mapping", err)
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	all := append(events.CommandStreams(), events.StreamExpiries, events.StreamOrderEvents, events.StreamDeadLetters)
	if err := streams.Verify(ctx, js, streams.Config{}, all...); err != nil {
		t.Fatalf("Verify after the bootstrap: %v", err)
	}
	if err := streams.VerifyCommandMapping(ctx, js); err != nil {
		t.Fatalf("VerifyCommandMapping after the bootstrap: %v", err)
	}
	for _, name := range events.CommandStreams() {
		if s, err := js.Stream(ctx, name); err != nil || s.CachedInfo().State.Msgs != 0 {
			t.Fatalf("stream %s after the mapping probe: %v, want it empty (the probe is never stored)", name, err)
		}
	}
	err := streams.Verify(ctx, js, streams.Config{FireSubjectPrefixes: []string{"carts.expire."}}, events.StreamExpiries)
	if err == nil || !strings.Contains(err.Error(), "carts.expire.>") {
		t.Fatalf("Verify with an undeclared fire prefix: %v, want an error naming carts.expire.>", err)
	}
}

// TestEnsureUpgradesToTenantSubjects: a command stream made before tenants
// (timeouts.cmd.<p>.*) is updated to capture every tenant's form too
// (timeouts.cmd.<p>.*.*), keeping the commands it holds; commands of both
// forms then land in it.
func TestEnsureUpgradesToTenantSubjects(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := testinfra.NATS(t).JetStream(t)
	const key = "o-upgrade"
	p := events.PartitionOf(key)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events.CommandStream(p), Retention: jetstream.WorkQueuePolicy,
		Subjects: []string{events.CommandSubjectPrefix + strconv.Itoa(p) + ".*"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, events.CommandSubject(key), []byte(`{}`)); err != nil {
		t.Fatalf("publish before the upgrade: %v", err)
	}
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatalf("Ensure over the stream made before tenants: %v", err)
	}
	if _, err := js.Publish(ctx, events.CommandSubject(events.TenantKey("res", key)), []byte(`{}`)); err != nil {
		t.Fatalf("publish a tenant's command after the upgrade: %v", err)
	}
	s, err := js.Stream(ctx, events.CommandStream(p))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || !slices.Equal(info.Config.Subjects, events.PartitionCommandSubjects(p)) {
		t.Fatalf("after the upgrade: %d commands, subjects %v; want both commands and %v", info.State.Msgs, info.Config.Subjects, events.PartitionCommandSubjects(p))
	}
}

// TestSpecsAllowNoHeaderThatActsOnOthers: no stream allows the headers by
// which one publisher would act on another's messages (rollups,
// schedules, TTLs, counters, atomic batches); e2e's tenant matrix checks
// that the server then refuses each. The expiry stream, which timeoutd
// alone writes, allows atomic batches: its fenced batches.
func TestSpecsAllowNoHeaderThatActsOnOthers(t *testing.T) {
	t.Parallel()
	for _, sc := range streams.Specs(streams.Config{Replicas: 3, FireSubjectPrefixes: []string{"a.", "b."}}) {
		if sc.AllowAtomicPublish != (sc.Name == events.StreamExpiries) {
			t.Errorf("stream %s allows atomic batches: %v, want %v", sc.Name, sc.AllowAtomicPublish, sc.Name == events.StreamExpiries)
		}
		if sc.AllowRollup || sc.AllowMsgTTL || sc.AllowMsgSchedules || sc.AllowMsgCounter || sc.AllowBatchPublish {
			t.Errorf("stream %s allows a header that acts on other publishers' messages: %+v", sc.Name, sc)
		}
	}
}
