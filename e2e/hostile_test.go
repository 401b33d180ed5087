package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// wrongToken is a bearer token the stack does not accept; like the real
// one, it must never appear in a log.
const wrongToken = "e2e-wrong-token-6f1c"

// problemBody is the part of an RFC 9457 answer the hostile table checks.
type problemBody struct {
	Type   string          `json:"type"`
	Title  string          `json:"title"`
	Status json.RawMessage `json:"status"`
	Detail string          `json:"detail"`
	Errors []struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"errors"`
}

// restCase is one hostile HTTP request and the answers accepted for it.
type restCase struct {
	name         string
	method, path string
	body         string
	// header adds or overrides request headers; a "" value removes one.
	// By default Content-Type is application/json and mutating requests
	// carry the valid bearer token.
	header map[string]string
	// want lists the accepted statuses.
	want []int
	// field, when set, must be named by the problem's errors.
	field string
	// check, when set, inspects a 2xx body.
	check func(t *testing.T, body []byte)
}

// orderBody returns a valid create body with some members replaced: each
// of set is a raw JSON member such as `"pay_within":"-5m"`, replacing the
// member of the same name (or added).
func orderBody(set ...string) string {
	members := map[string]string{
		"customer_id": `"c-hostile"`, "currency": `"EUR"`,
		"items":      `[{"sku":"H-1","quantity":1,"unit_price_minor":100}]`,
		"pay_within": `"1h"`,
	}
	order := []string{"customer_id", "currency", "items", "pay_within"}
	for _, m := range set {
		name, value, _ := strings.Cut(m, ":")
		name = strings.Trim(name, `"`)
		if _, ok := members[name]; !ok {
			order = append(order, name)
		}
		members[name] = value
	}
	var parts []string
	for _, name := range order {
		if v := members[name]; v != "-" {
			parts = append(parts, fmt.Sprintf("%q:%s", name, v))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func (s *stack) do(t *testing.T, base string, tc restCase) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), tc.method, base+tc.path, strings.NewReader(tc.body))
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if tc.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tc.method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+s.APIToken)
	}
	for k, v := range tc.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", tc.method, tc.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return resp.StatusCode, resp.Header, body
}

// checkAnswer asserts tc's expectations on an answer: an accepted status,
// and for an error an application/problem+json naming tc.field.
func checkAnswer(t *testing.T, tc restCase, status int, h http.Header, body []byte) {
	t.Helper()
	if !slices.Contains(tc.want, status) {
		t.Fatalf("%s %s: status %d, want one of %v; body %.300s", tc.method, tc.path, status, tc.want, body)
	}
	if status < 400 {
		t.Logf("%d", status)
		if tc.check != nil {
			tc.check(t, body)
		}
		return
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("status %d with Content-Type %q, want application/problem+json; body %.300s", status, ct, body)
	}
	var p problemBody
	if err := json.Unmarshal(body, &p); err != nil || p.Title == "" || len(p.Status) == 0 {
		t.Fatalf("problem %.300s: want type, title and status (%v)", body, err)
	}
	if tc.field == "" {
		t.Logf("%d %s: %s", status, p.Title, p.Detail)
		return
	}
	for _, e := range p.Errors {
		if e.Field == tc.field || strings.HasSuffix(e.Field, "."+tc.field) {
			t.Logf("%d %s: %s: %s", status, p.Title, e.Field, e.Reason)
			return
		}
	}
	t.Fatalf("problem %.400s: want an error naming field %q", body, tc.field)
}

