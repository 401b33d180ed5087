package http

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
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

// consumerStats is what WatchConsumer reads of the command consumer (a
// *jetstream.Consumer of package services/timeoutd/jetstream).
type consumerStats interface {
	Takeovers() (reset, recreated uint64)
	Restarts() uint64
}

// WatchConsumer registers the command consumer's counters:
// timeoutd_consumer_takeovers_total, how each partition's consumer was
// taken over, by kind, "reset" (kept and reset to its ack floor: fast) or
// "recreated" (deleted and created anew: a new group and its election on a
// cluster), and timeoutd_consumer_restarts_total, the consumptions
// restarted because their consumer was deleted under them.
func (m *Metrics) WatchConsumer(c consumerStats) {
	kind := func(name string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "timeoutd_consumer_takeovers_total",
			Help:        "Partitions whose command consumer this instance took over, by kind: reset (the consumer found, reset to its ack floor) or recreated (deleted and created anew).",
			ConstLabels: prometheus.Labels{"kind": name}}, f)
	}
	m.reg.MustRegister(
		kind("reset", func() float64 { r, _ := c.Takeovers(); return float64(r) }),
		kind("recreated", func() float64 { _, n := c.Takeovers(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "timeoutd_consumer_restarts_total",
			Help: "Partition consumptions restarted because their consumer was deleted under them (by a former owner's late takeover)."},
			func() float64 { return float64(c.Restarts()) }))
}

// OverdueBounds are the ages of timeoutd_overdue_timeouts' older_than
// label: an alert rule picks the one it needs.
var OverdueBounds = []time.Duration{10 * time.Second, time.Minute, 10 * time.Minute}

// watched is what Watch reads of the service (a *timeoutd.Service).
type watched interface {
	Stats() timeoutd.Stats
	Pending() int
	IsReady() bool
	Owned() []int
	Deadlines(now time.Time) timeoutd.Deadlines
	Ownership() []timeoutd.PartitionOwnership
}

// ownershipReasons are the values of timeoutd_cluster_partitions' why
// label: "may_fire", then each reason a partition may not be fired.
var ownershipReasons = []lease.Why{"", lease.Opening, lease.Untrusted, lease.OutOfContact, timeoutd.InGrace, lease.Unowned}

// Watch registers the gauges and counters read from svc's Stats.
func (m *Metrics) Watch(svc watched) {
	counter := func(name, help string, f func(timeoutd.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(svc.Stats())) })
	}
	for _, why := range ownershipReasons {
		label := string(why)
		if why == "" {
			label = "may_fire"
		}
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_cluster_partitions",
			Help:        "The cluster's partitions as they really are, as of this instance's last lease round: whether their owner may fire them, and why not (opening, untrusted, out_of_contact, in_grace, unowned).",
			ConstLabels: prometheus.Labels{"why": label}},
			func() float64 {
				n := 0
				for _, o := range svc.Ownership() {
					if o.Why == why {
						n++
					}
				}
				return float64(n)
			}))
	}
	m.reg.MustRegister(&overdueCollector{svc: svc},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_partitions_owned", Help: "Partitions this instance holds a lease on (64 in all over the cluster)."},
			func() float64 { return float64(len(svc.Owned())) }),
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
		counter("timeoutd_clock_resets_total", "Times the database's clock changed under the heartbeats (another server after a failover, or a step back): the hold on the fires started over.",
			func(s timeoutd.Stats) uint64 { return s.ClockResets }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_clock_offset_seconds", Help: "How far this instance's wall clock is ahead of Postgres's (negative: behind), at the last heartbeat; fires are held by the lead."},
			func() float64 { return svc.Stats().ClockOffset.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_clock_standby_lag_seconds", Help: "How far the clock of Postgres's slowest standby is behind the primary's, at most, over the last heartbeats; fires wait that much longer, so that none is early by any member's clock."},
			func() float64 { return svc.Stats().StandbyLag.Seconds() }),
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

var overdueDesc = prometheus.NewDesc("timeoutd_overdue_timeouts",
	"Pending timeouts held by this instance whose deadline passed longer ago than older_than (held for a backlog, a clock hold or a fire path that does not keep up).",
	[]string{"older_than"}, nil)

// overdueCollector counts the overdue timeouts at each scrape from the
// schedule's counts by deadline (timeoutd.Service.Deadlines, one census per
// bound), never from Postgres.
type overdueCollector struct{ svc watched }

func (c *overdueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- overdueDesc }

func (c *overdueCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.svc.Stats().Now
	for _, b := range OverdueBounds {
		due := c.svc.Deadlines(now.Add(-b)).Due
		ch <- prometheus.MustNewConstMetric(overdueDesc, prometheus.GaugeValue, float64(due), promDuration(b))
	}
}

// promDuration writes d as Prometheus writes a duration: 10s, 1m, 10m.
func promDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}
