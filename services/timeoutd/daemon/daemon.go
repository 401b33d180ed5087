package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/internal/envconfig"
	"github.com/ordertimeout/ordertimeout/internal/natshealth"
	"github.com/ordertimeout/ordertimeout/internal/pgparams"
	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/tenants"
	"github.com/ordertimeout/ordertimeout/internal/tlsclient"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	thttp "github.com/ordertimeout/ordertimeout/services/timeoutd/http"
	tjs "github.com/ordertimeout/ordertimeout/services/timeoutd/jetstream"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/postgres"
)

// Defaults of Config.
const (
	// HTTPAddrDefault is the HTTP listen address.
	HTTPAddrDefault = ":8080"
	// ShutdownTimeoutDefault bounds the graceful shutdown.
	ShutdownTimeoutDefault = 20 * time.Second
	// ShutdownDelayDefault is how long /readyz answers 503 after SIGTERM
	// before fetching stops and the listener closes.
	ShutdownDelayDefault = time.Second
	// IdleInTransactionTimeoutDefault is short: an instance frozen inside a
	// fenced transaction (docker pause, a stalled VM) holds its
	// partitions' lease rows FOR SHARE, so no survivor can take them over
	// until Postgres ends the transaction.
	IdleInTransactionTimeoutDefault = time.Second
	// DBMaxConnsDefault is the pgxpool size.
	DBMaxConnsDefault = 16
	// ReadDBMaxConnsDefault is the size of the read API's own pool.
	ReadDBMaxConnsDefault = 4
	// NATSGraceDefault is how long NATS may fail to answer before the
	// instance hands its partitions over.
	NATSGraceDefault = 2 * time.Second
	// MemoryLimitDefault is the Go runtime's soft memory limit the binary
	// sets: sized for 10M pending (docs/ARCHITECTURE.md, "The schedule"),
	// it keeps the collector from letting the heap grow to twice the live
	// heap (GOGC=100) before it runs.
	MemoryLimitDefault = 1400 << 20
)

// NATSTLSPrefix is the prefix of Config.NATSTLS's variables.
const NATSTLSPrefix = "TIMEOUTD_NATS_"

