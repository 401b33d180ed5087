// Command demo is a load generator for a running platform (make up): it
// creates orders at a steady rate through the orders REST API with random
// payment behaviour, so the dashboard has something to show. Of the orders
// it creates, by default 60% are paid at a random moment before their
// deadline, 5% are cancelled by the customer, 5% get their deadline
// extended once, and the rest are left to time out.
//
// Usage (make demo sets the flags from DEMO_* variables):
//
//	go run ./e2e/cmd/demo -orders-url http://127.0.0.1:8081 -token dev-token -rate 20
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// config is the demo's settings, from flags.
type config struct {
	// OrdersURL is the orders service's root.
	OrdersURL string
	// Token is a bearer token the orders service accepts.
	Token string
	// Rate is the number of orders created per second.
	Rate float64
	// Duration bounds the run; 0 runs until interrupted.
	Duration time.Duration
	// PayWithinMin and PayWithinMax bound the random payment deadlines.
	PayWithinMin, PayWithinMax time.Duration
	// PayShare, CancelShare and ExtendShare are the shares of orders paid,
	// cancelled by the customer and extended; the rest time out.
	PayShare, CancelShare, ExtendShare float64
}

func main() {
	var cfg config
	flag.StringVar(&cfg.OrdersURL, "orders-url", "http://127.0.0.1:8081", "root URL of the orders service")
	flag.StringVar(&cfg.Token, "token", "dev-token", "bearer token of the orders API")
	flag.Float64Var(&cfg.Rate, "rate", 20, "orders created per second")
	flag.DurationVar(&cfg.Duration, "duration", 0, "how long to run (0: until Ctrl-C)")
	flag.DurationVar(&cfg.PayWithinMin, "pay-within-min", 5*time.Second, "shortest payment deadline")
	flag.DurationVar(&cfg.PayWithinMax, "pay-within-max", 2*time.Minute, "longest payment deadline")
	flag.Float64Var(&cfg.PayShare, "pay", 0.6, "share of orders paid before their deadline")
	flag.Float64Var(&cfg.CancelShare, "cancel", 0.05, "share of orders cancelled by the customer")
	flag.Float64Var(&cfg.ExtendShare, "extend", 0.05, "share of orders whose deadline is extended once")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, logger); err != nil {
		logger.Error("demo failed", "err", err)
		os.Exit(1)
	}
}

// counters are the demo's running totals.
type counters struct {
	created, paid, cancelled, extended, failed atomic.Int64
}

func (c *counters) log(logger *slog.Logger) {
	logger.Info("demo", "created", c.created.Load(), "paid", c.paid.Load(), "cancelled_by_customer", c.cancelled.Load(),
		"extended", c.extended.Load(), "errors", c.failed.Load())
}

func run(ctx context.Context, cfg config, logger *slog.Logger) error {
	switch {
	case cfg.Rate <= 0:
		return errors.New("rate: must be positive")
	case cfg.PayWithinMin < time.Second || cfg.PayWithinMax <= cfg.PayWithinMin:
		return errors.New("pay-within-min, pay-within-max: need 1s <= min < max")
	case cfg.PayShare+cfg.CancelShare+cfg.ExtendShare > 1:
		return errors.New("pay, cancel, extend: the shares add up to more than 1")
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	cl, err := ordersclient.NewClientWithResponses(cfg.OrdersURL, ordersclient.WithBearerToken(cfg.Token),
		ordersclient.WithHTTPClient(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}))
	if err != nil {
		return fmt.Errorf("orders client: %w", err)
	}
	var (
		c  counters
		wg sync.WaitGroup
	)
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
	defer tick.Stop()
	report := time.NewTicker(5 * time.Second)
	defer report.Stop()
	logger.Info("demo started", "orders_url", cfg.OrdersURL, "rate", cfg.Rate)
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			c.log(logger)
			return nil
		case <-report.C:
			c.log(logger)
		case <-tick.C:
			wg.Go(func() { order(ctx, cl, cfg, &c, logger) })
		}
	}
}

// order creates one order and plays its random fate: paid, cancelled or
// extended at a random moment before its deadline, or left to time out.
func order(ctx context.Context, cl *ordersclient.ClientWithResponses, cfg config, c *counters, logger *slog.Logger) {
	within := cfg.PayWithinMin + rand.N(cfg.PayWithinMax-cfg.PayWithinMin)
	o, err := ordersclient.OrderOf(cl.CreateOrderWithResponse(ctx, nil, ordersclient.CreateOrder{
		CustomerID: fmt.Sprintf("demo-%d", rand.N(1000)),
		Currency:   "EUR",
		Items:      []ordersclient.Item{{SKU: fmt.Sprintf("SKU-%d", rand.N(50)), Quantity: 1 + rand.N(int64(3)), UnitPriceMinor: 100 + rand.N(int64(10000))}},
		PayWithin:  within.Round(time.Millisecond).String(),
	}))
	if err != nil {
		if ctx.Err() == nil {
			c.failed.Add(1)
			logger.Warn("create order", "err", err)
		}
		return
	}
	c.created.Add(1)
	fate := rand.Float64()
	if fate >= cfg.PayShare+cfg.CancelShare+cfg.ExtendShare {
		return // left to time out
	}
	// Act at a random moment between creation and half a second before the deadline.
	wait := rand.N(max(time.Until(o.PayBy)-500*time.Millisecond, time.Millisecond))
	select {
	case <-ctx.Done():
		return
	case <-time.After(wait):
	}
	switch {
	case fate < cfg.PayShare:
		_, err = ordersclient.OrderOf(cl.PayOrderWithResponse(ctx, o.ID))
		count(err, &c.paid, c)
	case fate < cfg.PayShare+cfg.CancelShare:
		_, err = ordersclient.OrderOf(cl.CancelOrderWithResponse(ctx, o.ID))
		count(err, &c.cancelled, c)
	default:
		_, err = ordersclient.OrderOf(cl.ExtendOrderWithResponse(ctx, o.ID, ordersclient.Deadline{PayWithin: within.Round(time.Millisecond).String()}))
		count(err, &c.extended, c)
	}
	if err != nil && ctx.Err() == nil {
		logger.Warn("order action", "order", o.ID, "err", err)
	}
}

// count adds one to ok when err is nil, else to the errors.
func count(err error, ok *atomic.Int64, c *counters) {
	if err != nil {
		c.failed.Add(1)
		return
	}
	ok.Add(1)
}
