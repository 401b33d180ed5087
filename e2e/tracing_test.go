package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// jaegerImage is the OTLP receiver of the tracing profile, built by
// `make images TRACING=1` (scripts/images.sh jaeger).
var jaegerImage = cmp.Or(os.Getenv("ORDERTIMEOUT_JAEGER_IMAGE"), "ordertimeout/jaeger:latest")

// TestTracingReceiver: the receiver image built from Jaeger's Go module
// takes spans over OTLP/HTTP and returns them from its query API, as the
// trace tests will read them: one trace with its spans, their attributes,
// and a span's link to a span of another trace (the shape of a fire that
// links to the span that set its deadline). It runs under make
// test-tracing, which builds the image first (minutes, once).
func TestTracingReceiver(t *testing.T) {
	t.Parallel()
	if testing.Short() || os.Getenv("ORDERTIMEOUT_TRACING") != "1" {
		t.Skip("the OTLP receiver's image is built on demand: run make test-tracing")
	}
	ctx := context.Background()
	if err := requireImages(ctx, jaegerImage); err != nil {
		t.Fatal(err)
	}
	ctr, err := testcontainers.Run(ctx, jaegerImage,
		testcontainers.WithExposedPorts("4318/tcp", "16686/tcp"),
		testcontainers.WithWaitStrategy(wait.ForExec([]string{"/healthcheck", "http://127.0.0.1:13133/status"}).
			WithPollInterval(100*time.Millisecond).WithStartupTimeout(60*time.Second)))
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("start %s: %v", jaegerImage, err)
	}
	endpoint := func(port string) string {
		t.Helper()
		host, err := ctr.PortEndpoint(ctx, port, "http")
		if err != nil {
			t.Fatal(err)
		}
		return host
	}
	const (
		setTrace  = "5b8efff798038103d269b633813fc60c"
		setSpan   = "eee19b7ec3c1b174"
		fireTrace = "0af7651916cd43dd8448eb211c80319c"
	)
	now := time.Now()
	span := func(trace, id, name string, attrs map[string]string, link string) map[string]any {
		var as []map[string]any
		for k, v := range attrs {
			as = append(as, map[string]any{"key": k, "value": map[string]any{"stringValue": v}})
		}
		s := map[string]any{"traceId": trace, "spanId": id, "name": name, "kind": 1, "attributes": as,
			"startTimeUnixNano": fmt.Sprint(now.UnixNano()), "endTimeUnixNano": fmt.Sprint(now.Add(time.Millisecond).UnixNano())}
		if link != "" {
			s["links"] = []map[string]any{{"traceId": setTrace, "spanId": link}}
		}
		return s
	}
	body, err := json.Marshal(map[string]any{"resourceSpans": []map[string]any{{
		"resource": map[string]any{"attributes": []map[string]any{{"key": "service.name", "value": map[string]any{"stringValue": "timeoutd"}}}},
		"scopeSpans": []map[string]any{{"scope": map[string]any{"name": "e2e"}, "spans": []map[string]any{
			span(setTrace, setSpan, "ingest", map[string]string{"timeout.key": "o-1"}, ""),
			span(fireTrace, "00f067aa0ba902b7", "fire", map[string]string{"timeout.key": "o-1", "timeout.version": "1"}, setSpan),
		}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(endpoint("4318/tcp")+"/v1/traces", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("OTLP export: %s", resp.Status)
	}

	var got struct {
		Data []struct {
			Spans []struct {
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
			} `json:"spans"`
		} `json:"data"`
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get(endpoint("16686/tcp") + "/api/traces/" + fireTrace)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
		}
		if err == nil && len(got.Data) == 1 && len(got.Data[0].Spans) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not returned by the query API: %v %+v", fireTrace, err, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fire := got.Data[0].Spans[0]
	tags := map[string]any{}
	for _, tg := range fire.Tags {
		tags[tg.Key] = tg.Value
	}
	if fire.OperationName != "fire" || tags["timeout.key"] != "o-1" || tags["timeout.version"] != "1" {
		t.Fatalf("fire span %s with tags %v", fire.OperationName, tags)
	}
	linked := slices.ContainsFunc(fire.References, func(r struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	}) bool {
		return r.TraceID == setTrace && r.SpanID == setSpan
	})
	if !linked {
		t.Fatalf("fire span's references %+v, want a link to %s/%s", fire.References, setTrace, setSpan)
	}
	t.Logf("fire span as the receiver returned it: %+v", fire)
}
