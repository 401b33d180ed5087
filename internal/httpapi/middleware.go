package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// RequestIDHeader carries the request id in both directions.
const RequestIDHeader = "X-Request-Id"

// RequestID keeps a well-formed incoming X-Request-Id (at most 64 letters,
// digits, '-', '_' or '.') or makes a random one, stores it where chi's
// middleware.GetReqID finds it, and echoes it in the response. chi's own
// middleware.RequestID would keep any incoming value, of any length, and
// not echo it.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middleware.RequestIDKey, id)))
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Observed is one finished request as Observe reports it: route is chi's
// route pattern ("unmatched" when none matched), never the raw path, so
// it is a bounded metric label.
type Observed struct {
	Method, Route string
	Status, Bytes int
	Elapsed       time.Duration
}

// Observe is the outermost middleware of both services: it answers a
// panic through fail (a 500 problem in both; http.ErrAbortHandler goes
// on), then logs the request at info (never its headers, so no token)
// and hands it to record, when not nil, for the metrics.
func Observe(log *slog.Logger, fail func(http.ResponseWriter, *http.Request, error), record func(Observed)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					fail(ww, r, fmt.Errorf("panic: %v", v))
				}
				o := Observed{Method: r.Method, Route: "unmatched", Status: ww.Status(), Bytes: ww.BytesWritten(), Elapsed: time.Since(start)}
				if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
					o.Route = rc.RoutePattern()
				}
				if o.Status == 0 {
					o.Status = http.StatusOK
				}
				if record != nil {
					record(o)
				}
				log.InfoContext(r.Context(), "http request", "request_id", middleware.GetReqID(r.Context()),
					"method", o.Method, "route", o.Route, "path", r.URL.Path, "status", o.Status,
					"bytes", o.Bytes, "duration_ms", float64(o.Elapsed.Microseconds())/1000, "remote", r.RemoteAddr)
			}()
			next.ServeHTTP(ww, r)
		})
	}
}
