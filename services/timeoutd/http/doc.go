// Package http is timeoutd's HTTP adapter: the chi router with /healthz,
// /readyz, Prometheus /metrics ([Metrics] implements timeoutd.Metrics), the
// JSON and server-sent-events API of services/timeoutd/api under /api/v1,
// the operator actions (operator.go: extend and cancel forwarded to the
// orders API, only with an operator token) and, when configured, the static
// dashboard at /. Errors are RFC 9457 problem documents typed
// /problems/<code> (internal/httpapi, as the orders API's); every code's
// status and title are in one table, problems, and domain errors map to
// codes in codeOf.
package http
