// Package harness is the shared machinery of the load generator: it starts
// the real Postgres and NATS JetStream containers (docker run, reached at
// their bridge address, not through docker-proxy) or a Postgres cluster
// under Patroni, runs a service binary as a child process whose RSS it
// reads from /proc, polls HTTP endpoints with a deadline, summarises latency
// samples and prints every measurement as one greppable line of key=value
// pairs.
package harness
