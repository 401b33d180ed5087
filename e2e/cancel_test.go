package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// lateBound is how long after its deadline a single order's cancellation
// must be visible, to the outside consumer and through the REST API.
const lateBound = time.Second

// expectOnTimeCancellation checks that o is not cancelled before its
// deadline (polling the API and the consumer until then), that exactly one
// cancel event for o's version reaches the consumer by deadline+lateBound,
// and that the order then reads cancelled/payment_timeout.
func expectOnTimeCancellation(t *testing.T, cl *ordersclient.ClientWithResponses, c *consumer, o ordersclient.Order) {
	t.Helper()
	ctx := context.Background()
	// Each probe is judged by when it is known to have happened: a status
	// answered before the deadline, an event that arrived before it. (A
	// probe started 50 ms before the deadline can be answered after it on
	// a loaded machine, and the event then rightly be there.)
	for time.Now().Before(o.PayBy.Add(-50 * time.Millisecond)) {
		got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID))
		answered := time.Now()
		if err != nil {
			t.Fatalf("get order: %v", err)
		}
		if got.Status != events.StatusPendingPayment && answered.Before(o.PayBy) {
			t.Fatalf("order %s read %s at %s, before its deadline %s",
				o.ID, got.Status, answered.UTC().Format(time.RFC3339Nano), o.PayBy.Format(time.RFC3339Nano))
		}
		for _, e := range c.expiriesOf(o.ID) {
			if e.At.Before(o.PayBy) {
				t.Fatalf("a cancel event of %s arrived at %s, before its deadline %s",
					o.ID, e.At.UTC().Format(time.RFC3339Nano), o.PayBy.Format(time.RFC3339Nano))
			}
		}
		time.Sleep(100 * time.Millisecond) // pacing the early-fire probe, not waiting for a result
	}
	waitFor(t, time.Until(o.PayBy.Add(lateBound)), "the cancel event within deadline + 1s", func() bool {
		return len(c.expiriesOf(o.ID)) > 0
	})
	e := c.expiriesOf(o.ID)[0]
	if e.Msg.Outcome != events.OutcomeFired || e.Msg.Version != o.Version || !sameInstant(e.Msg.Deadline, o.PayBy) {
		t.Fatalf("cancel event %+v, want outcome fired, version %d, deadline %s", e.Msg, o.Version, o.PayBy)
	}
	if e.At.Before(o.PayBy) || e.Msg.FiredAt.Before(e.Msg.Deadline) {
		t.Fatalf("cancel event arrived at %s (fired_at %s), before the deadline %s", e.At, e.Msg.FiredAt, o.PayBy)
	}
	t.Logf("cancel event of %s arrived %s after its deadline (timeoutd's lateness %s)",
		o.ID, e.At.Sub(o.PayBy).Round(time.Microsecond), time.Duration(e.Msg.LatenessNs).Round(time.Microsecond))

	var got ordersclient.Order
	waitFor(t, time.Until(o.PayBy.Add(lateBound)), "the order to read cancelled within deadline + 1s", func() bool {
		var err error
		got, err = ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID))
		return err == nil && got.Status == events.StatusCancelled
	})
	if got.CancelReason != events.CancelPaymentTimeout {
		t.Fatalf("order cancelled with reason %q, want %q", got.CancelReason, events.CancelPaymentTimeout)
	}
	waitFor(t, 5*time.Second, "the orders.cancelled event", func() bool { return len(c.cancelledOf(o.ID)) > 0 })
	if n := len(c.expiriesOf(o.ID)); n != 1 {
		t.Fatalf("%d cancel events for %s, want 1", n, o.ID)
	}
}

// Scenario 1.
func TestUnpaidOrderIsCancelledAfterItsDeadline(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	c := watch(t, s.NATSURL)
	cl := s.orders()
	o := createOrder(t, cl, within(2*time.Second))
	expectOnTimeCancellation(t, cl, c, o)
}

// Scenario 2.
func TestPaidAndExtendedOrders(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	c := watch(t, s.NATSURL)
	cl := s.orders()
	ctx := context.Background()

	t.Run("paid order is never cancelled", func(t *testing.T) {
		t.Parallel()
		o := createOrder(t, cl, within(1500*time.Millisecond))
		paid, err := ordersclient.OrderOf(cl.PayOrderWithResponse(ctx, o.ID))
		if err != nil || paid.Status != events.StatusPaid {
			t.Fatalf("pay: %+v, %v", paid, err)
		}
		settle := o.PayBy.Add(2 * time.Second)
		waitFor(t, time.Until(settle)+time.Second, "the deadline to be 2s past", func() bool {
			if len(c.expiriesOf(o.ID)) > 0 || len(c.cancelledOf(o.ID)) > 0 {
				t.Fatalf("paid order %s got a cancel event", o.ID)
			}
			return time.Now().After(settle)
		})
		got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID))
		if err != nil || got.Status != events.StatusPaid {
			t.Fatalf("paid order after its deadline: %+v, %v", got, err)
		}
	})

	t.Run("extended deadline moves the cancellation", func(t *testing.T) {
		t.Parallel()
		o := createOrder(t, cl, within(1500*time.Millisecond))
		ext, err := ordersclient.OrderOf(cl.ExtendOrderWithResponse(ctx, o.ID, within(4*time.Second)))
		if err != nil {
			t.Fatalf("extend: %v", err)
		}
		if !ext.PayBy.After(o.PayBy.Add(2*time.Second)) || ext.Version <= o.Version || ext.Status != events.StatusPendingPayment {
			t.Fatalf("extended order %+v, original %+v", ext, o)
		}
		expectOnTimeCancellation(t, cl, c, ext)
	})

	t.Run("payment racing the deadline has one outcome", func(t *testing.T) {
		t.Parallel()
		o := createOrder(t, cl, within(1500*time.Millisecond))
		waitFor(t, 3*time.Second, "the deadline", func() bool { return !time.Now().Before(o.PayBy) })
		paid, err := ordersclient.OrderOf(cl.PayOrderWithResponse(ctx, o.ID))
		var p *ordersclient.Problem
		switch {
		case err == nil:
			// The payment won: the order stays paid, whatever timeoutd fires.
			settle := o.PayBy.Add(2 * time.Second)
			waitFor(t, 4*time.Second, "the deadline to be 2s past", func() bool { return time.Now().After(settle) })
			got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID))
			if err != nil || got.Status != events.StatusPaid || len(c.cancelledOf(o.ID)) != 0 {
				t.Fatalf("payment at the deadline accepted (%+v) but the order is now %+v (%v)", paid, got, err)
			}
			t.Log("the payment at the deadline won")
		case errors.As(err, &p) && p.Status == 409:
			// The cancellation won: the order is cancelled once.
			waitFor(t, 5*time.Second, "the orders.cancelled event", func() bool { return len(c.cancelledOf(o.ID)) > 0 })
			got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID))
			if err != nil || got.Status != events.StatusCancelled || len(c.cancelledOf(o.ID)) != 1 {
				t.Fatalf("payment refused with 409 but the order is %+v (%v), %d cancelled events", got, err, len(c.cancelledOf(o.ID)))
			}
			t.Log("the cancellation won over the payment at the deadline")
		default:
			t.Fatalf("pay at the deadline: %v", err)
		}
	})
}
