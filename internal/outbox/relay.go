package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
)

// Defaults of Config.
const (
	TableDefault        = "outbox"
	BatchSizeDefault    = 1000
	PollIntervalDefault = 250 * time.Millisecond
	AckTimeoutDefault   = 5 * time.Second
	RetryDelayDefault   = 500 * time.Millisecond
	HandoffMaxDefault   = 20_000
)

// Config configures a Relay.
type Config struct {
	// Table is the outbox table name; default "outbox".
	Table string
	// BatchSize is the most rows published per transaction, which also
	// bounds the PubAcks in flight; default 1000.
	BatchSize int
	// PollInterval is how often the table is checked when nobody calls
	// Kick (rows left by a crash, another process's writes); default 250ms.
	PollInterval time.Duration
	// AckTimeout bounds the wait for a batch's PubAcks; default 5s. On
	// timeout the batch is rolled back and retried.
	AckTimeout time.Duration
	// RetryDelay is the pause after a failed batch; default 500ms.
	RetryDelay time.Duration
	// Workers is the number of batches published concurrently; default 1.
	// Claims skip locked rows, so workers never publish the same row; but
	// rows of different batches may reach the stream out of table order.
	// Use more than one only where consumers order by version, not by
	// arrival (expiry events: one per key and version).
	Workers int
	// ClaimMinAge makes the relay's own claims (Run's polls, not Flush)
	// skip rows younger than it, measured from their created_at. Set it
	// above AckTimeout where the writer hands its committed rows over with
	// Handoff, so that a poll does not publish again rows still in flight;
	// the poll then only picks up what a hand-off failed to publish or
	// delete. Default 0: claim every row.
	ClaimMinAge time.Duration
	// HandoffMax bounds the handed-over messages in flight (queued,
	// published and awaiting PubAck, or awaiting deletion); Handoff waits
	// while a batch would exceed it. Default 20,000.
	HandoffMax int
	// OnPublished, if set, is called after a batch's deletion committed, with
	// the messages and the time the last PubAck arrived. It must not block,
	// and it may be called concurrently (several Workers, or Workers and
	// the hand-off path).
	OnPublished func(batch []Message, ackedAt time.Time)
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

var identRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (c *Config) setDefaults() error {
	c.Table = cmp.Or(c.Table, TableDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Workers = cmp.Or(c.Workers, 1)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.AckTimeout = cmp.Or(c.AckTimeout, AckTimeoutDefault)
	c.RetryDelay = cmp.Or(c.RetryDelay, RetryDelayDefault)
	c.HandoffMax = cmp.Or(c.HandoffMax, HandoffMaxDefault)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case !identRe.MatchString(c.Table):
		return fmt.Errorf("outbox: Table %q is not a lower-case SQL identifier", c.Table)
	case c.BatchSize < 1:
		return fmt.Errorf("outbox: BatchSize must be positive, got %d", c.BatchSize)
	case c.Workers < 1:
		return fmt.Errorf("outbox: Workers must be positive, got %d", c.Workers)
	case c.PollInterval < 0 || c.AckTimeout < 0 || c.RetryDelay < 0 || c.ClaimMinAge < 0:
		return errors.New("outbox: PollInterval, AckTimeout, RetryDelay and ClaimMinAge must not be negative")
	case c.HandoffMax < 1:
		return fmt.Errorf("outbox: HandoffMax must be positive, got %d", c.HandoffMax)
	}
	return nil
}

// Relay publishes the rows of an outbox table to JetStream. Start it with
// Start and end it with Stop; after committing new rows, call Kick so they
// go out at once, or hand them over with Handoff so they go out without
// being read back.
type Relay struct {
	startstop.Base
	cfg  Config
	pool *pgxpool.Pool
	js   jetstream.JetStream
	kick chan struct{}

	claimSQL  string
	deleteSQL string

	// The hand-off path: Handoff queues batches on handoff, Run's
	// publisher publishes them and passes them to its acker on acking,
	// which queues the acknowledged rows for its deleter.
	handoff  chan []Message
	acking   chan handed
	mu       sync.Mutex
	held     int           // messages handed over and not yet settled
	room     chan struct{} // closed (and replaced) when held decreases
	acked    []handed      // acknowledged, awaiting deletion
	toDelete chan struct{}
}

// handed is a handed-over batch on its way: its PubAck futures and the
// time it was sent, then the time its last PubAck arrived.
type handed struct {
	batch   []Message
	futures []jetstream.PubAckFuture
	sentAt  time.Time
	ackedAt time.Time
}

// NewRelay returns a relay over pool's cfg.Table publishing through js.
func NewRelay(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config) (*Relay, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	t := pgx.Identifier{cfg.Table}.Sanitize()
	return &Relay{
		cfg:  cfg,
		pool: pool,
		js:   js,
		kick: make(chan struct{}, 1),
		claimSQL: `DELETE FROM ` + t + ` WHERE id IN (
			SELECT id FROM ` + t + ` WHERE created_at <= clock_timestamp() - $2::interval
			ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
			RETURNING id, subject, msg_id, data`,
		deleteSQL: `DELETE FROM ` + t + ` WHERE id = ANY($1)`,
		handoff:   make(chan []Message, cfg.HandoffMax),
		acking:    make(chan handed, cfg.HandoffMax),
		toDelete:  make(chan struct{}, 1),
		room:      make(chan struct{}),
	}, nil
}

// batchSettingsSQL sets three options for the claiming transaction only.
//   - synchronous_commit off: the deletion need not wait for the WAL flush.
//     If a crash loses it, the rows are republished, which JetStream drops by
//     Nats-Msg-Id within its duplicate window and idempotent consumers absorb
//     beyond it; it halves the WAL flushes a message costs the writer's
//     database under load.
//   - plan_cache_mode force_custom_plan: the claim is a prepared statement;
//     a generic plan made while the table was nearly empty (a scan and sort
//     per batch) stalled a relay for minutes once a backlog built. Planning
//     each batch for the table as it is keeps the index scan.
//
// The batch's transaction stays open while its PubAcks are awaited, so it
// allows itself AckTimeout plus a margin of idleness whatever the
// session's idle_in_transaction_session_timeout ($1, in milliseconds):
// timeoutd keeps that short for its fenced writes.
const batchSettingsSQL = `SELECT set_config('synchronous_commit', 'off', true),
	set_config('plan_cache_mode', 'force_custom_plan', true),
	set_config('idle_in_transaction_session_timeout', $1, true)`

// batchIdleMargin is the idleness a batch's transaction allows itself
// beyond AckTimeout (the claim before the publish, the commit after).
const batchIdleMargin = 5 * time.Second

// batchIdle is batchSettingsSQL's idle_in_transaction_session_timeout.
func (r *Relay) batchIdle() string {
	return strconv.FormatInt((r.cfg.AckTimeout + batchIdleMargin).Milliseconds(), 10)
}

// Kick wakes the relay to publish what was just committed. It never blocks.
func (r *Relay) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Handoff publishes msgs, rows the caller has just committed (their IDs
// set by QueueInsertReturning), without reading them back: Run publishes them at
// once, waits for their PubAcks and deletes them in batches off the publish
// path. It waits while HandoffMax messages are in flight (backpressure:
// under overload the rows still take the cheap path, not the poll's claim
// ClaimMinAge later); it returns false, leaving the rows to the relay's
// polls, only if ctx ends first. Rows handed over stay in the table until
// PubAcked, so a crash at any point only republishes them.
func (r *Relay) Handoff(ctx context.Context, msgs []Message) bool {
	if len(msgs) == 0 {
		return true
	}
	r.mu.Lock()
	// A batch larger than HandoffMax goes alone.
	for r.held > 0 && r.held+len(msgs) > r.cfg.HandoffMax {
		room := r.room
		r.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return false
		}
		r.mu.Lock()
	}
	defer r.mu.Unlock()
	r.held += len(msgs)
	r.handoff <- msgs // cannot block: at most HandoffMax batches are held
	return true
}

// Start publishes in the background until ctx ends or Stop. When it ends
// it does not start new batches; a batch in flight is rolled back and left
// for the next run (use Flush first to drain on shutdown), and so are
// handed-over rows not yet deleted. Stop returns once every publishing
// goroutine has returned.
func (r *Relay) Start(ctx context.Context) { r.Base.Start(ctx, r.run) }

func (r *Relay) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.publishHandedOver(ctx) })
	wg.Go(func() { r.ackHandedOver(ctx) })
	wg.Go(func() { r.deleteHandedOver(ctx) })
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-timer.C:
		}
		n, err := r.drain(ctx, r.cfg.ClaimMinAge)
		wait := r.cfg.PollInterval
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("outbox relay batch failed; retrying", "table", r.cfg.Table, "err", err)
			wait = r.cfg.RetryDelay
		} else if n > 0 {
			wait = 0
		}
		timer.Reset(wait)
	}
}

