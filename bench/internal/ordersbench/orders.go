package ordersbench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// Defaults of Config.
const (
	// ClientsDefault is the number of concurrent HTTP clients.
	ClientsDefault = 64
	// DurationDefault is the measured span.
	DurationDefault = 10 * time.Second
	// WarmupDefault is the unmeasured load before it.
	WarmupDefault = 2 * time.Second
	// Token is the bearer token the benchmark configures and sends.
	Token = "bench-token"
)

// Config configures the orders load.
type Config struct {
	// Bin is the built orders binary.
	Bin string
	// DatabaseURL is the orders database on the shared Postgres server.
	DatabaseURL string
	// NATSURL is the NATS server.
	NATSURL string
	// LogPath receives the service's JSON logs.
	LogPath string
	// Clients is the number of concurrent HTTP clients; default 64.
	Clients int
	// Duration is the measured span; default 10s.
	Duration time.Duration
	// Warmup is the load before the measured span; default 2s.
	Warmup time.Duration
}

func (c Config) withDefaults() Config {
	c.Clients = cmp.Or(c.Clients, ClientsDefault)
	c.Duration = cmp.Or(c.Duration, DurationDefault)
	c.Warmup = cmp.Or(c.Warmup, WarmupDefault)
	return c
}

// body is the request of every create: one item, 15 minutes to pay. It is
// encoded once, so the clients, which share the 2 cores with the service,
// spend no CPU on JSON per request.
var body = mustJSON(ordersclient.CreateOrder{
	CustomerID: "c-bench",
	Currency:   "EUR",
	Items:      []ordersclient.Item{{SKU: "A-1", Quantity: 2, UnitPriceMinor: 1250}},
	PayWithin:  "15m",
})

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Orders starts the orders binary, drives POST /v1/orders from cfg.Clients
// goroutines for cfg.Warmup and then cfg.Duration, prints the creates/s and
// latency of the measured span, waits for the relay to publish every
// command, and returns the creates/s.
func Orders(ctx context.Context, cfg Config, rep *harness.Report) (float64, error) {
	cfg = cfg.withDefaults()
	if cfg.Bin == "" || cfg.DatabaseURL == "" || cfg.NATSURL == "" {
		return 0, errors.New("ordersbench: Bin, DatabaseURL and NATSURL are required")
	}
	svc, err := startOrders(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer svc.Stop(30 * time.Second)
	rep.Line("result", "peer", "orders", "workload", "start", "ready_ms", svc.Ready)
	client, err := newClient(svc.Base, cfg.Clients)
	if err != nil {
		return 0, err
	}
	l := &load{lat: make([]time.Duration, 0, 1<<18)}
	d := l.run(ctx, cfg, client)
	if len(l.lat) == 0 {
		return 0, fmt.Errorf("orders: no create succeeded: %v", l.firstErr.Load())
	}
	rate := harness.PerSec(len(l.lat), d)
	kv := []any{"peer", "orders", "workload", "create", "clients", cfg.Clients, "seconds", d.Seconds(), "n", len(l.lat),
		"per_sec", rate, "errors", l.failed.Load()}
	kv = append(kv, harness.Summarize(l.lat).KV("latency_")...)
	if e := l.firstErr.Load(); e != nil {
		kv = append(kv, "first_error", fmt.Sprint(e))
	}
	rep.Line("result", kv...)
	return rate, relayDrain(ctx, cfg.NATSURL, l.created.Load(), rep)
}

// startOrders creates the platform's streams and starts the orders binary.
func startOrders(ctx context.Context, cfg Config) (*harness.Service, error) {
	// The streams bootstrap: orders only verifies the streams at start.
	if err := ensureStreams(ctx, cfg.NATSURL); err != nil {
		return nil, err
	}
	svc, err := harness.StartService(ctx, cfg.Bin, func(addr string) []string {
		return []string{
			"ORDERS_DATABASE_URL=" + cfg.DatabaseURL,
			"ORDERS_NATS_URL=" + cfg.NATSURL,
			"ORDERS_HTTP_ADDR=" + addr,
			"ORDERS_API_TOKENS=" + Token,
			"ORDERS_LOG_LEVEL=warn",
		}
	}, cfg.LogPath, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("start orders: %w", err)
	}
	return svc, nil
}

// newClient returns the generated orders client (pkg/ordersclient) for
// base at its lower level, which returns the *http.Response: the answer is
// read but not decoded, so that, like the body, it costs the clients no
// JSON work.
func newClient(base string, clients int) (*ordersclient.Client, error) {
	client, err := ordersclient.NewClient(base,
		ordersclient.WithBearerToken(Token),
		ordersclient.WithHTTPClient(&http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients},
		}))
	if err != nil {
		return nil, fmt.Errorf("orders client: %w", err)
	}
	return client, nil
}

