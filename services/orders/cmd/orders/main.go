// Command orders runs the order service: the REST API, the outbox relay that
// publishes timeout commands and order events to JetStream, the consumer
// of the cancel events timeoutd publishes, and the reconciler that cancels
// what stays pending long after its deadline. It is configured by environment
// variables (see services/orders/README.md) and stops gracefully on SIGINT or
// SIGTERM: the HTTP server drains, the consumer finishes the events in
// flight, and the outbox is flushed.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/internal/envconfig"
	"github.com/ordertimeout/ordertimeout/internal/pgparams"
	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
	"github.com/ordertimeout/ordertimeout/services/orders"
	ordershttp "github.com/ordertimeout/ordertimeout/services/orders/http"
	ojs "github.com/ordertimeout/ordertimeout/services/orders/jetstream"
	"github.com/ordertimeout/ordertimeout/services/orders/postgres"
)

const (
	// relayPoolMaxConns is the size of the relay's own pool.
	relayPoolMaxConns = 2
	// poolMaxConnsDefault applies when the database URL sets no
	// pool_max_conns: enough for 64 concurrent clients on a small host.
	poolMaxConnsDefault = 16
	// shutdownTimeout bounds the HTTP drain and the outbox flush.
	shutdownTimeout = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, envconfig.Environ()); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, environ map[string]string) error {
	cfg, err := orders.ConfigFromEnv(environ)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	stopTracing, err := tracing.Setup(ctx, "orders", log)
	if err != nil {
		return err
	}
	defer stopTracing()

	sessionLimits := pgparams.Timeouts{Statement: cfg.StatementTimeout, IdleInTransaction: cfg.IdleInTransactionTimeout}
	pool, err := openPool(ctx, cfg.DatabaseURL, sessionLimits)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := retry.Startup(ctx, log, "postgres", pool.Ping); err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		return err
	}

	natsTLS, err := cfg.NATSTLS.NATS(orders.NATSTLSPrefix)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(cfg.NATSURL, append(natsTLS, nats.Name("orders"), nats.CustomInboxPrefix(streams.InboxOrders),
		nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))...)
	if err != nil {
		return fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// The streams bootstrap (deploy/streams) creates the streams; orders may
	// only read them, and checks that the server files its commands in
	// their partition's stream.
	if err := retry.Startup(ctx, log, "streams", func(ctx context.Context) error {
		if err := streams.Verify(ctx, js, streams.Config{}, events.StreamOrderEvents, events.StreamExpiries, events.StreamDeadLetters); err != nil {
			return err
		}
		return streams.VerifyCommandMapping(ctx, js)
	}); err != nil {
		return err
	}

	relayPool, err := openRelayPool(ctx, cfg.DatabaseURL, sessionLimits)
	if err != nil {
		return err
	}
	defer relayPool.Close()
	pack := timeouts.Pack
	if cfg.SingleCommands {
		pack = nil // one message per row
	}
	relay, err := outbox.NewRelay(relayPool, js, outbox.Config{Table: postgres.OutboxTable, Pack: pack, Logger: log})
	if err != nil {
		return err
	}
	store := postgres.NewStore(pool, relay.Kick)
	svc, err := orders.NewService(store, orders.ServiceConfig{Limits: cfg.Limits, PaymentGrace: cfg.PaymentGrace, Logger: log})
	if err != nil {
		return err
	}
	janitor, err := postgres.NewJanitor(pool, postgres.JanitorConfig{Logger: log})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reconciler, err := postgres.NewReconciler(store, postgres.ReconcilerConfig{
		Margin: cfg.ReconcileMargin, Interval: cfg.ReconcileInterval, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	consumer, err := ojs.NewConsumer(ctx, js, svc, ojs.Config{Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	handler, err := ordershttp.NewHandler(ordershttp.Config{
		Service:  svc,
		Tokens:   cfg.APITokens,
		Registry: reg,
		Logger:   log,
		OutboxLag: func(ctx context.Context) (time.Duration, error) {
			st, err := relay.Stats(ctx)
			return st.OldestAge, err
		},
		MaxOutboxLag: cfg.MaxOutboxLag,
		Ready: func(ctx context.Context) error {
			if err := pool.Ping(ctx); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
			if s := nc.Status(); s != nats.CONNECTED {
				return fmt.Errorf("nats: %s", s)
			}
			return nil
		},
		Stats: func(ctx context.Context) (ordershttp.Stats, error) {
			by, err := store.CountByStatus(ctx)
			if err != nil {
				return ordershttp.Stats{}, err
			}
			ob, err := relay.Stats(ctx)
			if err != nil {
				return ordershttp.Stats{}, err
			}
			return ordershttp.Stats{ByStatus: by, OutboxRows: ob.Rows, OutboxOldestAge: ob.OldestAge}, nil
		},
	})
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:              cfg.HTTPAddr,
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	g, gctx := errgroup.WithContext(ctx)
	// The relay outlives the HTTP server so the last commits are flushed.
	relay.Start(context.WithoutCancel(ctx))
	defer relay.Stop()
	g.Go(func() error { return consumer.Run(gctx) })
	g.Go(func() error { return janitor.Run(gctx) })
	g.Go(func() error { return reconciler.Run(gctx) })
	g.Go(func() error {
		log.Info("orders listening", "addr", cfg.HTTPAddr)
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("orders shutting down")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		defer relay.Stop()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("http shutdown: %w", err)
		}
		if n, err := relay.Flush(sctx); err != nil {
			return fmt.Errorf("flush outbox (%d published): %w", n, err)
		}
		return nil
	})
	return g.Wait()
}

// openRelayPool opens the outbox relay's own small pool, so that the relay
// keeps publishing when the API's requests hold every connection of the main
// pool. (The relay sets its own transaction options: see pkg/outbox.)
func openRelayPool(ctx context.Context, url string, t pgparams.Timeouts) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("ORDERS_DATABASE_URL: %w", err)
	}
	t.Apply(pc.ConnConfig.RuntimeParams)
	pc.MaxConns = relayPoolMaxConns
	pc.ConnConfig.RuntimeParams["application_name"] = "orders-outbox-relay"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open relay pool: %w", err)
	}
	return pool, nil
}

// openPool opens the pool, with the session timeouts t unless the URL sets
// them; it connects on first use.
func openPool(ctx context.Context, url string, t pgparams.Timeouts) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("ORDERS_DATABASE_URL: %w", err)
	}
	t.Apply(pc.ConnConfig.RuntimeParams)
	if !strings.Contains(url, "pool_max_conns") {
		pc.MaxConns = poolMaxConnsDefault
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	return pool, nil
}