// TestHostileInputs sends a table of hostile inputs through the real REST
// APIs and NATS of the shared stack: malformed JSON, wrong types, negative
// and absurd durations, year-9999 deadlines, unicode and control characters
// in ids, SQL-looking strings, oversized bodies, invalid subjects, missing
// or wrong tokens, duplicate and out-of-order versions, forged cancel
// events and fire subjects outside the allowed prefixes. Each must get a 4xx
// application/problem+json naming the field, or a dead letter with its
// reason, or be ignored as stale; afterwards both services are healthy and
// never restarted, and two control orders (one only read, one the target
// of rejected changes) are exactly as before.
func TestHostileInputs(t *testing.T) {
	// A stack of its own: the forged cancel events below would trip the
	// outside consumers of the scenarios sharing the shared stack.
	s := startStack(t, stackOptions{})
	nc, err := nats.Connect(s.NATSURL, nats.Name("e2e-hostile"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	dead := watchDeadLetters(t, nc)
	cl := s.orders()
	control := createOrder(t, cl, within(time.Hour))
	target := createOrder(t, cl, within(time.Hour))
	waitPending := func(t *testing.T, key string, version int64) api.Timeout {
		t.Helper()
		var tm api.Timeout
		waitFor(t, 15*time.Second, fmt.Sprintf("timeout %s pending at v%d", key, version), func() bool {
			var ok bool
			tm, ok = pendingTimeout(t, s, key)
			return ok && tm.Version == version
		})
		return tm
	}
	controlTimeout := waitPending(t, control.ID, 1)
	waitPending(t, target.ID, 1)
	startedAt := map[string]string{}
	for _, name := range []string{svcOrders, svcTimeoutd} {
		startedAt[name] = containerStarted(t, s, name)
	}

	t.Run("orders REST", func(t *testing.T) {
		year9999 := `"9999-12-31T23:59:59Z"`
		past := fmt.Sprintf("%q", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		bad := []int{http.StatusBadRequest}
		tests := []restCase{
			{name: "malformed JSON", method: "POST", path: "/v1/orders", body: `{"customer_id":`, want: bad, field: "body"},
			{name: "not an object", method: "POST", path: "/v1/orders", body: `[1,2,3]`, want: bad, field: "body"},
			{name: "trailing data", method: "POST", path: "/v1/orders", body: orderBody() + `{}`, want: bad, field: "body"},
			{name: "empty body", method: "POST", path: "/v1/orders", body: "", header: map[string]string{"Content-Type": "application/json"}, want: bad, field: "body"},
			{name: "unknown field", method: "POST", path: "/v1/orders", body: orderBody(`"is_admin":true`), want: bad, field: "is_admin"},
			{name: "wrong type: customer_id a number", method: "POST", path: "/v1/orders", body: orderBody(`"customer_id":42`), want: bad, field: "customer_id"},
			{name: "wrong type: quantity a string", method: "POST", path: "/v1/orders", body: orderBody(`"items":[{"sku":"H-1","quantity":"two","unit_price_minor":100}]`), want: bad, field: "items[0].quantity"},
			{name: "wrong type: items an object", method: "POST", path: "/v1/orders", body: orderBody(`"items":{"sku":"H-1"}`), want: bad, field: "items"},
			{name: "negative quantity", method: "POST", path: "/v1/orders", body: orderBody(`"items":[{"sku":"H-1","quantity":-1,"unit_price_minor":100}]`), want: bad, field: "items[0].quantity"},
			{name: "negative price", method: "POST", path: "/v1/orders", body: orderBody(`"items":[{"sku":"H-1","quantity":1,"unit_price_minor":-100}]`), want: bad, field: "items[0].unit_price_minor"},
			{name: "amount overflows int64", method: "POST", path: "/v1/orders", body: orderBody(`"items":[{"sku":"H-1","quantity":1000000,"unit_price_minor":9223372036854775807}]`), want: bad, field: "items[0].unit_price_minor"},
			{name: "quantity beyond int64", method: "POST", path: "/v1/orders", body: orderBody(`"items":[{"sku":"H-1","quantity":1e40,"unit_price_minor":1}]`), want: bad, field: "items[0].quantity"},
			{name: "no items", method: "POST", path: "/v1/orders", body: orderBody(`"items":[]`), want: bad, field: "items"},
			{name: "negative pay_within", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":"-5m"`), want: bad, field: "pay_within"},
			{name: "zero pay_within", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":"0s"`), want: bad, field: "pay_within"},
			{name: "absurd pay_within", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":"2562047h"`), want: bad, field: "pay_within"},
			{name: "pay_within overflowing a duration", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":"99999999999999999999h"`), want: bad, field: "pay_within"},
			{name: "pay_within not a duration", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":"soon"`), want: bad, field: "pay_within"},
			{name: "pay_within a number", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":900`), want: bad, field: "pay_within"},
			{name: "pay_by in year 9999", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":-`, `"pay_by":`+year9999), want: bad, field: "pay_by"},
			{name: "pay_by in the past", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":-`, `"pay_by":`+past), want: bad, field: "pay_by"},
			{name: "pay_by not RFC 3339", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":-`, `"pay_by":"tomorrow at noon"`), want: bad, field: "pay_by"},
			{name: "pay_within and pay_by", method: "POST", path: "/v1/orders", body: orderBody(`"pay_by":` + fmt.Sprintf("%q", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))), want: bad, field: "pay_by"},
			{name: "neither pay_within nor pay_by", method: "POST", path: "/v1/orders", body: orderBody(`"pay_within":-`), want: bad, field: "pay_within"},
			// Postgres text cannot hold NUL: it must be refused as input,
			// not reach the database as a 500.
			{name: "NUL in customer_id", method: "POST", path: "/v1/orders", body: orderBody(`"customer_id":"c-\u0000-x"`), want: bad, field: "customer_id"},
			{name: "NUL in sku", method: "POST", path: "/v1/orders", body: orderBody(`"items":[{"sku":"H\u0000","quantity":1,"unit_price_minor":100}]`), want: bad, field: "items[0].sku"},
			{name: "control characters in customer_id", method: "POST", path: "/v1/orders", body: orderBody(`"customer_id":"c-\u0007\u001b[2J\r\n"`), want: []int{http.StatusCreated, http.StatusBadRequest}, field: "customer_id"},
			{name: "currency not ISO 4217", method: "POST", path: "/v1/orders", body: orderBody(`"currency":"€€€"`), want: bad, field: "currency"},
			{name: "SQL in customer_id is stored verbatim", method: "POST", path: "/v1/orders", body: orderBody(`"customer_id":"c'); DROP TABLE orders; --"`),
				want: []int{http.StatusCreated}, check: func(t *testing.T, body []byte) {
					var o ordersclient.Order
					if err := json.Unmarshal(body, &o); err != nil || o.CustomerID != "c'); DROP TABLE orders; --" {
						t.Fatalf("created %+v (%v): want the customer id verbatim", o, err)
					}
				}},
			{name: "unicode customer_id", method: "POST", path: "/v1/orders", body: orderBody(`"customer_id":"клиент-😀"`), want: []int{http.StatusCreated, http.StatusBadRequest}, field: "customer_id"},
			{name: "oversized body", method: "POST", path: "/v1/orders", body: orderBody(`"customer_id":"` + strings.Repeat("x", 1<<20) + `"`), want: []int{http.StatusRequestEntityTooLarge}},
			{name: "deeply nested JSON", method: "POST", path: "/v1/orders", body: strings.Repeat("[", 10000) + strings.Repeat("]", 10000), want: bad, field: "body"},
			{name: "text/plain body", method: "POST", path: "/v1/orders", body: orderBody(), header: map[string]string{"Content-Type": "text/plain"}, want: []int{http.StatusUnsupportedMediaType}, field: "Content-Type"},
			{name: "Idempotency-Key of 10 KiB", method: "POST", path: "/v1/orders", body: orderBody(), header: map[string]string{"Idempotency-Key": strings.Repeat("k", 10<<10)}, want: bad, field: "Idempotency-Key"},

			{name: "create without a token", method: "POST", path: "/v1/orders", body: orderBody(), header: map[string]string{"Authorization": ""}, want: []int{http.StatusUnauthorized}},
			{name: "create with a wrong token", method: "POST", path: "/v1/orders", body: orderBody(), header: map[string]string{"Authorization": "Bearer " + wrongToken}, want: []int{http.StatusUnauthorized}},
			{name: "pay the control order without a token", method: "POST", path: "/v1/orders/" + control.ID + "/pay", header: map[string]string{"Authorization": ""}, want: []int{http.StatusUnauthorized}},
			{name: "cancel the control order with a wrong token", method: "POST", path: "/v1/orders/" + control.ID + "/cancel", header: map[string]string{"Authorization": "Bearer " + wrongToken}, want: []int{http.StatusUnauthorized}},
			{name: "extend the control order with Basic auth", method: "POST", path: "/v1/orders/" + control.ID + "/extend", body: `{"pay_within":"1m"}`, header: map[string]string{"Authorization": "Basic " + s.APIToken}, want: []int{http.StatusUnauthorized}},
			{name: "pay the control order with the token in the query", method: "POST", path: "/v1/orders/" + control.ID + "/pay?access_token=" + s.APIToken, header: map[string]string{"Authorization": ""}, want: []int{http.StatusUnauthorized}},
			{name: "pay the control order with an empty bearer", method: "POST", path: "/v1/orders/" + control.ID + "/pay", header: map[string]string{"Authorization": "Bearer "}, want: []int{http.StatusUnauthorized}},
			{name: "pay the control order with the token as a prefix", method: "POST", path: "/v1/orders/" + control.ID + "/pay", header: map[string]string{"Authorization": "Bearer " + s.APIToken[:len(s.APIToken)-1]}, want: []int{http.StatusUnauthorized}},

			{name: "extend: negative pay_within", method: "POST", path: "/v1/orders/" + target.ID + "/extend", body: `{"pay_within":"-1h"}`, want: bad, field: "pay_within"},
			{name: "extend: pay_by in year 9999", method: "POST", path: "/v1/orders/" + target.ID + "/extend", body: `{"pay_by":` + year9999 + `}`, want: bad, field: "pay_by"},
			{name: "extend: wrong type", method: "POST", path: "/v1/orders/" + target.ID + "/extend", body: `{"pay_within":true}`, want: bad, field: "pay_within"},
			{name: "extend: malformed JSON", method: "POST", path: "/v1/orders/" + target.ID + "/extend", body: `{"pay_within":"1h"`, want: bad, field: "body"},

			{name: "unicode id", method: "GET", path: "/v1/orders/" + url.PathEscape("заказ-😀"), want: []int{http.StatusNotFound}},
			{name: "control character in id", method: "GET", path: "/v1/orders/a%00b%07", want: []int{http.StatusNotFound}},
			{name: "path traversal in id", method: "GET", path: "/v1/orders/..%2F..%2Fetc%2Fpasswd", want: []int{http.StatusNotFound}},
			{name: "SQL in id", method: "GET", path: "/v1/orders/" + url.PathEscape("x' OR '1'='1"), want: []int{http.StatusNotFound}},
			{name: "id of 8 KiB", method: "GET", path: "/v1/orders/" + strings.Repeat("a", 8<<10), want: []int{http.StatusNotFound}},
			{name: "pay an unknown id", method: "POST", path: "/v1/orders/" + url.PathEscape("x'; UPDATE orders SET status='paid'; --") + "/pay", want: []int{http.StatusNotFound}},
			{name: "SQL in the customer filter", method: "GET", path: "/v1/orders?customer_id=" + url.QueryEscape("' OR '1'='1"), want: []int{http.StatusOK},
				check: func(t *testing.T, body []byte) {
					var page struct{ Items []ordersclient.Order }
					if err := json.Unmarshal(body, &page); err != nil || len(page.Items) != 0 {
						t.Fatalf("list by a SQL-looking customer id: %d items (%v), want none", len(page.Items), err)
					}
				}},
			{name: "SQL in the status filter", method: "GET", path: "/v1/orders?status=" + url.QueryEscape("paid' OR 1=1 --"), want: bad, field: "status"},
			{name: "negative limit", method: "GET", path: "/v1/orders?limit=-1", want: bad, field: "limit"},
			{name: "absurd limit", method: "GET", path: "/v1/orders?limit=100000000000000000000", want: bad, field: "limit"},
			{name: "forged cursor", method: "GET", path: "/v1/orders?cursor=" + url.QueryEscape("'; SELECT pg_sleep(10); --"), want: bad, field: "cursor"},
			{name: "method not allowed", method: "DELETE", path: "/v1/orders/" + control.ID, want: []int{http.StatusMethodNotAllowed}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				status, h, body := s.do(t, s.OrdersURL, tc)
				checkAnswer(t, tc, status, h, body)
			})
		}
	})

	t.Run("timeoutd API", func(t *testing.T) {
		bad := []int{http.StatusBadRequest}
		tests := []restCase{
			{name: "negative limit", method: "GET", path: "/api/v1/timeouts?limit=-5", want: bad, field: "limit"},
			{name: "limit not a number", method: "GET", path: "/api/v1/timeouts?limit=" + url.QueryEscape("1 OR 1=1"), want: bad, field: "limit"},
			{name: "limit above the maximum", method: "GET", path: "/api/v1/timeouts?limit=1000000", want: bad, field: "limit"},
			{name: "forged cursor", method: "GET", path: "/api/v1/timeouts?cursor=" + url.QueryEscape("' OR 1=1 --"), want: bad, field: "cursor"},
			{name: "SQL in the key filter", method: "GET", path: "/api/v1/timeouts?key=" + url.QueryEscape("%' OR '1'='1"), want: []int{http.StatusOK, http.StatusBadRequest}, field: "key",
				check: func(t *testing.T, body []byte) {
					var p api.Page
					if err := json.Unmarshal(body, &p); err != nil || len(p.Items) != 0 {
						t.Fatalf("pending timeouts by a SQL-looking key prefix: %d items (%v), want none", len(p.Items), err)
					}
				}},
			{name: "unicode key", method: "GET", path: "/api/v1/timeouts/" + url.PathEscape("ключ-😀"), want: []int{http.StatusNotFound, http.StatusBadRequest}},
			{name: "control character in key", method: "GET", path: "/api/v1/timeouts/a%00b", want: []int{http.StatusNotFound, http.StatusBadRequest}},
			{name: "expiries limit absurd", method: "GET", path: "/api/v1/expiries?limit=99999999999999999999", want: bad, field: "limit"},
			{name: "stream with absurd sizes", method: "GET", path: "/api/v1/stream?soonest=-1&recent=100000000", want: bad},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				status, h, body := s.do(t, s.TimeoutdURL, tc)
				checkAnswer(t, tc, status, h, body)
			})
		}
	})

	// publish sends data with the Nats-Msg-Id msgID and a nonce, as a
	// producer of the contract does.
	publish := func(t *testing.T, subject, msgID string, data []byte) uint64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		ack, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID+":"+events.NewNonce()))
		if err != nil {
			t.Fatalf("publish on %s: %v", subject, err)
		}
		return ack.Sequence
	}
	run := time.Now().UnixNano()
	hour := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	// cmd returns a command as JSON (strings JSON-escaped, so control
	// characters reach the decoder as such).
	cmd := func(key, kind string, version any, deadline, fireSubject, extra string) string {
		j := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		return fmt.Sprintf(`{"schema":1,"kind":%s,"key":%s,"version":%s,"deadline":%s,"fire_subject":%s%s}`, j(kind), j(key), j(version), j(deadline), j(fireSubject), extra)
	}

	t.Run("NATS commands", func(t *testing.T) {
		tests := []struct {
			name string
			body func(key string) string // key is the subject's key
			// reason is the expected dead-letter reason.
			reason events.Reason
		}{
			{"version a word", func(k string) string { return cmd(k, "set", "one", hour, events.OrderCancelSubject(k), "") }, events.ReasonInvalidVersion},
			{"negative version", func(k string) string { return cmd(k, "set", -5, hour, events.OrderCancelSubject(k), "") }, events.ReasonInvalidVersion},
			{"version beyond int64", func(k string) string {
				return strings.Replace(cmd(k, "set", 1, hour, events.OrderCancelSubject(k), ""), `"version":1`, `"version":99999999999999999999`, 1)
			}, events.ReasonInvalidVersion},
			{"unknown kind", func(k string) string { return cmd(k, "explode", 1, hour, events.OrderCancelSubject(k), "") }, events.ReasonUnknownKind},
			{"deadline not RFC 3339", func(k string) string { return cmd(k, "set", 1, "tomorrow", events.OrderCancelSubject(k), "") }, events.ReasonInvalidDeadline},
			{"deadline in year 9999", func(k string) string {
				return cmd(k, "set", 1, "9999-12-31T23:59:59Z", events.OrderCancelSubject(k), "")
			}, events.ReasonDeadlineOutOfRange},
			{"deadline in year 1", func(k string) string {
				return cmd(k, "set", 1, "0001-01-01T00:00:00Z", events.OrderCancelSubject(k), "")
			}, events.ReasonDeadlineOutOfRange},
			{"control characters in the key", func(k string) string { return cmd("a\u0000b\u0007", "set", 1, hour, events.OrderCancelSubject(k), "") }, events.ReasonInvalidKey},
			{"unicode key", func(k string) string { return cmd("ключ-😀", "set", 1, hour, events.OrderCancelSubject(k), "") }, events.ReasonInvalidKey},
			{"SQL in the key", func(k string) string {
				return cmd("x'); DELETE FROM timeouts; --", "set", 1, hour, events.OrderCancelSubject(k), "")
			}, events.ReasonInvalidKey},
			{"key differs from the subject's", func(k string) string { return cmd(k+"-other", "set", 1, hour, events.OrderCancelSubject(k), "") }, events.ReasonSubjectMismatch},
			{"wildcard fire subject", func(k string) string { return cmd(k, "set", 1, hour, "orders.cancel.*", "") }, events.ReasonInvalidSubject},
			{"fire subject with an empty token", func(k string) string { return cmd(k, "set", 1, hour, "orders..cancel", "") }, events.ReasonInvalidSubject},
			{"fire subject outside the allowed prefixes", func(k string) string { return cmd(k, "set", 1, hour, "payments.refund."+k, "") }, events.ReasonSubjectNotAllowed},
			{"fire subject of the command stream", func(k string) string { return cmd(k, "set", 1, hour, events.CommandSubject(k), "") }, events.ReasonSubjectNotAllowed},
			{"payload not JSON", func(k string) string {
				return cmd(k, "set", 1, hour, events.OrderCancelSubject(k), `,"payload":{not json}`)
			}, events.ReasonMalformed},
			{"negative max_lateness_ms", func(k string) string {
				return cmd(k, "set", 1, hour, events.OrderCancelSubject(k), `,"max_lateness_ms":-1`)
			}, events.ReasonInvalidField},
			{"empty message", func(string) string { return "" }, events.ReasonMalformed},
			{"binary garbage", func(string) string { return "\x00\xff\xfe{\x01" }, events.ReasonMalformed},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				key := fmt.Sprintf("e2e-hostile-%d-%d", i, run)
				subject := events.CommandSubject(key)
				publish(t, subject, "e2e-hostile:"+key, []byte(tt.body(key)))
				d := dead.wait(t, subject, "")
				if d.Reason != tt.reason || d.Detail == "" {
					t.Fatalf("dead letter reason %s field %q detail %q, want reason %s with a detail", d.Reason, d.Field, d.Detail, tt.reason)
				}
				t.Logf("dead-lettered: %s, field %q: %s", d.Reason, d.Field, d.Detail)
			})
		}
		// A partition's subject published as it is: the tenants' mapping
		// files it as of a "tenant" that is a partition number (a user
		// with permissions may not publish it at all), and it must not be
		// applied.
		t.Run("filed under another partition", func(t *testing.T) {
			t.Parallel()
			key := fmt.Sprintf("e2e-hostile-partition-%d", run)
			subject := fmt.Sprintf("%s%d.%s", events.CommandSubjectPrefix, (events.PartitionOf(key)+1)%events.Partitions, key)
			publish(t, subject, "e2e-hostile:"+key, []byte(cmd(key, "set", 1, hour, events.OrderCancelSubject(key), "")))
			d := dead.wait(t, subject, "")
			if d.Reason != events.ReasonSubjectMismatch {
				t.Fatalf("dead letter reason %s (%s), want %s", d.Reason, d.Detail, events.ReasonSubjectMismatch)
			}
		})
	})

	t.Run("duplicate and out-of-order versions", func(t *testing.T) {
		key := fmt.Sprintf("e2e-versions-%d", run)
		subject := events.CommandSubject(key)
		d3 := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		steps := []struct {
			what string
			body string
		}{
			{"set v3", cmd(key, "set", 3, d3.Format(time.RFC3339Nano), events.OrderCancelSubject(key), "")},
			{"stale set v2, an earlier deadline", cmd(key, "set", 2, time.Now().Add(2*time.Second).UTC().Format(time.RFC3339Nano), events.OrderCancelSubject(key), "")},
			{"duplicate set v3, another deadline", cmd(key, "set", 3, time.Now().Add(3*time.Second).UTC().Format(time.RFC3339Nano), events.OrderCancelSubject(key), "")},
			{"stale clear v1", fmt.Sprintf(`{"schema":1,"kind":"clear","key":%q,"version":1}`, key)},
		}
		for i, st := range steps {
			publish(t, subject, fmt.Sprintf("e2e-versions:%s:%d", key, i), []byte(st.body))
			waitConsumed(t, js, key)
			got := waitPending(t, key, 3)
			if !got.Deadline.Equal(d3) {
				t.Fatalf("after %s: pending v%d deadline %s, want v3 deadline %s", st.what, got.Version, got.Deadline, d3)
			}
		}
		// A deadline long past is not an error: it fires at once.
		past := fmt.Sprintf("e2e-1970-%d", run)
		publish(t, events.CommandSubject(past), "e2e-versions:"+past, []byte(cmd(past, "set", 1, "1970-01-01T00:00:00Z", events.OrderCancelSubject(past), "")))
		waitFor(t, 15*time.Second, "the 1970 deadline to fire", func() bool {
			return storedOn(t, js, events.StreamExpiries, events.OrderCancelSubject(past)) == 1
		})
		// The same stale and duplicate versions aimed at the control order.
		for i, body := range []string{
			cmd(control.ID, "set", 1, time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano), events.OrderCancelSubject(control.ID), ""),
			fmt.Sprintf(`{"schema":1,"kind":"clear","key":%q,"version":1}`, control.ID),
		} {
			publish(t, events.CommandSubject(control.ID), fmt.Sprintf("e2e-versions:%s:%d", control.ID, i), []byte(body))
			waitConsumed(t, js, control.ID)
		}
	})

	t.Run("forged cancel events", func(t *testing.T) {
		expiry := func(key string, version int64, outcome events.Outcome, deadline, firedAt time.Time) []byte {
			b, err := json.Marshal(events.Expiry{Schema: events.SchemaVersion, Outcome: outcome, Key: key, Version: version,
				Deadline: deadline, FiredAt: firedAt, LatenessNs: int64(firedAt.Sub(deadline))})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		now := time.Now().UTC()
		// Dead-lettered by orders.
		for _, tt := range []struct {
			name, key string
			data      []byte
			reason    events.Reason
		}{
			{"malformed", fmt.Sprintf("e2e-forged-bad-%d", run), []byte(`{"outcome":"fired","key":`), events.ReasonMalformed},
			{"key differs from the subject's", target.ID, expiry(target.ID+"x", 1, events.OutcomeFired, now, now), events.ReasonSubjectMismatch},
			{"fired_at before the deadline", target.ID, expiry(target.ID, 1, events.OutcomeFired, target.PayBy, now), events.ReasonInvalidDeadline},
			{"outcome missed on a fire subject", fmt.Sprintf("e2e-forged-missed-%d", run), expiry(fmt.Sprintf("e2e-forged-missed-%d", run), 1, events.OutcomeMissed, now, now), ""},
		} {
			t.Run(tt.name, func(t *testing.T) {
				subject := events.OrderCancelSubject(tt.key)
				publish(t, subject, fmt.Sprintf("e2e-forged:%s:%d", tt.name, run), tt.data)
				d := dead.wait(t, subject, tt.reason)
				t.Logf("dead-lettered: %s, field %q: %s", d.Reason, d.Field, d.Detail)
			})
		}
		// Ignored by orders as stale: the version is not the order's.
		t.Run("stale version", func(t *testing.T) {
			subject := events.OrderCancelSubject(target.ID)
			seq := publish(t, subject, fmt.Sprintf("e2e-forged:stale:%d", run), expiry(target.ID, 7, events.OutcomeFired, target.PayBy, target.PayBy))
			waitAcked(t, js, "orders-cancel", seq)
		})
		// Cancel events with the order's current version, published before
		// its deadline by someone else than timeoutd (in compose, the NATS
		// permissions keep others off orders.cancel.>). Orders must not
		// cancel early: an event whose deadline is not the order's pay_by
		// is dead-lettered; one that carries pay_by but arrives before it
		// (a lying fired_at) is redelivered at pay_by.
		t.Run("current version, a false past deadline", func(t *testing.T) {
			victim := createOrder(t, cl, within(time.Hour))
			subject := events.OrderCancelSubject(victim.ID)
			now := time.Now().UTC()
			publish(t, subject, fmt.Sprintf("e2e-forged:false-deadline:%d", run), expiry(victim.ID, victim.Version, events.OutcomeFired, now.Add(-time.Second), now))
			d := dead.wait(t, subject, "")
			if d.Reason != events.ReasonInvalidDeadline {
				t.Errorf("dead letter reason %s (%s), want %s", d.Reason, d.Detail, events.ReasonInvalidDeadline)
			}
			expectPending(t, cl, victim)
		})
		t.Run("current version and deadline, before the deadline", func(t *testing.T) {
			victim := createOrder(t, cl, within(time.Hour))
			hc := &http.Client{Timeout: time.Second}
			early := `orders_cancel_events_total{result="early"}`
			before, _ := scrapeGauge(hc, s.OrdersURL+"/metrics", early)
			publish(t, events.OrderCancelSubject(victim.ID), fmt.Sprintf("e2e-forged:early:%d", run),
				expiry(victim.ID, victim.Version, events.OutcomeFired, victim.PayBy, victim.PayBy))
			waitFor(t, 15*time.Second, "orders to count the event as early", func() bool {
				n, ok := scrapeGauge(hc, s.OrdersURL+"/metrics", early)
				return ok && n > before
			})
			expectPending(t, cl, victim)
		})
	})

	// Nothing crashed, nothing else changed.
	for _, name := range []string{svcOrders, svcTimeoutd} {
		if got := containerStarted(t, s, name); got != startedAt[name] {
			t.Errorf("%s restarted during the hostile inputs (started %s, then %s)", name, startedAt[name], got)
		}
	}
	for _, u := range []string{s.OrdersURL + "/healthz", s.OrdersURL + "/readyz", s.TimeoutdURL + "/healthz", s.TimeoutdURL + "/readyz"} {
		waitReady(t, u, 5*time.Second)
	}
	for _, o := range []ordersclient.Order{control, target} {
		got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(t.Context(), o.ID))
		if err != nil {
			t.Fatalf("get control order: %v", err)
		}
		if got.Status != o.Status || got.Version != o.Version || !got.PayBy.Equal(o.PayBy) || !got.UpdatedAt.Equal(o.UpdatedAt) {
			t.Errorf("control order changed by hostile inputs:\n before %+v\n after  %+v", o, got)
		}
	}
	if got := waitPending(t, control.ID, 1); !got.Deadline.Equal(controlTimeout.Deadline) {
		t.Errorf("control order's timeout moved from %s to %s", controlTimeout.Deadline, got.Deadline)
	}
	// The table sent the token in a query string and wrong tokens.
	expectNoTokensLogged(t, s)
	for _, sub := range []struct{ stream, subject string }{
		{events.StreamExpiries, events.OrderCancelSubject(control.ID)},
		{events.StreamOrderEvents, events.OrderEventSubject(events.OrderCancelled, control.ID)},
	} {
		if n := storedOn(t, js, sub.stream, sub.subject); n != 0 {
			t.Errorf("control order: %d messages on %s, want none", n, sub.subject)
		}
	}
}

// storedOn returns how many messages stream holds on subject.
func storedOn(t *testing.T, js jetstream.JetStream, stream, subject string) uint64 {
	t.Helper()
	st, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	return info.State.Subjects[subject]
}

// deadLetters collects the dead letters published while a test runs, by
// the subject of the message they reject.
type deadLetters struct {
	mu  sync.Mutex
	got map[string]events.DeadLetter
}

// watchDeadLetters subscribes to dlq.> on nc until t ends.
func watchDeadLetters(t *testing.T, nc *nats.Conn) *deadLetters {
	t.Helper()
	d := &deadLetters{got: map[string]events.DeadLetter{}}
	sub, err := nc.Subscribe(events.DeadLetterSubjectPrefix+">", func(m *nats.Msg) {
		var dl events.DeadLetter
		if json.Unmarshal(m.Data, &dl) == nil {
			d.mu.Lock()
			d.got[dl.Subject] = dl
			d.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("subscribe to dead letters: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return d
}

// wait returns the dead letter of the message published on subject, once
// one with reason (any, when "") has arrived; it fails t after 15 s.
func (d *deadLetters) wait(t *testing.T, subject string, reason events.Reason) events.DeadLetter {
	t.Helper()
	var dl events.DeadLetter
	waitFor(t, 15*time.Second, "the dead letter of "+subject, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		var ok bool
		dl, ok = d.got[subject]
		return ok && (reason == "" || dl.Reason == reason)
	})
	return dl
}

// expectPending fails t unless order o is still pending_payment at its
// version.
func expectPending(t *testing.T, cl *ordersclient.ClientWithResponses, o ordersclient.Order) {
	t.Helper()
	got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(t.Context(), o.ID))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != events.StatusPendingPayment || got.Version != o.Version {
		t.Fatalf("order %s is %s/%s at v%d (updated %s, pay_by %s): a forged cancel event changed it",
			o.ID, got.Status, got.CancelReason, got.Version, got.UpdatedAt.Format(time.RFC3339Nano), o.PayBy.Format(time.RFC3339Nano))
	}
}

// pendingTimeout reads timeoutd's /api/v1/timeouts/{key}.
func pendingTimeout(t *testing.T, s *stack, key string) (api.Timeout, bool) {
	t.Helper()
	resp, err := http.Get(s.TimeoutdURL + "/api/v1/timeouts/" + key)
	if err != nil {
		return api.Timeout{}, false
	}
	defer resp.Body.Close()
	var tm api.Timeout
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&tm) != nil {
		return api.Timeout{}, false
	}
	return tm, true
}

// waitConsumed waits until key's command stream holds no command of key:
// timeoutd acked them, which it does only after Postgres committed them (or
// they were dead-lettered, or ignored as stale). The stream stores them
// under the partitioned subject the server's mapping gives them.
func waitConsumed(t *testing.T, js jetstream.JetStream, key string) {
	t.Helper()
	name, subject := events.CommandStream(events.PartitionOf(key)), events.PartitionedCommandSubject(key)
	st, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	waitFor(t, 15*time.Second, "timeoutd to ack the commands on "+subject, func() bool {
		info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(subject))
		return err == nil && info.State.Subjects[subject] == 0
	})
}

// waitAcked waits until the durable consumer of the expiry stream has
// acknowledged every message up to stream sequence seq.
func waitAcked(t *testing.T, js jetstream.JetStream, durable string, seq uint64) {
	t.Helper()
	cons, err := js.Consumer(t.Context(), events.StreamExpiries, durable)
	if err != nil {
		t.Fatalf("consumer %s: %v", durable, err)
	}
	waitFor(t, 15*time.Second, fmt.Sprintf("consumer %s to ack stream sequence %d", durable, seq), func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.AckFloor.Stream >= seq
	})
}

// containerStarted returns when a container's process last started.
func containerStarted(t *testing.T, s *stack, name string) string {
	t.Helper()
	info, err := s.container(name).Inspect(t.Context())
	if err != nil {
		t.Fatalf("inspect %s: %v", name, err)
	}
	return info.State.StartedAt
}

// TestSecurity checks what an attacker on the network meets: every
// mutating REST endpoint refuses a missing or wrong bearer token (401
// problem) while reads need none; neither the valid nor a rejected token
// ever appears in any container's log; the dashboard is served with a CSP
// that allows only its own origin and WebAssembly, and nosniff; the
// service containers run as a non-root user.
func TestSecurity(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	cl := s.orders()
	o := createOrder(t, cl, within(time.Hour))
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/orders", orderBody()},
		{"POST", "/v1/orders/" + o.ID + "/pay", ""},
		{"POST", "/v1/orders/" + o.ID + "/cancel", ""},
		{"POST", "/v1/orders/" + o.ID + "/extend", `{"pay_within":"2h"}`},
	} {
		for _, auth := range []string{"", "Bearer " + wrongToken, "bearer", "Token " + s.APIToken} {
			t.Run(fmt.Sprintf("%s %s with %q", tc.method, tc.path, strings.ReplaceAll(auth, s.APIToken, "<token>")), func(t *testing.T) {
				rc := restCase{method: tc.method, path: tc.path, body: tc.body, header: map[string]string{"Authorization": auth}, want: []int{http.StatusUnauthorized}}
				status, h, body := s.do(t, s.OrdersURL, rc)
				checkAnswer(t, rc, status, h, body)
			})
		}
	}
	if got, err := ordersclient.OrderOf(cl.GetOrderWithResponse(t.Context(), o.ID)); err != nil || got.Version != o.Version || got.Status != o.Status {
		t.Fatalf("order after unauthenticated changes: %+v, %v; want it unchanged", got, err)
	}
	anon := newOrdersClient(s.OrdersURL, "", ordersHTTP)
	if _, err := ordersclient.OrderOf(anon.GetOrderWithResponse(t.Context(), o.ID)); err != nil {
		t.Fatalf("read without a token: %v, want it allowed", err)
	}
	// A valid request with the token, so its handling is in the logs too.
	if _, err := ordersclient.OrderOf(cl.PayOrderWithResponse(t.Context(), o.ID)); err != nil {
		t.Fatalf("pay with the token: %v", err)
	}

	t.Run("dashboard headers", func(t *testing.T) {
		for _, path := range []string{"/", "/main.wasm"} {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", s.TimeoutdURL+path, nil)
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatalf("get %s: %v", path, err)
			}
			resp.Body.Close()
			csp := resp.Header.Get("Content-Security-Policy")
			if resp.StatusCode != http.StatusOK || !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "'wasm-unsafe-eval'") ||
				strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "*") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("GET %s: %s, CSP %q, X-Content-Type-Options %q; want 200, a self-only CSP allowing wasm, nosniff",
					path, resp.Status, csp, resp.Header.Get("X-Content-Type-Options"))
			}
			if path == "/main.wasm" && resp.Header.Get("Content-Type") != "application/wasm" {
				t.Errorf("main.wasm served as %q", resp.Header.Get("Content-Type"))
			}
		}
	})

	t.Run("non-root containers", func(t *testing.T) {
		for _, name := range []string{svcOrders, svcTimeoutd, svcNATS} {
			info, err := s.container(name).Inspect(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if u := info.Config.User; u == "" || u == "root" || u == "0" || strings.HasPrefix(u, "0:") {
				t.Errorf("%s runs as user %q, want a non-root user", name, u)
			}
		}
	})

	t.Run("tokens never logged", func(t *testing.T) { expectNoTokensLogged(t, s) })
}

// expectNoTokensLogged fails t when the valid or the rejected bearer token
// appears in the log of any container of s.
func expectNoTokensLogged(t *testing.T, s *stack) {
	t.Helper()
	for _, name := range []string{svcOrders, svcTimeoutd, svcNATS, svcPostgres} {
		logs := testinfra.Logs(s.container(name))
		for _, secret := range []string{s.APIToken, wrongToken} {
			if i := strings.Index(logs, secret); i >= 0 {
				t.Errorf("%s's log contains a bearer token: …%s…", name, logs[max(0, i-120):min(len(logs), i+40)])
			}
		}
		if !strings.Contains(logs, "{") && name != svcPostgres && name != svcNATS {
			t.Errorf("%s's log is empty: the grep proves nothing", name)
		}
	}
}
