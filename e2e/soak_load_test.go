package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// payResult is what the soak's load generator learnt of an order's payment.
type payResult uint8

const (
	// payNone: the order was not chosen for payment.
	payNone payResult = iota
	// payOK: POST /pay answered 200 with status paid (acknowledged).
	payOK
	// payRefused: POST /pay answered 409 (the deadline won the race).
	payRefused
	// payUnknown: POST /pay got a 5xx or no answer (a fault was running):
	// the order may end paid or cancelled.
	payUnknown
)

// soakOrder is an order whose creation the orders service acknowledged
// (201), as the load generator logged it.
type soakOrder struct {
	PayBy time.Time
	Pay   payResult
}

// soakLoad creates orders at a steady rate and pays a share of them at
// random moments, through the REST API, while the soak breaks the stack. It
// never fails on a 5xx or a transport error: such an operation has an
// unknown outcome and is counted, not audited strictly. Any other
// unexpected answer (a 4xx to a valid request) is recorded as rejected.
type soakLoad struct {
	// cls are clients of every orders instance, used in turn (next).
	cls  []*ordersclient.ClientWithResponses
	next atomic.Uint64
	cfg  soakConfig

	mu       sync.Mutex
	orders   map[string]*soakOrder // acknowledged creates by order id
	outcomes map[string]int        // "create 503", "pay transport error", …
	rejected []string              // unexpected answers (first 20)
	nRejects int

	createUnknown, payUnknown, skipped atomic.Int64
	pays                               sync.WaitGroup
}

// newSoakLoad returns a load of cfg on the orders instances at baseURLs,
// which it spreads its requests over.
func newSoakLoad(baseURLs []string, token string, cfg soakConfig) *soakLoad {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: cfg.Workers + 64, MaxConnsPerHost: cfg.Workers + 256,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}}
	var cls []*ordersclient.ClientWithResponses
	for _, u := range baseURLs {
		cls = append(cls, newOrdersClient(u, token, hc))
	}
	return &soakLoad{
		cls:      cls,
		cfg:      cfg,
		orders:   map[string]*soakOrder{},
		outcomes: map[string]int{},
	}
}

// classify names an error of the orders client and reports whether the
// operation's outcome is unknown (5xx or no answer).
func classify(err error) (string, bool) {
	var p *ordersclient.Problem
	if errors.As(err, &p) {
		return fmt.Sprint(p.Status), p.Status >= 500
	}
	return "transport error", true
}

// client returns the next orders instance's client.
func (l *soakLoad) client() *ordersclient.ClientWithResponses {
	return l.cls[l.next.Add(1)%uint64(len(l.cls))]
}

func (l *soakLoad) count(what string) {
	l.mu.Lock()
	l.outcomes[what]++
	l.mu.Unlock()
}

func (l *soakLoad) reject(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nRejects++
	if len(l.rejected) < 20 {
		l.rejected = append(l.rejected, fmt.Sprintf(format, args...))
	}
}

// run creates cfg.Rate orders per second for cfg.Duration, then returns;
// payments scheduled meanwhile go on (wait for them with waitPays). A tick
// that finds every worker busy is skipped and counted, so a stalled service
// does not turn into a burst later.
func (l *soakLoad) run(ctx context.Context) {
	work := make(chan struct{}, l.cfg.Workers)
	var wg sync.WaitGroup
	for range l.cfg.Workers {
		wg.Go(func() {
			for range work {
				l.create(ctx)
			}
		})
	}
	const step = 10 * time.Millisecond
	tk := time.NewTicker(step)
	defer tk.Stop()
	end := time.Now().Add(l.cfg.Duration)
	var due float64
	for now := range tk.C {
		if now.After(end) || ctx.Err() != nil {
			break
		}
		due += float64(l.cfg.Rate) * step.Seconds()
		for ; due >= 1; due-- {
			select {
			case work <- struct{}{}:
			default:
				l.skipped.Add(1)
			}
		}
	}
	close(work)
	wg.Wait()
}

