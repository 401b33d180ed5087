package http

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

const (
	// LagSampleInterval is the longest a sample of the outbox lag is
	// reused: at most one Config.OutboxLag call per interval, whatever the
	// request rate.
	LagSampleInterval = time.Second
	// lagSampleTimeout bounds one Config.OutboxLag call.
	lagSampleTimeout = time.Second
)

// lagGate holds the latest sample of the outbox lag. The request that finds
// the sample older than LagSampleInterval refreshes it; requests arriving
// meanwhile use the previous sample instead of waiting.
type lagGate struct {
	sample func(ctx context.Context) (time.Duration, error)
	now    func() time.Time

	mu         sync.Mutex
	refreshing bool
	sampledAt  time.Time
	lag        time.Duration
}

// current returns the latest lag, refreshing it first when it is stale and
// no other request is doing so. A failed sample counts as no lag (the
// request then meets the failure itself, as a 503 if the database is down)
// and is logged by the caller through err.
func (g *lagGate) current(ctx context.Context) (lag time.Duration, err error) {
	g.mu.Lock()
	if g.refreshing || g.now().Sub(g.sampledAt) < LagSampleInterval {
		lag = g.lag
		g.mu.Unlock()
		return lag, nil
	}
	g.refreshing = true
	g.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lagSampleTimeout)
	defer cancel()
	lag, err = g.sample(ctx)
	if err != nil {
		lag = 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshing, g.sampledAt, g.lag = false, g.now(), lag
	return lag, err
}

// backpressure refuses mutating requests with 503 and Retry-After while the
// outbox lag exceeds Config.MaxOutboxLag: every accepted change adds outbox
// rows, so accepting more only delays the timeout commands of the orders
// already taken. Reads are not gated.
func (s *server) backpressure(next http.Handler) http.Handler {
	if s.lag == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lag, err := s.lag.current(r.Context())
		if err != nil {
			s.log.WarnContext(r.Context(), "sample outbox lag", "err", err)
		}
		if lag > s.cfg.MaxOutboxLag {
			s.writeError(w, r, &orders.Error{Code: codeOverloaded,
				Detail: "the outbox is " + lag.Round(time.Millisecond).String() + " behind (limit " + s.cfg.MaxOutboxLag.String() + "); retry later"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
