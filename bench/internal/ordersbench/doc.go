// Package ordersbench measures the orders service's POST /v1/orders at a
// fixed number of concurrent HTTP clients, with the service run as its own
// binary, and beside it pgbench's single-row INSERT on the same Postgres
// server (pgbench runs inside the Postgres container), so the two rates are
// compared in one run.
package ordersbench
