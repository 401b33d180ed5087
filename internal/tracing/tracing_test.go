package tracing

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestWanted: tracing is off unless the standard variables ask for it, and
// an exporter this build cannot honour is an error.
func TestWanted(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		on      bool
		wantErr bool
	}{
		{"nothing set", nil, false, false},
		{"otlp exporter", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, true, false},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://jaeger:4318/v1/traces"}, true, false},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318"}, false, false},
		{"sdk disabled wins", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, false},
		{"zipkin", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
				t.Setenv(k, tt.env[k])
			}
			on, err := wanted()
			if on != tt.on || (err != nil) != tt.wantErr {
				t.Fatalf("wanted() = %v, %v; want %v, error %v", on, err, tt.on, tt.wantErr)
			}
		})
	}
}

// TestSamplerFromEnv: the specification's samplers, and errors naming the
// variable for the others.
func TestSamplerFromEnv(t *testing.T) {
	tests := []struct{ sampler, arg, want string }{
		{"", "", "ParentBased{root:AlwaysOnSampler,"},
		{"parentbased_traceidratio", "0.01", "ParentBased{root:TraceIDRatioBased{0.01},"},
		{"traceidratio", "0.5", "TraceIDRatioBased{0.5}"},
		{"always_off", "", "AlwaysOffSampler"},
		{"traceidratio", "2", "OTEL_TRACES_SAMPLER_ARG"},
		{"jaeger_remote", "", "OTEL_TRACES_SAMPLER"},
	}
	for _, tt := range tests {
		t.Run(tt.sampler+"="+tt.arg, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tt.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tt.arg)
			s, err := samplerFromEnv()
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = s.Description()
			}
			if !strings.Contains(got, tt.want) {
				t.Fatalf("sampler %q: %q, want it to contain %q", tt.sampler, got, tt.want)
			}
		})
	}
}

// TestLinkedSamplesARootLinkedToASampledSpan: whatever the base sampler, a
// root span linked to a sampled span is sampled; one linked to an
// unsampled span, or a child, is the base's to decide.
func TestLinkedSamplesARootLinkedToASampledSpan(t *testing.T) {
	sampled, ok := Parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if !ok {
		t.Fatal("Parse failed")
	}
	unsampled, _ := Parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	s := linked{sdktrace.NeverSample()}
	root := context.Background()
	child := trace.ContextWithRemoteSpanContext(root, unsampled)
	tests := []struct {
		name   string
		parent context.Context
		links  []trace.Link
		want   sdktrace.SamplingDecision
	}{
		{"root linked to a sampled span", root, []trace.Link{{SpanContext: sampled}}, sdktrace.RecordAndSample},
		{"root linked to an unsampled span", root, []trace.Link{{SpanContext: unsampled}}, sdktrace.Drop},
		{"root without links", root, nil, sdktrace.Drop},
		{"child linked to a sampled span", child, []trace.Link{{SpanContext: sampled}}, sdktrace.Drop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: tt.parent, Links: tt.links})
			if got.Decision != tt.want {
				t.Fatalf("decision %v, want %v", got.Decision, tt.want)
			}
		})
	}
}

// TestTraceParentRoundTrip: a sampled span's context is written as W3C
// traceparent and read back; an unsampled or absent one is not carried.
func TestTraceParentRoundTrip(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := WithRemote(context.Background(), tp)
	if got := TraceParent(ctx); got != tp {
		t.Fatalf("TraceParent = %q, want %q", got, tp)
	}
	if got := TraceParent(WithRemote(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")); got != "" {
		t.Fatalf("unsampled context carried as %q", got)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-b7ad6b7169203331-01"} {
		if _, ok := Parse(bad); ok {
			t.Fatalf("Parse(%q) succeeded", bad)
		}
	}
}
