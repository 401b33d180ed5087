// Package orders is the domain of the order service: orders, their items and
// statuses, the state machine (pending_payment → paid | cancelled), the
// domain errors, the configuration, and the Service that applies a request to
// the Store.
//
// Every state change bumps the order's version and yields a Change: the new
// order, the timeout command for timeoutd (events.Command "set" on create and
// extend, "clear" on pay and customer cancel) and the order domain event
// (events.OrderEvent created|paid|cancelled). The Store writes the three in one
// Postgres transaction through the outbox, so a change is announced exactly
// when it commits.
//
// The payment deadline race has one outcome, decided by whichever transaction
// locks the order row first: a payment that commits while the order is still
// pending_payment wins (the cancel event then finds another version or status
// and is an acknowledged no-op), and a cancel event that commits first wins
// (the payment then fails with ErrConflict carrying status cancelled). A
// payment after pay_by is therefore accepted until the cancel event commits;
// the deadline is enforced by timeoutd, not by the clock of this service.
//
// The adapters live in sub-packages: postgres (the Store), jetstream (the
// consumer of cancel events) and http (the REST API). Only cmd/orders wires
// them together.
package orders
