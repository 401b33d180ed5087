// Command orders runs the order service (services/orders/daemon): the REST
// API, the outbox relay that publishes timeout commands and order events to
// JetStream, the consumer of the cancel events timeoutd publishes, and the
// reconciler that cancels what stays pending long after its deadline. It is
// configured by ORDERS_* environment variables (services/orders/README.md)
// and stops gracefully on SIGINT or SIGTERM: the HTTP server drains, the
// outbox is flushed, the consumer finishes the events in flight.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata"

	"github.com/ordertimeout/ordertimeout/internal/envconfig"
	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/services/orders/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := daemon.FromEnv(envconfig.Environ())
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	cfg.Logger = log
	stopTracing, err := tracing.Setup(ctx, "orders", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	m, err := daemon.New(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("orders listening", "addr", m.Addr())
	return m.Run(ctx)
}
