package httpapi_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/ordertimeout/ordertimeout/internal/httpapi"
)

func TestObserve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, header string
		wantStatus         int
		wantRoute          string
		wantID             string // "" = a made one
	}{
		{name: "route pattern, not the path", path: "/things/42", wantStatus: http.StatusOK, wantRoute: "/things/{id}"},
		{name: "panic answered through fail", path: "/panic", wantStatus: http.StatusInternalServerError, wantRoute: "/panic"},
		{name: "unmatched", path: "/nowhere", wantStatus: http.StatusNotFound, wantRoute: "unmatched"},
		{name: "request id kept", path: "/things/1", header: "abc-1.2_3", wantStatus: http.StatusOK, wantRoute: "/things/{id}", wantID: "abc-1.2_3"},
		{name: "unsafe request id replaced", path: "/things/1", header: "a b\"c", wantStatus: http.StatusOK, wantRoute: "/things/{id}"},
		{name: "overlong request id replaced", path: "/things/1", header: strings.Repeat("x", 65), wantStatus: http.StatusOK, wantRoute: "/things/{id}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			var got []httpapi.Observed
			var failed error
			fail := func(w http.ResponseWriter, r *http.Request, err error) {
				failed = err
				httpapi.WriteProblem(w, http.StatusInternalServerError, httpapi.Problem{Status: 500, RequestID: middleware.GetReqID(r.Context())})
			}
			r := chi.NewRouter()
			r.Use(httpapi.RequestID, httpapi.Observe(slog.New(slog.NewJSONHandler(&logs, nil)), fail, func(o httpapi.Observed) { got = append(got, o) }))
			r.Get("/things/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("thing")) })
			r.Get("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			if tt.header != "" {
				req.Header.Set(httpapi.RequestIDHeader, tt.header)
			}
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, req)

			id := rec.Header().Get(httpapi.RequestIDHeader)
			if id == "" || (tt.wantID != "" && id != tt.wantID) || (tt.wantID == "" && id == tt.header) {
				t.Errorf("request id = %q, want %q (or a made one)", id, tt.wantID)
			}
			if rec.Code != tt.wantStatus || len(got) != 1 || got[0].Status != tt.wantStatus || got[0].Route != tt.wantRoute || got[0].Method != http.MethodGet {
				t.Fatalf("status %d, observed %+v; want %d on %s", rec.Code, got, tt.wantStatus, tt.wantRoute)
			}
			if (failed != nil) != (tt.wantStatus == http.StatusInternalServerError) || (failed != nil && !strings.Contains(failed.Error(), "panic: boom")) {
				t.Errorf("fail got %v", failed)
			}
			if !strings.Contains(logs.String(), `"request_id":"`+id+`"`) || !strings.Contains(logs.String(), `"route":"`+tt.wantRoute+`"`) {
				t.Errorf("access log %s lacks the request id or route", logs.String())
			}
		})
	}
}

func TestObserveLetsAnAbortedHandlerAbort(t *testing.T) {
	t.Parallel()
	h := httpapi.Observe(slog.New(slog.DiscardHandler), func(http.ResponseWriter, *http.Request, error) {
		t.Error("fail called for http.ErrAbortHandler")
	}, nil)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	defer func() {
		if v := recover(); !errors.Is(asError(v), http.ErrAbortHandler) {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
		}
	}()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
}

func asError(v any) error {
	err, _ := v.(error)
	return err
}
