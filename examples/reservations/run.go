package reservations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

// Config is what Run needs.
type Config struct {
	// DatabaseURL is the service's own Postgres database.
	DatabaseURL string
	// NATSURL is the platform's NATS; InboxPrefix the inbox its user may
	// subscribe to (the compose stack's reservations user: _INBOX_reservations).
	NATSURL, InboxPrefix string
	// Listener serves the HTTP API.
	Listener net.Listener
	// Logger receives the service's log.
	Logger *slog.Logger
}

// Run runs the service until ctx ends: the HTTP API, the outbox relay
// that publishes its deadline commands, and the consumer of its expiry
// events.
func Run(ctx context.Context, cfg Config) error {
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("open postgres: %w", err)
	}
	defer pool.Close()
	if err := Migrate(ctx, pool); err != nil {
		return err
	}
	opts := []nats.Option{nats.Name("reservations"), nats.MaxReconnects(-1)}
	if cfg.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	nc, err := nats.Connect(cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	// 1. The relay publishes what the service's transactions wrote into
	// the outbox, packed as the platform expects.
	relay, err := outbox.NewRelay(pool, js, outbox.Config{Pack: timeouts.Pack, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	svc := NewService(pool, relay.Kick, time.Now)
	// 2. The consumer of the service's own expiry events.
	expiries, err := timeouts.NewConsumer(ctx, js, timeouts.ConsumerConfig[events.Expiry]{
		Durable:       "reservations",
		FilterSubject: FireSubjectPrefix + ">",
		Decode:        timeouts.DecodeExpiry,
		Handle: func(ctx context.Context, e events.Expiry) error {
			expired, err := svc.Expire(ctx, e)
			if expired {
				cfg.Logger.Info("reservation expired", "id", e.Key, "version", e.Version, "lateness", time.Duration(e.LatenessNs))
			}
			return err
		},
		Logger: cfg.Logger,
	})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: Handler(svc), ReadHeaderTimeout: 5 * time.Second}

	relay.Start(context.WithoutCancel(ctx))
	defer relay.Stop()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return expiries.Run(gctx) })
	g.Go(func() error {
		if err := srv.Serve(cfg.Listener); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("http shutdown: %w", err)
		}
		_, err := relay.Flush(sctx) // the last commits' commands
		return err
	})
	return g.Wait()
}

// Handler serves the API:
//
//	POST /reservations               {"sku":"A-1","qty":2,"ttl":"15m"} → 201 the reservation
//	GET  /reservations/{id}          → the reservation
//	POST /reservations/{id}/extend   {"ttl":"15m"} → the reservation, held longer
//	POST /reservations/{id}/confirm  → the reservation, confirmed (its deadline cleared)
func Handler(svc *Service) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reservations", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			SKU string `json:"sku"`
			Qty int    `json:"qty"`
			TTL string `json:"ttl"`
		}
		ttl, err := decode(r, &req, func() string { return req.TTL })
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := svc.Reserve(r.Context(), req.SKU, req.Qty, ttl)
		reply(w, http.StatusCreated, res, err)
	})
	mux.HandleFunc("GET /reservations/{id}", func(w http.ResponseWriter, r *http.Request) {
		res, err := svc.Get(r.Context(), r.PathValue("id"))
		reply(w, http.StatusOK, res, err)
	})
	mux.HandleFunc("POST /reservations/{id}/extend", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			TTL string `json:"ttl"`
		}
		ttl, err := decode(r, &req, func() string { return req.TTL })
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := svc.Extend(r.Context(), r.PathValue("id"), ttl)
		reply(w, http.StatusOK, res, err)
	})
	mux.HandleFunc("POST /reservations/{id}/confirm", func(w http.ResponseWriter, r *http.Request) {
		res, err := svc.Confirm(r.Context(), r.PathValue("id"))
		reply(w, http.StatusOK, res, err)
	})
	return mux
}

// decode reads a JSON body into v and parses its ttl.
func decode(r *http.Request, v any, ttl func() string) (time.Duration, error) {
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16)).Decode(v); err != nil {
		return 0, fmt.Errorf("body: %w", err)
	}
	d, err := time.ParseDuration(ttl())
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("ttl: want a positive duration such as 15m, got %q", ttl())
	}
	return d, nil
}

// reply writes res, or the status of err.
func reply(w http.ResponseWriter, status int, res Reservation, err error) {
	var refused *timeouts.RefusedError
	switch {
	case errors.Is(err, ErrNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.Is(err, ErrNotHeld):
		http.Error(w, err.Error(), http.StatusConflict)
	case errors.As(err, &refused):
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
	case errors.Is(err, ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case err != nil:
		http.Error(w, "internal error", http.StatusInternalServerError)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(res)
	}
}
