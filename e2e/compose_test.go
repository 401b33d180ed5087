package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// Scenario 7: the compose file users run (deploy/compose/compose.yaml),
// brought up by the same script as `make up` under a project name and host
// ports of its own, passes one create → cancel round trip.
func TestComposeStack(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e test: needs Docker and the built images; run without -short (make test)")
	}
	if err := requireImages(t.Context(), "ordertimeout/postgres:15", testinfra.NATSImage, ordersImage, timeoutdImage); err != nil {
		t.Fatal(err)
	}
	env := []string{
		fmt.Sprintf("COMPOSE_PROJECT=ot-e2e-%d", os.Getpid()),
		"NATS_IMAGE=" + testinfra.NATSImage, // it also runs the streams bootstrap
		"ORDERS_API_TOKENS=" + apiToken,
		"ORDERS_IMAGE=" + ordersImage,
		"TIMEOUTD_IMAGE=" + timeoutdImage,
		"DOWN_VOLUMES=1", // only read by down
	}
	ports := map[string]string{}
	for _, v := range []string{"ORDERS_PORT", "TIMEOUTD_PORT", "NATS_PORT", "NATS_MONITOR_PORT", "POSTGRES_PORT"} {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[v] = p
		env = append(env, v+"="+p)
	}
	stack := func(args ...string) (string, error) {
		cmd := exec.Command("../scripts/stack.sh", args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := stack("dump")
			t.Logf("==== compose logs ====\n%s", tail(out, 4*logTailLines))
		}
		if out, err := stack("down"); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})
	began := time.Now()
	if out, err := stack("up"); err != nil {
		t.Fatalf("scripts/stack.sh up: %v\n%s", err, out)
	}
	t.Logf("compose stack healthy in %s", time.Since(began).Round(time.Millisecond))

	ordersURL := "http://127.0.0.1:" + ports["ORDERS_PORT"]
	cl := newOrdersClient(ordersURL, apiToken, ordersHTTP)
	o := createOrder(t, cl, within(time.Second))
	var got ordersclient.Order
	waitFor(t, time.Until(o.PayBy.Add(5*time.Second)), "the order to be cancelled", func() bool {
		var err error
		got, err = ordersclient.OrderOf(cl.GetOrderWithResponse(t.Context(), o.ID))
		return err == nil && got.Status == events.StatusCancelled
	})
	if got.CancelReason != events.CancelPaymentTimeout || got.UpdatedAt.Before(o.PayBy) {
		t.Fatalf("order %+v: want cancelled for payment_timeout after %s", got, o.PayBy)
	}
	// The token is checked: a client without it is refused.
	anon := newOrdersClient(ordersURL, "", ordersHTTP)
	_, err := ordersclient.OrderOf(anon.CreateOrderWithResponse(t.Context(), nil, orderRequest("c-anon", within(time.Minute))))
	var p *ordersclient.Problem
	if !errors.As(err, &p) || p.Status != http.StatusUnauthorized {
		t.Fatalf("create without a bearer token: %v, want a 401 problem", err)
	}
}
