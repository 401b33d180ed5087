// Package timeoutdbench drives timeoutd, run as its own binary (a child
// process, so its RSS is read from /proc), through its public contract only:
// set and clear commands published to JetStream on timeouts.cmd.<key> with
// their Nats-Msg-Id, /api/v1/stats polled until the pending count says the
// commands were durably ingested, /readyz timed across a restart, and an
// independent JetStream consumer of the cancel events that measures each
// one's arrival against its deadline.
package timeoutdbench
