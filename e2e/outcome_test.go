package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// orderRequest returns a create request of one line item with the given
// payment deadline.
func orderRequest(customer string, d ordersclient.Deadline) ordersclient.CreateOrder {
	return ordersclient.CreateOrder{
		CustomerID: customer,
		Currency:   "EUR",
		Items:      []ordersclient.Item{{SKU: "E2E-1", Quantity: 2, UnitPriceMinor: 1250}},
		PayWithin:  d.PayWithin,
		PayBy:      d.PayBy,
	}
}

// within returns the deadline "pay within d".
func within(d time.Duration) ordersclient.Deadline {
	return ordersclient.Deadline{PayWithin: d.Round(time.Millisecond).String()}
}

// payBy returns the deadline "pay by at".
func payBy(at time.Time) ordersclient.Deadline {
	return ordersclient.Deadline{PayBy: at.UTC()}
}

// createOrder creates an order or fails t.
func createOrder(t *testing.T, cl *ordersclient.ClientWithResponses, d ordersclient.Deadline) ordersclient.Order {
	t.Helper()
	o, err := ordersclient.OrderOf(cl.CreateOrderWithResponse(context.Background(), nil, orderRequest("c-"+t.Name(), d)))
	if err != nil {
		t.Fatalf("create order: %v", err)
	}
	if o.Status != events.StatusPendingPayment || !events.ValidKey(o.ID) {
		t.Fatalf("created order = %+v, want a pending_payment order with a valid id", o)
	}
	return o
}

// cancelTrail says where the cancellation of order o stands, hop by hop,
// for a test whose order was not cancelled in time: whether timeoutd still
// holds its deadline (its API), whether the cancel event is stored
// (TIMEOUT_EXPIRIES) and when, and whether orders published orders.cancelled.
// natsURL and opts connect a reader allowed on those streams.
func (s *stack) cancelTrail(ctx context.Context, o ordersclient.Order, natsURL string, opts ...nats.Option) string {
	hops := []string{"timeoutd: no pending timeout (fired, cleared, or never ingested)"}
	if resp, err := http.Get(s.TimeoutdURL + "/api/v1/timeouts/" + o.ID); err != nil {
		hops[0] = fmt.Sprintf("timeoutd: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			hops[0] = "timeoutd: pending " + strings.TrimSpace(string(body))
		}
	}
	ev, err := readEvents(ctx, natsURL, opts...)
	if err != nil {
		return strings.Join(append(hops, fmt.Sprintf("streams: %v", err)), "; ")
	}
	if exps := ev.Expiries[o.ID]; len(exps) == 0 {
		hops = append(hops, "cancel event: not stored")
	} else {
		for _, e := range exps {
			hops = append(hops, fmt.Sprintf("cancel event v%d %s: fired %s, stored %s after the deadline", e.Version, e.Outcome,
				e.FiredAt.Sub(e.Deadline).Round(time.Millisecond), e.Stored.Sub(o.PayBy).Round(time.Millisecond)))
		}
	}
	if cs := ev.Cancelled[o.ID]; len(cs) == 0 {
		hops = append(hops, "orders.cancelled: not published")
	} else {
		for _, c := range cs {
			hops = append(hops, fmt.Sprintf("orders.cancelled v%d (%s): stored %s after the deadline", c.Version, c.Reason,
				c.Stored.Sub(o.PayBy).Round(time.Millisecond)))
		}
	}
	return strings.Join(hops, "; ")
}

// load describes orders created at a steady rate, some paid at a random
// moment before their deadline.
type load struct {
	// N orders are created, evenly over Over (0: as fast as Workers allow).
	N    int
	Over time.Duration
	// Workers is the number of concurrent clients.
	Workers int
	// Deadline returns the deadline of an order created at now.
	Deadline func(now time.Time) ordersclient.Deadline
	// PayShare of the orders are paid, each at a moment PayAt picks for
	// its pay_by (a moment at least a second before it).
	PayShare float64
	PayAt    func(payBy time.Time) time.Time
	// PayGate, when set, holds every payment back until it is closed.
	PayGate <-chan struct{}
	// OnCreateError, when set, absorbs creation errors (for a test that
	// breaks the stack on purpose) instead of failing the test.
	OnCreateError func(error)
}

