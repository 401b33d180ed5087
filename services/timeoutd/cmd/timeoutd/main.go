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
	"strings"
	"syscall"
	_ "time/tzdata"

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
	var level slog.Level
	if v := os.Getenv("TIMEOUTD_LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(strings.ToUpper(v))); err != nil {
			return fmt.Errorf("TIMEOUTD_LOG_LEVEL: %w", err)
		}
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	cfg, err := daemon.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if lim := cmp.Or(cfg.MemoryLimit, daemon.MemoryLimitDefault); lim > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(lim)
		log.Info("memory limit set", "bytes", lim)
	}
	m, err := daemon.New(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("timeoutd listening", "addr", m.Addr())
	return m.Run(ctx)
}
