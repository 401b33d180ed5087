package http

import (
	"context"
	"net/http"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

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