// Config is everything the daemon reads from its environment; FromEnv
// documents the variable of each field.
type Config struct {
	// DatabaseURL is the Postgres connection string (required).
	DatabaseURL string `env:"TIMEOUTD_DATABASE_URL"`
	// NATSURL is the NATS server URL (required).
	NATSURL string `env:"TIMEOUTD_NATS_URL"`
	// NATSTLS are the NATS connection's TLS files: TIMEOUTD_NATS_CA_FILE
	// (the CA of the servers' certificates), TIMEOUTD_NATS_CERT_FILE and
	// TIMEOUTD_NATS_KEY_FILE (a client certificate, for servers that
	// verify their clients). With any set the connection requires TLS;
	// default plaintext. Postgres's TLS is set in DatabaseURL
	// (sslmode=verify-full, sslrootcert, sslcert, sslkey).
	NATSTLS tlsclient.Files `envPrefix:"TIMEOUTD_NATS_"`
	// HTTPAddr is the HTTP listen address; default HTTPAddrDefault. Use
	// "127.0.0.1:0" to pick a free port (see Main.Addr).
	HTTPAddr string `env:"TIMEOUTD_HTTP_ADDR"`
	// DebugAddr (TIMEOUTD_DEBUG_ADDR), when set, is a second listen address
	// that serves Go's runtime profiles (net/http/pprof, /debug/pprof/) and
	// nothing else; default empty: no profiles are served. Bind it where
	// only operators reach it (127.0.0.1:6060, say): a profile shows the
	// process's internals and a CPU profile costs CPU while it runs.
	DebugAddr string `env:"TIMEOUTD_DEBUG_ADDR"`
	// DashboardDir, when set, is served at /.
	DashboardDir string `env:"TIMEOUTD_DASHBOARD_DIR"`
	// OperatorToken (TIMEOUTD_OPERATOR_TOKEN), when set, enables the
	// dashboard's operator actions; empty keeps it read-only.
	OperatorToken string `env:"TIMEOUTD_OPERATOR_TOKEN"`
	// OrdersURL (TIMEOUTD_ORDERS_URL) is the orders API the operator
	// actions go to; required with OperatorToken.
	OrdersURL string `env:"TIMEOUTD_ORDERS_URL"`
	// OrdersToken (TIMEOUTD_ORDERS_TOKEN) is timeoutd's bearer token for
	// the orders API; required with OperatorToken.
	OrdersToken string `env:"TIMEOUTD_ORDERS_TOKEN"`
	// ReadToken (TIMEOUTD_READ_TOKEN), when set, is the bearer token that
	// makes the payloads of pending timeouts visible in the read API (the
	// operator token does too); without it they are withheld. Empty: the
	// payloads are visible to every reader.
	ReadToken string `env:"TIMEOUTD_READ_TOKEN"`
	// MaxStreams (TIMEOUTD_MAX_STREAMS) bounds the concurrent live
	// streams; default thttp.MaxStreamsDefault.
	MaxStreams int `env:"TIMEOUTD_MAX_STREAMS"`
	// StreamWriteTimeout (TIMEOUTD_STREAM_WRITE_TIMEOUT) bounds each write
	// of a live stream: a client that does not read is dropped; default
	// thttp.StreamWriteTimeoutDefault.
	StreamWriteTimeout time.Duration `env:"TIMEOUTD_STREAM_WRITE_TIMEOUT"`
	// ReadDBMaxConns (TIMEOUTD_READ_DB_MAX_CONNS) is the size of the read
	// API's own Postgres pool, apart from ingest's and fire's; default
	// ReadDBMaxConnsDefault.
	ReadDBMaxConns int `env:"TIMEOUTD_READ_DB_MAX_CONNS"`
	// ShutdownTimeout bounds the graceful shutdown; default
	// ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration `env:"TIMEOUTD_SHUTDOWN_TIMEOUT"`
	// ShutdownDelay is how long readiness is false before the shutdown
	// proper begins; default ShutdownDelayDefault.
	ShutdownDelay time.Duration `env:"TIMEOUTD_SHUTDOWN_DELAY"`
	// NATSGrace (TIMEOUTD_NATS_GRACE) is how long NATS may fail to answer
	// a ping before this instance, which can then neither ingest nor
	// publish, hands its partitions over to the others and takes none
	// until it answers again; above NATS's own reconnection (a node lost
	// moves no partition). Default NATSGraceDefault.
	NATSGrace time.Duration `env:"TIMEOUTD_NATS_GRACE"`
	// DBMaxConns is the Postgres pool size; default DBMaxConnsDefault. A
	// pool_max_conns in DatabaseURL wins (it sizes this pool only: the
	// read and lease pools keep theirs).
	DBMaxConns int `env:"TIMEOUTD_DB_MAX_CONNS"`
	// StatementTimeout is every database session's statement_timeout;
	// default pgparams.StatementTimeoutDefault (30s). A statement_timeout
	// in DatabaseURL wins.
	StatementTimeout time.Duration `env:"TIMEOUTD_STATEMENT_TIMEOUT"`
	// IdleInTransactionTimeout is every database session's
	// idle_in_transaction_session_timeout; default
	// IdleInTransactionTimeoutDefault, and below Service.LeaseTTL. The
	// parameter in DatabaseURL wins.
	IdleInTransactionTimeout time.Duration `env:"TIMEOUTD_IDLE_IN_TRANSACTION_TIMEOUT"`
	// MemoryLimit is the soft memory limit in bytes
	// (runtime/debug.SetMemoryLimit) that cmd/timeoutd applies, unless
	// GOMEMLIMIT is set; 0 means MemoryLimitDefault, negative none. It is
	// process-wide, so New and Run leave it alone (in-process tests).
	MemoryLimit envconfig.Bytes `env:"TIMEOUTD_MEMORY_LIMIT"`
	// LogLevel (TIMEOUTD_LOG_LEVEL: debug, info, warn or error) is the
	// level of cmd/timeoutd's logger; default info.
	LogLevel slog.Level `env:"TIMEOUTD_LOG_LEVEL"`
	// Consumer configures the command consumer (TIMEOUTD_BATCH_SIZE,
	// TIMEOUTD_PREFETCH, TIMEOUTD_ACK_WAIT, TIMEOUTD_PULL_HEARTBEAT,
	// TIMEOUTD_LINGER).
	Consumer tjs.ConsumerConfig `envPrefix:"TIMEOUTD_"`
	// TenantsFile (TIMEOUTD_TENANTS_FILE), when set, is the tenant
	// registry (internal/tenants; deploy/compose/tenants.json): the
	// tenants whose commands are accepted and each one's fire subject
	// prefixes, read again within a second of a change, so that a tenant
	// added on a running platform needs no restart. It replaces
	// TIMEOUTD_FIRE_SUBJECT_PREFIXES. Default: the orders tenant alone,
	// with TIMEOUTD_FIRE_SUBJECT_PREFIXES.
	TenantsFile string `env:"TIMEOUTD_TENANTS_FILE"`
	// Service configures the domain service (TIMEOUTD_ and the names of
	// its tags: TIMEOUTD_TICK, TIMEOUTD_LEASE_TTL, …).
	Service timeoutd.Config `envPrefix:"TIMEOUTD_"`
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// FromEnv reads the TIMEOUTD_* variables of environ (envconfig.Environ()
// in cmd/timeoutd; see services/timeoutd/README.md), each named by its
// field's tag. Unset ones stay zero, which New reads as the default;
// ranges are checked by New, as for a Config built in code.
func FromEnv(environ map[string]string) (Config, error) {
	var c Config
	err := envconfig.Parse(&c, environ)
	return c, err
}

func (c Config) withDefaults() (_ Config, err error) {
	c.HTTPAddr = cmp.Or(c.HTTPAddr, HTTPAddrDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.ShutdownDelay = cmp.Or(c.ShutdownDelay, ShutdownDelayDefault)
	c.DBMaxConns = cmp.Or(c.DBMaxConns, DBMaxConnsDefault)
	c.NATSGrace = cmp.Or(c.NATSGrace, NATSGraceDefault)
	c.ReadDBMaxConns = cmp.Or(c.ReadDBMaxConns, ReadDBMaxConnsDefault)
	c.StatementTimeout = cmp.Or(c.StatementTimeout, pgparams.StatementTimeoutDefault)
	c.IdleInTransactionTimeout = cmp.Or(c.IdleInTransactionTimeout, IdleInTransactionTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Service.InstanceID == "" {
		if c.Service.InstanceID, err = timeoutd.DefaultInstanceID(); err != nil {
			return c, err
		}
	}
	c.Service.Logger = cmp.Or(c.Service.Logger, c.Logger)
	if c.TenantsFile != "" && c.Service.Tenants == nil {
		reg, err := tenants.Open(c.TenantsFile, 0, c.Logger)
		if err != nil {
			return c, fmt.Errorf("daemon: TIMEOUTD_TENANTS_FILE (TenantsFile): %w", err)
		}
		c.Service.Tenants, c.Service.FireSubjectPrefixes = reg, reg.All()
	}
	c.Service.CrashGrace = cmp.Or(c.Service.CrashGrace, postgres.CrashGrace) // the store's crash detection
	if len(c.Service.FireSubjectPrefixes) == 0 {
		c.Service.FireSubjectPrefixes = []string{events.OrderCancelSubjectPrefix}
	}
	c.Service.DefaultFireSubjectPrefix = cmp.Or(c.Service.DefaultFireSubjectPrefix, events.OrderCancelSubjectPrefix)
	switch {
	case c.DatabaseURL == "":
		return c, errors.New("daemon: TIMEOUTD_DATABASE_URL (DatabaseURL) is required")
	case setsApplicationName(c.DatabaseURL):
		// Crash detection tells an instance's sessions by their name,
		// timeoutd/<instance id>: instances sharing a name would hide each
		// other's crash.
		return c, errors.New("daemon: TIMEOUTD_DATABASE_URL (DatabaseURL) must not set application_name: timeoutd names its sessions timeoutd/<instance id>, by which the other instances tell it crashed")
	case c.NATSURL == "":
		return c, errors.New("daemon: TIMEOUTD_NATS_URL (NATSURL) is required")
	case c.OperatorToken != "" && !httpURL(c.OrdersURL):
		return c, fmt.Errorf("daemon: TIMEOUTD_ORDERS_URL (OrdersURL) must be an http(s) URL such as http://orders:8081 when TIMEOUTD_OPERATOR_TOKEN is set, got %q", c.OrdersURL)
	case c.OperatorToken != "" && c.OrdersToken == "":
		return c, errors.New("daemon: TIMEOUTD_ORDERS_TOKEN (OrdersToken) is required when TIMEOUTD_OPERATOR_TOKEN is set")
	case c.DBMaxConns < 2:
		return c, fmt.Errorf("daemon: TIMEOUTD_DB_MAX_CONNS (DBMaxConns) must be at least 2, got %d", c.DBMaxConns)
	case c.ReadDBMaxConns < 1:
		return c, fmt.Errorf("daemon: TIMEOUTD_READ_DB_MAX_CONNS (ReadDBMaxConns) must be at least 1, got %d", c.ReadDBMaxConns)
	case c.MaxStreams < 0:
		return c, fmt.Errorf("daemon: TIMEOUTD_MAX_STREAMS (MaxStreams) must be positive, got %d", c.MaxStreams)
	case c.ReadToken != "" && c.ReadToken == c.OperatorToken:
		return c, errors.New("daemon: TIMEOUTD_READ_TOKEN (ReadToken) must differ from TIMEOUTD_OPERATOR_TOKEN: a reader must not be an operator")
	case c.NATSGrace < 200*time.Millisecond:
		return c, fmt.Errorf("daemon: TIMEOUTD_NATS_GRACE (NATSGrace) must be at least 200ms, got %s", c.NATSGrace)
	case c.StatementTimeout < time.Millisecond:
		return c, fmt.Errorf("daemon: TIMEOUTD_STATEMENT_TIMEOUT (StatementTimeout) must be at least 1ms, got %s", c.StatementTimeout)
	case cmp.Or(c.Service.MaxPending, timeoutd.MaxPendingDefault) < cmp.Or(c.Consumer.BatchSize, tjs.BatchSizeDefault):
		// Ingest would not stall (only the sets that do not fit wait), but
		// it would defer most of every batch and crawl.
		return c, fmt.Errorf("daemon: TIMEOUTD_MAX_PENDING (Service.MaxPending) must be at least TIMEOUTD_BATCH_SIZE (Consumer.BatchSize) %d, got %d",
			cmp.Or(c.Consumer.BatchSize, tjs.BatchSizeDefault), c.Service.MaxPending)
	case c.Consumer.Validate() != nil:
		return c, fmt.Errorf("daemon: TIMEOUTD_BATCH_SIZE, TIMEOUTD_PREFETCH, TIMEOUTD_ACK_WAIT, TIMEOUTD_PULL_HEARTBEAT or TIMEOUTD_LINGER (Consumer): %w", c.Consumer.Validate())
	case c.IdleInTransactionTimeout < time.Millisecond:
		return c, fmt.Errorf("daemon: TIMEOUTD_IDLE_IN_TRANSACTION_TIMEOUT (IdleInTransactionTimeout) must be at least 1ms, got %s", c.IdleInTransactionTimeout)
	case c.IdleInTransactionTimeout >= cmp.Or(c.Service.LeaseTTL, timeoutd.LeaseTTLDefault):
		return c, fmt.Errorf("daemon: TIMEOUTD_IDLE_IN_TRANSACTION_TIMEOUT (IdleInTransactionTimeout) must be below TIMEOUTD_LEASE_TTL %s: a stalled writer would hold its partitions past a failover, got %s",
			cmp.Or(c.Service.LeaseTTL, timeoutd.LeaseTTLDefault), c.IdleInTransactionTimeout)
	}
	return c, nil
}

// setsApplicationName reports whether the connection string dbURL (a URL
// or key=value pairs) sets application_name.
func setsApplicationName(dbURL string) bool {
	cfg, err := pgx.ParseConfig(dbURL)
	return err == nil && cfg.RuntimeParams["application_name"] != ""
}

// httpURL reports whether s is an absolute http or https URL.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// Main is the daemon as the binary runs it: Postgres (migrated), NATS
// (streams verified, durable consumer), the outbox relay, the service and the
// HTTP server. End-to-end tests and benchmarks run it in-process the same
// way: New, then Run in a goroutine, then wait for Ready.
type Main struct {
	cfg    Config
	log    *slog.Logger
	pool   *pgxpool.Pool
	reads  *pgxpool.Pool // the read API's own pool
	leases *pgxpool.Pool // the membership's own pool
	nc     *nats.Conn
	svc    *timeoutd.Service
	srv    *http.Server
	ln     net.Listener
	dbg    *http.Server // the profiles, on DebugAddr; nil without it
	dbgLn  net.Listener
	once   sync.Once
	// natsOK is when NATS last answered a ping (Unix ns).
	natsOK atomic.Int64
}

// connectPostgres opens the three pools (data, reads, leases), waits for
// Postgres and applies the migrations.
func (m *Main) connectPostgres(ctx context.Context) (err error) {
	cfg := m.cfg
	if m.pool, err = openPool(ctx, cfg, cfg.DBMaxConns, false, nil); err != nil {
		return err
	}
	if size := m.pool.Config().MaxConns; size < 2 {
		return fmt.Errorf("daemon: pool_max_conns in TIMEOUTD_DATABASE_URL (DatabaseURL) must be at least 2, got %d", size)
	}
	if m.reads, err = openPool(ctx, cfg, cfg.ReadDBMaxConns, true, nil); err != nil {
		return err
	}
	if m.leases, err = openPool(ctx, cfg, postgres.LeasePoolConns, true, postgres.LeasePoolConfig); err != nil {
		return err
	}
	// Postgres, NATS and the streams may come up after timeoutd.
	if err := retry.Startup(ctx, cfg.Logger, "postgres", m.pool.Ping); err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	return postgres.Migrate(ctx, m.pool)
}

// connectNATS connects to NATS and verifies the streams; it returns the
// JetStream client, with room for every fire batch in flight.
func (m *Main) connectNATS(ctx context.Context, natsTLS []nats.Option) (_ jetstream.JetStream, err error) {
	cfg := m.cfg
	m.nc, err = nats.Connect(cfg.NATSURL, append(natsTLS, nats.Name("timeoutd"), nats.CustomInboxPrefix(streams.InboxTimeoutd), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(true))...)
	if err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	fire := cmp.Or(cfg.Service.FireBatch, timeoutd.FireBatchDefault) * cmp.Or(cfg.Service.FireConcurrency, timeoutd.FireConcurrencyDefault)
	js, err := jetstream.New(m.nc, jetstream.WithPublishAsyncMaxPending(fire))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	// The streams bootstrap (deploy/streams) creates the streams; timeoutd
	// may only read them, and checks they capture its fire subjects.
	if err := retry.Startup(ctx, cfg.Logger, "streams", func(ctx context.Context) error {
		return streams.Verify(ctx, js, streams.Config{FireSubjectPrefixes: cfg.Service.FireSubjectPrefixes},
			append(events.CommandStreams(), events.StreamExpiries, events.StreamDeadLetters)...)
	}); err != nil {
		return nil, err
	}
	return js, nil
}

// New connects to Postgres and NATS, applies the migrations, verifies the
// streams (created beforehand by the bootstrap step, deploy/streams),
// ensures the consumer, and listens on HTTPAddr. Nothing is consumed or
// fired before Run.
func New(ctx context.Context, cfg Config) (_ *Main, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	natsTLS, err := cfg.NATSTLS.NATS(NATSTLSPrefix)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	m := &Main{cfg: cfg, log: cfg.Logger}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if err := m.connectPostgres(ctx); err != nil {
		return nil, err
	}
	js, err := m.connectNATS(ctx, natsTLS)
	if err != nil {
		return nil, err
	}
	src, err := tjs.NewConsumer(js, cfg.Consumer)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := thttp.NewMetrics(reg)
	store := postgres.NewStore(m.pool, cfg.Service.DefaultFireSubjectPrefix)
	if err := store.PinDefaultFireSubject(ctx); err != nil {
		_ = src.Close()
		return nil, fmt.Errorf("daemon: TIMEOUTD_DEFAULT_FIRE_SUBJECT_PREFIX (Service.DefaultFireSubjectPrefix): %w", err)
	}
	m.natsOK.Store(time.Now().UnixNano())
	svc, err := timeoutd.New(cfg.Service, timeoutd.Deps{Store: store, Reads: postgres.NewStore(m.reads, cfg.Service.DefaultFireSubjectPrefix), Source: src, BrokerHealthy: m.natsHealthy,
		DeadLetters: tjs.NewDeadLetters(js), Publisher: tjs.NewPublisher(js, 0), Leases: postgres.NewLeases(m.leases), Metrics: metrics})
	if err != nil {
		_ = src.Close()
		return nil, err
	}
	m.svc = svc
	src.KeepWhile(svc.Serves)
	metrics.Watch(svc)
	metrics.WatchConsumer(src)
	h, err := thttp.NewHandler(thttp.Config{Service: svc, Registry: reg, DashboardDir: cfg.DashboardDir, Logger: cfg.Logger,
		Operator:  thttp.Operator{Token: cfg.OperatorToken, OrdersURL: cfg.OrdersURL, OrdersToken: cfg.OrdersToken},
		ReadToken: cfg.ReadToken, MaxStreams: cfg.MaxStreams, StreamWriteTimeout: cfg.StreamWriteTimeout,
		Checks: map[string]func(context.Context) error{"nats": func(context.Context) error {
			if !m.nc.IsConnected() {
				return fmt.Errorf("not connected (%s)", m.nc.Status())
			}
			return nil
		}}})
	if err != nil {
		return nil, err
	}
	if m.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen on TIMEOUTD_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	m.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	if cfg.DebugAddr != "" {
		if m.dbgLn, err = net.Listen("tcp", cfg.DebugAddr); err != nil {
			return nil, fmt.Errorf("listen on TIMEOUTD_DEBUG_ADDR %s: %w", cfg.DebugAddr, err)
		}
		// No write timeout: a CPU profile or a trace writes after the
		// seconds it was asked for.
		m.dbg = &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 5 * time.Second,
			ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	}
	return m, nil
}

// openPool opens a Postgres pool of cfg (with defaults applied) of size
// connections, or of the pool_max_conns DatabaseURL sets unless dedicated
// (pgparams.Pool), whose sessions have StatementTimeout and
// IdleInTransactionTimeout, unless DatabaseURL sets them itself, and whose
// application_name is timeoutd/<instance id> (pg_stat_activity shows which
// instance holds a connection: the other instances tell it crashed when
// none is left; the cluster's e2e audit attributes writes). adapt, when
// given, adapts the pool's configuration last.
func openPool(ctx context.Context, cfg Config, size int, dedicated bool, adapt func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	return pgparams.Pool{
		URL: cfg.DatabaseURL, Variable: "TIMEOUTD_DATABASE_URL", MaxConns: int32(size), Dedicated: dedicated,
		Timeouts:        pgparams.Timeouts{Statement: cfg.StatementTimeout, IdleInTransaction: cfg.IdleInTransactionTimeout},
		ApplicationName: "timeoutd/" + cfg.Service.InstanceID, Adapt: adapt,
	}.Open(ctx)
}

// natsHealthy reports whether NATS answered a ping within NATSGrace.
func (m *Main) natsHealthy() bool {
	return time.Since(time.Unix(0, m.natsOK.Load())) < m.cfg.NATSGrace
}

// Addr is the HTTP server's listen address (useful with port 0).
func (m *Main) Addr() string { return m.ln.Addr().String() }

// DebugAddr is the profiles' listen address (useful with port 0), or ""
// without Config.DebugAddr.
func (m *Main) DebugAddr() string {
	if m.dbgLn == nil {
		return ""
	}
	return m.dbgLn.Addr().String()
}

// Service is the running service, for tests that inspect it.
func (m *Main) Service() *timeoutd.Service { return m.svc }

// Ready returns a channel closed when recovery is done.
func (m *Main) Ready() <-chan struct{} { return m.svc.Ready() }

// Run serves HTTP and runs the service until ctx ends, then shuts down
// gracefully within ShutdownTimeout: readiness false for ShutdownDelay,
// fetching stopped, the batches in flight finished, HTTP
// drained, connections closed. It returns the first error that stopped it
// early. Like orders' main, the parts run under one errgroup.
func (m *Main) Run(ctx context.Context) error {
	defer m.Close()
	// The service outlives ctx by ShutdownDelay: it stops only once
	// readiness has been false that long, so balancers stop sending first.
	svcCtx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSvc()
	svcDone := make(chan struct{})
	g, gctx := errgroup.WithContext(ctx)
	// The pings go on until Run returns, however it ends (Kill included).
	pctx, stopPings := context.WithCancel(gctx)
	defer stopPings()
	go natshealth.Watch(pctx, m.nc, m.cfg.NATSGrace, func() { m.natsOK.Store(time.Now().UnixNano()) }, m.log)
	if reg, ok := m.cfg.Service.Tenants.(*tenants.Registry); ok {
		go func() { _ = reg.Run(pctx) }()
	}
	if m.dbg != nil {
		// Profiles are served until Close; their failure stops nothing.
		go func() {
			if err := m.dbg.Serve(m.dbgLn); !errors.Is(err, http.ErrServerClosed) {
				m.log.Warn("serve profiles on TIMEOUTD_DEBUG_ADDR", "err", err)
			}
		}()
	}
	g.Go(func() error {
		if err := m.srv.Serve(m.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		defer close(svcDone)
		err := m.svc.Run(svcCtx)
		// HTTP answers (readiness false) until the service has stopped.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = m.srv.Shutdown(sctx)
		return err
	})
	g.Go(func() error {
		select {
		case <-gctx.Done():
		case <-svcDone: // only a misuse (Run twice) ends it early
		}
		m.log.Info("timeoutd shutting down", "readiness_off_for", m.cfg.ShutdownDelay)
		m.svc.Unready()
		if ctx.Err() != nil { // asked to stop, not failed
			delay := time.NewTimer(m.cfg.ShutdownDelay)
			select {
			case <-delay.C:
			case <-svcDone:
			}
			delay.Stop()
		}
		stopSvc()
		watchdog := time.NewTimer(m.cfg.ShutdownTimeout)
		defer watchdog.Stop()
		select {
		case <-svcDone:
		case <-watchdog.C:
			m.log.Error("graceful shutdown timed out; aborting")
			m.svc.Kill()
		}
		return nil
	})
	return g.Wait()
}

// Kill stops the daemon abruptly, as SIGKILL would: the service abandons
// what is in flight and the connections close without draining. Run
// returns soon after. It is for tests of crash recovery.
func (m *Main) Kill() {
	m.svc.Kill()
	m.nc.Close()
	_ = m.srv.Close()
}

// Close releases what New opened: the listeners, the NATS connection
// (drained) and the pools. Run calls it when it returns; call it when Run
// is not called. It may be called more than once.
func (m *Main) Close() {
	m.once.Do(func() {
		if m.srv != nil {
			_ = m.srv.Close()
		} else if m.ln != nil {
			_ = m.ln.Close()
		}
		if m.dbg != nil {
			_ = m.dbg.Close()
		}
		if m.dbgLn != nil {
			_ = m.dbgLn.Close()
		}
		if m.nc != nil {
			_ = m.nc.Drain()
		}
		if m.pool != nil {
			m.pool.Close()
		}
		if m.reads != nil {
			m.reads.Close()
		}
		if m.leases != nil {
			m.leases.Close()
		}
	})
}
