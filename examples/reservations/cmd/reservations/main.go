// Command reservations runs the example reservations service
// (examples/reservations) against the platform: RESERVATIONS_DATABASE_URL
// (default postgres://postgres:postgres@127.0.0.1:5432/reservations),
// RESERVATIONS_NATS_URL (default the compose stack's reservations user),
// RESERVATIONS_ADDR (default 127.0.0.1:8082).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/ordertimeout/ordertimeout/examples/reservations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "reservations:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	addr := cmp.Or(os.Getenv("RESERVATIONS_ADDR"), "127.0.0.1:8082")
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Info("reservations listening", "addr", addr)
	return reservations.Run(ctx, reservations.Config{
		DatabaseURL: cmp.Or(os.Getenv("RESERVATIONS_DATABASE_URL"), "postgres://postgres:postgres@127.0.0.1:5432/reservations"),
		NATSURL:     cmp.Or(os.Getenv("RESERVATIONS_NATS_URL"), "nats://reservations:reservations-dev@127.0.0.1:4222"),
		InboxPrefix: "_INBOX_reservations",
		Listener:    l,
		Logger:      log,
	})
}
