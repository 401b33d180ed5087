// Package timeoutd is the durable timeout daemon's domain: the Timeout type
// and its errors (timeoutd.go), the contracts of its adapters (ports.go:
// [Store], [Reader], [Source], [DeadLetterer], [Publisher],
// [Metrics]), its [Config] (config.go), and the [Service] (service.go) that
// runs one component per job around the in-memory schedule:
//
//   - the schedule (internal/schedule): a pkg/wheel wheel and a compact key
//     index (a slab, a key arena and a hash table, no pointer per timeout)
//     holding every pending deadline in memory, behind one small API
//     (Admit, Apply, Load, Release, Done, Rearm, Drop); nothing else
//     touches the wheel or the index.
//   - ingest (ingest.go): command batches from JetStream are validated,
//     deduplicated per key, upserted into Postgres in one statement (a row
//     only changes when the version is newer), committed, acked, and then
//     applied to the schedule; invalid commands are dead-lettered with their
//     reason and terminated.
//   - the fire path (fire.go): the schedule hands out the timeouts due by the
//     wall clock (never early); for each batch their rows are read and
//     their expiry events published and PubAcked, which frees the batch's
//     slot; the rows of every batch published meanwhile are then marked
//     fired in one fenced transaction. The timeout row is the outbox: it stays
//     pending until its event is stored, so a crash republishes it under
//     the same Nats-Msg-Id.
//   - recovery (recovery.go): at start, the pending rows are loaded into the
//     schedule in keyset-paginated batches, and only then is the service
//     ready; no timeout fires until ingest has consumed
//     the commands waiting at start (bounded by RecoveryCatchupMax), and the
//     overdue ones are then released at a bounded rate.
//   - the membership (internal/lease): the instance's heartbeat and its
//     leases on the 64 partitions through lease.Table (a pool of its own),
//     the epochs that fence every write (lease.Ownership, which ingest, the
//     fire path and the janitor ask on every batch), the contact with
//     Postgres that the fire path needs to publish, the takeover of a
//     gained partition (recovery, above, implements lease.Partitions) and
//     the drop of a lost one, and the hold of fires by the clock offset
//     from the database; cluster.go keeps the cluster view of every live
//     instance.
//   - the janitor (janitor.go): expired tombstones shrink to version marks
//     in batches (a key's version is never forgotten).
//   - stats (stats.go): counters, rates, recent expiries and the sampler of
//     the rates; deadlines.go counts the pending
//     timeouts by deadline for the dashboard's histogram, from the schedule.
//
// Each long-running component embeds internal/startstop's Base: Start runs
// its loop, Stop ends it and waits. The adapters live in subpackages
// (postgres, jetstream, http) and are wired by package daemon; this package
// imports none of them.
package timeoutd