// Flush publishes every row present when it is called, whatever its age,
// and returns when the table is empty or ctx ends; it returns the number of
// messages published. Rows handed over and still in flight may be published
// twice, which their Nats-Msg-Id deduplicates.
func (r *Relay) Flush(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := r.drain(ctx, 0)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// drain publishes batches of rows at least minAge old and returns the count
// and the first error. One batch goes first; only if it came back full do
// cfg.Workers workers go on, each until one of its batches comes back
// short, so that a poll of a nearly empty table costs one claim, not one
// per worker.
func (r *Relay) drain(ctx context.Context, minAge time.Duration) (int, error) {
	n, err := r.publishBatch(ctx, minAge)
	if err != nil || n < r.cfg.BatchSize {
		return n, err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total = n
		first error
	)
	for range r.cfg.Workers {
		wg.Go(func() {
			n, err := r.drainOne(ctx, minAge)
			mu.Lock()
			defer mu.Unlock()
			total += n
			if first == nil {
				first = err
			}
		})
	}
	wg.Wait()
	return total, first
}

// drainOne publishes batches until one comes back short.
func (r *Relay) drainOne(ctx context.Context, minAge time.Duration) (int, error) {
	total := 0
	for {
		n, err := r.publishBatch(ctx, minAge)
		total += n
		if err != nil || n < r.cfg.BatchSize {
			return total, err
		}
	}
}

// publishBatch claims up to BatchSize rows at least minAge old, publishes
// them asynchronously, waits for every PubAck and commits the deletion. Any
// failure rolls back.
func (r *Relay) publishBatch(ctx context.Context, minAge time.Duration) (n int, err error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin outbox batch: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, batchSettingsSQL, r.batchIdle()); err != nil {
		return 0, fmt.Errorf("set outbox batch settings: %w", err)
	}
	rows, err := tx.Query(ctx, r.claimSQL, r.cfg.BatchSize, minAge)
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Message, error) {
		var m Message
		err := row.Scan(&m.ID, &m.Subject, &m.MsgID, &m.Data)
		return m, err
	})
	if err != nil {
		return 0, fmt.Errorf("read outbox rows: %w", err)
	}
	if len(batch) == 0 {
		return 0, tx.Rollback(ctx)
	}
	ackedAt, err := r.publish(ctx, batch)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit outbox deletion: %w", err)
	}
	if r.cfg.OnPublished != nil {
		r.cfg.OnPublished(batch, ackedAt)
	}
	return len(batch), nil
}

