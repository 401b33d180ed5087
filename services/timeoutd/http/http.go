package http

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ordertimeout/ordertimeout/internal/httpapi"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// Service is what the handlers need of the daemon; *timeoutd.Service
// implements it.
type Service interface {
	timeoutd.Reader
	IsReady() bool
	Check(ctx context.Context) error
	Stats() timeoutd.Stats
	// Deadlines counts the pending timeouts by deadline at now.
	Deadlines(now time.Time) timeoutd.Deadlines
	Recent(n int) []events.Expiry
	Generation() uint64
	// Cluster returns the live instances of the cluster.
	Cluster() []timeoutd.Member
	// Ownership returns every partition's owner as it really is.
	Ownership() []timeoutd.PartitionOwnership
}

// Defaults of Config.
const (
	// SnapshotIntervalDefault is the shortest pause between two SSE
	// snapshots (changes in between are coalesced): at most 4 per second.
	SnapshotIntervalDefault = 250 * time.Millisecond
	// HeartbeatDefault is the pause after which an idle SSE stream gets a
	// comment line, so proxies keep it open and clients detect a dead one.
	HeartbeatDefault = 15 * time.Second
	// ResyncDefault is the longest pause between two snapshots even when no
	// counter changed, so "now" and the upcoming buckets stay fresh.
	ResyncDefault = 5 * time.Second
	// MaxStreamsDefault bounds the concurrent /api/v1/stream clients: a
	// dashboard tab holds one.
	MaxStreamsDefault = 100
	// StreamWriteTimeoutDefault is how long one write of a stream may
	// block on a client that does not read before the stream is dropped.
	StreamWriteTimeoutDefault = 10 * time.Second
)

// Config configures the handler.
type Config struct {
	// Service is the daemon the API reads.
	Service Service
	// ReadToken, when set, is the bearer token that makes the payloads of
	// pending timeouts visible; without it they are withheld
	// (payload_hidden) and a wrong token is a 401. The operator token is
	// accepted too. Empty: payloads are visible to every reader.
	ReadToken string
	// MaxStreams bounds the concurrent SSE streams; beyond it a stream is
	// refused with 503 and Retry-After. Default MaxStreamsDefault.
	MaxStreams int
	// StreamWriteTimeout bounds every write of an SSE stream; a client that
	// does not read within it is dropped. Default
	// StreamWriteTimeoutDefault.
	StreamWriteTimeout time.Duration
	// Checks are the dependency checks of /readyz besides Service.Check
	// and recovery (e.g. the NATS connection).
	Checks map[string]func(ctx context.Context) error
	// Registry is what /metrics serves; nil serves nothing at /metrics.
	Registry *prometheus.Registry
	// DashboardDir, when set, is served at / (see dashboard.go).
	DashboardDir string
	// SnapshotInterval is the shortest pause between SSE snapshots; default
	// SnapshotIntervalDefault.
	SnapshotInterval time.Duration
	// Heartbeat is the SSE heartbeat; default HeartbeatDefault.
	Heartbeat time.Duration
	// Operator enables the operator actions (see operator.go); the zero
	// value keeps the API read-only.
	Operator Operator
	// Logger; default slog.Default().
	Logger *slog.Logger
}

type server struct {
	cfg     Config
	svc     Service
	log     *slog.Logger
	streams *streams
	// orders forwards the operator actions; nil when they are disabled.
	orders *ordersclient.Client
	// snapshots are the encoded snapshot events the streams share.
	snapshots snapshotEvents
	// operatorToken and readToken are cfg's tokens (each empty when unset).
	operatorToken, readToken httpapi.Tokens
}

