// Package streams declares the JetStream streams of the platform with
// explicit settings. Ensure creates or updates them idempotently; only the
// one-shot bootstrap step (deploy/streams, NATS user bootstrap) calls it,
// before the services start. The services hold no right to create, update,
// delete or purge a stream: at start they call Verify, which only reads.
package streams

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Inbox prefixes (nats.CustomInboxPrefix) of the platform's NATS users.
// Each user may subscribe only below its own (deploy/compose/nats.conf), so
// no client reads the JetStream deliveries, PubAcks or API replies sent to
// another.
const (
	InboxBootstrap = "_INBOX_bootstrap"
	InboxOrders    = "_INBOX_orders"
	InboxTimeoutd  = "_INBOX_timeoutd"
	InboxObserver  = "_INBOX_observer"
)

// Defaults of Config.
const (
	// DuplicateWindowDefault must exceed the worst time between a first
	// publish and its republish (orders' relay: a failed batch's AckTimeout
	// and a retry; timeoutd: a fire batch's PubAck timeout and RetryDelay,
	// or a takeover after a crash between the PubAck and the mark, a few
	// seconds) so that the republish is dropped by JetStream; beyond it
	// idempotent consumers absorb the duplicate. Two minutes keeps the dedupe index small at 60k msgs/s.
	DuplicateWindowDefault = 2 * time.Minute
	// MaxAgeDefault is how long expiry and order events stay readable by
	// late or new consumers.
	MaxAgeDefault = 72 * time.Hour
	// DeadLetterMaxAgeDefault keeps dead letters for inspection and replay.
	DeadLetterMaxAgeDefault = 14 * 24 * time.Hour
	// ReplicasDefault is 1: the single-node stack of deploy/compose; a
	// cluster sets Config.Replicas (STREAMS_REPLICAS of deploy/streams) to 3.
	ReplicasDefault = 1
)

// Config sets what may differ between deployments.
type Config struct {
	// Replicas of every stream; default 1.
	Replicas int `env:"REPLICAS"`
	// DuplicateWindow of every stream; default 2m.
	DuplicateWindow time.Duration `env:"DUPLICATE_WINDOW"`
	// MaxAge of the event streams; default 72h.
	MaxAge time.Duration
	// FireSubjectPrefixes are the allowed fire subject prefixes, each ending
	// in "."; default [events.OrderCancelSubjectPrefix]. The expiry stream
	// captures <prefix>> for each.
	FireSubjectPrefixes []string `env:"FIRE_SUBJECT_PREFIXES" envSeparator:","`
}

func (c Config) withDefaults() Config {
	c.Replicas = cmp.Or(c.Replicas, ReplicasDefault)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, DuplicateWindowDefault)
	c.MaxAge = cmp.Or(c.MaxAge, MaxAgeDefault)
	if len(c.FireSubjectPrefixes) == 0 {
		c.FireSubjectPrefixes = []string{events.OrderCancelSubjectPrefix}
	}
	return c
}

