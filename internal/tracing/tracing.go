// Package tracing is the OpenTelemetry setup both services share and the
// few helpers that carry a trace context through what is not a request:
// an outbox row, a NATS header, a stored timeout.
//
// Tracing is off unless the standard variables ask for it
// (OTEL_TRACES_EXPORTER=otlp, or an OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SDK_DISABLED=true wins). Off, the
// global tracer provider stays OpenTelemetry's no-op one and Enabled
// reports false, so the hot paths skip even reading headers. On, spans go
// over OTLP/HTTP (the exporter reads OTEL_EXPORTER_OTLP_*), in batches
// (OTEL_BSP_*), sampled by OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// (default parentbased_always_on) with one addition: a root span linked to
// a sampled span is sampled, so a fire that links to a traced set of its
// deadline is traced whatever the ratio.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of the platform's spans.
const Scope = "github.com/ordertimeout/ordertimeout"

// HeaderTraceParent is the W3C header, in HTTP and NATS alike.
const HeaderTraceParent = "traceparent"

var enabled atomic.Bool

// Enabled reports whether Setup turned tracing on.
func Enabled() bool { return enabled.Load() }

// Tracer returns the platform's tracer (a no-op one while tracing is off).
func Tracer() trace.Tracer { return otel.Tracer(Scope) }

// flushTimeout bounds the export of the spans still buffered at Stop.
const flushTimeout = 5 * time.Second

// Setup turns tracing on for service when the environment asks for it
// (see the package comment) and returns the function that stops it,
// exporting the spans still buffered for at most 5 s (a failure is logged
// to log); with tracing off it does nothing and returns a no-op. A
// variable it cannot honour (an exporter other than otlp, an unknown
// sampler, a ratio outside [0, 1]) is an error naming it.
func Setup(ctx context.Context, service string, log *slog.Logger) (stop func(), err error) {
	noop := func() {}
	on, err := wanted()
	if err != nil || !on {
		return noop, err
	}
	sampler, err := samplerFromEnv()
	if err != nil {
		return noop, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return noop, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)), resource.WithFromEnv())
	if err != nil {
		return noop, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(LinkedSampler(sampler)))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	enabled.Store(true)
	log.Info("tracing on", "service", service, "sampler", sampler.Description())
	return func() {
		enabled.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}, nil
}

// wanted reads whether the environment turns tracing on.
func wanted() (bool, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch e := os.Getenv("OTEL_TRACES_EXPORTER"); e {
	case "otlp":
		return true, nil
	case "none":
		return false, nil
	case "":
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: only otlp (or none) is supported", e)
	}
}

// samplerFromEnv returns the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG name, as the specification defines them.
func samplerFromEnv() (sdktrace.Sampler, error) {
	name := os.Getenv("OTEL_TRACES_SAMPLER")
	ratio := 1.0
	if arg := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); arg != "" && strings.HasSuffix(name, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		ratio = r
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	default:
		return nil, errors.New("tracing: OTEL_TRACES_SAMPLER=" + strconv.Quote(name) + " is not a sampler this build knows")
	}
}

// LinkedSampler returns the sampler Setup uses: a root span linked to a
// sampled span is sampled; anything else is base's to decide.
func LinkedSampler(base sdktrace.Sampler) sdktrace.Sampler { return linked{base} }

// linked is LinkedSampler's sampler.
type linked struct{ base sdktrace.Sampler }

func (l linked) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, link := range p.Links {
			if link.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample,
					Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
			}
		}
	}
	return l.base.ShouldSample(p)
}

func (l linked) Description() string { return "LinkedOr{" + l.base.Description() + "}" }

// TraceParent returns the W3C traceparent of the span in ctx, or "" when
// it has none that is sampled (an unsampled context is not worth carrying:
// nothing downstream would be recorded under it).
func TraceParent(ctx context.Context) string { return Format(trace.SpanContextFromContext(ctx)) }

// Format returns sc as a W3C traceparent, or "" when it is invalid or not
// sampled.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// Parse returns the span context of a W3C traceparent, marked remote, and
// false when it is empty or malformed.
func Parse(traceparent string) (trace.SpanContext, bool) {
	if traceparent == "" {
		return trace.SpanContext{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{HeaderTraceParent: traceparent})
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// WithRemote returns ctx with traceparent's span context as its remote
// parent, or ctx when traceparent is empty or malformed.
func WithRemote(ctx context.Context, traceparent string) context.Context {
	if sc, ok := Parse(traceparent); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// Use makes tp the global tracer provider with tracing on, as Setup does,
// until the returned function restores the provider before it; for the
// tests and benchmarks that drive instrumented code in process. Calls must
// not overlap.
func Use(tp trace.TracerProvider) (restore func()) {
	prev, was := otel.GetTracerProvider(), enabled.Load()
	otel.SetTracerProvider(tp)
	enabled.Store(true)
	return func() {
		otel.SetTracerProvider(prev)
		enabled.Store(was)
	}
}
