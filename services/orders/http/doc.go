// Package http is the REST adapter of the orders service: the chi router of
// the /v1 API, RFC 9457 problem responses naming the offending field, bearer
// authentication of mutating endpoints, request ids, access logs, request
// size and time limits, health, Prometheus metrics and the OpenAPI document.
//
// Domain errors become HTTP statuses in one table (statusOf). Unexpected
// errors reach the client only as a generic 500 carrying the request id; the
// cause is logged.
package http
