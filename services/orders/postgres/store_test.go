package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/orders"
	"github.com/ordertimeout/ordertimeout/services/orders/postgres"
)

func TestMain(m *testing.M) { testinfra.Main(m) }

type env struct {
	pool  *pgxpool.Pool
	store *postgres.Store
	svc   *orders.Service
	// late is svc with a clock two hours ahead: every deadline the tests
	// create has passed by it.
	late    *orders.Service
	commits *atomic.Int64
}

// newEnv migrates a fresh database and returns a service over its store.
func newEnv(t *testing.T) env {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testinfra.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Migrating twice is a no-op.
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	commits := &atomic.Int64{}
	store, err := postgres.NewStore(pool, postgres.StoreConfig{OnCommit: func() { commits.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := orders.NewService(store, orders.ServiceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	late, err := orders.NewService(store, orders.ServiceConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	return env{pool: pool, store: store, svc: svc, late: late, commits: commits}
}

func createReq(customer string) orders.CreateRequest {
	return orders.CreateRequest{CustomerID: customer, Currency: "EUR",
		Items: []orders.Item{{SKU: "A-1", Quantity: 2, UnitPriceMinor: 1250}}, Deadline: orders.Deadline{PayWithin: "15m"}}
}

func (e env) create(t *testing.T, customer string) orders.Order {
	t.Helper()
	o, _, err := e.svc.Create(context.Background(), createReq(customer), "")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// outbox returns the "subject msg_id" of the outbox rows about id, in order.
// outbox returns the outbox rows of order id, "<subject> <msg id>", a
// command's id without its nonce, which it checks.
func (e env) outbox(t *testing.T, id string) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT subject || ' ' || msg_id FROM outbox WHERE msg_id LIKE '%:' || $1 || ':%' ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(s, events.CommandSubjectPrefix) {
			msgID := s[strings.IndexByte(s, ' ')+1:]
			if err := events.CheckMsgID(msgID); err != nil {
				t.Errorf("outbox row %q: %v", s, err)
			}
			s = s[:strings.LastIndexByte(s, ':')]
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChangesWriteTheirOutboxRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	o := e.create(t, "c-1")
	got, err := e.svc.Get(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != o.ID || !got.PayBy.Equal(o.PayBy) || !got.CreatedAt.Equal(o.CreatedAt) || got.AmountMinor != 2500 || len(got.Items) != 1 || got.Items[0] != o.Items[0] {
		t.Fatalf("get = %+v, want %+v", got, o)
	}
	extended, err := e.svc.Extend(ctx, o.ID, orders.Deadline{PayWithin: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	paid, err := e.svc.Pay(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if extended.Version != 2 || paid.Version != 3 || paid.Status != orders.StatusPaid || !paid.PayBy.Equal(extended.PayBy) {
		t.Fatalf("extended %+v, paid %+v", extended, paid)
	}
	want := []string{
		"timeouts.cmd." + o.ID + " set:" + o.ID + ":1",
		"orders.created." + o.ID + " order.created:" + o.ID + ":1",
		"timeouts.cmd." + o.ID + " set:" + o.ID + ":2",
		"timeouts.cmd." + o.ID + " clear:" + o.ID + ":3",
		"orders.paid." + o.ID + " order.paid:" + o.ID + ":3",
	}
	if got := e.outbox(t, o.ID); !slices.Equal(got, want) {
		t.Fatalf("outbox = %q\nwant     %q", got, want)
	}
	if n := e.commits.Load(); n != 3 {
		t.Fatalf("onCommit called %d times, want 3", n)
	}
	// A failed transition writes nothing.
	_, err = e.svc.Cancel(ctx, o.ID)
	var de *orders.Error
	if !errors.As(err, &de) || de.Code != orders.CodeConflict || de.Status != orders.StatusPaid {
		t.Fatalf("cancel of a paid order: %v", err)
	}
	if _, err := e.svc.Pay(ctx, "missing"); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("pay of a missing order: %v", err)
	}
	if got := e.outbox(t, o.ID); len(got) != len(want) {
		t.Fatalf("failed transitions wrote outbox rows: %q", got)
	}
}

// expireOne applies one cancel event with svc.ExpireAll and returns its
// result (the transaction's error if it failed).
func expireOne(ctx context.Context, svc *orders.Service, id string, version int64, deadline time.Time) (orders.Order, bool, error) {
	r, err := svc.ExpireAll(ctx, []orders.Expiry{{ID: id, Version: version, Deadline: deadline}})
	if err != nil {
		return orders.Order{}, false, err
	}
	return r[0].Order, r[0].Applied, r[0].Err
}

// TestExpireAllAppliesEachEventOfABatch: one transaction, events with every
// outcome, an order named twice and an unknown one; each result is the
// outcome the event would have alone, and only the applied ones wrote an
// order change and an event.
func TestExpireAllAppliesEachEventOfABatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	due, twice, stale, early, forged := e.create(t, "b1"), e.create(t, "b2"), e.create(t, "b3"), e.create(t, "b4"), e.create(t, "b5")
	ext, err := e.svc.Extend(ctx, early.ID, orders.Deadline{PayWithin: "3h"})
	if err != nil {
		t.Fatal(err)
	}
	exps := []orders.Expiry{
		{ID: twice.ID, Version: twice.Version, Deadline: twice.PayBy},
		{ID: "missing", Version: 1, Deadline: due.PayBy},
		{ID: due.ID, Version: due.Version, Deadline: due.PayBy},
		{ID: stale.ID, Version: stale.Version - 1, Deadline: stale.PayBy},
		{ID: early.ID, Version: ext.Version, Deadline: ext.PayBy},
		{ID: twice.ID, Version: twice.Version, Deadline: twice.PayBy},
		{ID: forged.ID, Version: forged.Version, Deadline: forged.PayBy.Add(time.Hour)},
	}
	results, err := e.late.ExpireAll(ctx, exps)
	if err != nil {
		t.Fatal(err)
	}
	var earlyErr *orders.EarlyError
	tests := []struct {
		name    string
		applied bool
		err     func(error) bool
	}{
		{"first of an order named twice", true, nil},
		{"unknown order", false, func(err error) bool { return errors.Is(err, orders.ErrNotFound) }},
		{"due", true, nil},
		{"stale version", false, nil},
		{"before pay_by (the late clock is two hours ahead, the deadline three)", false, func(err error) bool { return errors.As(err, &earlyErr) }},
		{"second of an order named twice: a duplicate", false, nil},
		{"another deadline", false, func(err error) bool { return errors.Is(err, orders.ErrDeadlineMismatch) }},
	}
	if len(results) != len(tests) {
		t.Fatalf("%d results for %d events", len(results), len(tests))
	}
	for i, tc := range tests {
		r := results[i]
		if r.Applied != tc.applied || (tc.err == nil) != (r.Err == nil) || tc.err != nil && !tc.err(r.Err) {
			t.Errorf("%s: applied=%v err=%v", tc.name, r.Applied, r.Err)
		}
		if r.Applied && (r.Order.Status != orders.StatusCancelled || r.Order.Version != exps[i].Version+1) {
			t.Errorf("%s: order %+v", tc.name, r.Order)
		}
	}
	for _, c := range []struct {
		o      orders.Order
		status orders.Status
		events int // orders.cancelled events in the outbox
	}{
		{due, orders.StatusCancelled, 1}, {twice, orders.StatusCancelled, 1},
		{stale, orders.StatusPendingPayment, 0}, {early, orders.StatusPendingPayment, 0}, {forged, orders.StatusPendingPayment, 0},
	} {
		got, err := e.svc.Get(ctx, c.o.ID)
		if err != nil || got.Status != c.status || c.events == 1 && got.CancelReason != orders.CancelPaymentTimeout {
			t.Errorf("order %s: %+v (%v), want %s", c.o.ID, got, err, c.status)
		}
		n := 0
		for _, r := range e.outbox(t, c.o.ID) {
			if strings.HasPrefix(r, "orders.cancelled.") {
				n++
			}
		}
		if n != c.events {
			t.Errorf("order %s: %d cancelled events in the outbox, want %d", c.o.ID, n, c.events)
		}
	}
}

func TestExpireAppliesOnlyTheCurrentVersionOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	o := e.create(t, "c")
	ext, err := e.svc.Extend(ctx, o.ID, orders.Deadline{PayWithin: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name        string
		svc         *orders.Service
		version     int64
		deadline    time.Time
		wantApplied bool
		wantErr     bool
	}{
		{"stale version", e.late, 1, o.PayBy, false, false},
		{"before pay_by", e.svc, 2, ext.PayBy, false, true},
		{"another deadline", e.late, 2, o.PayBy, false, true},
		{"current version", e.late, 2, ext.PayBy, true, false},
		{"duplicate", e.late, 2, ext.PayBy, false, false},
		{"stale after cancel", e.late, 1, o.PayBy, false, false},
	}
	for _, s := range steps {
		got, applied, err := expireOne(ctx, s.svc, o.ID, s.version, s.deadline)
		if (err != nil) != s.wantErr || applied != s.wantApplied {
			t.Fatalf("%s: applied=%v err=%v, want applied=%v, error %v", s.name, applied, err, s.wantApplied, s.wantErr)
		}
		if applied && (got.Status != orders.StatusCancelled || got.CancelReason != orders.CancelPaymentTimeout || got.Version != 3) {
			t.Fatalf("%s: order %+v", s.name, got)
		}
	}
	if _, _, err := expireOne(ctx, e.late, "missing", 1, o.PayBy); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("expire of a missing order: %v", err)
	}
	cancelled := 0
	for _, r := range e.outbox(t, o.ID) {
		if r == "orders.cancelled."+o.ID+" order.cancelled:"+o.ID+":3" {
			cancelled++
		}
	}
	if cancelled != 1 {
		t.Fatalf("%d cancelled events in the outbox, want 1: %q", cancelled, e.outbox(t, o.ID))
	}
}

// TestPayRacesDeadline runs a payment and the cancel event of the same order
// at once, many times: exactly one wins and the loser sees the winner's
// state (the documented outcome).
func TestPayRacesDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const n = 40
	payWins, cancelWins := 0, 0
	for i := range n {
		o := e.create(t, fmt.Sprint("race-", i))
		var wg sync.WaitGroup
		start := make(chan struct{})
		var paid orders.Order
		var payErr, expErr error
		var applied bool
		wg.Go(func() { <-start; paid, payErr = e.svc.Pay(ctx, o.ID) })
		wg.Go(func() { <-start; _, applied, expErr = expireOne(ctx, e.late, o.ID, o.Version, o.PayBy) })
		close(start)
		wg.Wait()
		if expErr != nil {
			t.Fatal(expErr)
		}
		final, err := e.svc.Get(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		var de *orders.Error
		switch {
		case payErr == nil && !applied:
			payWins++
			if final.Status != orders.StatusPaid || paid.Version != 2 || final.Version != 2 {
				t.Fatalf("pay won but the order is %+v", final)
			}
		case applied && errors.As(payErr, &de) && de.Code == orders.CodeConflict && de.Status == orders.StatusCancelled:
			cancelWins++
			if final.Status != orders.StatusCancelled || final.CancelReason != orders.CancelPaymentTimeout || final.Version != 2 {
				t.Fatalf("cancel won but the order is %+v", final)
			}
		default:
			t.Fatalf("no single winner: pay err %v, expiry applied %v, order %+v", payErr, applied, final)
		}
		if rows := e.outbox(t, o.ID); len(rows) != 3 && len(rows) != 4 {
			t.Fatalf("outbox after the race: %q", rows)
		}
	}
	t.Logf("pay won %d, cancel won %d of %d races", payWins, cancelWins, n)
}

func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	first, replayed, err := e.svc.Create(ctx, createReq("c"), "key-1")
	if err != nil || replayed {
		t.Fatalf("first: replayed=%v err=%v", replayed, err)
	}
	again, replayed, err := e.svc.Create(ctx, createReq("c"), "key-1")
	if err != nil || !replayed || again.ID != first.ID || !again.PayBy.Equal(first.PayBy) || again.Version != 1 {
		t.Fatalf("retry: %+v replayed=%v err=%v, want %+v", again, replayed, err, first)
	}
	if _, _, err := e.svc.Create(ctx, createReq("other"), "key-1"); !errors.Is(err, orders.ErrIdempotencyMismatch) {
		t.Fatalf("other body: %v", err)
	}
	// Concurrent first requests under one key create one order.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Go(func() {
			o, _, err := e.svc.Create(ctx, createReq("d"), "key-2")
			ids[i], errs[i] = o.ID, err
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("concurrent create %d: id %s err %v, want id %s", i, ids[i], errs[i], ids[0])
		}
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE customer_id = 'd'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d orders for the key, want 1 (%v)", n, err)
	}
}

func TestListFiltersAndPaginates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var mine []string
	for i := range 7 {
		o := e.create(t, "c-a")
		mine = append(mine, o.ID)
		if i%2 == 0 {
			if _, err := e.svc.Pay(ctx, o.ID); err != nil {
				t.Fatal(err)
			}
		}
		e.create(t, "c-b")
	}
	slices.Reverse(mine)
	tests := []struct {
		name   string
		filter orders.ListFilter
		want   []string
	}{
		{"customer", orders.ListFilter{CustomerID: "c-a", Limit: 3}, mine},
		{"customer and status", orders.ListFilter{CustomerID: "c-a", Status: orders.StatusPaid, Limit: 2}, []string{mine[0], mine[2], mine[4], mine[6]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			f := tt.filter
			for page := 0; page < 10; page++ {
				p, err := e.svc.List(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range p.Items {
					got = append(got, o.ID)
				}
				if p.Next == "" {
					break
				}
				f.After = p.Next
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("listed %q\nwant   %q", got, tt.want)
			}
		})
	}
	counts, err := e.store.CountByStatus(ctx)
	if err != nil || counts[orders.StatusPaid] != 4 || counts[orders.StatusPendingPayment] != 10 {
		t.Fatalf("counts = %v, %v", counts, err)
	}
}

func TestJanitorForgetsExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	old, _, err := e.svc.Create(ctx, createReq("c"), "old-key")
	if err != nil {
		t.Fatal(err)
	}
	fresh, _, err := e.svc.Create(ctx, createReq("c"), "fresh-key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = created_at - interval '25 hours' WHERE key = 'old-key'`); err != nil {
		t.Fatal(err)
	}
	j, err := postgres.NewJanitor(e.pool, postgres.JanitorConfig{Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := j.Sweep(ctx); n != 1 || err != nil {
		t.Fatalf("swept %d keys (%v), want 1", n, err)
	}
	tests := []struct {
		name     string
		key      string
		replayed bool
		sameAs   string
	}{
		{"expired key creates anew", "old-key", false, ""},
		{"fresh key still replays", "fresh-key", true, fresh.ID},
	}
	for _, tt := range tests {
		o, replayed, err := e.svc.Create(ctx, createReq("c"), tt.key)
		if err != nil || replayed != tt.replayed || (tt.sameAs != "" && o.ID != tt.sameAs) || (tt.sameAs == "" && o.ID == old.ID) {
			t.Fatalf("%s: order %s replayed=%v err=%v", tt.name, o.ID, replayed, err)
		}
	}
}

// TestConcurrentCreatesAreBatchedAndIsolated creates many orders at once, so
// they share insert batches, among them one whose id is taken: only that one
// fails, and every other order is stored with its two outbox rows.
func TestConcurrentCreatesAreBatchedAndIsolated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	taken := e.create(t, "c")
	const n = 200
	errs := make([]error, n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i == n/2 {
				ch, err := orders.NewOrder(taken.ID, createReq("dup"), time.Now(), orders.Limits{PayWithinMin: time.Second, PayWithinMax: time.Hour})
				if err != nil {
					errs[i] = err
					return
				}
				_, _, errs[i] = e.store.Create(ctx, ch, nil)
				return
			}
			o, _, err := e.svc.Create(ctx, createReq("many"), "")
			ids[i], errs[i] = o.ID, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (i == n/2) != (err != nil) {
			t.Fatalf("create %d: err = %v", i, err)
		}
	}
	var orderRows, outboxRows int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE customer_id = 'many'`).Scan(&orderRows); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&outboxRows); err != nil {
		t.Fatal(err)
	}
	if orderRows != n-1 || outboxRows != 2*n {
		t.Fatalf("%d orders and %d outbox rows, want %d and %d", orderRows, outboxRows, n-1, 2*n)
	}
	got, err := e.svc.Get(ctx, ids[0])
	if err != nil || got.AmountMinor != 2500 || got.Items[0].SKU != "A-1" || got.Status != orders.StatusPendingPayment || got.CancelReason != "" {
		t.Fatalf("a batched order reads back as %+v (%v)", got, err)
	}
}
