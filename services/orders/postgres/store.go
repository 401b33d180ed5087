package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

// OutboxTable is the outbox table the migrations create; give it to
// outbox.Config.Table.
const OutboxTable = outbox.TableDefault

// Store is the orders.Store over a pgx pool. Every operation goes through a
// gate that fails it fast while the database is known to be down (see
// GateConfig and Available).
type Store struct {
	pool     *pgxpool.Pool
	onCommit func()
	creates  *createBatcher
	gate     *gate
}

var _ orders.Store = (*Store)(nil)

// StoreConfig configures a Store.
type StoreConfig struct {
	// OnCommit, if set, is called after every commit that wrote outbox rows
	// (main passes the relay's Kick); it must not block.
	OnCommit func()
	// Gate configures the failing fast while the database is down.
	Gate GateConfig
}

// NewStore returns a Store over pool (migrated with Migrate).
func NewStore(pool *pgxpool.Pool, cfg StoreConfig) (*Store, error) {
	s := &Store{pool: pool, onCommit: cfg.OnCommit, creates: &createBatcher{pool: pool}}
	if s.onCommit == nil {
		s.onCommit = func() {}
	}
	var err error
	if s.gate, err = newGate(func(ctx context.Context) error { return s.checked(s.probe(ctx)) }, cfg.Gate); err != nil {
		return nil, err
	}
	return s, nil
}

// do runs op, which returns its error unmapped, through the gate: refused at
// once while the database is known to be down, else run, its error checked
// and its outcome recorded.
func (s *Store) do(ctx context.Context, op func() error) error {
	if err := s.gate.admit(ctx); err != nil {
		return err
	}
	err := s.checked(op())
	s.gate.observe(err)
	return err
}

// checked returns storeError(err), after resetting the pool when err says
// that the server takes no writes (readOnly): pgx keeps a connection that
// answered an error, so without the reset the pool's connections to a
// former primary, now a standby, would fail every operation in turn; new
// ones go to the server that takes writes (target_session_attrs=read-write).
func (s *Store) checked(err error) error {
	err = storeError(err)
	if readOnly(err) {
		s.pool.Reset()
	}
	return err
}

// probe checks that the database answers and takes writes: a standby (a
// former primary back after a failover) is errStandby.
func (s *Store) probe(ctx context.Context) error {
	var standby bool
	if err := s.pool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return fmt.Errorf("ask pg_is_in_recovery: %w", err)
	}
	if standby {
		return errStandby
	}
	return nil
}

// Ping reports, through the gate, whether the database answers and takes
// writes: at once while it is known to be down (unless a probe is due),
// else by asking it. Readiness calls it, so that an instance no traffic
// reaches still finds out when the database is back.
func (s *Store) Ping(ctx context.Context) error {
	return s.do(ctx, func() error { return s.probe(ctx) })
}

// Available reports whether the Store lets operations through and, when
// not, since when the database is known to be down.
func (s *Store) Available() (ok bool, since time.Time) { return s.gate.state() }

const orderColumns = `id, customer_id, currency, items, amount_minor, status, cancel_reason, version, pay_by, created_at, updated_at`

const insertOrderSQL = `INSERT INTO orders (` + orderColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

func insertArgs(o orders.Order) []any {
	return []any{o.ID, o.CustomerID, o.Currency, o.Items, o.AmountMinor, string(o.Status), nullable(string(o.CancelReason)),
		o.Version, o.PayBy, o.CreatedAt, o.UpdatedAt}
}

// batchExecer queues outbox.Insert's statement on a batch, so the outbox
// rows travel in the same round trip as the order.
type batchExecer struct{ b *pgx.Batch }

func (e batchExecer) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	e.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// Create implements orders.Store.
func (s *Store) Create(ctx context.Context, ch orders.Change, key *orders.IdempotencyKey) (orders.Order, bool, error) {
	msgs, err := messages(ch, traced(ctx, ch))
	if err != nil {
		return orders.Order{}, false, err
	}
	if key != nil {
		var o orders.Order
		var replayed bool
		err := s.do(ctx, func() (err error) {
			o, replayed, err = s.createIdempotent(ctx, ch, msgs, key)
			return err
		})
		return o, replayed, err
	}
	// Concurrent creates share a round trip and a commit (createBatcher).
	if err := s.do(ctx, func() error { return s.creates.submit(ch.Order, msgs) }); err != nil {
		return orders.Order{}, false, err
	}
	s.onCommit()
	return ch.Order, false, nil
}

