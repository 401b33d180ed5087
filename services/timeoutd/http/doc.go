// Package http is timeoutd's HTTP adapter: the chi router with /healthz,
// /readyz, Prometheus /metrics ([Metrics] implements timeoutd.Metrics), the
// JSON and server-sent-events API of services/timeoutd/api under /api/v1,
// the operator actions (operator.go: extend and cancel forwarded to the
// orders API, only with an operator token) and, when configured, the static
// dashboard at /. Errors are RFC 9457
// application/problem+json; domain errors map to statuses in statusOf.
package http
