// Package pgparams sets the server-side session limits every Postgres pool
// of the services opens with: statement_timeout, so a stuck query cannot hold
// a connection (and its locks) for ever, and
// idle_in_transaction_session_timeout, so a transaction abandoned by a
// crashed or hung client releases its locks. Both are startup parameters
// (pgx's ConnConfig.RuntimeParams), so they cost no round trip.
package pgparams
