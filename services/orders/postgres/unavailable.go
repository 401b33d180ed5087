package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

// storeError returns err, marked with orders.ErrUnavailable (and still
// wrapping err) when it says that Postgres cannot be reached or does not
// answer in time, so that callers can tell an outage from a bug.
func storeError(err error) error {
	if err == nil || !unavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
}

// errStandby is the probe's error when the server it reached is a standby.
var errStandby = errors.New("postgres: the server is a standby (in recovery); it takes no writes")

// unavailable reports whether err is an outage of the database rather than a
// failure of the request: pgx's connect errors, network errors, a closed
// connection, a deadline passed while acquiring a connection or waiting for
// an answer, and the server's own "connection exception" (class 08),
// "shutting down / starting up" (57P01-57P03), statement_timeout (57014) and
// "too many connections" (53300) errors, and a server that takes no writes
// (readOnly). A domain error is never one.
//
// Of Postgres's other codes none means that the server cannot take writes
// for now: 25P02 (in_failed_sql_transaction) is the request's own
// transaction, 57P04 (database_dropped) does not heal by waiting.
func unavailable(err error) bool {
	var de *orders.Error
	if errors.As(err, &de) {
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr *net.OpError
	var pgErr *pgconn.PgError
	switch {
	case readOnly(err):
		return true
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return true
	case errors.As(err, &pgErr):
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "57014", "53300":
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	return false
}

// readOnly reports whether err says that the server of the connection takes
// no writes: 25006 (read_only_sql_transaction), which a connection opened to
// a primary answers once that server came back as a standby after a
// failover, or the probe's errStandby. The pool's other connections are
// likely to be to the same server: Store resets the pool on such an error.
func readOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, errStandby) || errors.As(err, &pgErr) && pgErr.Code == pgerrReadOnly
}

// pgerrReadOnly is SQLSTATE read_only_sql_transaction.
const pgerrReadOnly = "25006"