// publish sends batch asynchronously and waits for all PubAcks, in order.
func (r *Relay) publish(ctx context.Context, batch []Message) (time.Time, error) {
	futures, err := r.send(batch)
	if err != nil {
		return time.Time{}, err
	}
	return r.await(ctx, time.Now(), batch, futures)
}

// send publishes batch asynchronously with each message's Nats-Msg-Id.
func (r *Relay) send(batch []Message) ([]jetstream.PubAckFuture, error) {
	futures := make([]jetstream.PubAckFuture, len(batch))
	for i, m := range batch {
		msg := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, m.MsgID)
		f, err := r.js.PublishMsgAsync(msg)
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		futures[i] = f
	}
	return futures, nil
}

// await waits for the PubAcks of batch until AckTimeout after sentAt, and
// returns the time the last one arrived. The bound runs from the send, not
// from the wait, so that when a connection drops the batches queued behind
// a lost one time out together rather than one AckTimeout after another.
func (r *Relay) await(ctx context.Context, sentAt time.Time, batch []Message, futures []jetstream.PubAckFuture) (time.Time, error) {
	ctx, cancel := context.WithDeadline(ctx, sentAt.Add(r.cfg.AckTimeout))
	defer cancel()
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return time.Time{}, fmt.Errorf("publish %s (%s): %w", batch[i].Subject, batch[i].MsgID, err)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for PubAck of %s: %w", batch[i].MsgID, ctx.Err())
		}
	}
	return r.cfg.Now(), nil
}

