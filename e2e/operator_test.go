package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// TestOperatorActionsThroughTimeoutd drives the dashboard's operator actions
// against the real containers: timeoutd checks the operator token and
// forwards to the orders API with its own token, so an extend moves the
// deadline in both services and a cancel cancels the order (reason
// customer) and clears its timeout; without the token nothing changes.
func TestOperatorActionsThroughTimeoutd(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	cl := s.orders()
	ctx := context.Background()
	o := createOrder(t, cl, within(time.Minute))
	waitFor(t, 10*time.Second, "timeout pending in timeoutd", func() bool {
		code, _ := operatorPost(t, s, "GET", "/api/v1/timeouts/"+o.ID, "", "")
		return code == http.StatusOK
	})

	tests := []struct {
		name, path, token, body string
		want                    int
	}{
		{"no token", "/cancel", "", "", http.StatusUnauthorized},
		{"wrong token", "/cancel", "not-the-token", "", http.StatusUnauthorized},
		{"orders' own token is not an operator token", "/cancel", apiToken, "", http.StatusUnauthorized},
		{"invalid extend is the orders API's 400", "/extend", operatorToken, `{"pay_within":"-5m"}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		if code, body := operatorPost(t, s, "POST", "/api/v1/orders/"+o.ID+tt.path, tt.token, tt.body); code != tt.want {
			t.Fatalf("%s: %d %s, want %d", tt.name, code, body, tt.want)
		}
	}
	if got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID)); err != nil || got.Version != o.Version || got.Status != events.StatusPendingPayment {
		t.Fatalf("refused actions changed the order: %+v, %v", got, err)
	}

	code, body := operatorPost(t, s, "POST", "/api/v1/orders/"+o.ID+"/extend", operatorToken, `{"pay_within":"2h"}`)
	if code != http.StatusOK {
		t.Fatalf("extend: %d %s", code, body)
	}
	ext, err := ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID))
	if err != nil || ext.Version != o.Version+1 || !ext.PayBy.After(o.PayBy.Add(time.Hour)) {
		t.Fatalf("after extend the order is %+v (%v), want version %d and pay_by about 2 h ahead", ext, err, o.Version+1)
	}
	waitFor(t, 10*time.Second, "timeoutd holds the extended deadline", func() bool {
		code, body := operatorPost(t, s, "GET", "/api/v1/timeouts/"+o.ID, "", "")
		var p struct {
			Version int64 `json:"version"`
		}
		return code == http.StatusOK && json.Unmarshal([]byte(body), &p) == nil && p.Version == ext.Version
	})

	if code, body := operatorPost(t, s, "POST", "/api/v1/orders/"+o.ID+"/cancel", operatorToken, ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(ctx, o.ID))
	if err != nil || got.Status != events.StatusCancelled || got.CancelReason != events.CancelByCustomer {
		t.Fatalf("after cancel the order is %+v (%v), want cancelled by customer", got, err)
	}
	waitFor(t, 10*time.Second, "timeout cleared in timeoutd", func() bool {
		code, _ := operatorPost(t, s, "GET", "/api/v1/timeouts/"+o.ID, "", "")
		return code == http.StatusNotFound
	})
	if code, body := operatorPost(t, s, "POST", "/api/v1/orders/"+o.ID+"/cancel", operatorToken, ""); code != http.StatusConflict {
		t.Fatalf("second cancel: %d %s, want the orders API's 409", code, body)
	}
}

// operatorPost sends method path to timeoutd with an optional bearer token
// and JSON body, and returns the status and the body.
func operatorPost(t *testing.T, s *stack, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.TimeoutdURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
