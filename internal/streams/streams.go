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
	"slices"
	"time"

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

// Specs returns the stream configurations Ensure applies.
//
// The command stream is a work queue: a command is removed once timeoutd
// acked it, so the stream is bounded by the commands in flight. It keeps
// every command of a key, not only the last one published: with one message
// per subject, a stale command republished after a newer one (a relay retry
// past the duplicate window) would evict the newer command before it was
// consumed. Ordering per key is preserved, and timeoutd's version check
// makes the stale one a no-op.
func Specs(cfg Config) []jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	expirySubjects := []string{events.MissedSubjectPrefix + ">"}
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
		}
	}
	commands := base(events.StreamCommands, []string{events.CommandSubjects}, 0)
	commands.Retention = jetstream.WorkQueuePolicy
	// Each command is filed under its partition (timeouts.cmd.<p>.<key>),
	// so that each partition's owner consumes it alone; producers keep
	// publishing on timeouts.cmd.<key>.
	commands.SubjectTransform = &jetstream.SubjectTransformConfig{
		Source: events.CommandTransformSource, Destination: events.CommandTransformDestination}
	return []jetstream.StreamConfig{
		commands,
		base(events.StreamExpiries, expirySubjects, cfg.MaxAge),
		base(events.StreamOrderEvents, []string{"orders.created.>", "orders.paid.>", "orders.cancelled.>"}, cfg.MaxAge),
		base(events.StreamDeadLetters, []string{events.DeadLetterSubjectPrefix + ">"}, DeadLetterMaxAgeDefault),
	}
}

// Ensure creates every stream of Specs(cfg), or updates it to these
// settings when it exists. It never removes a subject a stream already
// has, so services configured with different fire subject prefixes do not
// rewrite the expiry stream back and forth.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) error {
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
	// timeoutd's single consumer of every command, from before the command
	// stream was partitioned: its filter overlaps the partitions' consumers,
	// which a work queue refuses.
	if err := js.DeleteConsumer(ctx, events.StreamCommands, LegacyCommandConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete the unpartitioned command consumer: %w", err)
	}
	return nil
}

// LegacyCommandConsumer is the durable name of timeoutd's consumer of every
// command before the command stream was partitioned; Ensure deletes it.
const LegacyCommandConsumer = "timeoutd"

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
