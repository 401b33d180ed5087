package httpapi

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// RequestMetrics are a service's HTTP request metrics,
// <service>_http_requests_total and <service>_http_request_duration_seconds,
// labelled by route pattern, so their cardinality is that of the routes.
type RequestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewRequestMetrics registers service's request metrics in reg.
func NewRequestMetrics(reg prometheus.Registerer, service string) (*RequestMetrics, error) {
	m := &RequestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: service + "_http_requests_total",
			Help: "HTTP requests by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    service + "_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"method", "route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register http metrics: %w", err)
		}
	}
	return m, nil
}

// Record counts o; it is Observe's record.
func (m *RequestMetrics) Record(o Observed) {
	m.requests.WithLabelValues(o.Method, o.Route, strconv.Itoa(o.Status)).Inc()
	m.duration.WithLabelValues(o.Method, o.Route).Observe(o.Elapsed.Seconds())
}
