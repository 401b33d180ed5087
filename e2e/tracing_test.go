package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// jaegerImage is the OTLP receiver, built by `make images TRACING=1`
// (scripts/images.sh jaeger; make test builds it).
var jaegerImage = cmp.Or(os.Getenv("ORDERTIMEOUT_JAEGER_IMAGE"), "ordertimeout/jaeger:latest")

// jaegerTrace is a trace as Jaeger's query API returns it.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		TraceID       string `json:"traceID"`
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		References    []struct {
			RefType string `json:"refType"`
			TraceID string `json:"traceID"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		Tags []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
		ProcessID string `json:"processID"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// span is one span of a trace, its tags as a map.
type span struct {
	trace, id, service string
	tags               map[string]any
	childOf, follows   string // "trace/span" of its references
}

// span returns the span of the trace named op, or false.
func (tr jaegerTrace) span(op string) (span, bool) {
	for _, s := range tr.Spans {
		if s.OperationName != op {
			continue
		}
		out := span{trace: s.TraceID, id: s.SpanID, service: tr.Processes[s.ProcessID].ServiceName, tags: map[string]any{}}
		for _, tg := range s.Tags {
			out.tags[tg.Key] = tg.Value
		}
		for _, r := range s.References {
			switch r.RefType {
			case "CHILD_OF":
				out.childOf = r.TraceID + "/" + r.SpanID
			case "FOLLOWS_FROM":
				out.follows = r.TraceID + "/" + r.SpanID
			}
		}
		return out, true
	}
	return span{}, false
}

// jaegerTraces polls the query API path until want accepts the traces it
// returns, or fails t after within.
func jaegerTraces(t *testing.T, base, path string, within time.Duration, want func([]jaegerTrace) bool) ([]jaegerTrace, []byte) {
	t.Helper()
	var got struct {
		Data []jaegerTrace `json:"data"`
	}
	var raw json.RawMessage
	for deadline := time.Now().Add(within); ; {
		resp, err := http.Get(base + path)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&raw)
			resp.Body.Close()
		}
		if err == nil && json.Unmarshal(raw, &got) == nil && want(got.Data) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver did not return what the test waits for from %s within %v; it returned %s (%v)", path, within, raw, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return got.Data, raw
}

// TestTraceFromOrderToCancellation: with tracing on, an order that
// expires leaves two traces in the OTLP receiver, joined by a link. The
// first is the REST call's: the client's span, orders' POST span (with
// the order id, the timeout's key, version, partition and deadline) and,
// as its child, timeoutd's ingest span. The second is the fire's: its root
// span, with the lateness, links to the ingest span (the fire does not live
// in the first trace for the minutes between), and orders' cancel span is
// its child; the orders.cancelled event carries the cancel span's context.
func TestTraceFromOrderToCancellation(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{Tracing: true})
	c := watch(t, s.NATSURL)
	cl := s.orders()
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	traceparent := func(_ context.Context, req *http.Request) error {
		req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
		return nil
	}
	o, err := ordersclient.OrderOf(cl.CreateOrderWithResponse(context.Background(), nil, orderRequest("c-trace", within(2*time.Second)), traceparent))
	if err != nil {
		t.Fatal(err)
	}
	expectOnTimeCancellation(t, cl, c, o)

	// The REST call's trace: the POST and, as its child, the ingest.
	traces, _ := jaegerTraces(t, s.JaegerURL, "/api/traces/"+clientTrace, 20*time.Second, func(ts []jaegerTrace) bool {
		if len(ts) != 1 {
			return false
		}
		_, post := ts[0].span("POST /v1/orders")
		_, ingest := ts[0].span("timeoutd ingest")
		return post && ingest
	})
	post, _ := traces[0].span("POST /v1/orders")
	ingest, _ := traces[0].span("timeoutd ingest")
	partition := float64(events.PartitionOf(o.ID))
	wantTags := func(sp span, want map[string]any) {
		t.Helper()
		for k, v := range want {
			if sp.tags[k] != v {
				t.Errorf("span %s (%s): tag %s = %v (%T), want %v; tags %v", sp.id, sp.service, k, sp.tags[k], sp.tags[k], v, sp.tags)
			}
		}
	}
	deadline := o.PayBy.UTC().Format(time.RFC3339Nano)
	if post.service != "orders" || post.childOf != clientTrace+"/"+clientSpan {
		t.Errorf("POST span of %s, child of %q; want orders, child of the client's span", post.service, post.childOf)
	}
	wantTags(post, map[string]any{"order.id": o.ID, "timeout.key": o.ID, "timeout.version": float64(o.Version),
		"timeout.partition": partition, "timeout.deadline": deadline, "http.route": "/v1/orders", "http.response.status_code": float64(201)})
	if ingest.service != "timeoutd" || ingest.childOf != clientTrace+"/"+post.id {
		t.Errorf("ingest span of %s, child of %q; want timeoutd, child of the POST span %s", ingest.service, ingest.childOf, post.id)
	}
	wantTags(ingest, map[string]any{"timeout.key": o.ID, "timeout.version": float64(o.Version), "timeout.partition": partition,
		"timeout.deadline": deadline, "timeout.kind": "set"})

	// The fire's trace, found by the timeout's key: the fire, linked to
	// the ingest, and the cancellation as its child.
	q := url.Values{"service": {"timeoutd"}, "operation": {"timeoutd fire"}, "lookback": {"1h"},
		"tags": {fmt.Sprintf(`{"timeout.key":%q}`, o.ID)}}
	traces, raw := jaegerTraces(t, s.JaegerURL, "/api/traces?"+q.Encode(), 20*time.Second, func(ts []jaegerTrace) bool {
		if len(ts) != 1 {
			return false
		}
		_, cancel := ts[0].span("orders cancel")
		return cancel
	})
	fire, _ := traces[0].span("timeoutd fire")
	cancel, _ := traces[0].span("orders cancel")
	if fire.trace == clientTrace || fire.childOf != "" || fire.follows != clientTrace+"/"+ingest.id {
		t.Errorf("fire span in trace %s, child of %q, following %q; want a root of its own trace linked to the ingest span %s/%s",
			fire.trace, fire.childOf, fire.follows, clientTrace, ingest.id)
	}
	wantTags(fire, map[string]any{"timeout.key": o.ID, "timeout.version": float64(o.Version), "timeout.partition": partition,
		"timeout.deadline": deadline, "timeout.outcome": "fired", "messaging.destination.name": events.OrderCancelSubject(o.ID)})
	if l, ok := fire.tags["timeout.lateness_ms"].(float64); !ok || l < 0 || l > float64(lateBound.Milliseconds()) {
		t.Errorf("fire span's lateness %v, want 0 to %v ms", fire.tags["timeout.lateness_ms"], lateBound.Milliseconds())
	}
	if cancel.service != "orders" || cancel.childOf != fire.trace+"/"+fire.id {
		t.Errorf("cancel span of %s, child of %q; want orders, child of the fire span", cancel.service, cancel.childOf)
	}
	wantTags(cancel, map[string]any{"order.id": o.ID, "timeout.version": float64(o.Version), "orders.cancelled": true})

	// The orders.cancelled event continues the fire's trace.
	nc, err := nats.Connect(s.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), events.StreamOrderEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), events.OrderEventSubject(events.OrderCancelled, o.ID))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Header.Get("traceparent"), "00-"+cancel.trace+"-"+cancel.id+"-01"; got != want {
		t.Errorf("orders.cancelled event's traceparent %q, want the cancel span's %q", got, want)
	}
	t.Logf("the fire's trace as the receiver returned it:\n%s", raw)
}