// NewHandler returns the router: /healthz, /readyz, /metrics, /api/v1/… and,
// when configured, the dashboard at /.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.Service == nil {
		return nil, errors.New("http: Config.Service is nil")
	}
	cfg.SnapshotInterval = cmp.Or(cfg.SnapshotInterval, SnapshotIntervalDefault)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, HeartbeatDefault)
	cfg.MaxStreams = cmp.Or(cfg.MaxStreams, MaxStreamsDefault)
	cfg.StreamWriteTimeout = cmp.Or(cfg.StreamWriteTimeout, StreamWriteTimeoutDefault)
	switch {
	case cfg.MaxStreams < 0:
		return nil, fmt.Errorf("http: Config.MaxStreams must be positive, got %d", cfg.MaxStreams)
	case cfg.StreamWriteTimeout < 0:
		return nil, fmt.Errorf("http: Config.StreamWriteTimeout must be positive, got %s", cfg.StreamWriteTimeout)
	case cfg.SnapshotInterval < 0:
		return nil, fmt.Errorf("http: Config.SnapshotInterval must be positive, got %s", cfg.SnapshotInterval)
	case cfg.Heartbeat < 0:
		return nil, fmt.Errorf("http: Config.Heartbeat must be positive, got %s", cfg.Heartbeat)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	orders, err := cfg.Operator.ordersClient()
	if err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, svc: cfg.Service, log: cfg.Logger, streams: newStreams(cfg.MaxStreams), orders: orders,
		operatorToken: httpapi.NewTokens(cfg.Operator.Token), readToken: httpapi.NewTokens(cfg.ReadToken)}
	var record func(httpapi.Observed)
	if cfg.Registry != nil {
		m, err := httpapi.NewRequestMetrics(cfg.Registry, "timeoutd")
		if err != nil {
			return nil, err
		}
		record = m.Record
	}
	r := chi.NewRouter()
	r.Use(httpapi.RequestID, httpapi.Observe(s.log, s.fail, record))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	r.Get("/readyz", s.readyz)
	if cfg.Registry != nil {
		if err := s.streams.register(cfg.Registry); err != nil {
			return nil, err
		}
		r.Handle("/metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{Registry: cfg.Registry}))
	}
	r.Route("/api/v1", func(r chi.Router) {
		r.Get("/timeouts", s.listTimeouts)
		r.Get("/timeouts/{key}", s.getTimeout)
		r.Get("/stats", s.stats)
		r.Get("/cluster", s.cluster)
		r.Get("/expiries", s.expiries)
		r.Get("/stream", s.stream)
		s.operatorRoutes(r)
		r.NotFound(func(w http.ResponseWriter, r *http.Request) {
			s.problem(w, r, codeRouteNotFound, r.URL.Path)
		})
	})
	if cfg.DashboardDir != "" {
		d, err := newDashboard(cfg.DashboardDir)
		if err != nil {
			return nil, err
		}
		r.Handle("/*", d)
	}
	return r, nil
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var failed []string
	if !s.svc.IsReady() {
		failed = append(failed, "recovery: not done or shutting down")
	}
	if err := s.svc.Check(ctx); err != nil {
		failed = append(failed, "postgres: "+err.Error())
	}
	for name, check := range s.cfg.Checks {
		if err := check(ctx); err != nil {
			failed = append(failed, name+": "+err.Error())
		}
	}
	if len(failed) > 0 {
		s.problem(w, r, codeNotReady, strings.Join(failed, "; "))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ready\n"))
}

// invalidParam is a query parameter error, mapped to 400 with its field.
type invalidParam struct{ field, reason string }

func (e *invalidParam) Error() string { return e.field + ": " + e.reason }

// Problem codes of the API (their type is httpapi.TypeOf(code)).
const (
	codeValidation        = "validation"
	codeUnauthorized      = "unauthorized"
	codeNotFound          = "not_found"
	codeRouteNotFound     = "route_not_found"
	codeOperatorDisabled  = "operator_disabled"
	codeBodyTooLarge      = "body_too_large"
	codeInternal          = "internal"
	codeOrdersUnreachable = "orders_unreachable"
	codeOrdersBadAnswer   = "orders_bad_answer"
	codeOrdersRefused     = "orders_refused"
	codeNotReady          = "not_ready"
	codeTooManyStreams    = "too_many_streams"
)

// problems maps every code to its HTTP status and title: the one table.
var problems = map[string]struct {
	status int
	title  string
}{
	codeValidation:        {http.StatusBadRequest, "Invalid request"},
	codeUnauthorized:      {http.StatusUnauthorized, "Unauthorized"},
	codeNotFound:          {http.StatusNotFound, "Timeout not found"},
	codeRouteNotFound:     {http.StatusNotFound, "No such endpoint"},
	codeOperatorDisabled:  {http.StatusNotFound, "Operator actions disabled"},
	codeBodyTooLarge:      {http.StatusRequestEntityTooLarge, "Request body too large"},
	codeInternal:          {http.StatusInternalServerError, "Internal server error"},
	codeOrdersUnreachable: {http.StatusBadGateway, "Orders API unreachable"},
	codeOrdersBadAnswer:   {http.StatusBadGateway, "Bad answer from the orders API"},
	codeOrdersRefused:     {http.StatusBadGateway, "Orders API refused timeoutd"},
	codeNotReady:          {http.StatusServiceUnavailable, "Not ready"},
	codeTooManyStreams:    {http.StatusServiceUnavailable, "Too many streams"},
}

// codeOf maps domain errors to problem codes.
func codeOf(err error) string {
	var ip *invalidParam
	switch {
	case errors.As(err, &ip), errors.Is(err, timeoutd.ErrInvalid):
		return codeValidation
	case errors.Is(err, timeoutd.ErrNotFound):
		return codeNotFound
	default:
		return codeInternal
	}
}

// fail writes err as a problem; unexpected errors become a generic 500 with
// the request id, and are logged.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := codeOf(err)
	var ip *invalidParam
	switch {
	case errors.As(err, &ip):
		s.problem(w, r, code, err.Error(), httpapi.FieldError{Field: ip.field, Reason: ip.reason})
	case code == codeInternal:
		s.log.Error("request failed", "path", r.URL.Path, "request_id", middleware.GetReqID(r.Context()), "err", err)
		s.problem(w, r, code, "the request failed; quote the request id when reporting it")
	default:
		s.problem(w, r, code, err.Error())
	}
}

