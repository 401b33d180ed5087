package timeoutd

import (
	"context"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// Lease and Fence are the lease and the fence of writes and publishes
// (package lease), named here for the adapters' callers outside timeoutd.
type (
	Lease = lease.Lease
	Fence = lease.Fence
)

// Store is every SQL operation timeoutd performs; package postgres
// implements it. All methods are safe for concurrent use.
type Store interface {
	// Apply upserts the commands in one transaction, fenced: only the
	// commands of partitions whose lease fence still grants (same owner,
	// same epoch, not expired by the database's clock, checked and locked in
	// the same transaction) are written, and the partitions refused are
	// returned. A row changes only when the command's version is newer than
	// the stored one (tombstones included). cmds holds at most one command
	// per key. It returns, once committed, the rows at their command's
	// version and state: those it changed, and those an earlier call
	// committed (a retry after a commit whose reply was lost), so that the
	// caller schedules them either way. A clear writes a tombstone whose
	// deadline is now.
	Apply(ctx context.Context, fence lease.Fence, cmds []events.Command, now time.Time) (changes []Change, refused []int, err error)
	// DueRows returns the rows of due still pending at their version, with
	// what their expiry events carry. It writes nothing: the fire path
	// reads the rows of the timeouts that are not plain, publishes the
	// events, then calls MarkFired.
	DueRows(ctx context.Context, due []Due) ([]Timeout, error)
	// MarkFired, in one transaction fenced as Apply is, marks fired at
	// firedAt (their tombstone time) the rows of due still pending at that
	// version, and returns the partitions the fence refused. It is called
	// once the rows' expiry events are stored in JetStream: a pending row
	// whose deadline passed is an event not known to be published (the
	// timeout row is the outbox).
	MarkFired(ctx context.Context, fence lease.Fence, due []Due, firedAt time.Time) (refused []int, err error)
	// LoadPending returns up to limit pending rows of partition with key >
	// afterKey, in key order (only Key, Version, Deadline and Plain are
	// set).
	LoadPending(ctx context.Context, partition int, afterKey string, limit int) ([]Timeout, error)
	// RetireTombstones turns up to limit tombstones older than before into
	// version marks (StateRetired: the key's version and nothing else) and
	// returns how many it retired: none unless fence holds its leases
	// (checked in the same statement), so that one instance sweeps, and a
	// former one writes nothing.
	RetireTombstones(ctx context.Context, fence lease.Fence, before time.Time, limit int) (int, error)
	// ForgetMarks deletes up to limit version marks whose tombstone time
	// is older than before and returns how many it deleted, fenced as
	// RetireTombstones is.
	ForgetMarks(ctx context.Context, fence lease.Fence, before time.Time, limit int) (int, error)
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

// Message is one delivery from the Source: a command, or a batch of a
// partition's commands (events.HeaderBatch).
type Message interface {
	// Subject is the subject the command was published on.
	Subject() string
	// Data is the raw command, or a batch's commands one per line.
	Data() []byte
	// Header returns the value of the message's header key, "" when it
	// has none; a batch has events.HeaderBatch.
	Header(key string) string
	// Seq is the message's sequence in its stream.
	Seq() uint64
	// Ack acknowledges the message (it is not redelivered).
	Ack() error
	// Term terminates the message (it is never redelivered).
	Term() error
	// NakWithDelay asks for a redelivery after delay.
	NakWithDelay(delay time.Duration) error
}

// Source delivers the command batches of the partitions added to it;
// package jetstream implements it with a durable pull consumer per
// partition.
type Source interface {
	// Next returns the next batch, blocking until at least one message is
	// available or ctx ends (then it returns ctx's error and hands back for
	// redelivery what it had taken). A batch holds at most the source's
	// batch size, of any partitions added.
	Next(ctx context.Context) ([]Message, error)
	// Add starts delivering partition p's commands. Safe to call
	// concurrently for different partitions.
	Add(ctx context.Context, p int) error
	// Remove stops fetching partition p's commands; those already fetched
	// may still be returned by Next (the fence refuses them).
	Remove(p int)
	// Close stops fetching and naks every message fetched and not yet
	// returned by Next.
	Close() error
	// Mark returns a position covering every command of partition p the
	// source holds now, to be passed to Consumed.
	Mark(ctx context.Context, p int) (uint64, error)
	// Consumed reports whether every command of partition p up to mark has
	// been acked or terminated (by this process or a previous owner).
	Consumed(ctx context.Context, p int, mark uint64) (bool, error)
}

// DeadLetterer publishes dead letters and waits for their PubAck.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, d events.DeadLetter) error
}

// Event is an expiry event as published: its subject, its Nats-Msg-Id
// and its encoded form.
type Event struct {
	Subject string
	MsgID   string
	Data    []byte
	// TraceParent is the W3C trace context of the fire's span, published
	// as the traceparent header so that the consumer continues its trace;
	// "" when the fire is not traced.
	TraceParent string
	// Partition and Fence are the event's partition and the stream
	// sequence of its fence (Publisher.Fence) the publisher holds: the
	// stream stores the event only while that fence is the partition's
	// last. A zero Fence publishes unfenced (a tool, a test).
	Partition int
	Fence     uint64
}

// Publisher publishes expiry events to JetStream; package jetstream
// implements it.
type Publisher interface {
	// Publish sends events without waiting between them, each with its
	// Nats-Msg-Id, and waits for every PubAck; it returns the time the last
	// one arrived. On error some may have been stored: publishing them again
	// is deduplicated by their ids.
	Publish(ctx context.Context, events []Event) (ackedAt time.Time, err error)
	// Stored reports whether an event with the Nats-Msg-Id msgID is stored
	// on subject, among every event of the subject (a fire subject may be
	// shared by several keys, and a deposed owner's late event may follow
	// the one sought). The fire path asks before publishing a missed event
	// for a row whose fired event may already be stored (published, then
	// not marked: a failed mark, a crash).
	Stored(ctx context.Context, subject, msgID string) (bool, error)
	// Fence publishes the fence of each of fence's leases on its
	// partition's fence subject (events.FenceSubject) in the expiry
	// stream, naming the lease's epoch, and returns their stream
	// sequences, in order. An owner fences a partition as it takes it
	// over, before it consumes a command of it: from then on the stream
	// refuses every event that names an earlier fence, however late a
	// former owner's publish arrives. With expect, a partition is fenced
	// only if its last fence is still at the sequence expect gives it (0:
	// none left, aged out of the stream); one whose last fence changed is
	// left as it is, its sequence 0.
	Fence(ctx context.Context, fence lease.Fence, expect []uint64) ([]uint64, error)
	// LastFence returns partition p's last fence in the expiry stream (the
	// zero StreamFence: none).
	LastFence(ctx context.Context, p int) (StreamFence, error)
}

// StreamFence is a partition's fence in the expiry stream: its sequence,
// and the owner and the epoch it names.
type StreamFence struct {
	Seq   uint64
	Owner string
	Epoch int64
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
