package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ordertimeout/ordertimeout/internal/tracing"
)

// Trace gives each request a server span while tracing is on (a child of
// the caller's, when its traceparent header carries one), named by its
// route once chi matched it ("POST /v1/orders/{id}/pay"), with the method,
// route, status and request id; a 5xx marks it failed. With tracing off it
// only calls next.
func Trace(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tracing.Enabled() {
			next.ServeHTTP(w, r)
			return
		}
		ctx := tracing.WithRemote(r.Context(), r.Header.Get(tracing.HeaderTraceParent))
		ctx, span := tracing.Tracer().Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
				attribute.String("http.request_id", middleware.GetReqID(r.Context()))))
		defer span.End()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r.WithContext(ctx))
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if rc := chi.RouteContext(ctx); rc != nil && rc.RoutePattern() != "" {
			span.SetName(r.Method + " " + rc.RoutePattern())
			span.SetAttributes(attribute.String("http.route", rc.RoutePattern()))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	})
}
