package http

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/internal/httpapi"
	"github.com/ordertimeout/ordertimeout/services/orders"
)

// registerMetrics registers the request metrics and the scrape-time
// gauges.
func (s *server) registerMetrics() (err error) {
	if s.requests, err = httpapi.NewRequestMetrics(s.cfg.Registry, "orders"); err != nil {
		return err
	}
	if s.cfg.Stats != nil {
		if err := s.cfg.Registry.Register(&statsCollector{s: s}); err != nil {
			return fmt.Errorf("register orders metrics: %w", err)
		}
	}
	return nil
}

var (
	byStatusDesc = prometheus.NewDesc("orders_by_status", "Orders per status.", []string{"status"}, nil)
	outboxRows   = prometheus.NewDesc("orders_outbox_rows", "Outbox messages not yet published to JetStream.", nil, nil)
	outboxAge    = prometheus.NewDesc("orders_outbox_lag_seconds", "Age of the oldest unpublished outbox message (0 when empty).", nil, nil)
	outboxDups   = prometheus.NewDesc("orders_outbox_duplicates_total", "Outbox messages JetStream answered as duplicates: republishes of rows an earlier publish had stored.", nil, nil)
)

// statsCollector reads Config.Stats at each scrape, bounded by
// StatsTimeoutDefault; a failed read leaves the gauges out of that scrape.
type statsCollector struct{ s *server }

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- byStatusDesc
	ch <- outboxRows
	ch <- outboxAge
	ch <- outboxDups
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
	ch <- prometheus.MustNewConstMetric(outboxDups, prometheus.CounterValue, float64(st.OutboxDuplicates))
}
