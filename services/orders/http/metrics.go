package http

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

// registerMetrics registers the request metrics (labelled by route pattern,
// so the cardinality is that of the routes) and the scrape-time gauges.
func (s *server) registerMetrics() error {
	s.metrics.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orders_http_requests_total",
		Help: "HTTP requests by method, route pattern and status code.",
	}, []string{"method", "route", "code"})
	s.metrics.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "orders_http_request_duration_seconds",
		Help:    "HTTP request latency by method and route pattern.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
	}, []string{"method", "route"})
	cs := []prometheus.Collector{s.metrics.requests, s.metrics.duration}
	if s.cfg.Stats != nil {
		cs = append(cs, &statsCollector{s: s})
	}
	for _, c := range cs {
		if err := s.cfg.Registry.Register(c); err != nil {
			return fmt.Errorf("register http metrics: %w", err)
		}
	}
	return nil
}

var (
	byStatusDesc = prometheus.NewDesc("orders_by_status", "Orders per status.", []string{"status"}, nil)
	outboxRows   = prometheus.NewDesc("orders_outbox_rows", "Outbox messages not yet published to JetStream.", nil, nil)
	outboxAge    = prometheus.NewDesc("orders_outbox_lag_seconds", "Age of the oldest unpublished outbox message (0 when empty).", nil, nil)
)

// statsCollector reads Config.Stats at each scrape, bounded by
// StatsTimeoutDefault; a failed read leaves the gauges out of that scrape.
type statsCollector struct{ s *server }

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- byStatusDesc
	ch <- outboxRows
	ch <- outboxAge
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), StatsTimeoutDefault)
	defer cancel()
	st, err := c.s.cfg.Stats(ctx)
	if err != nil {
		c.s.log.Warn("read metrics stats", "err", err)
		return
	}
	for _, status := range orders.Statuses {
		ch <- prometheus.MustNewConstMetric(byStatusDesc, prometheus.GaugeValue, float64(st.ByStatus[status]), string(status))
	}
	ch <- prometheus.MustNewConstMetric(outboxRows, prometheus.GaugeValue, float64(st.OutboxRows))
	ch <- prometheus.MustNewConstMetric(outboxAge, prometheus.GaugeValue, st.OutboxOldestAge.Seconds())
}