func (l *soakLoad) create(ctx context.Context) {
	span := l.cfg.MaxDeadline - l.cfg.MinDeadline
	within := l.cfg.MinDeadline + rand.N(span)
	o, err := ordersclient.OrderOf(l.client().CreateOrderWithResponse(ctx, nil, orderRequest("c-soak", ordersclient.Deadline{PayWithin: within.Round(time.Millisecond).String()})))
	if err != nil {
		what, unknown := classify(err)
		l.count("create " + what)
		if unknown {
			l.createUnknown.Add(1)
		} else {
			l.reject("create: %v", err)
		}
		return
	}
	if o.Status != events.StatusPendingPayment {
		l.reject("create answered %+v, want pending_payment", o)
		return
	}
	so := &soakOrder{PayBy: o.PayBy}
	l.mu.Lock()
	l.orders[o.ID] = so
	l.outcomes["create 201"]++
	l.mu.Unlock()
	if rand.Float64() >= l.cfg.PayShare {
		return
	}
	// Pay at a random moment between now and a little after the deadline,
	// so some payments race the cancel event.
	window := time.Until(o.PayBy)
	l.pays.Add(1)
	time.AfterFunc(time.Duration(rand.Float64()*1.05*float64(window)), func() {
		defer l.pays.Done()
		l.pay(ctx, o.ID, so)
	})
}

func (l *soakLoad) pay(ctx context.Context, id string, so *soakOrder) {
	paid, err := ordersclient.OrderOf(l.client().PayOrderWithResponse(ctx, id))
	res, what := payOK, "200"
	switch {
	case err == nil && paid.Status != events.StatusPaid:
		l.reject("pay %s answered %+v, want paid", id, paid)
		return
	case err != nil:
		var unknown bool
		what, unknown = classify(err)
		switch {
		case unknown:
			res = payUnknown
			l.payUnknown.Add(1)
		case what == "409":
			res = payRefused
		default:
			l.reject("pay %s: %v", id, err)
			return
		}
	}
	l.mu.Lock()
	so.Pay = res
	l.outcomes["pay "+what]++
	l.mu.Unlock()
}

// waitPays waits for the scheduled payments to be answered, up to timeout.
func (l *soakLoad) waitPays(timeout time.Duration) error {
	done := make(chan struct{})
	go func() { l.pays.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("payments still unanswered after %s", timeout)
	}
}

// snapshot returns a copy of the acknowledged orders, the outcome counts as
// "what n" lines, sorted, and the unexpected answers (the first 20 and their
// number).
func (l *soakLoad) snapshot() (map[string]soakOrder, []string, []string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	orders := make(map[string]soakOrder, len(l.orders))
	for id, o := range l.orders {
		orders[id] = *o
	}
	var lines []string
	for what, n := range l.outcomes {
		lines = append(lines, fmt.Sprintf("%s: %d", what, n))
	}
	sort.Strings(lines)
	return orders, lines, slices.Clone(l.rejected), l.nRejects
}

// rss samples the resident memory of the services from their /metrics
// (process_resident_memory_bytes) every interval until ctx ends. A sample
// that fails (the service is down) is skipped.
type rss struct {
	mu      sync.Mutex
	samples map[string][]rssSample
}

type rssSample struct {
	At    time.Duration // since the start of the sampling
	Bytes float64
}

func sampleRSS(ctx context.Context, every time.Duration, urls map[string]string) *rss {
	r := &rss{samples: map[string][]rssSample{}}
	start := time.Now()
	hc := http.Client{Timeout: time.Second}
	go func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			for name, url := range urls {
				if b, ok := scrapeGauge(&hc, url+"/metrics", "process_resident_memory_bytes"); ok {
					r.mu.Lock()
					r.samples[name] = append(r.samples[name], rssSample{time.Since(start), b})
					r.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	return r
}

// scrapeGauge returns the value of an unlabelled metric of a Prometheus
// text exposition.
func scrapeGauge(hc *http.Client, url, name string) (float64, bool) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// report returns one line per service: first, min, max and last RSS in MiB,
// and every tenth of the run.
func (r *rss) report() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for n := range r.samples {
		names = append(names, n)
	}
	sort.Strings(names)
	mib := func(b float64) string { return fmt.Sprintf("%.0f", b/(1<<20)) }
	var lines []string
	for _, n := range names {
		ss := r.samples[n]
		lo, hi := ss[0].Bytes, ss[0].Bytes
		for _, s := range ss {
			lo, hi = min(lo, s.Bytes), max(hi, s.Bytes)
		}
		var curve []string
		stride := max(1, len(ss)/10)
		for i := 0; i < len(ss); i += stride {
			curve = append(curve, fmt.Sprintf("%s@%s", mib(ss[i].Bytes), ss[i].At.Round(time.Second)))
		}
		lines = append(lines, fmt.Sprintf("RSS %s MiB: first %s min %s max %s last %s (%d samples; %s)",
			n, mib(ss[0].Bytes), mib(lo), mib(hi), mib(ss[len(ss)-1].Bytes), len(ss), strings.Join(curve, " ")))
	}
	return lines
}
