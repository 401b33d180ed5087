package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

// Limits of create batching.
const (
	// CreateBatchMax is the most orders one insert round trip carries.
	CreateBatchMax = 64
	// CreateConcurrency is the most insert round trips in flight; the other
	// pool connections stay free for reads, updates and the consumer.
	CreateConcurrency = 4
	// createTimeout bounds one batch, which serves several requests and so
	// runs under none of their contexts.
	createTimeout = 10 * time.Second
)

// pendingCreate is one order waiting to be inserted and where its result goes.
type pendingCreate struct {
	order orders.Order
	msgs  []outbox.Message
	done  chan error
}

// createBatcher inserts concurrent creates together: each submitted order
// joins a queue; while fewer than CreateConcurrency batches are in flight, a
// new one takes everything queued (up to CreateBatchMax) and inserts it with
// its outbox rows in one round trip and one implicit transaction. At low load
// a batch holds one order, so nothing waits for a timer; under load, batches
// grow by themselves and a commit (and its WAL flush) serves many orders.
type createBatcher struct {
	pool *pgxpool.Pool

	mu       sync.Mutex
	queue    []*pendingCreate
	inflight int
}

// submit inserts o with msgs and returns when its batch committed or failed.
// It waits for the outcome even when ctx ends, so a caller never reports a
// failure for an order that committed.
func (b *createBatcher) submit(o orders.Order, msgs []outbox.Message) error {
	p := &pendingCreate{order: o, msgs: msgs, done: make(chan error, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	if b.inflight < CreateConcurrency {
		b.inflight++
		go b.lead()
	}
	b.mu.Unlock()
	return <-p.done
}

// lead inserts batches from the queue until it is empty.
func (b *createBatcher) lead() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), CreateBatchMax)
		if n == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch := make([]*pendingCreate, n)
		copy(batch, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()

		err := b.insert(batch)
		var pgErr *pgconn.PgError
		if len(batch) > 1 && errors.As(err, &pgErr) {
			// Postgres rejected a row (a constraint): retry each order
			// alone so only the culprit fails. Connection failures and
			// timeouts fail the whole batch at once instead.
			for _, p := range batch {
				p.done <- b.insert([]*pendingCreate{p})
			}
			continue
		}
		for _, p := range batch {
			p.done <- err
		}
	}
}

const insertOrdersSQL = `INSERT INTO orders (` + orderColumns + `)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bigint[], $6::text[], $7::text[],
		$8::bigint[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[])`

// insert writes the orders of batch and their outbox rows in one round trip:
// a pgx batch without BEGIN runs as one implicit transaction.
func (b *createBatcher) insert(batch []*pendingCreate) error {
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	pb := &pgx.Batch{}
	var msgs []outbox.Message
	if len(batch) == 1 {
		pb.Queue(insertOrderSQL, insertArgs(batch[0].order)...)
		msgs = batch[0].msgs
	} else {
		cols := make([][]any, 11)
		for i := range cols {
			cols[i] = make([]any, len(batch))
		}
		for j, p := range batch {
			for i, v := range insertArgs(p.order) {
				cols[i][j] = v
			}
			msgs = append(msgs, p.msgs...)
		}
		args := make([]any, len(cols))
		for i := range cols {
			args[i] = cols[i]
		}
		pb.Queue(insertOrdersSQL, args...)
	}
	if err := outbox.Insert(ctx, batchExecer{pb}, OutboxTable, msgs); err != nil {
		return err
	}
	if err := b.pool.SendBatch(ctx, pb).Close(); err != nil {
		return fmt.Errorf("insert %d orders: %w", len(batch), err)
	}
	return nil
}
