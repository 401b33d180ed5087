// Package timeoutd is the durable timeout daemon's domain: the Timeout type,
// the contracts of its adapters ([Store], [Source], [DeadLetterer], [Relay],
// [Metrics]) and the long-running components a [Service] runs:
//
//   - ingest (ingest.go): command batches from JetStream are validated,
//     deduplicated per key, upserted into Postgres in one statement (a row
//     only changes when the version is newer), committed, acked, and then
//     applied to the in-memory schedule; invalid commands are dead-lettered
//     with their reason and terminated.
//   - the schedule (schedule.go): a pkg/wheel wheel and a compact key → slot
//     index (index.go: a slab, a key arena and a hash table, no pointer per
//     timeout) holding every pending deadline in memory.
//   - the scheduler (scheduler.go): the wheel's expired batches are checked
//     against the wall clock (never early: what is not due is rescheduled),
//     then marked fired and their expiry events written to the outbox in one
//     transaction per batch, and the relay is kicked.
//   - recovery (recovery.go): at start, the pending rows are loaded into the
//     schedule in keyset-paginated batches, the outbox is flushed, and only
//     then is the service ready; the overdue ones are held until ingest has
//     consumed the commands waiting at start (bounded by
//     RecoveryCatchupMax), then fire at a bounded rate.
//   - the janitor (janitor.go): expired tombstones shrink to version marks
//     in batches (a key's version is never forgotten).
//   - stats (stats.go): counters, rates, recent expiries and upcoming
//     buckets for the HTTP API.
//
// The adapters live in subpackages (postgres, jetstream, http) and are wired
// by package daemon; this package imports none of them.
package timeoutd
