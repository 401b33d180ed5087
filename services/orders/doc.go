// Package orders is the domain of the order service: orders, their items and
// statuses, the state machine (pending_payment → paid | cancelled), the
// domain errors, the defaults of its settings, and the Service that applies a
// request to the Store.
//
// Every state change bumps the order's version and yields a Change: the new
// order, the timeout command for timeoutd (events.Command "set" on create and
// extend, "clear" on pay and customer cancel) and the order domain event
// (events.OrderEvent created|paid|cancelled). The Store writes the three in one
// Postgres transaction through the outbox, so a change is announced exactly
// when it commits.
//
// The deadline is the rule. A payment is accepted only while the order is
// pending_payment and the service's clock (ServiceConfig.Now, read with the
// row locked) is not past pay_by plus ServiceConfig.PaymentGrace (zero by
// default); after that it is refused with ErrDeadlinePassed (409) even if the
// cancel event has not arrived, so a payment never depends on whether
// timeoutd is up. Within the deadline, the race has one outcome, decided by
// whichever transaction locks the order row first: a payment that commits
// while the order is still pending_payment wins (the cancel event then finds
// another version or status and is an acknowledged no-op), and a cancel
// event that commits first wins (the payment then fails with ErrConflict
// carrying status cancelled). The same clock decides that a cancel event is
// not early (Order.Expire) and which orders the reconciler (postgres.
// Reconciler) cancels when their cancel event never came.
//
// The adapters live in sub-packages: postgres (the Store, the janitor and
// the reconciler), jetstream (the consumer of cancel events) and http (the
// REST API). Only daemon wires them together (its Config is read from the
// environment); cmd/orders runs it.
package orders
