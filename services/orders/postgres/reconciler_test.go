package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/orders"
	"github.com/ordertimeout/ordertimeout/services/orders/postgres"
)

// lateClock is two hours ahead: every 15-minute deadline the tests create is
// overdue by far more than the margin by it.
func lateClock() time.Time { return time.Now().Add(2 * time.Hour) }

// newReconciler returns a reconciler over e's store on the late clock and
// the registry holding its counter.
func newReconciler(t *testing.T, e env, cfg postgres.ReconcilerConfig) (*postgres.Reconciler, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Now, cfg.Registerer, cfg.Logger = lateClock, reg, slog.New(slog.DiscardHandler)
	r, err := postgres.NewReconciler(e.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, reg
}

// reconciledTotal reads orders_reconciled_total from reg.
func reconciledTotal(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "orders_reconciled_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no orders_reconciled_total")
	return 0
}

// countPrefix counts the outbox rows about id whose "subject msg_id" starts
// with prefix.
func (e env) countPrefix(t *testing.T, id, prefix string) int {
	t.Helper()
	n := 0
	for _, r := range e.outbox(t, id) {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func (e env) reconciledAt(t *testing.T, id string) *time.Time {
	t.Helper()
	var at *time.Time
	if err := e.pool.QueryRow(context.Background(), `SELECT reconciled_at FROM orders WHERE id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// TestReconcilerCancelsLostDeadlinesOnce: an order whose deadline command
// never reached timeoutd (its set command sits in the outbox; nothing
// consumes it here) is cancelled by the sweeper once, with the cancelled
// event of a payment timeout and a clear command, counted and marked
// reconciled; a second sweep finds nothing. Paid orders, orders not overdue
// by the margin and orders cancelled by their cancel event are not touched.
func TestReconcilerCancelsLostDeadlinesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	lost, paid, extended, expired := e.create(t, "lost"), e.create(t, "paid"), e.create(t, "extended"), e.create(t, "expired")
	if _, err := e.svc.Pay(ctx, paid.ID); err != nil {
		t.Fatal(err)
	}
	// Two hours and 29 minutes from now: the late clock is 2 h ahead, so it
	// is not overdue by the 30 s margin.
	if _, err := e.svc.Extend(ctx, extended.ID, orders.Deadline{PayWithin: "2h29m"}); err != nil {
		t.Fatal(err)
	}
	if _, applied, err := expireOne(ctx, e.late, expired.ID, expired.Version, expired.PayBy); err != nil || !applied {
		t.Fatalf("expire: applied=%v err=%v", applied, err)
	}
	before := map[string]int{}
	for _, o := range []orders.Order{paid, extended, expired} {
		before[o.ID] = len(e.outbox(t, o.ID))
	}
	r, reg := newReconciler(t, e, postgres.ReconcilerConfig{})
	if n, err := r.Sweep(ctx); n != 1 || err != nil {
		t.Fatalf("first sweep cancelled %d (%v), want 1", n, err)
	}
	if n, err := r.Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("second sweep cancelled %d (%v), want 0", n, err)
	}
	if got := reconciledTotal(t, reg); got != 1 {
		t.Fatalf("orders_reconciled_total = %v, want 1", got)
	}
	got, err := e.svc.Get(ctx, lost.ID)
	if err != nil || got.Status != orders.StatusCancelled || got.CancelReason != orders.CancelPaymentTimeout || got.Version != 2 || e.reconciledAt(t, lost.ID) == nil {
		t.Fatalf("lost order after the sweep: %+v (%v), reconciled_at %v", got, err, e.reconciledAt(t, lost.ID))
	}
	for prefix, want := range map[string]int{
		"orders.cancelled." + lost.ID + " order.cancelled:" + lost.ID + ":2": 1,
		"timeouts.cmd." + lost.ID + " clear:" + lost.ID + ":2":               1,
	} {
		if n := e.countPrefix(t, lost.ID, prefix); n != want {
			t.Errorf("%d outbox rows %q, want %d: %q", n, prefix, want, e.outbox(t, lost.ID))
		}
	}
	for _, c := range []struct {
		o      orders.Order
		status orders.Status
	}{{paid, orders.StatusPaid}, {extended, orders.StatusPendingPayment}, {expired, orders.StatusCancelled}} {
		got, err := e.svc.Get(ctx, c.o.ID)
		if err != nil || got.Status != c.status || got.Version != 2 || len(e.outbox(t, c.o.ID)) != before[c.o.ID] || e.reconciledAt(t, c.o.ID) != nil {
			t.Errorf("order %s touched by the sweep: %+v (%v), outbox %q", c.o.CustomerID, got, err, e.outbox(t, c.o.ID))
		}
	}
}

// TestReconcilerIsBatchedAndBounded: 5 overdue orders with batches of 2 and
// at most 3 per sweep: the first sweep cancels 4 (two whole batches), the
// second the last one.
func TestReconcilerIsBatchedAndBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 5 {
		e.create(t, fmt.Sprint("b-", i))
	}
	r, reg := newReconciler(t, e, postgres.ReconcilerConfig{Batch: 2, MaxPerSweep: 3})
	for i, want := range []int{4, 1, 0} {
		if n, err := r.Sweep(context.Background()); n != want || err != nil {
			t.Fatalf("sweep %d cancelled %d (%v), want %d", i, n, err, want)
		}
	}
	if got := reconciledTotal(t, reg); got != 5 {
		t.Fatalf("orders_reconciled_total = %v, want 5", got)
	}
}

// TestReconcilerRacesCancellations runs the sweeper against a cancel event
// of the same order and against a customer's cancel, at once, many times:
// each order is cancelled exactly once, with one cancelled event.
func TestReconcilerRacesCancellations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	r, _ := newReconciler(t, e, postgres.ReconcilerConfig{})
	const n = 30
	wins := map[string]int{}
	for i := range n {
		o := e.create(t, fmt.Sprint("race-", i))
		var wg sync.WaitGroup
		start := make(chan struct{})
		var swept int
		var sweepErr, otherErr error
		var otherWon bool
		wg.Go(func() { <-start; swept, sweepErr = r.Sweep(ctx) })
		if i%2 == 0 {
			wg.Go(func() {
				<-start
				_, otherWon, otherErr = expireOne(ctx, e.late, o.ID, o.Version, o.PayBy)
			})
		} else {
			wg.Go(func() {
				<-start
				_, err := e.late.Cancel(ctx, o.ID)
				otherWon = err == nil
				if err != nil && !strings.Contains(err.Error(), "cannot cancel an order in status cancelled") {
					otherErr = err
				}
			})
		}
		close(start)
		wg.Wait()
		if sweepErr != nil || otherErr != nil {
			t.Fatalf("race %d: sweep %v, other %v", i, sweepErr, otherErr)
		}
		if (swept == 1) == otherWon || swept > 1 {
			t.Fatalf("race %d: the sweep cancelled %d and the other cancellation won=%v: want exactly one", i, swept, otherWon)
		}
		got, err := e.svc.Get(ctx, o.ID)
		if err != nil || got.Status != orders.StatusCancelled || got.Version != 2 {
			t.Fatalf("race %d: order %+v (%v)", i, got, err)
		}
		if c := e.countPrefix(t, o.ID, "orders.cancelled."); c != 1 {
			t.Fatalf("race %d: %d cancelled events, want 1: %q", i, c, e.outbox(t, o.ID))
		}
		if (e.reconciledAt(t, o.ID) != nil) != (swept == 1) {
			t.Fatalf("race %d: reconciled_at %v but the sweep cancelled %d", i, e.reconciledAt(t, o.ID), swept)
		}
		wins[map[bool]string{true: "sweeper", false: "other"}[swept == 1]]++
	}
	t.Logf("of %d races: %v", n, wins)
}

// TestReconcileQueryUsesThePendingIndex: with 10,000 settled orders, 10,000
// pending ones not yet due and three overdue, the sweep's query reads the
// partial index on pay_by, neither the table nor every pending order.
func TestReconcileQueryUsesThePendingIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for i := range 3 {
		e.create(t, fmt.Sprint("p-", i))
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO orders (id, customer_id, currency, items, amount_minor, status, version, pay_by, created_at, updated_at)
		SELECT 'o-' || g, 'c', 'EUR', '[]', 0, CASE WHEN g % 2 = 0 THEN 'paid' ELSE 'pending_payment' END, 1,
			now() + interval '1 day', now(), now() FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE orders`); err != nil {
		t.Fatal(err)
	}
	rows, err := e.pool.Query(ctx, "EXPLAIN "+postgres.ReconcileSQL, lateClock(), 500)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "Index Cond: (pay_by <") || !strings.Contains(text, "orders_pending_pay_by") || strings.Contains(text, "Seq Scan") {
		t.Fatalf("the sweep does not use orders_pending_pay_by:\n%s", text)
	}
	t.Logf("plan:\n%s", text)
}

// TestReconcilerRunSweepsUntilCancelled: Start sweeps at once and then
// every Interval, and the loop returns when its context ends.
func TestReconcilerRunSweepsUntilCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, reg := newReconciler(t, e, postgres.ReconcilerConfig{Interval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx)
	for i, want := range []float64{1, 2} {
		o := e.create(t, fmt.Sprint("run-", i))
		deadline := time.Now().Add(10 * time.Second)
		for reconciledTotal(t, reg) != want {
			if time.Now().After(deadline) {
				t.Fatalf("order %d: orders_reconciled_total = %v, want %v", i, reconciledTotal(t, reg), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got, err := e.svc.Get(context.Background(), o.ID); err != nil || got.Status != orders.StatusCancelled {
			t.Fatalf("order %d: %+v (%v)", i, got, err)
		}
	}
	cancel()
	stopped := make(chan struct{})
	go func() { r.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not return after its context ended")
	}
}
