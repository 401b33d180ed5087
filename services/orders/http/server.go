package http

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ordertimeout/ordertimeout/internal/httpapi"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

// Defaults of Config.
const (
	MaxBodyBytesDefault   = 64 << 10
	RequestTimeoutDefault = 10 * time.Second
	StatsTimeoutDefault   = 2 * time.Second
)

// Stats is what the metrics endpoint reports besides request metrics.
type Stats struct {
	// ByStatus counts orders per status.
	ByStatus map[orders.Status]int64
	// OutboxRows is the number of unpublished outbox messages.
	OutboxRows int64
	// OutboxOldestAge is the age of the oldest unpublished message.
	OutboxOldestAge time.Duration
	// OutboxDuplicates counts the outbox messages JetStream answered as
	// duplicates since the start (outbox.Stats.Duplicates).
	OutboxDuplicates uint64
}

// Config configures the handler.
type Config struct {
	// Service runs the use cases; required.
	Service *orders.Service
	// Tokens are the bearer tokens accepted on mutating endpoints; at least
	// one is required.
	Tokens []string
	// Ready reports whether the dependencies answer; /readyz is 503 with the
	// error otherwise. Nil means always ready.
	Ready func(ctx context.Context) error
	// Stats feeds the orders_by_status and outbox gauges at each scrape;
	// nil leaves them out.
	Stats func(ctx context.Context) (Stats, error)
	// Registry receives the HTTP metrics and serves /metrics; required.
	Registry *prometheus.Registry
	// MaxBodyBytes bounds request bodies; default 64 KiB.
	MaxBodyBytes int64
	// OutboxLag returns the age of the oldest unpublished outbox message
	// (main passes the relay's Stats). It is called at most once per
	// LagSampleInterval; nil disables backpressure.
	OutboxLag func(ctx context.Context) (time.Duration, error)
	// MaxOutboxLag is the lag beyond which creates, payments,
	// cancellations and extensions answer 503 with Retry-After; default
	// orders.MaxOutboxLagDefault.
	MaxOutboxLag time.Duration
	// RequestTimeout bounds a request's handling; default 10s.
	RequestTimeout time.Duration
	// Now is the clock of latency measurements; default time.Now.
	Now func() time.Time
	// Logger of the access log and errors; default slog.Default().
	Logger *slog.Logger
}

type server struct {
	cfg      Config
	svc      *orders.Service
	tokens   httpapi.Tokens
	now      func() time.Time
	log      *slog.Logger
	lag      *lagGate
	requests *httpapi.RequestMetrics
}

// NewHandler returns the HTTP handler of the service: the /v1 API, /healthz,
// /readyz, /metrics and /openapi.json.
func NewHandler(cfg Config) (http.Handler, error) {
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, RequestTimeoutDefault)
	cfg.MaxOutboxLag = cmp.Or(cfg.MaxOutboxLag, orders.MaxOutboxLagDefault)
	switch {
	case cfg.Service == nil:
		return nil, errors.New("http: Service is required")
	case cfg.Registry == nil:
		return nil, errors.New("http: Registry is required")
	case len(cfg.Tokens) == 0:
		return nil, errors.New("http: Tokens: at least one bearer token is required")
	case cfg.MaxBodyBytes < 0 || cfg.RequestTimeout < 0 || cfg.MaxOutboxLag < 0:
		return nil, errors.New("http: MaxBodyBytes, RequestTimeout and MaxOutboxLag must not be negative")
	}
	s := &server{cfg: cfg, svc: cfg.Service, now: cfg.Now, log: cfg.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.OutboxLag != nil {
		s.lag = &lagGate{sample: cfg.OutboxLag, now: s.now}
	}
	if slices.Contains(cfg.Tokens, "") {
		return nil, errors.New("http: Tokens: empty token")
	}
	s.tokens = httpapi.NewTokens(cfg.Tokens...)
	if err := s.registerMetrics(); err != nil {
		return nil, err
	}
	return s.routes(), nil
}

func (s *server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(httpapi.RequestID, httpapi.Trace, httpapi.Observe(s.log, s.writeError, s.requests.Record), s.limit)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &orders.Error{Code: codeRouteNotFound, Detail: "no route matches " + r.URL.Path})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &orders.Error{Code: codeMethodNotAllowed, Detail: r.Method + " is not allowed on " + r.URL.Path})
	})
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	r.Get("/openapi.json", s.openapi)
	r.Get("/v1/orders", s.list)
	r.Get("/v1/orders/{id}", s.get)
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, s.backpressure)
		r.Post("/v1/orders", s.create)
		r.Post("/v1/orders/{id}/pay", s.pay)
		r.Post("/v1/orders/{id}/cancel", s.cancel)
		r.Post("/v1/orders/{id}/extend", s.extend)
	})
	return r
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, "application/json", map[string]string{"status": "ok"}, s.log)
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(r.Context()); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, "application/json", map[string]string{"status": "unavailable", "detail": err.Error()}, s.log)
			return
		}
	}
	writeJSON(w, http.StatusOK, "application/json", map[string]string{"status": "ready"}, s.log)
}

func (s *server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(orders.OpenAPI)
}

// Location returns the path of order id.
func Location(id string) string { return "/v1/orders/" + id }

func (s *server) create(w http.ResponseWriter, r *http.Request) {
	var req orders.CreateRequest
	if err := decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	o, replayed, err := s.svc.Create(r.Context(), req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", Location(o.ID))
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, "application/json", o, s.log)
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	o, err := s.svc.Get(r.Context(), chi.URLParam(r, "id"))
	s.respond(w, r, o, err)
}

// listResponse is the body of GET /v1/orders.
type listResponse struct {
	Items []orders.Order `json:"items"`
	// NextCursor continues the listing; "" on the last page.
	NextCursor string `json:"next_cursor"`
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := orders.ListFilter{Status: orders.Status(q.Get("status")), CustomerID: q.Get("customer_id")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.writeError(w, r, orders.Invalid("limit", "must be an integer, got %.64q", v))
			return
		}
		if n < 1 {
			s.writeError(w, r, orders.Invalid("limit", "must be between 1 and %d", orders.ListLimitMax))
			return
		}
		f.Limit = n
	}
	if c := q.Get("cursor"); c != "" {
		id, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || !events.ValidKey(string(id)) {
			s.writeError(w, r, orders.Invalid("cursor", "is not a next_cursor of this API"))
			return
		}
		f.After = string(id)
	}
	p, err := s.svc.List(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := listResponse{Items: p.Items}
	if resp.Items == nil {
		resp.Items = []orders.Order{}
	}
	if p.Next != "" {
		resp.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(p.Next))
	}
	writeJSON(w, http.StatusOK, "application/json", resp, s.log)
}

func (s *server) pay(w http.ResponseWriter, r *http.Request) {
	o, err := s.svc.Pay(r.Context(), chi.URLParam(r, "id"))
	s.respond(w, r, o, err)
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	o, err := s.svc.Cancel(r.Context(), chi.URLParam(r, "id"))
	s.respond(w, r, o, err)
}

func (s *server) extend(w http.ResponseWriter, r *http.Request) {
	var d orders.Deadline
	if err := decodeBody(r, &d); err != nil {
		s.writeError(w, r, err)
		return
	}
	o, err := s.svc.Extend(r.Context(), chi.URLParam(r, "id"), d)
	s.respond(w, r, o, err)
}

// respond writes o with 200, or err.
func (s *server) respond(w http.ResponseWriter, r *http.Request, o orders.Order, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, "application/json", o, s.log)
}