// loadResult is what a load did: the orders left unpaid (they must be
// cancelled), the orders paid, and those whose payment lost the race with
// the deadline (409: they must be cancelled too).
type loadResult struct {
	Unpaid, Paid []ordersclient.Order
	LostRace     int
}

// run creates the orders, pays the chosen ones, and returns when every
// payment has been answered.
func (l load) run(t *testing.T, cl *ordersclient.ClientWithResponses) loadResult {
	t.Helper()
	ctx := context.Background()
	var (
		mu     sync.Mutex
		res    loadResult
		errs   []error
		pays   sync.WaitGroup
		work   = make(chan struct{})
		wg     sync.WaitGroup
		failed = func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	)
	for range l.Workers {
		wg.Go(func() {
			for range work {
				o, err := ordersclient.OrderOf(cl.CreateOrderWithResponse(ctx, nil, orderRequest("c-load", l.Deadline(time.Now()))))
				if err != nil {
					if l.OnCreateError != nil {
						l.OnCreateError(err)
					} else {
						failed(fmt.Errorf("create: %w", err))
					}
					continue
				}
				if rand.Float64() >= l.PayShare {
					mu.Lock()
					res.Unpaid = append(res.Unpaid, o)
					mu.Unlock()
					continue
				}
				pays.Add(1)
				time.AfterFunc(time.Until(l.PayAt(o.PayBy)), func() {
					defer pays.Done()
					if l.PayGate != nil {
						<-l.PayGate
					}
					paid, err := ordersclient.OrderOf(cl.PayOrderWithResponse(ctx, o.ID))
					var p *ordersclient.Problem
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil && paid.Status == events.StatusPaid:
						res.Paid = append(res.Paid, paid)
					case errors.As(err, &p) && p.Status == 409:
						res.LostRace++
						res.Unpaid = append(res.Unpaid, o)
					default:
						errs = append(errs, fmt.Errorf("pay %s: %+v, %v", o.ID, paid, err))
					}
				})
			}
		})
	}
	var tick <-chan time.Time
	if l.Over > 0 {
		tk := time.NewTicker(l.Over / time.Duration(l.N))
		defer tk.Stop()
		tick = tk.C
	}
	for range l.N {
		if tick != nil {
			<-tick
		}
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	pays.Wait()
	for i, err := range errs {
		if i == 10 {
			t.Errorf("… and %d more errors", len(errs)-10)
			break
		}
		t.Errorf("load: %v", err)
	}
	return res
}

// payBetween returns a PayAt that picks a moment uniformly between from and
// to before the deadline (from > to ≥ 1 s).
func payBetween(from, to time.Duration) func(time.Time) time.Time {
	return func(payBy time.Time) time.Time {
		return payBy.Add(-to - rand.N(from-to))
	}
}

// lateness summarises how late after their deadlines cancel events arrived.
type lateness struct {
	N             int
	P50, P99, Max time.Duration
}

func (l lateness) String() string {
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", l.N, l.P50, l.P99, l.Max)
}

// lateSample is how late after the deadline PayBy timeoutd fired an
// order's cancel event (Fired, its fired_at) and the event arrived at the
// outside consumer (Late).
type lateSample struct {
	PayBy       time.Time
	Late, Fired time.Duration
	// Cancelled and Announced, where the auditor measures them, are how
	// late the order's cancellation committed in the orders database
	// (updated_at) and its first orders.cancelled event was stored.
	Cancelled, Announced time.Duration
}

// summarise returns the arrival lateness of the samples keep selects (nil:
// all), and timeoutd's own firing lateness of the same samples.
func summarise(samples []lateSample, keep func(lateSample) bool) (arrived, fired lateness) {
	var ds, fs []time.Duration
	for _, s := range samples {
		if keep == nil || keep(s) {
			ds = append(ds, s.Late)
			fs = append(fs, s.Fired)
		}
	}
	return summary(ds), summary(fs)
}

