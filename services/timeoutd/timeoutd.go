package timeoutd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Errors of the domain; package http maps them to HTTP statuses in one table.
var (
	// ErrNotFound is returned when a key has no pending timeout.
	ErrNotFound = errors.New("timeoutd: not found")
	// ErrInvalid is returned for a malformed query (wrapped with the field).
	ErrInvalid = errors.New("timeoutd: invalid")
)

// State is the state of a stored timeout row.
type State int16

// The states of a row. Cleared and fired rows are tombstones: they keep the
// key's version so that stale commands are rejected, and their fire data,
// until the janitor retires them after TombstoneTTL into version marks,
// which keep only the key's version, for good: latest wins however late a
// stale command comes.
const (
	StatePending State = 0
	StateCleared State = 1
	StateFired   State = 2
	StateRetired State = 3
)

// Timeout is one timeout as stored.
type Timeout struct {
	Key       string
	Partition int
	Version   int64
	State     State
	// Deadline is when the timeout expires (pending rows), in UTC.
	Deadline time.Time
	// MaxLateness is the misfire bound; 0 means fire however late.
	MaxLateness time.Duration
	// FireSubject is where the expiry event goes.
	FireSubject string
	// Payload is returned verbatim in the expiry event.
	Payload []byte
}

// Change is a row that an Apply really changed: its new version, state and
// deadline (for a clear, the deadline holds the time of the clear).
type Change struct {
	Key      string
	Version  int64
	State    State
	Deadline time.Time
}

// Due is a timeout the scheduler fires: key and version identify the row,
// Deadline is its deadline.
type Due struct {
	Key      string
	Version  int64
	Deadline time.Time
}

// Cursor is a keyset position in the (deadline, key) order of pending
// timeouts; the zero Cursor is the start.
type Cursor struct {
	Deadline time.Time
	Key      string
}

// Query selects a page of pending timeouts.
type Query struct {
	// After is the position after which the page starts.
	After Cursor
	// KeyPrefix keeps only the keys that start with it (empty: all).
	KeyPrefix string
	// Limit is the page size.
	Limit int
}

// Store is every SQL operation timeoutd performs; package postgres
// implements it. All methods are safe for concurrent use.
type Store interface {
	// Apply upserts the commands in one statement and one transaction: a row
	// changes only when the command's version is newer than the stored one
	// (tombstones included). cmds holds at most one command per key. It
	// returns the rows that changed, once committed. A clear writes a
	// tombstone whose deadline is now.
	Apply(ctx context.Context, cmds []events.Command, partitions int, now time.Time) ([]Change, error)
	// Fire, in one transaction, marks fired the rows of due still pending at
	// that version (their tombstone time becomes firedAt), calls build for
	// each such row and inserts the returned messages into the outbox. It
	// returns the messages, committed, with their outbox IDs set. Rows that
	// changed since are skipped.
	Fire(ctx context.Context, due []Due, firedAt time.Time, build func(Timeout) outbox.Message) ([]outbox.Message, error)
	// LoadPending returns up to limit pending rows with key > afterKey, in
	// key order (only Key, Version and Deadline are set).
	LoadPending(ctx context.Context, afterKey string, limit int) ([]Timeout, error)
	// RetireTombstones turns up to limit tombstones older than before into
	// version marks (StateRetired: the key's version and nothing else) and
	// returns how many it retired.
	RetireTombstones(ctx context.Context, before time.Time, limit int) (int, error)
	Reader
	// Ping checks the database answers.
	Ping(ctx context.Context) error
}

// Reader is the read API's queries of pending timeouts. Store includes
// it; Deps.Reads may give the reads a store of their own (a small pool),
// so that readers can never take the connections of ingest and fire.
type Reader interface {
	// ListPending returns a page of pending timeouts in (deadline, key) order.
	ListPending(ctx context.Context, q Query) ([]Timeout, error)
	// GetPending returns the pending timeout of key, or ErrNotFound.
	GetPending(ctx context.Context, key string) (Timeout, error)
}

