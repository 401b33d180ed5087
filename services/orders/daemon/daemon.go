package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/internal/natshealth"
	"github.com/ordertimeout/ordertimeout/internal/pgparams"
	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/startstop"
	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
	"github.com/ordertimeout/ordertimeout/services/orders"
	ordershttp "github.com/ordertimeout/ordertimeout/services/orders/http"
	ojs "github.com/ordertimeout/ordertimeout/services/orders/jetstream"
	"github.com/ordertimeout/ordertimeout/services/orders/postgres"
)

// Pool sizes.
const (
	// PoolMaxConnsDefault is the API's pool size when DatabaseURL sets no
	// pool_max_conns: enough for 64 concurrent clients on a small host.
	PoolMaxConnsDefault = 16
	// RelayPoolMaxConns is the size of the outbox relay's own pool,
	// whatever DatabaseURL says.
	RelayPoolMaxConns = 2
)

// shutdownTimeout bounds the HTTP drain and the outbox flush.
const shutdownTimeout = 10 * time.Second

// Main is the daemon as the binary runs it: Postgres (migrated), NATS
// (streams verified), the outbox relay, the consumer of cancel events, the
// janitor, the reconciler and the HTTP server. Tests run it in-process the
// same way: New, then Run in a goroutine.
type Main struct {
	cfg       Config
	log       *slog.Logger
	pool      *pgxpool.Pool
	relayPool *pgxpool.Pool // the relay's own pool
	nc        *nats.Conn
	relay     *outbox.Relay
	// loops are the consumer, the janitor and the reconciler.
	loops []startstop.Service
	srv   *http.Server
	ln    net.Listener
	once  sync.Once
}

// New connects to Postgres and NATS, applies the migrations, verifies the
// streams (created beforehand by the bootstrap step, deploy/streams),
// ensures the cancel consumer, and listens on HTTPAddr. Nothing is
// consumed, published or served before Run. On error, what it opened is
// closed.
func New(ctx context.Context, cfg Config) (_ *Main, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Main{cfg: cfg, log: cfg.Logger}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if err := m.openPostgres(ctx); err != nil {
		return nil, err
	}
	js, err := m.connectNATS(ctx)
	if err != nil {
		return nil, err
	}
	pack := timeouts.Pack
	if cfg.SingleCommands {
		pack = nil // one message per row
	}
	if m.relay, err = outbox.NewRelay(m.relayPool, js, outbox.Config{Table: postgres.OutboxTable, Pack: pack, Logger: m.log}); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	store, err := postgres.NewStore(m.pool, postgres.StoreConfig{OnCommit: m.relay.Kick, Gate: postgres.GateConfig{Registerer: reg}})
	if err != nil {
		return nil, err
	}
	svc, err := orders.NewService(store, orders.ServiceConfig{Limits: cfg.Limits, PaymentGrace: cfg.PaymentGrace, Logger: m.log})
	if err != nil {
		return nil, err
	}
	if err := m.newLoops(ctx, js, store, svc, reg); err != nil {
		return nil, err
	}
	handler, err := m.newHandler(store, svc, reg)
	if err != nil {
		return nil, err
	}
	if m.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen on ORDERS_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	m.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	return m, nil
}

// openPool opens a pool of DatabaseURL with the configured session
// timeouts: of size connections unless the URL sets pool_max_conns and the
// pool is not dedicated (pgparams.Pool).
func (m *Main) openPool(ctx context.Context, size int32, dedicated bool, app string) (*pgxpool.Pool, error) {
	return pgparams.Pool{
		URL: m.cfg.DatabaseURL, Variable: "ORDERS_DATABASE_URL", MaxConns: size, Dedicated: dedicated,
		Timeouts:        pgparams.Timeouts{Statement: m.cfg.StatementTimeout, IdleInTransaction: m.cfg.IdleInTransactionTimeout},
		ApplicationName: app,
	}.Open(ctx)
}

// openPools opens the API's pool and the outbox relay's own small one, so
// that the relay keeps publishing when the API's requests hold every
// connection of the main pool. (The relay sets its own transaction options:
// see pkg/outbox.) They connect on first use.
func (m *Main) openPools(ctx context.Context) (err error) {
	if m.pool, err = m.openPool(ctx, PoolMaxConnsDefault, false, ""); err != nil {
		return err
	}
	m.relayPool, err = m.openPool(ctx, RelayPoolMaxConns, true, "orders-outbox-relay")
	return err
}

// openPostgres opens the pools, waits for Postgres and migrates it.
func (m *Main) openPostgres(ctx context.Context) error {
	if err := m.openPools(ctx); err != nil {
		return err
	}
	if err := retry.Startup(ctx, m.log, "postgres", m.pool.Ping); err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	return postgres.Migrate(ctx, m.pool)
}

// connectNATS connects to NATS and waits for the streams orders reads.
func (m *Main) connectNATS(ctx context.Context) (jetstream.JetStream, error) {
	natsTLS, err := m.cfg.NATSTLS.NATS(NATSTLSPrefix)
	if err != nil {
		return nil, err
	}
	m.nc, err = nats.Connect(m.cfg.NATSURL, append(natsTLS, nats.Name("orders"), nats.CustomInboxPrefix(streams.InboxOrders),
		nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))...)
	if err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	js, err := jetstream.New(m.nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	// The streams bootstrap (deploy/streams) creates the streams; orders may
	// only read them, and checks that the server files its commands in
	// their partition's stream.
	if err := retry.Startup(ctx, m.log, "streams", func(ctx context.Context) error {
		if err := streams.Verify(ctx, js, streams.Config{}, events.StreamOrderEvents, events.StreamExpiries, events.StreamDeadLetters); err != nil {
			return err
		}
		return streams.VerifyCommandMapping(ctx, js)
	}); err != nil {
		return nil, err
	}
	return js, nil
}