// problem writes an RFC 9457 problem document of code (httpapi.WriteProblem).
func (s *server) problem(w http.ResponseWriter, r *http.Request, code, detail string, errs ...httpapi.FieldError) {
	p := problems[code]
	httpapi.WriteProblem(w, p.status, httpapi.Problem{Type: httpapi.TypeOf(code), Title: p.title, Status: p.status,
		Detail: detail, Instance: r.URL.Path, RequestID: middleware.GetReqID(r.Context()), Errors: errs})
}

func (s *server) json(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// intParam parses an optional integer query parameter in [1, maxV].
func intParam(r *http.Request, name string, def, maxV int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxV {
		return 0, &invalidParam{name, fmt.Sprintf("must be an integer in [1, %d]", maxV)}
	}
	return n, nil
}

func encodeCursor(t timeoutd.Timeout) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.Deadline.UnixNano(), 10) + ":" + t.Key))
}

func decodeCursor(s string) (timeoutd.Cursor, error) {
	bad := &invalidParam{"cursor", "is not a cursor returned by this API"}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return timeoutd.Cursor{}, bad
	}
	ns, key, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !events.ValidTimeoutKey(key) {
		return timeoutd.Cursor{}, bad
	}
	return timeoutd.Cursor{Deadline: time.Unix(0, n).UTC(), Key: key}, nil
}

// toAPI converts t; without payloads, a payload is withheld and marked so.
func toAPI(t timeoutd.Timeout, payloads bool) api.Timeout {
	out := api.Timeout{Key: t.Key, Version: t.Version, Deadline: t.Deadline, FireSubject: t.FireSubject, Partition: t.Partition,
		MaxLatenessMs: t.MaxLateness.Milliseconds(), Payload: t.Payload}
	if !payloads && len(t.Payload) > 0 {
		out.Payload, out.PayloadHidden = nil, true
	}
	return out
}

