package http

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

type ctxKey struct{}

// RequestIDHeader carries the request id in both directions.
const RequestIDHeader = "X-Request-Id"

// requestID returns the id withRequestID stored in ctx.
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// withRequestID keeps a well-formed incoming X-Request-Id (at most 64
// letters, digits, '-', '_' or '.') or makes a random one, stores it in the
// context and echoes it in the response.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, id)))
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

// statusWriter records the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe recovers panics as a 500 problem, then records the request in the
// metrics (by route pattern, not path) and the access log. The Authorization
// header is never logged.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.writeError(sw, r, fmt.Errorf("panic: %v", v))
			}
			elapsed := s.now().Sub(start)
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = "unmatched"
			}
			code := strconv.Itoa(sw.status)
			s.metrics.requests.WithLabelValues(r.Method, route, code).Inc()
			s.metrics.duration.WithLabelValues(r.Method, route).Observe(elapsed.Seconds())
			s.log.InfoContext(r.Context(), "http request", "request_id", requestID(r.Context()),
				"method", r.Method, "route", route, "path", r.URL.Path, "status", sw.status,
				"bytes", sw.bytes, "duration_ms", float64(elapsed.Microseconds())/1000, "remote", r.RemoteAddr)
		}()
		next.ServeHTTP(sw, r)
	})
}

// limit bounds the request body and the time a handler may take.
func (s *server) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// authenticate admits requests with one of the configured bearer tokens
// (httpapi.Tokens: SHA-256 digests compared in constant time).
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.tokens.Allow(r) {
			s.writeError(w, r, orders.ErrUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
