// Package pgparams opens the services' Postgres pools ([Pool]) and sets the
// server-side session limits every pool opens with ([Timeouts]):
// statement_timeout, so a stuck query cannot hold a connection (and its
// locks) for ever, and idle_in_transaction_session_timeout, so a
// transaction abandoned by a crashed or hung client releases its locks.
// Both are startup parameters (pgx's ConnConfig.RuntimeParams), so they
// cost no round trip. Every connection is dialed with keepalives and a TCP
// user timeout (dial.go), so that a server gone from the network (a
// primary lost in a failover) fails its connections within seconds, and
// the name lookups of a multi-host URL are bounded (lookup.go), so that a
// member whose name no longer resolves does not hold the connections to
// the others. A pool of several hosts tries them in the order its
// connections learnt (hosts.go): the primary first, failed members last;
// and a pool of the primary alone closes its sessions to a former primary
// that went silent once another host takes writes (takeover.go).
//
// One rule holds for every setting: the connection string wins. A service's
// pool size, timeouts and application name apply where the URL sets none;
// only a dedicated pool (the outbox relay's, timeoutd's read and lease
// pools) keeps its own size.
package pgparams
