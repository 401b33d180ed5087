// Package sim is timeoutd's deterministic simulation: the daemon's real
// core (membership, ingest, schedule and wheel, fire path) run as a
// cluster inside testing/synctest bubbles, against in-memory models of
// what it relies on, under a seeded nemesis and load, with a checker that
// reads the whole history and asserts each invariant. Virtual time makes a
// seed's minute take a fraction of a second. README.md says how to run,
// replay and extend it.
//
// The world is split by concern, one file each:
//
//   - postgres.go: versioned rows (pending, cleared, fired), the lease
//     table with owners, epochs and expiries by its clock, the instance
//     registry with crash detection (an instance whose sessions are all
//     gone for the crash grace is dead, its partitions takeable at once),
//     restarts, freezes, the grace after either, and failovers to a
//     synchronous standby whose clock and name are another's. store.go and leases.go
//     are the timeoutd.Store and lease.Table on it. Each statement runs
//     atomically at one instant, its fence checked in the same step, as
//     the row locks make it in Postgres. The lease rules are checked
//     against the real adapter by one behaviour suite (package leasetest),
//     run on both.
//   - jetstream.go: a work queue per partition read through one durable
//     consumer (ack, term, nak with delay, redelivery after ackWait, reset
//     on Add), the expiry stream with its dedupe window by Nats-Msg-Id,
//     dead letters.
//   - network.go: each instance's links to Postgres and NATS, which the
//     nemesis cuts, slows, or makes lose commit replies and PubAcks.
//   - node.go: an instance's lifecycle (start, crash, graceful stop) and
//     its wall clock, the reference plus a skew the nemesis steps.
//   - nemesis.go: the kinds of fault and how a seed draws them.
//   - checker.go: the history and the invariants judged over it.
//   - seed.go: one seed's cluster, load and run.
//
// The reference clock is the bubble's, time.Now. Postgres's clock is the
// reference plus an offset that each failover changes (a standby's clock
// is another): every expiry of the model is by it, and so is "never
// early". The models share one lock, the
// world's: a statement, a publish and the checks that judge it happen at
// one instant, as they would be ordered in the real systems.
package sim
