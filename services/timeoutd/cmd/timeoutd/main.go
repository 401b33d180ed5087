// Command timeoutd is the durable timeout daemon: it consumes timeout
// commands from JetStream, keeps them in Postgres and in a timing wheel, and
// publishes expiry events when their deadlines pass. It is configured by
// TIMEOUTD_* environment variables (services/timeoutd/README.md).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	_ "time/tzdata"

	"github.com/ordertimeout/ordertimeout/internal/envconfig"
	"github.com/ordertimeout/ordertimeout/internal/tracing"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "timeoutd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := daemon.FromEnv(envconfig.Environ())
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(log)
	cfg.Logger = log
	if lim := int64(cmp.Or(cfg.MemoryLimit, daemon.MemoryLimitDefault)); lim > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(lim)
		log.Info("memory limit set", "bytes", lim)
	}
	stopTracing, err := tracing.Setup(ctx, "timeoutd", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	m, err := daemon.New(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("timeoutd listening", "addr", m.Addr(), "tracing", tracing.Enabled())
	return m.Run(ctx)
}
