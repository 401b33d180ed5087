package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	ojs "github.com/ordertimeout/ordertimeout/services/orders/jetstream"
)

// TestOrdersCrashWithEventsInFlight: an orders instance holding cancel
// events in flight is SIGKILLed; the other instance cancels those orders
// within 3 s of the kill, not after half a minute (the consumer's AckWait
// was 30 s; it is 2 s, kept alive by progress acks while an instance
// works). Two orders instances, one timeoutd, one NATS node.
//
// The killed instance really holds the events: the second instance is
// stopped while the events arrive, so the first pulls them all, and the
// test holds the orders' rows locked in Postgres, so its transaction
// waits. The events then stay delivered and unacked (num_ack_pending) and
// are not redelivered, to the second instance either, once it runs again,
// for longer than AckWait: the progress acks hold them. Then the first is
// killed and the locks released. The lateness is measured from the kill
// to each order's cancellation committed (orders.updated_at), and no
// order may be rescued by the reconciler.
func TestOrdersCrashWithEventsInFlight(t *testing.T) {
	const n = 20
	s := startStack(t, stackOptions{Orders: 2})
	ctx := t.Context()
	holder, other := s.Orders[0], s.Orders[1]
	s.Stop(t, other)

	cl := newOrdersClient(s.roots[holder], s.APIToken, ordersHTTP)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = createOrder(t, cl, within(3*time.Second)).ID
	}
	db, err := pgx.Connect(ctx, s.pgURL("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	lock, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background()) //nolint:errcheck // committed below, or the test failed
	if _, err := lock.Exec(ctx, `SELECT id FROM orders WHERE id = ANY($1) FOR UPDATE`, ids); err != nil {
		t.Fatalf("lock the orders: %v", err)
	}

	nc, err := nats.Connect(s.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	consumerInfo := func() *jetstream.ConsumerInfo {
		t.Helper()
		c, err := js.Consumer(ctx, events.StreamExpiries, ojs.DurableDefault)
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo()
	}
	waitFor(t, time.Minute, "the cancel events to be in flight at "+holder, func() bool { return consumerInfo().NumAckPending == n })
	inFlight := time.Now()
	s.Start(t, other)
	otherReady := waitReady(t, s.readyURL(other), time.Minute)
	ackWait := consumerInfo().Config.AckWait
	// Observe for longer than the default AckWait with both instances
	// pulling: the holder's progress acks keep its events from being
	// redelivered. (Not much longer: the holder's transaction gives up
	// after ApplyTimeout, 15 s, and hands its events back.)
	for time.Since(otherReady) < ojs.AckWaitDefault+time.Second {
		if info := consumerInfo(); info.NumAckPending != n || info.NumRedelivered != 0 {
			t.Fatalf("while %s held the events: %d in flight, %d redelivered; want %d, none", holder, info.NumAckPending, info.NumRedelivered, n)
		}
		time.Sleep(100 * time.Millisecond) // the observation's sampling, not a wait for a result
	}

	killedAt := time.Now() // the SIGKILL is sent now; Kill returns once the container exited
	s.Kill(t, holder)
	t.Logf("%s SIGKILLed holding %d events for %s", holder, n, killedAt.Sub(inFlight).Round(time.Millisecond))
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var cancelled int
	waitFor(t, time.Minute, "the orders to be cancelled", func() bool {
		err := db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'cancelled'`, ids).Scan(&cancelled)
		return err == nil && cancelled == n
	})
	var last time.Time
	var reconciled, timedOut int
	if err := db.QueryRow(ctx, `SELECT max(updated_at), count(*) FILTER (WHERE reconciled_at IS NOT NULL),
		count(*) FILTER (WHERE cancel_reason = 'payment_timeout') FROM orders WHERE id = ANY($1)`, ids).Scan(&last, &reconciled, &timedOut); err != nil {
		t.Fatal(err)
	}
	took := last.Sub(killedAt)
	t.Logf("%d orders whose cancel events %s held (AckWait %v) cancelled by %s, the last %s after the SIGKILL", n, holder, ackWait, other, took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("the last order was cancelled %s after the kill, want within 3 s", took.Round(time.Millisecond))
	}
	if reconciled != 0 || timedOut != n {
		t.Errorf("%d of %d orders rescued by the reconciler, %d cancelled for their payment timeout; want none, all", reconciled, n, timedOut)
	}
	applied, _ := scrapeGauge(&http.Client{Timeout: 5 * time.Second}, s.roots[other]+"/metrics", `orders_cancel_events_total{result="applied"}`)
	if applied != n {
		t.Errorf("%s applied %v cancel events, want the %d its peer held", other, applied, n)
	}
}