// Message is one command delivery from the Source.
type Message interface {
	// Subject is the subject the command was published on.
	Subject() string
	// Data is the raw command.
	Data() []byte
	// Seq is the message's sequence in its stream.
	Seq() uint64
	// Ack acknowledges the message (it is not redelivered).
	Ack() error
	// Term terminates the message (it is never redelivered).
	Term() error
	// NakWithDelay asks for a redelivery after delay.
	NakWithDelay(delay time.Duration) error
}

// Source delivers command batches; package jetstream implements it with a
// durable pull consumer.
type Source interface {
	// Next returns the next batch, blocking until at least one message is
	// available or ctx ends (then it returns ctx's error). A batch holds at
	// most the source's batch size.
	Next(ctx context.Context) ([]Message, error)
	// Close stops fetching and naks every message fetched and not yet
	// returned by Next.
	Close() error
	// Mark returns a position covering every command the source holds
	// now, to be passed to Consumed.
	Mark(ctx context.Context) (uint64, error)
	// Consumed reports whether every command up to mark has been acked or
	// terminated (by this process or a previous one).
	Consumed(ctx context.Context, mark uint64) (bool, error)
}

// DeadLetterer publishes dead letters and waits for their PubAck.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, d events.DeadLetter) error
}

// Relay is the outbox relay (internal/outbox.Relay satisfies it).
type Relay interface {
	Run(ctx context.Context) error
	// Handoff publishes committed outbox rows without reading them back,
	// waiting while too many are in flight; false means ctx ended first
	// and they were left to the relay's polls.
	Handoff(ctx context.Context, msgs []outbox.Message) bool
	Flush(ctx context.Context) (int, error)
	Stats(ctx context.Context) (outbox.Stats, error)
}

// Metrics receives the observations the counters of Stats do not cover;
// package http implements it with Prometheus. Methods must not block.
type Metrics interface {
	// BatchSize observes a batch of n items at stage "ingest" or "fire".
	BatchSize(stage string, n int)
	// FireLateness observes an expiry event's PubAck time minus its deadline.
	FireLateness(d time.Duration)
	// DeadLettered counts a dead-lettered command.
	DeadLettered(reason events.Reason)
	// RecoveryDuration observes the time from start to ready.
	RecoveryDuration(d time.Duration)
}

// NopMetrics discards every observation.
type NopMetrics struct{}

// BatchSize implements Metrics.
func (NopMetrics) BatchSize(string, int) {}

// FireLateness implements Metrics.
func (NopMetrics) FireLateness(time.Duration) {}

// DeadLettered implements Metrics.
func (NopMetrics) DeadLettered(events.Reason) {}

// RecoveryDuration implements Metrics.
func (NopMetrics) RecoveryDuration(time.Duration) {}

// Defaults of Config.
const (
	// PartitionsDefault is the number of key partitions stored with each
	// row, so that instances can later own partitions (see DESIGN).
	PartitionsDefault = 16
	// TickDefault is the wheel's resolution; lateness is below one tick plus
	// the batch's transaction and PubAck.
	TickDefault = time.Millisecond
	// MaxPendingDefault bounds the timeouts held in memory.
	MaxPendingDefault = 20_000_000
	// MaxHorizonDefault is the furthest accepted deadline from now.
	MaxHorizonDefault = 400 * 24 * time.Hour
	// FireBatchDefault is the most timeouts fired in one transaction.
	FireBatchDefault = 5000
	// FireConcurrencyDefault is the most fire transactions in flight.
	FireConcurrencyDefault = 2
	// IngestLanesDefault is the number of sub-batches of a command batch
	// upserted concurrently, split by key partition.
	IngestLanesDefault = 2
	// RecoveryBatchDefault is the page size of the recovery load.
	RecoveryBatchDefault = 50_000
	// RecoveryCatchupMaxDefault bounds how long recovery holds the overdue
	// timeouts while ingest consumes the commands that waited in the source.
	RecoveryCatchupMaxDefault = 10 * time.Second
	// OverdueRateDefault is how many overdue timeouts per second recovery
	// releases, so a long outage does not flood NATS at once.
	OverdueRateDefault = 20_000
	// TombstoneTTLDefault is how long cleared and fired keys keep their
	// fire data after the clear or the fire; then they shrink to a version
	// mark.
	TombstoneTTLDefault = time.Hour
	// JanitorIntervalDefault is how often the janitor looks for expired
	// tombstones.
	JanitorIntervalDefault = 10 * time.Second
	// JanitorBatchDefault is the most tombstones deleted per statement.
	JanitorBatchDefault = 10_000
	// RetryDelayDefault is the pause after a failed database operation.
	RetryDelayDefault = 500 * time.Millisecond
	// RecentDefault is the number of recent expiries kept for the API.
	RecentDefault = 200
)

