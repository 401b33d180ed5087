package timeoutd

import (
	"context"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

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
	// Start publishes the outbox in the background until ctx ends or Stop.
	Start(ctx context.Context)
	// Stop ends the publishing and waits for it.
	Stop()
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