// publishHandedOver publishes the handed-over batches as they come and
// passes them to the acker, until ctx ends.
func (r *Relay) publishHandedOver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case batch := <-r.handoff:
			sentAt := time.Now()
			futures, err := r.send(batch)
			if err != nil {
				r.cfg.Logger.Warn("outbox hand-off publish failed; the rows stay for the relay's polls", "table", r.cfg.Table, "err", err)
				r.settle(len(batch))
				continue
			}
			r.acking <- handed{batch: batch, futures: futures, sentAt: sentAt} // cannot block: as many slots as handoff
		}
	}
}

// ackHandedOver waits for the PubAcks of the published batches in turn and
// queues the acknowledged ones for deletion, until ctx ends.
func (r *Relay) ackHandedOver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case h := <-r.acking:
			at, err := r.await(ctx, h.sentAt, h.batch, h.futures)
			if err != nil {
				if ctx.Err() == nil {
					r.cfg.Logger.Warn("outbox hand-off not acknowledged; the rows stay for the relay's polls", "table", r.cfg.Table, "err", err)
				}
				r.settle(len(h.batch))
				continue
			}
			h.ackedAt, h.futures = at, nil
			r.mu.Lock()
			r.acked = append(r.acked, h)
			r.mu.Unlock()
			select {
			case r.toDelete <- struct{}{}:
			default:
			}
		}
	}
}

// deleteHandedOver deletes the acknowledged rows, all that accumulated
// during the previous deletion in one statement, until ctx ends. A failed
// batch leaves its connection inside the transaction, which the pool then
// closes (and so rolls back). The
// deletion does not wait for the WAL flush (see batchSettingsSQL): a lost
// one only republishes.
func (r *Relay) deleteHandedOver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.toDelete:
		}
		r.mu.Lock()
		done := r.acked
		r.acked = nil
		r.mu.Unlock()
		var ids []int64
		for _, h := range done {
			for _, m := range h.batch {
				ids = append(ids, m.ID)
			}
		}
		// One round trip: the transaction pipelined as a batch.
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(batchSettingsSQL, r.batchIdle())
		b.Queue(r.deleteSQL, ids)
		b.Queue("COMMIT")
		err := r.pool.SendBatch(ctx, b).Close()
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("delete published outbox rows failed; the relay's polls republish them", "table", r.cfg.Table, "err", err)
			}
		} else if r.cfg.OnPublished != nil {
			for _, h := range done {
				r.cfg.OnPublished(h.batch, h.ackedAt)
			}
		}
		for _, h := range done {
			r.settle(len(h.batch))
		}
	}
}

// settle ends the hand-off of a batch of n messages.
func (r *Relay) settle(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held -= n
	close(r.room)
	r.room = make(chan struct{})
}

// Stats describes the backlog of an outbox table.
type Stats struct {
	// Rows is the number of unpublished messages.
	Rows int64
	// OldestAge is the age of the oldest unpublished message, 0 when empty.
	OldestAge time.Duration
}

// Stats reads the backlog; it costs a count over the (normally tiny) table.
func (r *Relay) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var oldest *time.Time
	err := r.pool.QueryRow(ctx, `SELECT count(*), min(created_at) FROM `+pgx.Identifier{r.cfg.Table}.Sanitize()).Scan(&s.Rows, &oldest)
	if err != nil {
		return Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	if oldest != nil {
		s.OldestAge = max(r.cfg.Now().Sub(*oldest), 0)
	}
	return s, nil
}
