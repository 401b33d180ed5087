// Package jetstream is the NATS JetStream adapter of the orders service: the
// durable consumer of the cancel events timeoutd publishes on
// orders.cancel.<order id> (stream TIMEOUT_EXPIRIES).
//
// A cancel event is acked only after the cancellation committed, or after it
// was found to be a no-op (a stale version, a duplicate, an order already paid
// or cancelled). A message that does not decode, or whose key does not match
// its subject, is published to DEAD_LETTERS on dlq.orders.<reason> and
// terminated; so is an event with the order's current version but another
// deadline (forged or corrupt). An event that arrives before the order's
// pay_by by this service's clock is redelivered at pay_by, so an order is
// never cancelled early. A transient failure (Postgres down) naks the message
// with a delay, so it is redelivered.
package jetstream
