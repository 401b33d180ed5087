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
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/internal/tracing"
)

// Defaults of Config.
const (
	TableDefault        = "outbox"
	BatchSizeDefault    = 1000
	PollIntervalDefault = 250 * time.Millisecond
	AckTimeoutDefault   = 5 * time.Second
	RetryDelayDefault   = 500 * time.Millisecond
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
	// Pack turns a batch's rows, in table order, into the messages to
	// publish, each with its Nats-Msg-Id; default one message per row
	// (Msg). orders packs its timeout commands into batches of a
	// partition's commands (events.Batch), so that the broker stores and
	// delivers a batch once.
	Pack func(rows []Message) []*nats.Msg
	// Now is the clock Stats measures ages with; default time.Now.
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
	if c.Pack == nil {
		c.Pack = packEach
	}
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
	case c.PollInterval < 0 || c.AckTimeout < 0 || c.RetryDelay < 0:
		return errors.New("outbox: PollInterval, AckTimeout and RetryDelay must not be negative")
	}
	return nil
}

// Relay publishes the rows of an outbox table to JetStream. Start it with
// Start and end it with Stop; after committing new rows, call Kick so they
// go out at once.
type Relay struct {
	base       startstop.Base
	cfg        Config
	pool       *pgxpool.Pool
	js         jetstream.JetStream
	kick       chan struct{}
	claimSQL   string
	duplicates atomic.Uint64
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
			SELECT id FROM ` + t + ` ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
			RETURNING subject, msg_id, data, coalesce(traceparent, '')`,
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
// session's idle_in_transaction_session_timeout ($1, in milliseconds),
// which a service may keep short for its own transactions (internal/pgparams).
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

// Start publishes in the background until ctx ends or Stop. When it ends
// it does not start new batches; a batch in flight is rolled back and left
// for the next run (use Flush first to drain on shutdown). Stop returns once
// every publishing goroutine has returned.
func (r *Relay) Start(ctx context.Context) { r.base.Start(ctx, r.run) }

// Stop ends the relay started by Start and waits for its batches to
// return; a batch in flight is rolled back. Stop on a relay not running
// does nothing.
func (r *Relay) Stop() { r.base.Stop() }

func (r *Relay) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-timer.C:
		}
		n, err := r.drain(ctx)
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

// Flush publishes every row present when it is called and returns when the
// table is empty or ctx ends; it returns the number of messages published.
func (r *Relay) Flush(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := r.drain(ctx)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// drain publishes batches of rows and returns the count and the first
// error. One batch goes first; only if it came back full do cfg.Workers
// workers go on, each until one of its batches comes back short, so that a
// poll of a nearly empty table costs one claim, not one per worker.
func (r *Relay) drain(ctx context.Context) (int, error) {
	n, err := r.publishBatch(ctx)
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
			n, err := r.drainOne(ctx)
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
func (r *Relay) drainOne(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := r.publishBatch(ctx)
		total += n
		if err != nil || n < r.cfg.BatchSize {
			return total, err
		}
	}
}

// publishBatch claims up to BatchSize rows, publishes them asynchronously,
// waits for every PubAck and commits the deletion. Any failure rolls back.
func (r *Relay) publishBatch(ctx context.Context) (n int, err error) {
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
	rows, err := tx.Query(ctx, r.claimSQL, r.cfg.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Message, error) {
		var m Message
		err := row.Scan(&m.Subject, &m.MsgID, &m.Data, &m.TraceParent)
		return m, err
	})
	if err != nil {
		return 0, fmt.Errorf("read outbox rows: %w", err)
	}
	if len(batch) == 0 {
		return 0, tx.Rollback(ctx)
	}
	if err := r.publish(ctx, batch); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit outbox deletion: %w", err)
	}
	return len(batch), nil
}

// Msg returns the message of one row: its subject and data, with its
// Nats-Msg-Id and, when it has one, its traceparent header.
func (m Message) Msg() *nats.Msg {
	msg := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, m.MsgID)
	if m.TraceParent != "" {
		msg.Header.Set(tracing.HeaderTraceParent, m.TraceParent)
	}
	return msg
}

// packEach is Config.Pack's default: one message per row.
func packEach(rows []Message) []*nats.Msg {
	msgs := make([]*nats.Msg, len(rows))
	for i, r := range rows {
		msgs[i] = r.Msg()
	}
	return msgs
}

// publish sends the rows of batch, packed by Config.Pack, asynchronously
// and waits up to AckTimeout for every PubAck, in order.
func (r *Relay) publish(ctx context.Context, batch []Message) error {
	msgs := r.cfg.Pack(batch)
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, msg := range msgs {
		f, err := r.js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("publish %s: %w", msg.Subject, err)
		}
		futures[i] = f
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AckTimeout)
	defer cancel()
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				// The stream holds a message of this id from an earlier
				// publish of the same row (one whose PubAck or deletion
				// was lost): a command's id ends in its nonce, so no
				// other publisher's message has it.
				r.duplicates.Add(1)
				r.cfg.Logger.Debug("outbox message already stored", "subject", msgs[i].Subject, "msg_id", msgs[i].Header.Get(jetstream.MsgIDHeader), "seq", ack.Sequence)
			}
		case err := <-f.Err():
			return fmt.Errorf("publish %s (%s): %w", msgs[i].Subject, msgs[i].Header.Get(jetstream.MsgIDHeader), err)
		case <-ctx.Done():
			return fmt.Errorf("wait for PubAck of %s: %w", msgs[i].Header.Get(jetstream.MsgIDHeader), ctx.Err())
		}
	}
	return nil
}

// Stats describes the backlog of an outbox table.
type Stats struct {
	// Rows is the number of unpublished messages.
	Rows int64
	// OldestAge is the age of the oldest unpublished message, 0 when empty.
	OldestAge time.Duration
	// Duplicates counts the messages this relay published that JetStream
	// answered as duplicates (PubAck.Duplicate), since it started: each a
	// republish of a row an earlier publish had stored.
	Duplicates uint64
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
	s.Duplicates = r.duplicates.Load()
	return s, nil
}