func (s *Store) createIdempotent(ctx context.Context, ch orders.Change, msgs []outbox.Message, key *orders.IdempotencyKey) (orders.Order, bool, error) {
	resp, err := json.Marshal(ch.Order)
	if err != nil {
		return orders.Order{}, false, fmt.Errorf("encode order: %w", err)
	}
	var stored orders.Order
	replayed := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A concurrent request with the same key waits here for the first
		// one's transaction, then sees its row.
		tag, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (key, request_hash, response, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (key) DO NOTHING`, key.Key, key.Hash, resp, ch.Order.CreatedAt)
		if err != nil {
			return fmt.Errorf("claim idempotency key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			var hash, body []byte
			if err := tx.QueryRow(ctx, `SELECT request_hash, response FROM idempotency_keys WHERE key = $1`, key.Key).Scan(&hash, &body); err != nil {
				return fmt.Errorf("read idempotency key: %w", err)
			}
			if !bytes.Equal(hash, key.Hash) {
				return orders.ErrIdempotencyMismatch
			}
			replayed = true
			if err := json.Unmarshal(body, &stored); err != nil {
				return fmt.Errorf("decode stored response: %w", err)
			}
			return nil
		}
		if _, err := tx.Exec(ctx, insertOrderSQL, insertArgs(ch.Order)...); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		return outbox.Insert(ctx, tx, OutboxTable, msgs)
	})
	if err != nil {
		return orders.Order{}, false, err
	}
	if replayed {
		return stored, true, nil
	}
	s.onCommit()
	return ch.Order, false, nil
}

// Get implements orders.Store.
func (s *Store) Get(ctx context.Context, id string) (o orders.Order, err error) {
	err = s.do(ctx, func() (err error) {
		o, err = scanOrder(s.pool.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return orders.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("get order: %w", err)
		}
		return nil
	})
	if err != nil {
		return orders.Order{}, err
	}
	return o, nil
}

// List implements orders.Store. The query is built from the filters in use,
// so each shape gets its own prepared statement and index.
func (s *Store) List(ctx context.Context, f orders.ListFilter) (orders.Page, error) {
	sql := `SELECT ` + orderColumns + ` FROM orders WHERE true`
	args := []any{}
	arg := func(cond string, v any) {
		args = append(args, v)
		sql += fmt.Sprintf(" AND %s $%d", cond, len(args))
	}
	if f.Status != "" {
		arg("status =", string(f.Status))
	}
	if f.CustomerID != "" {
		arg("customer_id =", f.CustomerID)
	}
	if f.After != "" {
		arg("id <", f.After)
	}
	args = append(args, f.Limit+1)
	sql += fmt.Sprintf(" ORDER BY id DESC LIMIT $%d", len(args))
	var items []orders.Order
	err := s.do(ctx, func() error {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err == nil {
			items, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (orders.Order, error) { return scanOrder(r) })
		}
		if err != nil {
			return fmt.Errorf("list orders: %w", err)
		}
		return nil
	})
	if err != nil {
		return orders.Page{}, err
	}
	p := orders.Page{Items: items}
	if len(items) > f.Limit {
		p.Items = items[:f.Limit]
		p.Next = p.Items[f.Limit-1].ID
	}
	return p, nil
}

// Update implements orders.Store.
func (s *Store) Update(ctx context.Context, id string, fn func(orders.Order) (orders.Change, error)) (orders.Order, error) {
	return s.update(ctx, id, fn)
}

// expireSQL writes the cancellations of ExpireAll and ReconcileOverdue: $1
// the ids, $2 the versions they were read at, $3 their new versions, $4 the
// update times, $5 and $6 the status and reason of a payment timeout, $7 the
// reconciled_at of the rows (NULL unless reconciled). The condition repeats
// the domain check against the locked rows.
const expireSQL = `UPDATE orders o SET status = $5, cancel_reason = $6, version = u.next, updated_at = u.at, reconciled_at = $7
FROM unnest($1::text[], $2::int8[], $3::int8[], $4::timestamptz[]) AS u(id, version, next, at)
WHERE o.id = u.id AND o.status = 'pending_payment' AND o.version = u.version`

// ExpireAll implements orders.Store in four statements whatever the number
// of events: lock the orders (in id order, as every other writer of several
// rows would have to, so two batches cannot deadlock), apply
// orders.Order.Expire to each in Go, write the cancellations with one
// UPDATE and their events with one outbox insert.
func (s *Store) ExpireAll(ctx context.Context, exps []orders.Expiry, now time.Time) ([]orders.ExpireResult, error) {
	ids := make([]string, 0, len(exps))
	for _, e := range exps {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var results []orders.ExpireResult
	err := s.do(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
			if err != nil {
				return fmt.Errorf("lock orders: %w", err)
			}
			locked, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (orders.Order, error) { return scanOrder(r) })
			if err != nil {
				return fmt.Errorf("lock orders: %w", err)
			}
			results, err = cancelLocked(ctx, tx, locked, exps, nil, func(o orders.Order, e orders.Expiry) (orders.Change, bool, error) {
				return o.Expire(e.Version, e.Deadline, now)
			})
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	s.onCommit()
	return results, nil
}

// reconcileSQL locks up to $2 orders still pending whose pay_by is before
// $1, oldest deadline first, through the partial index orders_pending_pay_by.
// It skips the rows another transaction holds (a payment, a cancellation or
// a cancel event in flight, which settles them anyway), so it never waits
// and never deadlocks with them.
const reconcileSQL = `SELECT ` + orderColumns + ` FROM orders
WHERE status = 'pending_payment' AND pay_by < $1 ORDER BY pay_by LIMIT $2 FOR UPDATE SKIP LOCKED`

// ReconcileOverdue cancels, in one transaction, up to limit orders still
// pending_payment whose pay_by passed more than margin before now, as
// orders.Order.Reconcile does (the cancelled event of a payment timeout and
// a clear command, through the outbox), marking them reconciled_at now. It
// returns the orders it cancelled, oldest deadline first; fewer than limit
// means no other overdue order was free.
func (s *Store) ReconcileOverdue(ctx context.Context, now time.Time, margin time.Duration, limit int) ([]orders.Order, error) {
	var done []orders.Order
	err := s.do(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, reconcileSQL, now.Add(-margin), limit)
			if err != nil {
				return fmt.Errorf("lock overdue orders: %w", err)
			}
			locked, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (orders.Order, error) { return scanOrder(r) })
			if err != nil {
				return fmt.Errorf("lock overdue orders: %w", err)
			}
			exps := make([]orders.Expiry, len(locked))
			for i, o := range locked {
				exps[i] = orders.Expiry{ID: o.ID, Version: o.Version, Deadline: o.PayBy}
			}
			at := now.Truncate(time.Microsecond).UTC()
			results, err := cancelLocked(ctx, tx, locked, exps, &at, func(o orders.Order, _ orders.Expiry) (orders.Change, bool, error) {
				ch, applied := o.Reconcile(now, margin)
				return ch, applied, nil
			})
			for _, r := range results {
				if r.Applied {
					done = append(done, r.Order)
				}
			}
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	if len(done) > 0 {
		s.onCommit()
	}
	return done, nil
}

// cancelLocked applies cancel to the order of each of exps, in turn, among
// the locked rows (an order named twice sees the first's outcome), then
// writes the cancellations with one UPDATE, setting reconciled_at to
// reconciled, and their outbox rows with one insert. Result i is about
// exps[i]; an order not among the locked rows is ErrNotFound.
func cancelLocked(ctx context.Context, tx pgx.Tx, locked []orders.Order, exps []orders.Expiry, reconciled *time.Time,
	cancel func(orders.Order, orders.Expiry) (orders.Change, bool, error)) ([]orders.ExpireResult, error) {
	results := make([]orders.ExpireResult, len(exps))
	current := make(map[string]orders.Order, len(locked))
	for _, o := range locked {
		current[o.ID] = o
	}
	var msgs []outbox.Message
	for i, e := range exps {
		o, ok := current[e.ID]
		if !ok {
			results[i].Err = orders.ErrNotFound
			continue
		}
		ch, applied, err := cancel(o, e)
		results[i] = orders.ExpireResult{Order: o, Applied: applied, Err: err}
		if !applied {
			continue
		}
		m, err := messages(ch, e.TraceParent)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m...)
		current[e.ID], results[i].Order = ch.Order, ch.Order
	}
	var up struct {
		ids           []string
		versions, nxt []int64
		at            []time.Time
	}
	for _, read := range locked {
		if o := current[read.ID]; o.Version != read.Version {
			up.ids, up.versions = append(up.ids, o.ID), append(up.versions, read.Version)
			up.nxt, up.at = append(up.nxt, o.Version), append(up.at, o.UpdatedAt)
		}
	}
	if len(up.ids) == 0 {
		return results, nil
	}
	tag, err := tx.Exec(ctx, expireSQL, up.ids, up.versions, up.nxt, up.at,
		string(orders.StatusCancelled), string(orders.CancelPaymentTimeout), reconciled)
	if err != nil {
		return nil, fmt.Errorf("cancel orders: %w", err)
	}
	if n := tag.RowsAffected(); n != int64(len(up.ids)) {
		return nil, fmt.Errorf("cancel orders: %d of %d locked rows changed", n, len(up.ids))
	}
	return results, outbox.Insert(ctx, tx, OutboxTable, msgs)
}

// update locks the row, applies fn and writes its change with the outbox
// rows; it returns the order after.
func (s *Store) update(ctx context.Context, id string, fn func(orders.Order) (orders.Change, error)) (after orders.Order, err error) {
	err = s.do(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			before, err := scanOrder(tx.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = $1 FOR UPDATE`, id))
			if errors.Is(err, pgx.ErrNoRows) {
				return orders.ErrNotFound
			}
			if err != nil {
				return fmt.Errorf("lock order: %w", err)
			}
			ch, err := fn(before)
			if err != nil {
				return err
			}
			msgs, err := messages(ch, traced(ctx, ch))
			if err != nil {
				return err
			}
			o := ch.Order
			// Every transition leaves pending_payment; the condition repeats
			// the domain check against the locked row.
			tag, err := tx.Exec(ctx, `UPDATE orders SET status = $2, cancel_reason = $3, version = $4, pay_by = $5, updated_at = $6
			WHERE id = $1 AND status = 'pending_payment' AND version = $7`,
				o.ID, string(o.Status), nullable(string(o.CancelReason)), o.Version, o.PayBy, o.UpdatedAt, before.Version)
			if err != nil {
				return fmt.Errorf("update order: %w", err)
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("update order %s: the locked row changed", id)
			}
			after = o
			return outbox.Insert(ctx, tx, OutboxTable, msgs)
		})
	})
	if err != nil {
		return orders.Order{}, err
	}
	s.onCommit()
	return after, nil
}

