// Package e2e is the end-to-end suite of the platform: it starts Postgres,
// NATS JetStream, the orders service and timeoutd from their built images
// (make images) as containers on one network, with testcontainers-go, and
// drives them from outside as users do: REST calls through e2e/ordersapi and
// an independent JetStream consumer written against pkg/events.
//
// The harness (stack_test.go) builds nothing: a missing image fails the test
// with the command that builds it. A failed test prints every container's
// logs. Under -short the suite is skipped.
//
// Scenarios, one test each: an unpaid order cancelled on time, paid and
// extended orders, 5,000 orders with random payments, timeoutd killed with
// 10,000 pending deadlines, NATS restarted mid-run, malformed commands
// dead-lettered, and the compose file itself brought up.
package e2e
