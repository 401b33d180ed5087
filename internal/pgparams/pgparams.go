package pgparams

import (
	"strconv"
	"strings"
	"time"
)

// Defaults of Timeouts.
const (
	// StatementTimeoutDefault bounds one statement.
	StatementTimeoutDefault = 30 * time.Second
	// IdleInTransactionTimeoutDefault bounds the idle time inside an open
	// transaction.
	IdleInTransactionTimeoutDefault = 60 * time.Second
)

// The Postgres parameter names.
const (
	statementTimeout         = "statement_timeout"
	idleInTransactionTimeout = "idle_in_transaction_session_timeout"
)

// Timeouts are the session limits of a pool's connections; Postgres keeps
// them at millisecond resolution.
type Timeouts struct {
	// Statement is statement_timeout; 0 means StatementTimeoutDefault.
	Statement time.Duration
	// IdleInTransaction is idle_in_transaction_session_timeout; 0 means
	// IdleInTransactionTimeoutDefault.
	IdleInTransaction time.Duration
}

// Apply sets the timeouts in params (a pgx ConnConfig.RuntimeParams, which
// holds the connection string's own parameters) unless the connection
// string already sets them, directly (?statement_timeout=5s) or in its
// options (-c statement_timeout=5s): the connection string wins.
func (t Timeouts) Apply(params map[string]string) {
	set := func(name string, d, def time.Duration) {
		if _, ok := params[name]; ok || strings.Contains(params["options"], name) {
			return
		}
		if d <= 0 {
			d = def
		}
		params[name] = strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	set(statementTimeout, t.Statement, StatementTimeoutDefault)
	set(idleInTransactionTimeout, t.IdleInTransaction, IdleInTransactionTimeoutDefault)
}
