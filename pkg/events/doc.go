// Package events is the public NATS contract of the ordertimeout platform:
// the subjects, the stream names, and the versioned Go types of every message
// that crosses a service boundary, with the Nats-Msg-Id each must carry.
//
// Three families of messages exist:
//
//   - Timeout commands ([Command]) on timeouts.cmd.<key>: "set" creates, moves
//     or extends a deadline, "clear" removes it. The producer (the orders
//     service) owns the key and sets a version that strictly increases per
//     key; consumers apply a command only when its version is newer than the
//     one they hold, so redeliveries and reordering are harmless.
//   - Expiry events ([Expiry]) that timeoutd publishes when a deadline
//     passes: outcome "fired" on the command's fire subject (for orders,
//     orders.cancel.<id>), or outcome "missed" on timeouts.missed.<key> when the
//     timeout's misfire bound was exceeded.
//   - Order domain events ([OrderEvent]) on orders.created|paid|cancelled.<id>.
//
// Every message has a schema version ([SchemaVersion]). Decoders ignore
// unknown fields (so producers may add fields) and reject a newer schema
// version with [ReasonUnsupportedSchema], so a consumer that is behind
// dead-letters the message instead of misreading it. Decoding errors are
// [*Error] values carrying a machine-readable [Reason] and the offending field.
//
// Message ids: [Command.MsgID], [Expiry.MsgID] and [OrderEvent.MsgID] derive
// the Nats-Msg-Id header from the key, the version and the kind, so a
// republish after a crash is dropped by JetStream's duplicate window, and
// consumers that apply changes conditionally absorb it beyond the window.
package events
