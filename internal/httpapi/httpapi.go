// Package httpapi holds the HTTP conventions both services follow: errors
// answered as RFC 9457 problem documents typed /problems/<code>, and bearer
// tokens compared as SHA-256 digests in constant time.
package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// Problem is an RFC 9457 problem document. A service with extension
// members embeds it in a struct of its own.
type Problem struct {
	// Type is TypeOf(code): the same code always has the same type.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail is always present (the orders API's schema requires it).
	Detail string `json:"detail"`
	// Instance is the request's path.
	Instance string `json:"instance,omitempty"`
	// RequestID is the X-Request-Id of the request, to quote in a report.
	RequestID string       `json:"request_id,omitempty"`
	Errors    []FieldError `json:"errors,omitempty"`
}

// FieldError names a refused field of the request and the reason.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// TypeOf returns the problem type of an error code: "/problems/" + code.
func TypeOf(code string) string { return "/problems/" + code }

// WriteProblem writes p, a Problem or a struct embedding one, with status
// as application/problem+json. A document that cannot be encoded (a bug)
// is answered with a bare 500 problem.
func WriteProblem(w http.ResponseWriter, status int, p any) {
	body, err := json.Marshal(p)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"type":"/problems/internal","title":"Internal server error","status":500}`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// Tokens is a set of bearer tokens, kept as SHA-256 digests.
type Tokens struct{ sums [][sha256.Size]byte }

// NewTokens returns the set of the non-empty tokens given.
func NewTokens(tokens ...string) Tokens {
	var t Tokens
	for _, s := range tokens {
		if s != "" {
			t.sums = append(t.sums, sha256.Sum256([]byte(s)))
		}
	}
	return t
}

// Empty reports whether the set holds no token.
func (t Tokens) Empty() bool { return len(t.sums) == 0 }

// Allow reports whether r's Authorization header carries one of the
// tokens ("Bearer <token>", the scheme in any case). Every token's digest
// is compared, in constant time, so neither which token matched nor any
// token's content or length leaks through timing.
func (t Tokens) Allow(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	match := 0
	for _, s := range t.sums {
		match |= subtle.ConstantTimeCompare(sum[:], s[:])
	}
	return match == 1
}