// page reads a page of pending timeouts, with their payloads or not.
func (s *server) page(ctx context.Context, q timeoutd.Query, payloads bool) (api.Page, error) {
	q.Limit++ // one more tells whether a next page exists
	ts, err := s.svc.ListPending(ctx, q)
	if err != nil {
		return api.Page{}, err
	}
	p := api.Page{Items: make([]api.Timeout, 0, len(ts))}
	if len(ts) == q.Limit {
		ts = ts[:len(ts)-1]
		p.NextCursor = encodeCursor(ts[len(ts)-1])
	}
	for _, t := range ts {
		p.Items = append(p.Items, toAPI(t, payloads))
	}
	return p, nil
}

func (s *server) listTimeouts(w http.ResponseWriter, r *http.Request) {
	payloads, ok := s.payloadAccess(w, r)
	if !ok {
		return
	}
	limit, err := intParam(r, "limit", api.LimitDefault, api.LimitMax)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := timeoutd.Query{Limit: limit, KeyPrefix: r.URL.Query().Get("key")}
	if p := q.KeyPrefix; p != "" && !events.ValidTimeoutKey(p) && !events.ValidTimeoutKey(p+"_") { // "_": a prefix may end with the tenant's '.'
		s.fail(w, r, &invalidParam{"key", "must be a key prefix of letters, digits, '-' or '_', after <tenant>. for a tenant's keys"})
		return
	}
	if c := r.URL.Query().Get("cursor"); c != "" {
		if q.After, err = decodeCursor(c); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	p, err := s.page(r.Context(), q, payloads)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.json(w, p)
}

func (s *server) getTimeout(w http.ResponseWriter, r *http.Request) {
	payloads, ok := s.payloadAccess(w, r)
	if !ok {
		return
	}
	key := chi.URLParam(r, "key")
	if !events.ValidTimeoutKey(key) {
		s.fail(w, r, &invalidParam{"key", "must be 1 to 128 letters, digits, '-' or '_', after <tenant>. for a tenant's keys"})
		return
	}
	t, err := s.svc.GetPending(r.Context(), key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.json(w, toAPI(t, payloads))
}

// cluster serves /api/v1/cluster.
func (s *server) cluster(w http.ResponseWriter, _ *http.Request) {
	s.json(w, s.clusterToAPI())
}

func (s *server) clusterToAPI() api.Cluster {
	ms := s.svc.Cluster()
	out := api.Cluster{Partitions: events.Partitions, Instances: make([]api.Instance, len(ms))}
	for i, m := range ms {
		out.Instances[i] = api.Instance{ID: m.ID, StartedAt: m.StartedAt, Self: m.Self, Partitions: m.Partitions,
			Pending: m.Info.Pending, Fired: m.Info.Fired, FiredPerSec: m.Info.FiredPerSec,
			LatenessP50Ms: float64(m.Info.LatenessP50) / 1e6, LatenessMaxMs: float64(m.Info.LatenessMax) / 1e6}
		if out.Instances[i].Partitions == nil {
			out.Instances[i].Partitions = []int{}
		}
	}
	own := s.svc.Ownership()
	out.Ownership = make([]api.PartitionOwner, len(own))
	for i, o := range own {
		out.Ownership[i] = api.PartitionOwner{Partition: o.Partition, Owner: o.Owner, Epoch: o.Epoch, Lease: string(o.Lease),
			MayFire: o.Why == "", Why: string(o.Why)}
		if o.Why == "" {
			out.MayFire++
		}
	}
	return out
}

func (s *server) recent(n int) []api.Expiry {
	es := s.svc.Recent(n)
	out := make([]api.Expiry, len(es))
	for i, e := range es {
		out[i] = api.Expiry{Key: e.Key, Version: e.Version, Deadline: e.Deadline, FiredAt: e.FiredAt,
			LatenessMs: float64(max(e.LatenessNs, 0)) / 1e6, Outcome: string(e.Outcome)}
	}
	return out
}

func (s *server) expiries(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", api.LimitDefault, api.LimitMax)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.json(w, api.ExpiryList{Items: s.recent(limit)})
}