// CountByStatus implements orders.Store. It scans the status index.
func (s *Store) CountByStatus(ctx context.Context) (map[orders.Status]int64, error) {
	counts := map[orders.Status]int64{}
	err := s.do(ctx, func() error {
		rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM orders GROUP BY status`)
		if err == nil {
			var status string
			var n int64
			_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
				counts[orders.Status(status)] = n
				return nil
			})
		}
		if err != nil {
			return fmt.Errorf("count orders: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// traced returns the trace context of ctx's span for a change's outbox
// rows, after naming on the span the order and the deadline it sets.
func traced(ctx context.Context, ch orders.Change) string {
	if !tracing.Enabled() {
		return ""
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(tracing.AttrOrderID.String(ch.Order.ID))
	if c := ch.Command; c != nil {
		span.SetAttributes(tracing.Timeout(c.Key, c.Version, events.PartitionOf(c.Key), c.Deadline)...)
	}
	return outbox.TraceParent(ctx)
}

// messages encodes a change's command (as pkg/timeouts writes it) and
// event as outbox rows, each carrying traceparent.
func messages(ch orders.Change, traceparent string) ([]outbox.Message, error) {
	msgs := make([]outbox.Message, 0, 2)
	if c := ch.Command; c != nil {
		m, err := timeouts.Message(*c)
		if err != nil {
			return nil, err
		}
		m.TraceParent = traceparent
		msgs = append(msgs, m)
	}
	if e := ch.Event; e != nil {
		data, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
		msgs = append(msgs, outbox.Message{Subject: e.Subject(), MsgID: e.MsgID(), Data: data, TraceParent: traceparent})
	}
	return msgs, nil
}

func scanOrder(row pgx.Row) (orders.Order, error) {
	var o orders.Order
	var status string
	var reason *string
	err := row.Scan(&o.ID, &o.CustomerID, &o.Currency, &o.Items, &o.AmountMinor, &status, &reason, &o.Version, &o.PayBy, &o.CreatedAt, &o.UpdatedAt)
	if err != nil {
		return orders.Order{}, err
	}
	o.Status = orders.Status(status)
	if reason != nil {
		o.CancelReason = orders.CancelReason(*reason)
	}
	o.PayBy, o.CreatedAt, o.UpdatedAt = o.PayBy.UTC(), o.CreatedAt.UTC(), o.UpdatedAt.UTC()
	return o, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
