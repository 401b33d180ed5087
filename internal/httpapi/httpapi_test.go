package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ordertimeout/ordertimeout/internal/httpapi"
)

func TestTokensAllow(t *testing.T) {
	t.Parallel()
	tokens := httpapi.NewTokens("alpha", "", "beta")
	tests := []struct {
		name, header string
		want         bool
	}{
		{"first token", "Bearer alpha", true},
		{"second token", "Bearer beta", true},
		{"scheme in lower case", "bearer beta", true},
		{"unknown token", "Bearer gamma", false},
		{"prefix of a token", "Bearer alph", false},
		{"empty token is never one", "Bearer ", false},
		{"no scheme", "alpha", false},
		{"basic scheme", "Basic alpha", false},
		{"no header", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			if got := tokens.Allow(r); got != tt.want {
				t.Fatalf("Allow(%q) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
	if !httpapi.NewTokens("").Empty() || httpapi.NewTokens("a").Empty() {
		t.Fatal("Empty: want true for no non-empty token only")
	}
}

func TestWriteProblem(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	type withExtension struct {
		httpapi.Problem
		Limit int `json:"limit"`
	}
	httpapi.WriteProblem(rec, http.StatusTooManyRequests, withExtension{httpapi.Problem{
		Type: httpapi.TypeOf("too_many"), Title: "Too many", Status: http.StatusTooManyRequests,
		Errors: []httpapi.FieldError{{Field: "n", Reason: "too big"}}}, 3})
	const want = `{"type":"/problems/too_many","title":"Too many","status":429,"detail":"","errors":[{"field":"n","reason":"too big"}],"limit":3}` + "\n"
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Content-Type") != "application/problem+json" || rec.Body.String() != want {
		t.Fatalf("got %d %q %s, want 429 application/problem+json %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body, want)
	}
}