// Config configures a Service. The zero value plus the adapters is valid.
type Config struct {
	// FireSubjectPrefixes are the allowed fire subject prefixes, each ending
	// in "."; default [events.OrderCancelSubjectPrefix]. Commands with
	// another fire subject are dead-lettered (subject_not_allowed).
	FireSubjectPrefixes []string
	// Partitions is the number of key partitions; default PartitionsDefault.
	Partitions int
	// Tick is the wheel's resolution; default TickDefault.
	Tick time.Duration
	// MaxPending bounds the pending timeouts in memory. Only a set for a
	// key not held in memory needs room: at the bound such sets are
	// deferred (negatively acknowledged, redelivered after RetryDelay)
	// while clears and the other commands go on. Default MaxPendingDefault.
	MaxPending int
	// MaxHorizon is the furthest accepted deadline from now; further ones
	// are dead-lettered (deadline_out_of_range). Default MaxHorizonDefault.
	MaxHorizon time.Duration
	// IngestLanes is the number of concurrent upserts a command batch is
	// split into by key partition; default IngestLanesDefault.
	IngestLanes int
	// FireBatch is the most timeouts per fire transaction; default
	// FireBatchDefault.
	FireBatch int
	// FireConcurrency is the most fire transactions in flight: the wheel's
	// next batch is taken while earlier ones commit, so an expiry waits for
	// its own transaction, not for its predecessors'. Default
	// FireConcurrencyDefault.
	FireConcurrency int
	// RecoveryBatch is the page size of the recovery load; default
	// RecoveryBatchDefault.
	RecoveryBatch int
	// OverdueRate is how many overdue timeouts per second are released after
	// recovery; default OverdueRateDefault.
	OverdueRate int
	// RecoveryCatchupMax bounds how long recovery holds the overdue
	// timeouts until ingest has consumed every command that was waiting in
	// the source when the pending rows were loaded (a clear queued during an
	// outage must win over the overdue timeout it clears); past it they are
	// released anyway. Default RecoveryCatchupMaxDefault.
	RecoveryCatchupMax time.Duration
	// TombstoneTTL is how long a cleared or fired key keeps its fire data
	// before it shrinks to a version mark; default TombstoneTTLDefault.
	TombstoneTTL time.Duration
	// JanitorInterval is the pause between tombstone sweeps; default
	// JanitorIntervalDefault.
	JanitorInterval time.Duration
	// JanitorBatch is the most tombstones deleted per statement; default
	// JanitorBatchDefault.
	JanitorBatch int
	// RetryDelay is the pause after a failed database operation; default
	// RetryDelayDefault.
	RetryDelay time.Duration
	// Recent is the number of recent expiries kept; default RecentDefault.
	Recent int
	// Now is the wall clock; default time.Now.
	Now func() time.Time
	// Logger receives the service's logs; default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with defaults applied, or an error naming the first
// invalid field.
func (c Config) withDefaults() (Config, error) {
	if len(c.FireSubjectPrefixes) == 0 {
		c.FireSubjectPrefixes = []string{events.OrderCancelSubjectPrefix}
	}
	c.Partitions = cmp.Or(c.Partitions, PartitionsDefault)
	c.Tick = cmp.Or(c.Tick, TickDefault)
	c.MaxPending = cmp.Or(c.MaxPending, MaxPendingDefault)
	c.MaxHorizon = cmp.Or(c.MaxHorizon, MaxHorizonDefault)
	c.FireBatch = cmp.Or(c.FireBatch, FireBatchDefault)
	c.FireConcurrency = cmp.Or(c.FireConcurrency, FireConcurrencyDefault)
	c.IngestLanes = cmp.Or(c.IngestLanes, IngestLanesDefault)
	c.RecoveryBatch = cmp.Or(c.RecoveryBatch, RecoveryBatchDefault)
	c.OverdueRate = cmp.Or(c.OverdueRate, OverdueRateDefault)
	c.RecoveryCatchupMax = cmp.Or(c.RecoveryCatchupMax, RecoveryCatchupMaxDefault)
	c.TombstoneTTL = cmp.Or(c.TombstoneTTL, TombstoneTTLDefault)
	c.JanitorInterval = cmp.Or(c.JanitorInterval, JanitorIntervalDefault)
	c.JanitorBatch = cmp.Or(c.JanitorBatch, JanitorBatchDefault)
	c.RetryDelay = cmp.Or(c.RetryDelay, RetryDelayDefault)
	c.Recent = cmp.Or(c.Recent, RecentDefault)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	for _, p := range c.FireSubjectPrefixes {
		if !strings.HasSuffix(p, ".") || !events.ValidSubject(strings.TrimSuffix(p, ".")) {
			return c, fmt.Errorf("timeoutd: FireSubjectPrefixes: %q must be a literal subject followed by '.'", p)
		}
	}
	switch {
	case c.Partitions < 1 || c.Partitions > 32767:
		return c, fmt.Errorf("timeoutd: Partitions must be in [1, 32767], got %d", c.Partitions)
	case c.Tick < 0:
		return c, fmt.Errorf("timeoutd: Tick must be positive, got %v", c.Tick)
	case c.MaxPending < 1:
		return c, fmt.Errorf("timeoutd: MaxPending must be positive, got %d", c.MaxPending)
	case c.MaxHorizon < 0:
		return c, fmt.Errorf("timeoutd: MaxHorizon must be positive, got %v", c.MaxHorizon)
	case c.FireBatch < 1:
		return c, fmt.Errorf("timeoutd: FireBatch must be positive, got %d", c.FireBatch)
	case c.FireConcurrency < 1 || c.FireConcurrency > 64:
		return c, fmt.Errorf("timeoutd: FireConcurrency must be in [1, 64], got %d", c.FireConcurrency)
	case c.IngestLanes < 1 || c.IngestLanes > 64:
		return c, fmt.Errorf("timeoutd: IngestLanes must be in [1, 64], got %d", c.IngestLanes)
	case c.RecoveryBatch < 1:
		return c, fmt.Errorf("timeoutd: RecoveryBatch must be positive, got %d", c.RecoveryBatch)
	case c.OverdueRate < 1:
		return c, fmt.Errorf("timeoutd: OverdueRate must be positive, got %d", c.OverdueRate)
	case c.RecoveryCatchupMax < 0:
		return c, fmt.Errorf("timeoutd: RecoveryCatchupMax must be positive, got %v", c.RecoveryCatchupMax)
	case c.TombstoneTTL < 0:
		return c, fmt.Errorf("timeoutd: TombstoneTTL must be positive, got %v", c.TombstoneTTL)
	case c.JanitorInterval < 0:
		return c, fmt.Errorf("timeoutd: JanitorInterval must be positive, got %v", c.JanitorInterval)
	case c.JanitorBatch < 1:
		return c, fmt.Errorf("timeoutd: JanitorBatch must be positive, got %d", c.JanitorBatch)
	case c.RetryDelay < 0:
		return c, fmt.Errorf("timeoutd: RetryDelay must be positive, got %v", c.RetryDelay)
	case c.Recent < 1:
		return c, fmt.Errorf("timeoutd: Recent must be positive, got %d", c.Recent)
	}
	return c, nil
}

// PartitionOf returns the partition of key among n: FNV-1a of the key
// modulo n.
func PartitionOf(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}
