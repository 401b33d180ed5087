// Package e2e is the end-to-end suite of the platform: it starts Postgres,
// NATS JetStream, the orders service and timeoutd from their built images
// (make images) as containers on one network, with testcontainers-go, and
// drives them from outside as users do: REST calls through pkg/ordersclient
// (the client generated from the orders API's document, as an outside team
// would use it) and an independent JetStream consumer written against
// pkg/events.
//
// The harness (stack_test.go) builds nothing: a missing image fails the test
// with the command that builds it. A failed test prints every container's
// logs. Under -short the suite is skipped.
//
// Scenarios, one test each: an unpaid order cancelled on time, paid and
// extended orders, 5,000 orders with random payments, timeoutd killed with
// 10,000 pending deadlines, NATS restarted mid-run, malformed commands
// dead-lettered, and the compose file itself brought up.
//
// The scenarios that neither kill nor restart anything share one stack
// (sharedStack) and run in parallel; the load, crash, NATS restart and
// compose scenarios each start their own and run one at a time, because
// they measure timing on a 2-core machine. The whole suite takes about
// 2.5 to 3 minutes there.
//
// Reliability and security (issue 7, docs/RELIABILITY.md), each on a stack
// of its own unless noted: the soak under faults with its auditor
// (soak_test.go, audit_test.go; about 2 minutes), SIGTERM of timeoutd under
// load (soak_shutdown_test.go), hostile inputs through REST and NATS, the
// security checks (shared stack) and the compose NATS permissions
// (hostile_test.go). The cluster: its scenarios (cluster_test.go) and the
// chaos run, a seeded nemesis with a toxiproxy between one timeoutd and
// its dependencies (chaos_test.go, faultproxy_test.go; about 2 minutes in
// make test, make chaos for the long runs).
//
// The example producers run against stacks of their own: examples/reservations
// (Go, reservations_test.go) and examples/reservations-node (Node.js,
// written from docs/contract/asyncapi.yaml, as the compose stack's
// reservations NATS user: stackOptions.ShippedNATSConf;
// reservations_node_test.go, which needs node and npm).
//
// Tenants (tenants_test.go), on a stack of their own with a NATS user per
// tenant: the cross-tenant matrix of orders, reservations and invoices
// (every set, move and clear of another tenant's key, every foreign fire
// subject, every read of another's expiries or dead letters, refused by
// NATS or dead-lettered by timeoutd) and a tenant added to the running
// stack (TestTenantIsolation, about 15 s).
//
// The READMEs' curl examples run on the shared stack, each status compared
// with the one the README shows (readme_test.go).
//
// startStack(t, stackOptions{}) is the entry point for other end-to-end
// tests (the dashboard's browser test uses it): it returns the URLs of the
// services, the NATS URL and an API token, and Kill, Start and Restart act
// on a container by name.
package e2e
