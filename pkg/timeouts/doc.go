// Package timeouts is the producer's and the consumer's library of the
// ordertimeout platform: any service can say "expire this reservation at T
// unless it is cleared" in a few lines, with the guarantees the orders
// service has, and consume the expiry events durably.
//
// Producing. A deadline is set, moved, extended and cleared by key with
// versions that strictly increase per key ([Deadline], [SetCommand],
// [ClearCommand]). A [Writer] writes the commands into a transactional
// outbox (package pkg/outbox) in the caller's own pgx transaction, so a
// deadline exists if and only if the change it belongs to committed; an
// outbox.Relay configured with [Pack] publishes them, packed into batches
// of a partition's commands as the orders relay packs them, each message
// with its Nats-Msg-Id so that a republish after a crash is a duplicate.
// A command the platform would refuse (a bad key, a non-positive version,
// a payload that is too large or not a JSON object, a fire subject outside
// the allowed prefixes) is refused at the call with a [*RefusedError]
// (errors.Is(err, [ErrRefused])) naming the dead-letter reason, instead of
// being dead-lettered by timeoutd later.
//
// Tracing. A command written by a Writer carries the trace context of the
// span in the caller's context (W3C traceparent, through the outbox row and
// the message header), so timeoutd's ingest span continues the caller's
// trace and the fire's span links back to it.
//
// Consuming. A [Consumer] reads events (expiry events with [DecodeExpiry],
// or any other type) through a durable JetStream consumer, acks an event
// only after its handler returned nil, redelivers a failed one, and
// dead-letters one that does not decode ([PublishDeadLetter]). Handlers
// apply events conditionally on the key and version, which makes a
// redelivery harmless. Its AckWait is short (2s, [AckWaitDefault]): an
// instance that crashes holding events costs about that long, after which
// another instance of the service gets them; while an instance works, it
// marks every event it holds in progress every third of AckWait, so a slow
// handler ([ConsumerConfig].HandleTimeout bounds it, 30s by default) is
// never redelivered to another. NewConsumer updates an existing durable to
// the settings given and refuses one out of range, naming the field.
//
// The guarantees, from the platform: an expiry event is never published
// before its deadline; a command is acked by timeoutd only after it is
// stored; a command whose version is not newer than the one stored for
// its key is ignored, however late; every event carries a dedupe id.
//
// examples/reservations is a complete service built on this package.
package timeouts
