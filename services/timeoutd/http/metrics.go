package http

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// Metrics implements timeoutd.Metrics with Prometheus collectors, and
// exposes the service's counters and gauges. Create it with NewMetrics
// before the service, then call Watch with the service.
type Metrics struct {
	reg          *prometheus.Registry
	batch        *prometheus.HistogramVec
	lateness     prometheus.Histogram
	deadLettered *prometheus.CounterVec
	recovery     prometheus.Gauge
}

var _ timeoutd.Metrics = (*Metrics)(nil)

// NewMetrics registers the histograms and counters on reg.
func NewMetrics(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		reg: reg,
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "timeoutd_batch_size", Help: "Items per batch, by stage (ingest: commands fetched, each of a batch message counted; fire: timeouts per fire transaction).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}, []string{"stage"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "timeoutd_fire_lateness_seconds", Help: "Expiry event PubAck time minus the timeout's deadline.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 5, 30, 300},
		}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "timeoutd_dead_lettered_total", Help: "Commands dead-lettered, by reason.",
		}, []string{"reason"}),
		recovery: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "timeoutd_recovery_duration_seconds", Help: "Time from start to ready of the last recovery.",
		}),
	}
	reg.MustRegister(m.batch, m.lateness, m.deadLettered, m.recovery)
	return m
}

// Watch registers the gauges and counters read from svc's Stats.
func (m *Metrics) Watch(svc *timeoutd.Service) {
	counter := func(name, help string, f func(timeoutd.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(svc.Stats())) })
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_pending", Help: "Pending timeouts held in memory."},
			func() float64 { return float64(svc.Pending()) }),
		counter("timeoutd_scheduled_total", "Set commands that changed a timeout.", func(s timeoutd.Stats) uint64 { return s.Scheduled }),
		counter("timeoutd_cleared_total", "Clear commands that changed a timeout.", func(s timeoutd.Stats) uint64 { return s.Cleared }),
		counter("timeoutd_fired_total", "Timeouts fired (outcome fired).", func(s timeoutd.Stats) uint64 { return s.Fired }),
		counter("timeoutd_missed_total", "Timeouts past their misfire bound (outcome missed).", func(s timeoutd.Stats) uint64 { return s.Missed }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_outbox_rows", Help: "Expiry events fired and not yet marked published (reading, publishing, awaiting the PubAck or the mark)."},
			func() float64 { return float64(svc.Stats().OutboxRows) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_outbox_oldest_age_seconds", Help: "Time since the fire of the oldest of those events."},
			func() float64 { return svc.Stats().OutboxOldest.Seconds() }),
		counter("timeoutd_lease_lapses_total", "Times the leases went unrenewed past the renew deadline: fires waited for a renewal.",
			func(s timeoutd.Stats) uint64 { return s.LeaseLapses }),
		counter("timeoutd_partitions_gained_total", "Partitions acquired.", func(s timeoutd.Stats) uint64 { return s.PartitionsGained }),
		counter("timeoutd_partitions_lost_total", "Partitions lost: a renewal found them taken by another instance.",
			func(s timeoutd.Stats) uint64 { return s.PartitionsLost }),
		counter("timeoutd_partitions_released_total", "Partitions given up: handed over to balance, given up on shutdown or after a failed takeover.",
			func(s timeoutd.Stats) uint64 { return s.PartitionsReleased }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_clock_offset_seconds", Help: "How far this instance's wall clock is ahead of Postgres's (negative: behind), at the last heartbeat; fires are held by the lead."},
			func() float64 { return svc.Stats().ClockOffset.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_ready", Help: "1 when recovery is done and the service is not shutting down."},
			func() float64 {
				if svc.IsReady() {
					return 1
				}
				return 0
			}),
	)
}

// BatchSize implements timeoutd.Metrics.
func (m *Metrics) BatchSize(stage string, n int) { m.batch.WithLabelValues(stage).Observe(float64(n)) }

// FireLateness implements timeoutd.Metrics.
func (m *Metrics) FireLateness(d time.Duration) { m.lateness.Observe(d.Seconds()) }

// DeadLettered implements timeoutd.Metrics.
func (m *Metrics) DeadLettered(r events.Reason) { m.deadLettered.WithLabelValues(string(r)).Inc() }

// RecoveryDuration implements timeoutd.Metrics.
func (m *Metrics) RecoveryDuration(d time.Duration) { m.recovery.Set(d.Seconds()) }
