package timeoutd

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// discard is a span exporter that drops what it gets, so that a benchmark
// measures the spans' making and batching, not a network.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkFireTracing measures what tracing adds to the fire of one
// timeout, as the fire path runs it (fire.publish): off, the flag check;
// on, the fire's span (a root, linked to the stored set's span when there
// is one), its traceparent for the event's header, its end; the spans go
// to a batch processor with an exporter that drops them. "1%" samples a
// hundredth of the fires whose set was not traced, as
// OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.01
// does; "linked" fires are of sets traced and sampled, so always recorded.
func BenchmarkFireTracing(b *testing.B) {
	deadline := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	t := Timeout{Key: "01a2184e-d26c-7843-9690-bf3fb9a57507", Version: 1, Partition: 51, Deadline: deadline,
		FireSubject: "orders.cancel.01a2184e-d26c-7843-9690-bf3fb9a57507"}
	e := events.Expiry{Schema: 1, Outcome: events.OutcomeFired, Key: t.Key, Version: 1, Deadline: deadline,
		FiredAt: deadline.Add(3 * time.Millisecond), LatenessNs: 3e6}
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: tracing off
		set     string           // the stored set's traceparent
	}{
		{"off", nil, ""},
		{"1%", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)), ""},
		{"100%", sdktrace.AlwaysSample(), ""},
		{"1%/linked", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(tracing.LinkedSampler(tc.sampler)))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				defer tracing.Use(tp)()
			}
			t.TraceParent = tc.set
			ctx := context.Background()
			ev := Event{Subject: t.FireSubject, MsgID: e.MsgID()}
			var spans []trace.Span
			b.ReportAllocs()
			for b.Loop() {
				spans = spans[:0]
				if tracing.Enabled() {
					span := startFireSpan(ctx, t, e, t.FireSubject)
					ev.TraceParent = tracing.Format(span.SpanContext())
					spans = append(spans, span)
				}
				endSpans(spans, nil)
			}
			_ = fmt.Sprint(ev.TraceParent != "")
		})
	}
}