// Specs returns the stream configurations Ensure applies: the command
// stream of every partition (events.CommandStream), then the expiry, order
// event and dead letter streams.
//
// Each command stream is a work queue: a command is removed once timeoutd
// acked it, so the stream is bounded by the commands in flight. It has one
// consumer, its partition owner's: on a work queue every ack asks each other
// consumer of the stream whether it still needs the message, so one stream
// of 64 filtered consumers cost nats-server four times the CPU per command
// (docs/ARCHITECTURE.md). The server's subject mapping
// (events.CommandMappingDestination) files each command under its
// partition. A stream keeps every command of a key, not only the last one
// published: with one message per subject, a stale command republished
// after a newer one (a relay retry past the duplicate window) would evict
// the newer command before it was consumed. Ordering per key is preserved,
// and timeoutd's version check makes the stale one a no-op.
func Specs(cfg Config) []jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	expirySubjects := []string{events.MissedSubjectPrefix + ">", events.FenceSubjectPrefix + ">"}
	for _, p := range cfg.FireSubjectPrefixes {
		expirySubjects = append(expirySubjects, p+">")
	}
	base := func(name string, subjects []string, maxAge time.Duration) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:       name,
			Subjects:   subjects,
			Storage:    jetstream.FileStorage,
			Replicas:   cfg.Replicas,
			Retention:  jetstream.LimitsPolicy,
			Discard:    jetstream.DiscardOld,
			MaxAge:     maxAge,
			Duplicates: cfg.DuplicateWindow,
			// Every stream but the expiries is written by more than one
			// tenant (the expiries allow atomic batches, below), and these headers would let a publisher act on
			// messages other than its own: a rollup purges a subject or
			// the stream, a schedule publishes later on a target subject
			// of its choice, a counter or an atomic batch changes how
			// the server stores what others publish, a TTL removes a
			// message. JetStream refuses each header on a stream that
			// does not allow it (docs/ARCHITECTURE.md, "Tenant
			// isolation"); these say so here, where a change would show.
			AllowRollup:        false,
			AllowMsgTTL:        false,
			AllowMsgSchedules:  false,
			AllowMsgCounter:    false,
			AllowAtomicPublish: false,
		}
	}
	specs := make([]jetstream.StreamConfig, 0, events.Partitions+3)
	for p := range events.Partitions {
		commands := base(events.CommandStream(p), events.PartitionCommandSubjects(p), 0)
		commands.Description = fmt.Sprintf("timeout commands of partition %d", p)
		commands.Retention = jetstream.WorkQueuePolicy
		specs = append(specs, commands)
	}
	// The expiry stream is timeoutd's alone (no tenant may publish there,
	// deploy/compose/nats.conf), so atomic batches there act on nobody
	// else's messages: on a replicated stream timeoutd publishes a
	// partition's events as one batch under its fence
	// (services/timeoutd/jetstream.Publisher).
	expiries := base(events.StreamExpiries, expirySubjects, cfg.MaxAge)
	expiries.AllowAtomicPublish = true
	return append(specs,
		expiries,
		base(events.StreamOrderEvents, []string{"orders.created.>", "orders.paid.>", "orders.cancelled.>"}, cfg.MaxAge),
		base(events.StreamDeadLetters, []string{events.DeadLetterSubjectPrefix + ">"}, DeadLetterMaxAgeDefault),
	)
}

// ErrLegacyCommands is returned by Ensure while the single command stream
// the per-partition ones replace (events.StreamCommandsLegacy) still holds
// commands: they must be consumed by the timeoutd that reads that stream
// before it goes (docs/ARCHITECTURE.md, "Upgrading from the single command
// stream").
var ErrLegacyCommands = errors.New("the single command stream still holds commands")