// load is the create load of the concurrent clients and what it measured.
type load struct {
	measuring atomic.Bool
	stop      atomic.Bool
	mu        sync.Mutex
	lat       []time.Duration // latency of the measured span's creates; mu guards it
	created   atomic.Int64    // every 201, warmup included
	failed    atomic.Int64
	firstErr  atomic.Value
	wg        sync.WaitGroup
}

// run drives the creates from cfg.Clients goroutines for cfg.Warmup and
// then cfg.Duration, waits for the clients to stop and returns the
// measured span's length.
func (l *load) run(ctx context.Context, cfg Config, client *ordersclient.Client) time.Duration {
	for range cfg.Clients {
		l.wg.Go(func() { l.client(ctx, client) })
	}
	time.Sleep(cfg.Warmup) // a fixed load duration, not a wait for a result
	l.measuring.Store(true)
	start := time.Now()
	time.Sleep(cfg.Duration)
	l.measuring.Store(false)
	d := time.Since(start)
	l.stop.Store(true)
	l.wg.Wait()
	return d
}

// client creates orders one after the other until the load stops, then
// adds its latencies of the measured span to l.lat.
func (l *load) client(ctx context.Context, client *ordersclient.Client) {
	local := make([]time.Duration, 0, 4096)
	for !l.stop.Load() {
		t0 := time.Now()
		resp, err := client.CreateOrderWithBody(ctx, nil, "application/json", bytes.NewReader(body))
		d := time.Since(t0)
		if err != nil {
			l.failed.Add(1)
			l.firstErr.CompareAndSwap(nil, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			l.failed.Add(1)
			l.firstErr.CompareAndSwap(nil, fmt.Errorf("status %d: %s", resp.StatusCode, b))
			continue
		}
		l.created.Add(1)
		if l.measuring.Load() {
			local = append(local, d)
		}
	}
	l.mu.Lock()
	l.lat = append(l.lat, local...)
	l.mu.Unlock()
}

// ensureStreams creates the platform's streams on the NATS server at url,
// as the bootstrap step (deploy/streams) does before the services start.
func ensureStreams(ctx context.Context, url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return streams.Ensure(ctx, js, streams.Config{})
}

// relayDrain waits up to a minute for the command stream to hold one
// command per created order (nothing consumes it in this benchmark) and
// prints how long after the load that took.
func relayDrain(ctx context.Context, url string, want int64, rep *harness.Report) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	start := time.Now()
	var got uint64
	// Each poll reads 64 streams' info: every 100 ms, not to load NATS.
	err = harness.Poll(ctx, time.Minute, 100*time.Millisecond, func() (bool, error) {
		n, err := streams.CommandBacklog(ctx, js)
		if err != nil {
			return false, nil
		}
		got = n
		return int64(got) >= want, nil
	})
	rep.Line("result", "peer", "orders", "workload", "relay_drain", "created", want, "commands_in_stream", got,
		"drained", err == nil, "drain_ms", time.Since(start))
	return nil
}
