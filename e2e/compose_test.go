package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// Scenario 7: the compose files users run, brought up by the same script as
// `make up` and `make up-ha` under a project name and host ports of their
// own, pass one create → cancel round trip: deploy/compose/compose.yaml, and
// the cluster of compose.ha.yaml (through its second orders instance, and
// every timeoutd instance shows the whole cluster; its Postgres is the
// Patroni cluster, which scripts/stack.sh patroni lists).
func TestComposeStack(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e test: needs Docker and the built images; run without -short (make test)")
	}
	if err := requireImages(t.Context(), "ordertimeout/postgres:15", patroniImage, testinfra.NATSImage, ordersImage, timeoutdImage); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		stack string // STACK of scripts/stack.sh
		// ports are the host port variables; orders and timeoutd name the
		// ones the test talks to.
		ports     []string
		orders    string
		timeoutds []string
	}{
		{"single", "", []string{"ORDERS_PORT", "TIMEOUTD_PORT", "NATS_PORT", "NATS_MONITOR_PORT", "POSTGRES_PORT"},
			"ORDERS_PORT", []string{"TIMEOUTD_PORT"}},
		{"ha", "ha", []string{"ORDERS_PORT", "ORDERS_2_PORT", "TIMEOUTD_PORT", "TIMEOUTD_2_PORT", "TIMEOUTD_3_PORT",
			"NATS_PORT", "NATS_2_PORT", "NATS_3_PORT", "NATS_MONITOR_PORT", "POSTGRES_PORT", "POSTGRES_2_PORT", "POSTGRES_3_PORT"},
			"ORDERS_2_PORT", []string{"TIMEOUTD_PORT", "TIMEOUTD_2_PORT", "TIMEOUTD_3_PORT"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := []string{
				fmt.Sprintf("COMPOSE_PROJECT=ot-e2e-%d", os.Getpid()),
				"STACK=" + tt.stack,
				"NATS_IMAGE=" + testinfra.NATSImage, // it also runs the streams bootstrap
				"ORDERS_API_TOKENS=" + apiToken,
				"ORDERS_IMAGE=" + ordersImage,
				"TIMEOUTD_IMAGE=" + timeoutdImage,
				"PATRONI_IMAGE=" + patroniImage,
				"DOWN_VOLUMES=1", // only read by down
				"WAIT_SECONDS=240",
			}
			ports := map[string]string{}
			for _, v := range tt.ports {
				p, err := freePort()
				if err != nil {
					t.Fatal(err)
				}
				ports[v] = p
				env = append(env, v+"="+p)
			}
			composeUp(t, env)
			// Every instance's view shows every instance, owning every
			// partition between them (the spread takes a few lease rounds).
			// The round trip waits for it: an order whose partition is
			// still moving is fired late, which is not what this test is
			// about.
			for _, v := range tt.timeoutds {
				var c api.Cluster
				owned := func() int {
					n := 0
					for _, in := range c.Instances {
						n += len(in.Partitions)
					}
					return n
				}
				waitFor(t, 60*time.Second, v+"'s cluster view to show every instance and partition", func() bool {
					c = api.Cluster{}
					return getJSON("http://127.0.0.1:"+ports[v]+"/api/v1/cluster", &c) == nil &&
						len(c.Instances) == len(tt.timeoutds) && owned() == events.Partitions
				})
			}
			composeRoundTrip(t, "http://127.0.0.1:"+ports[tt.orders])
			if tt.stack == "ha" {
				// Patroni's view through the script operators use: a
				// leader and a synchronous standby.
				cmd := exec.Command("../scripts/stack.sh", "patroni", "list")
				cmd.Env = append(os.Environ(), env...)
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), "Leader") || !strings.Contains(string(out), "Sync Standby") {
					t.Fatalf("scripts/stack.sh patroni list: %v\n%s", err, out)
				}
			}
		})
	}
}

// composeUp brings a compose stack up with scripts/stack.sh in env and
// removes it when t ends. When t failed, the logs of every service go to a
// file named in the test's output, which shows the last lines of the
// services' own logs (not the NATS nodes' route chatter).
func composeUp(t *testing.T, env []string) {
	t.Helper()
	stack := func(args ...string) (string, error) {
		cmd := exec.Command("../scripts/stack.sh", args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := stack("dump")
			t.Logf("==== compose logs of orders and timeoutd (last lines) ====\n%s", tail(serviceLines(out), 40))
			if f, err := os.CreateTemp("", "compose-logs-*.txt"); err == nil {
				_, _ = f.WriteString(out)
				_ = f.Close()
				t.Logf("every service's compose logs: %s", f.Name())
			}
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
}

// serviceLines keeps the lines of a compose log dump written by the orders
// and timeoutd containers.
func serviceLines(dump string) string {
	var keep []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "orders") || strings.HasPrefix(l, "timeoutd") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// composeRoundTrip passes one create → cancel round trip through the orders
// API at ordersURL.
func composeRoundTrip(t *testing.T, ordersURL string) {
	t.Helper()
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