// Ensure creates every stream of Specs(cfg), or updates it to these
// settings when it exists. It never removes a subject a stream already
// has, so services configured with different fire subject prefixes do not
// rewrite the expiry stream back and forth. It first removes the legacy
// single command stream, whose subjects overlap the partitions' streams,
// when it is empty, and otherwise fails with ErrLegacyCommands, changing
// nothing.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	if err := retireLegacyCommands(ctx, js); err != nil {
		return err
	}
	for _, sc := range Specs(cfg) {
		if s, err := js.Stream(ctx, sc.Name); err == nil {
			for _, subj := range s.CachedInfo().Config.Subjects {
				if !slices.Contains(sc.Subjects, subj) {
					sc.Subjects = append(sc.Subjects, subj)
				}
			}
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("read stream %s: %w", sc.Name, err)
		}
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("ensure stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// retireLegacyCommands deletes events.StreamCommandsLegacy when it holds no
// command. So that no command lands between the check and the delete, the
// stream is first closed to new messages (a byte limit of 1 with discard
// new: a producer's publish fails and its outbox retries it, on the
// partitions' streams once they exist); if a command did land before that,
// the stream is reopened and ErrLegacyCommands returned.
func retireLegacyCommands(ctx context.Context, js jetstream.JetStream) error {
	s, err := js.Stream(ctx, events.StreamCommandsLegacy)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read stream %s: %w", events.StreamCommandsLegacy, err)
	}
	legacy := s.CachedInfo()
	if n := legacy.State.Msgs; n > 0 {
		return fmt.Errorf("%w: %s holds %d; let timeoutd consume them with the producers stopped, then run the bootstrap again", ErrLegacyCommands, events.StreamCommandsLegacy, n)
	}
	closed := legacy.Config
	closed.Discard, closed.MaxBytes = jetstream.DiscardNew, 1
	if _, err := js.UpdateStream(ctx, closed); err != nil {
		return fmt.Errorf("close stream %s to new commands: %w", events.StreamCommandsLegacy, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", events.StreamCommandsLegacy, err)
	}
	if n := info.State.Msgs; n > 0 {
		if _, err := js.UpdateStream(ctx, legacy.Config); err != nil {
			return fmt.Errorf("reopen stream %s: %w", events.StreamCommandsLegacy, err)
		}
		return fmt.Errorf("%w: %s received %d while being retired; stop the producers first", ErrLegacyCommands, events.StreamCommandsLegacy, n)
	}
	if err := js.DeleteStream(ctx, events.StreamCommandsLegacy); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream %s: %w", events.StreamCommandsLegacy, err)
	}
	return nil
}

// Verify checks, reading only, that every stream of Specs(cfg) named in
// names exists and captures every subject of its spec: the services call it
// at start instead of Ensure. The error names the stream and the missing
// subject and says to run the bootstrap step.
func Verify(ctx context.Context, js jetstream.JetStream, cfg Config, names ...string) error {
	for _, sc := range Specs(cfg) {
		if !slices.Contains(names, sc.Name) {
			continue
		}
		s, err := js.Stream(ctx, sc.Name)
		if err != nil {
			return fmt.Errorf("stream %s: %w (run the streams bootstrap, deploy/streams, first)", sc.Name, err)
		}
		have := s.CachedInfo().Config.Subjects
		for _, subj := range sc.Subjects {
			if !slices.Contains(have, subj) {
				return fmt.Errorf("stream %s does not capture %s (has %v): run the streams bootstrap, deploy/streams, with the same fire subject prefixes", sc.Name, subj, have)
			}
		}
	}
	return nil
}

// errCodeStreamNotMatch is JetStream's error code for a message whose
// expected stream (jetstream.WithExpectStream) is not the one that took it;
// nats.go names no constant for it.
const errCodeStreamNotMatch jetstream.ErrorCode = 10060

// mappingProbeKey is the key of the command VerifyCommandMapping sends,
// which no stream stores.
const mappingProbeKey = "mapping-probe"

// VerifyCommandMapping checks that the server files a command published on
// events.CommandSubject(key) in the stream of key's partition: that its
// configuration declares the subject mapping events.CommandMappingSource →
// events.CommandMappingDestination. Without it a producer's every command
// would fail with no stream to take it. The probe is published expecting
// the partition's stream and a last sequence on its subject that no
// subject reaches, so JetStream refuses it, and the refusal says which
// check failed: nothing is stored. A producer (the orders service) calls it
// at start; it needs the right to publish commands.
func VerifyCommandMapping(ctx context.Context, js jetstream.JetStream) error {
	want := events.CommandStream(events.PartitionOf(mappingProbeKey))
	msg := nats.NewMsg(events.CommandSubject(mappingProbeKey))
	_, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(want), jetstream.WithExpectLastSequencePerSubject(math.MaxUint64))
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return fmt.Errorf("the command mapping probe was stored in %s: its subject %s has no last sequence check", want, events.PartitionedCommandSubject(mappingProbeKey))
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return nil
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("no stream takes %s: declare the mapping %q: %q in the NATS server configuration (deploy/compose/nats.conf) and run the streams bootstrap", events.CommandSubject(mappingProbeKey), events.CommandMappingSource, events.CommandMappingDestination)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamNotMatch:
		return fmt.Errorf("%s is filed in another stream than %s: the NATS server's mapping of %q must be %q", events.CommandSubject(mappingProbeKey), want, events.CommandMappingSource, events.CommandMappingDestination)
	default:
		return fmt.Errorf("probe the command mapping: %w", err)
	}
}

// CommandBacklog returns the commands stored in every partition's command
// stream: those no timeoutd has acked yet (one stream info request per
// partition).
func CommandBacklog(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	var n uint64
	for _, name := range events.CommandStreams() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("stream %s: %w", name, err)
		}
		n += s.CachedInfo().State.Msgs
	}
	return n, nil
}
