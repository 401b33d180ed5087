package http_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/orders"
	ordershttp "github.com/ordertimeout/ordertimeout/services/orders/http"
)

// fakeLag is an outbox lag source with a settable lag and clock; it counts
// its calls.
type fakeLag struct {
	mu    sync.Mutex
	lag   time.Duration
	err   error
	clock time.Time
	calls int
}

func (f *fakeLag) set(lag time.Duration) { f.mu.Lock(); f.lag = lag; f.mu.Unlock() }

func (f *fakeLag) advance(d time.Duration) { f.mu.Lock(); f.clock = f.clock.Add(d); f.mu.Unlock() }

func (f *fakeLag) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.clock }

func (f *fakeLag) sample(context.Context) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.lag, f.err
}

func (f *fakeLag) callCount() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

// newLagEnv is newEnv with a fake outbox lag source and MaxOutboxLag 10s.
func newLagEnv(t *testing.T) (env, *fakeLag) {
	t.Helper()
	lag := &fakeLag{clock: now}
	store := newFakeStore()
	svc, err := orders.NewService(store, orders.ServiceConfig{Now: func() time.Time { return now },
		Limits: orders.Limits{PayWithinMin: time.Second, PayWithinMax: 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ordershttp.NewHandler(ordershttp.Config{Service: svc, Tokens: []string{token}, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Now: lag.now, OutboxLag: lag.sample, MaxOutboxLag: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return env{h: h, store: store}, lag
}

func TestOutboxLagRefusesChangesButNotReads(t *testing.T) {
	t.Parallel()
	e, lag := newLagEnv(t)
	o := e.create(t) // lag 0: accepted
	lag.set(11 * time.Second)
	lag.advance(ordershttp.LagSampleInterval)
	// Take the new sample before the parallel cases, which would otherwise
	// race for it (the losers use the old sample while it is taken).
	if rec := e.do(t, "POST", "/v1/orders", createBody, true); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("first create after the lag grew: status %d", rec.Code)
	}

	tests := []struct {
		name, method, path, body string
		auth                     bool
		want                     int
	}{
		{"create", "POST", "/v1/orders", createBody, true, http.StatusServiceUnavailable},
		{"pay", "POST", "/v1/orders/" + o.ID + "/pay", "", true, http.StatusServiceUnavailable},
		{"cancel", "POST", "/v1/orders/" + o.ID + "/cancel", "", true, http.StatusServiceUnavailable},
		{"extend", "POST", "/v1/orders/" + o.ID + "/extend", `{"pay_within":"1h"}`, true, http.StatusServiceUnavailable},
		{"create without token is still 401", "POST", "/v1/orders", createBody, false, http.StatusUnauthorized},
		{"get", "GET", "/v1/orders/" + o.ID, "", false, http.StatusOK},
		{"list", "GET", "/v1/orders", "", false, http.StatusOK},
		{"readyz", "GET", "/readyz", "", false, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := e.do(t, tt.method, tt.path, tt.body, tt.auth)
			if rec.Code != tt.want {
				t.Fatalf("status = %d %s, want %d", rec.Code, rec.Body, tt.want)
			}
			if tt.want != http.StatusServiceUnavailable {
				return
			}
			checkProblem(t, rec, "", "")
			if p := decode[problemBody](t, rec); p.Type != "/problems/overloaded" {
				t.Errorf("type = %q", p.Type)
			}
			if got := rec.Header().Get("Retry-After"); got != "5" {
				t.Errorf("Retry-After = %q, want 5", got)
			}
		})
	}
	t.Cleanup(func() {
		if got, _ := e.store.Get(context.Background(), o.ID); got.Version != 1 || got.Status != orders.StatusPendingPayment {
			t.Errorf("a refused change reached the store: %+v", got)
		}
	})
}

func TestOutboxLagIsSampledAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	e, lag := newLagEnv(t)
	create := func() int { return e.do(t, "POST", "/v1/orders", createBody, true).Code }

	if got := create(); got != http.StatusCreated {
		t.Fatalf("lag 0: status %d", got)
	}
	lag.set(30 * time.Second)
	for range 20 {
		if got := create(); got != http.StatusCreated {
			t.Fatalf("within the interval the old sample (0) must hold: status %d", got)
		}
	}
	if n := lag.callCount(); n != 1 {
		t.Fatalf("%d samples for 21 requests within one interval, want 1", n)
	}
	lag.advance(ordershttp.LagSampleInterval)
	if got := create(); got != http.StatusServiceUnavailable {
		t.Fatalf("lag 30s after a new sample: status %d", got)
	}
	lag.set(10 * time.Second) // at the limit, not past it
	lag.advance(ordershttp.LagSampleInterval - time.Millisecond)
	if got := create(); got != http.StatusServiceUnavailable {
		t.Fatalf("the 30s sample must hold until the interval ends: status %d", got)
	}
	lag.advance(time.Millisecond)
	if got := create(); got != http.StatusCreated {
		t.Fatalf("lag back to the limit: status %d", got)
	}
	if n := lag.callCount(); n != 3 {
		t.Fatalf("%d samples over three intervals, want 3", n)
	}
}

func TestFailedLagSampleDoesNotRefuse(t *testing.T) {
	t.Parallel()
	e, lag := newLagEnv(t)
	lag.set(time.Minute)
	lag.mu.Lock()
	lag.err = errors.New("read outbox stats: connection refused")
	lag.mu.Unlock()
	if rec := e.do(t, "POST", "/v1/orders", createBody, true); rec.Code != http.StatusCreated {
		t.Fatalf("status = %d %s, want 201: an unknown lag must not refuse", rec.Code, rec.Body)
	}
	lag.mu.Lock()
	lag.err = nil
	lag.mu.Unlock()
	lag.advance(ordershttp.LagSampleInterval)
	if rec := e.do(t, "POST", "/v1/orders", createBody, true); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503 once the sample succeeds again", rec.Code)
	}
}
