// Command streams is the one-shot bootstrap step of the platform: it creates
// or updates the JetStream streams (internal/streams.Ensure) and exits 0.
// It runs before the services, which hold no right to create, update,
// delete or purge a stream (deploy/compose/nats.conf, user bootstrap). The
// NATS image ships it as /streams; compose runs it as the service
// "streams", the e2e stack as a container of its own.
//
// Environment:
//
//	NATS_URL                        required, e.g. nats://bootstrap:pw@nats:4222
//	NATS_CA_FILE                    the CA of the servers' certificates; with it (or a client certificate) TLS is required
//	NATS_CERT_FILE, NATS_KEY_FILE   a client certificate and its key, for servers that verify their clients
//	STREAMS_REPLICAS                replicas of every stream; default 1 (3 in a cluster)
//	STREAMS_DUPLICATE_WINDOW        duplicate window; default 2m
//	STREAMS_TENANTS_FILE            the tenant registry (deploy/compose/tenants.json): the expiry stream captures every tenant's fire subjects
//	STREAMS_FIRE_SUBJECT_PREFIXES   without STREAMS_TENANTS_FILE: comma-separated, as TIMEOUTD_FIRE_SUBJECT_PREFIXES; default orders.cancel.
//	STREAMS_TIMEOUT                 how long to wait for NATS and finish; default 60s
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/envconfig"
	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/tenants"
	"github.com/ordertimeout/ordertimeout/internal/tlsclient"
)

// timeoutDefault bounds the whole run, NATS start-up included.
const timeoutDefault = 60 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctx, envconfig.Environ(), log); err != nil {
		log.Error("streams bootstrap failed", "err", err)
		os.Exit(1)
	}
}

// config is the bootstrap's settings, read from the environment.
type config struct {
	URL     string          `env:"NATS_URL"`
	TLS     tlsclient.Files `envPrefix:"NATS_"`
	Timeout time.Duration   `env:"STREAMS_TIMEOUT"`
	Tenants string          `env:"STREAMS_TENANTS_FILE"`
	Streams streams.Config  `envPrefix:"STREAMS_"`
}

// configFromEnv reads and validates environ, naming the variable in every
// error.
func configFromEnv(environ map[string]string) (config, error) {
	c := config{Timeout: timeoutDefault}
	errs := []error{envconfig.Parse(&c, environ)}
	check := func(bad bool, msg string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(msg, args...))
		}
	}
	check(c.URL == "", "NATS_URL is required, e.g. nats://bootstrap:password@nats:4222")
	_, set := environ["STREAMS_REPLICAS"]
	check(set && (c.Streams.Replicas < 1 || c.Streams.Replicas > 5), "STREAMS_REPLICAS: %d is not a replica count from 1 to 5", c.Streams.Replicas)
	_, set = environ["STREAMS_DUPLICATE_WINDOW"]
	check(set && c.Streams.DuplicateWindow == 0, "STREAMS_DUPLICATE_WINDOW must be positive")
	check(c.Timeout <= 0, "STREAMS_TIMEOUT must be positive")
	if _, err := c.TLS.Config("NATS_"); err != nil {
		errs = append(errs, err)
	}
	if c.Tenants != "" {
		ts, err := tenants.Load(c.Tenants)
		check(err != nil, "STREAMS_TENANTS_FILE: %v", err)
		check(len(c.Streams.FireSubjectPrefixes) > 0, "STREAMS_FIRE_SUBJECT_PREFIXES and STREAMS_TENANTS_FILE: set one")
		c.Streams.FireSubjectPrefixes = tenants.FirePrefixes(ts)
	}
	for _, p := range c.Streams.FireSubjectPrefixes {
		check(!strings.HasSuffix(p, ".") || strings.ContainsAny(p, "*> "), "STREAMS_FIRE_SUBJECT_PREFIXES: %q must be a literal subject prefix ending in '.'", p)
	}
	return c, errors.Join(errs...)
}

// attemptTimeout bounds one attempt to ensure the 67 streams: creating them
// replicated on a 3-node cluster takes seconds, and an attempt cut short
// starts again from the first stream (each one it made is then only read
// and updated in place).
const attemptTimeout = 15 * time.Second

func run(ctx context.Context, environ map[string]string, log *slog.Logger) error {
	cfg, err := configFromEnv(environ)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	natsTLS, err := cfg.TLS.NATS("NATS_")
	if err != nil {
		return err
	}
	nc, err := nats.Connect(cfg.URL, append(natsTLS, nats.Name("streams-bootstrap"), nats.CustomInboxPrefix(streams.InboxBootstrap),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// NATS may still be starting: retry until the deadline, logging each
	// new error. Each attempt has a deadline of its own: a cluster still
	// electing its leaders can leave a request unanswered, which must not
	// take the whole budget.
	var last string
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err = streams.Ensure(actx, js, cfg.Streams)
		cancel()
		if err == nil {
			break
		}
		if err.Error() != last {
			last = err.Error()
			log.Warn("streams not ensured yet; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up after %s)", err, cfg.Timeout)
		case <-time.After(500 * time.Millisecond):
		}
	}
	for _, sc := range streams.Specs(cfg.Streams) {
		log.Info("stream ensured", "stream", sc.Name, "subjects", sc.Subjects, "replicas", sc.Replicas)
	}
	return nil
}
