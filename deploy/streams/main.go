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
//	STREAMS_REPLICAS                replicas of every stream; default 1 (3 in a cluster)
//	STREAMS_DUPLICATE_WINDOW        duplicate window; default 2m
//	STREAMS_FIRE_SUBJECT_PREFIXES   comma-separated, as TIMEOUTD_FIRE_SUBJECT_PREFIXES; default orders.cancel.
//	STREAMS_TIMEOUT                 how long to wait for NATS and finish; default 60s
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/streams"
)

// timeoutDefault bounds the whole run, NATS start-up included.
const timeoutDefault = 60 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctx, os.Getenv, log); err != nil {
		log.Error("streams bootstrap failed", "err", err)
		os.Exit(1)
	}
}

// config is the bootstrap's settings, read from the environment.
type config struct {
	url     string
	timeout time.Duration
	streams streams.Config
}

// configFromEnv reads and validates the environment, naming the variable
// in every error.
func configFromEnv(getenv func(string) string) (config, error) {
	c := config{url: getenv("NATS_URL"), timeout: timeoutDefault}
	var errs []error
	if c.url == "" {
		errs = append(errs, errors.New("NATS_URL is required, e.g. nats://bootstrap:password@nats:4222"))
	}
	if v := getenv("STREAMS_REPLICAS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 5 {
			errs = append(errs, fmt.Errorf("STREAMS_REPLICAS: %q is not a replica count from 1 to 5", v))
		}
		c.streams.Replicas = n
	}
	for name, dst := range map[string]*time.Duration{"STREAMS_DUPLICATE_WINDOW": &c.streams.DuplicateWindow, "STREAMS_TIMEOUT": &c.timeout} {
		if v := getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a positive duration such as 2m", name, v))
			}
			*dst = d
		}
	}
	for _, p := range strings.Split(getenv("STREAMS_FIRE_SUBJECT_PREFIXES"), ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !strings.HasSuffix(p, ".") || strings.ContainsAny(p, "*> ") {
			errs = append(errs, fmt.Errorf("STREAMS_FIRE_SUBJECT_PREFIXES: %q must be a literal subject prefix ending in '.'", p))
		}
		c.streams.FireSubjectPrefixes = append(c.streams.FireSubjectPrefixes, p)
	}
	return c, errors.Join(errs...)
}

// attemptTimeout bounds one attempt to ensure the streams.
const attemptTimeout = 5 * time.Second

func run(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	cfg, err := configFromEnv(getenv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	nc, err := nats.Connect(cfg.url, nats.Name("streams-bootstrap"), nats.CustomInboxPrefix(streams.InboxBootstrap),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
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
		err = streams.Ensure(actx, js, cfg.streams)
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
			return fmt.Errorf("%w (gave up after %s)", err, cfg.timeout)
		case <-time.After(500 * time.Millisecond):
		}
	}
	for _, sc := range streams.Specs(cfg.streams) {
		log.Info("stream ensured", "stream", sc.Name, "subjects", sc.Subjects, "replicas", sc.Replicas)
	}
	return nil
}