// newLoops makes the background loops: the janitor, the reconciler and the
// consumer of cancel events.
func (m *Main) newLoops(ctx context.Context, js jetstream.JetStream, store *postgres.Store, svc *orders.Service, reg prometheus.Registerer) error {
	janitor, err := postgres.NewJanitor(m.pool, postgres.JanitorConfig{Logger: m.log})
	if err != nil {
		return err
	}
	reconciler, err := postgres.NewReconciler(store, postgres.ReconcilerConfig{
		Margin: m.cfg.ReconcileMargin, Interval: m.cfg.ReconcileInterval, Logger: m.log, Registerer: reg})
	if err != nil {
		return err
	}
	consumer, err := ojs.NewConsumer(ctx, js, svc, ojs.Config{AckWait: m.cfg.CancelAckWait, Registerer: reg, Logger: m.log})
	if err != nil {
		return err
	}
	m.loops = []startstop.Service{consumer, janitor, reconciler}
	return nil
}

// newHandler makes the HTTP API with its health, readiness and stats.
func (m *Main) newHandler(store *postgres.Store, svc *orders.Service, reg *prometheus.Registry) (http.Handler, error) {
	return ordershttp.NewHandler(ordershttp.Config{
		Service:  svc,
		Tokens:   m.cfg.APITokens,
		Registry: reg,
		Logger:   m.log,
		OutboxLag: func(ctx context.Context) (time.Duration, error) {
			st, err := m.relay.Stats(ctx)
			return st.OldestAge, err
		},
		MaxOutboxLag: m.cfg.MaxOutboxLag,
		// The Store's Ping answers at once while the database is known to
		// be down, and probes it when a probe is due.
		Ready: func(ctx context.Context) error {
			if err := store.Ping(ctx); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
			if s := m.nc.Status(); s != nats.CONNECTED {
				return fmt.Errorf("nats: %s", s)
			}
			return nil
		},
		Stats: func(ctx context.Context) (ordershttp.Stats, error) {
			by, err := store.CountByStatus(ctx)
			if err != nil {
				return ordershttp.Stats{}, err
			}
			ob, err := m.relay.Stats(ctx)
			if err != nil {
				return ordershttp.Stats{}, err
			}
			return ordershttp.Stats{ByStatus: by, OutboxRows: ob.Rows, OutboxOldestAge: ob.OldestAge, OutboxDuplicates: ob.Duplicates}, nil
		},
	})
}

// Addr is the HTTP server's listen address (useful with port 0).
func (m *Main) Addr() string { return m.ln.Addr().String() }

// Run serves HTTP and runs the relay and the loops until ctx ends, then
// shuts down gracefully: the HTTP server stops taking requests and drains
// (within 10 s), the outbox is flushed, the loops finish what they hold
// (the consumer the events in flight), and the connections and pools close
// last. It returns the first error that stopped it early.
func (m *Main) Run(ctx context.Context) error {
	defer m.Close()
	g, gctx := errgroup.WithContext(ctx)
	// The relay outlives the HTTP server so the last commits are flushed.
	m.relay.Start(context.WithoutCancel(ctx))
	defer m.relay.Stop()
	for _, l := range m.loops {
		l.Start(gctx)
	}
	g.Go(func() error {
		natshealth.Watch(gctx, m.nc, natsPingGrace, nil, m.log)
		return nil
	})
	g.Go(func() error {
		if err := m.srv.Serve(m.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		m.log.Info("orders shutting down")
		return m.drain(context.WithoutCancel(ctx))
	})
	err := g.Wait()
	// The loops ended with gctx; wait for them to return.
	for _, l := range m.loops {
		l.Stop()
	}
	return err
}

// natsPingGrace paces the NATS health ping (natshealth.Watch): a server
// silent for half of it is left for the next one of the list, so that a
// frozen node of a cluster holds orders' consumers and relay about a
// second, not until it thaws.
const natsPingGrace = 2 * time.Second

// drain stops the HTTP server and flushes the outbox, within
// shutdownTimeout, then stops the relay.
func (m *Main) drain(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
	defer cancel()
	defer m.relay.Stop()
	if err := m.srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if n, err := m.relay.Flush(sctx); err != nil {
		return fmt.Errorf("flush outbox (%d published): %w", n, err)
	}
	return nil
}

// Close releases what New opened: the listener, the loops and the relay
// (stopped if running), the NATS connection and the pools, in that order.
// Run calls it when it returns; call it when Run is not called. It may be
// called more than once.
func (m *Main) Close() {
	m.once.Do(func() {
		if m.srv != nil {
			_ = m.srv.Close()
		} else if m.ln != nil {
			_ = m.ln.Close()
		}
		for _, l := range m.loops {
			l.Stop()
		}
		if m.relay != nil {
			m.relay.Stop()
		}
		if m.relayPool != nil {
			m.relayPool.Close()
		}
		if m.nc != nil {
			m.nc.Close()
		}
		if m.pool != nil {
			m.pool.Close()
		}
	})
}