func summary(ds []time.Duration) lateness {
	if len(ds) == 0 {
		return lateness{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return lateness{N: len(ds), P50: at(0.50), P99: at(0.99), Max: ds[len(ds)-1]}
}

// verifyOutcomes waits, up to timeout, until every unpaid order's
// cancellation reached the consumer, then until every deadline is at least
// settle past, and checks the invariants order by order:
//   - an unpaid order has exactly one cancel event and one orders.cancelled
//     event, neither before its deadline, and reads cancelled/payment_timeout;
//   - a paid order has no orders.cancelled event and reads paid.
//
// It returns how late the cancel events arrived at the consumer.
func verifyOutcomes(t *testing.T, cl *ordersclient.ClientWithResponses, c *consumer, res loadResult, timeout, settle time.Duration) []lateSample {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("the cancellation of %d unpaid orders", len(res.Unpaid)), func() bool {
		for _, o := range res.Unpaid {
			if len(c.cancelledOf(o.ID)) == 0 {
				return false
			}
		}
		return true
	})
	var last time.Time
	for _, o := range append(slices.Clone(res.Unpaid), res.Paid...) {
		if o.PayBy.After(last) {
			last = o.PayBy
		}
	}
	waitFor(t, time.Until(last)+settle+time.Second, "the last deadline to be well past", func() bool {
		return time.Now().After(last.Add(settle))
	})

	var (
		mu        sync.Mutex
		problems  []string
		late      []lateSample
		paidFired int
	)
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	check := func(o ordersclient.Order, paid bool) {
		got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(context.Background(), o.ID))
		if err != nil {
			report("get %s: %v", o.ID, err)
			return
		}
		exps, cans := c.expiriesOf(o.ID), c.cancelledOf(o.ID)
		if paid {
			if got.Status != events.StatusPaid || len(cans) != 0 {
				report("paid order %s: status %s/%s, %d cancelled events; want paid and none", o.ID, got.Status, got.CancelReason, len(cans))
			}
			if len(exps) > 0 {
				mu.Lock()
				paidFired++
				mu.Unlock()
			}
			return
		}
		if got.Status != events.StatusCancelled || got.CancelReason != events.CancelPaymentTimeout {
			report("unpaid order %s: status %s/%s, want cancelled/payment_timeout", o.ID, got.Status, got.CancelReason)
		}
		if got.UpdatedAt.Before(o.PayBy) {
			report("unpaid order %s: cancelled at %s, before its deadline %s", o.ID, got.UpdatedAt, o.PayBy)
		}
		if len(exps) != 1 || len(cans) != 1 {
			report("unpaid order %s: %d cancel events and %d cancelled events, want exactly one of each", o.ID, len(exps), len(cans))
			return
		}
		e, ev := exps[0], cans[0]
		if !sameInstant(e.Msg.Deadline, o.PayBy) || e.Msg.FiredAt.Before(e.Msg.Deadline) || e.At.Before(o.PayBy) {
			report("unpaid order %s (pay_by %s): cancel event deadline %s fired_at %s arrived %s: early or wrong deadline",
				o.ID, o.PayBy, e.Msg.Deadline, e.Msg.FiredAt, e.At)
		}
		if ev.Msg.CancelReason != events.CancelPaymentTimeout || ev.Msg.At.Before(o.PayBy) {
			report("unpaid order %s: cancelled event %+v: wrong reason or before the deadline %s", o.ID, ev.Msg, o.PayBy)
		}
		mu.Lock()
		late = append(late, lateSample{PayBy: o.PayBy, Late: e.At.Sub(o.PayBy), Fired: e.Msg.FiredAt.Sub(o.PayBy)})
		mu.Unlock()
	}
	jobs := make(chan func())
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for j := range jobs {
				j()
			}
		})
	}
	for _, o := range res.Unpaid {
		jobs <- func() { check(o, false) }
	}
	for _, o := range res.Paid {
		jobs <- func() { check(o, true) }
	}
	close(jobs)
	wg.Wait()
	for i, p := range problems {
		if i == 20 {
			t.Errorf("… and %d more problems", len(problems)-20)
			break
		}
		t.Error(p)
	}
	t.Logf("%d unpaid orders cancelled (%d payments lost the race with the deadline), %d paid orders kept; "+
		"%d paid orders still got a (harmless, ignored) cancel event", len(res.Unpaid), res.LostRace, len(res.Paid), paidFired)
	return late
}

// sameInstant reports whether a and b are equal to the microsecond, the
// precision Postgres keeps.
func sameInstant(a, b time.Time) bool {
	return a.Truncate(time.Microsecond).Equal(b.Truncate(time.Microsecond))
}
