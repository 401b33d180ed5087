package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/envconfig"
	"github.com/ordertimeout/ordertimeout/internal/pgparams"
	"github.com/ordertimeout/ordertimeout/internal/tlsclient"
	"github.com/ordertimeout/ordertimeout/services/orders"
	ojs "github.com/ordertimeout/ordertimeout/services/orders/jetstream"
)

// HTTPAddrDefault is the default listen address of the API, health and
// metrics.
const HTTPAddrDefault = ":8081"

// NATSTLSPrefix is the prefix of Config.NATSTLS's variables.
const NATSTLSPrefix = "ORDERS_NATS_"

// Config is the configuration of the orders daemon, read from the
// environment by FromEnv; each field names its variable.
type Config struct {
	// DatabaseURL is the Postgres connection string (ORDERS_DATABASE_URL);
	// required. Its settings win (pgparams.Pool): a pool_max_conns sizes
	// the API's pool (default PoolMaxConnsDefault); the relay's keeps
	// RelayPoolMaxConns.
	DatabaseURL string `env:"ORDERS_DATABASE_URL"`
	// NATSURL is the NATS server URL (ORDERS_NATS_URL); required.
	NATSURL string `env:"ORDERS_NATS_URL"`
	// NATSTLS are the NATS connection's TLS files: ORDERS_NATS_CA_FILE
	// (the CA of the servers' certificates), ORDERS_NATS_CERT_FILE and
	// ORDERS_NATS_KEY_FILE (a client certificate, for servers that verify
	// their clients). With any set the connection requires TLS; default
	// plaintext. Postgres's TLS is set in DatabaseURL (sslmode=verify-full,
	// sslrootcert, sslcert, sslkey).
	NATSTLS tlsclient.Files `envPrefix:"ORDERS_NATS_"`
	// HTTPAddr is the listen address of the API, health and metrics
	// (ORDERS_HTTP_ADDR); default ":8081".
	HTTPAddr string `env:"ORDERS_HTTP_ADDR"`
	// APITokens are the bearer tokens accepted on mutating endpoints
	// (ORDERS_API_TOKENS, comma-separated); at least one is required.
	APITokens []string `env:"ORDERS_API_TOKENS" envSeparator:","`
	// Limits bound payment deadlines (ORDERS_PAY_WITHIN_MIN, default 1s, and
	// ORDERS_PAY_WITHIN_MAX, default 24h; Go durations).
	Limits orders.Limits `envPrefix:"ORDERS_"`
	// PaymentGrace is how long after an order's pay_by a payment is still
	// accepted (ORDERS_PAYMENT_GRACE, a Go duration); default 0: the
	// deadline is the rule.
	PaymentGrace time.Duration `env:"ORDERS_PAYMENT_GRACE"`
	// ReconcileMargin is how long past its pay_by an order may stay
	// pending_payment before the reconciler cancels it itself
	// (ORDERS_RECONCILE_MARGIN, positive); default 30s.
	ReconcileMargin time.Duration `env:"ORDERS_RECONCILE_MARGIN"`
	// ReconcileInterval is the time between reconciler sweeps
	// (ORDERS_RECONCILE_INTERVAL, positive); default 10s.
	ReconcileInterval time.Duration `env:"ORDERS_RECONCILE_INTERVAL"`
	// LogLevel is debug, info, warn or error (ORDERS_LOG_LEVEL); default info.
	LogLevel slog.Level `env:"ORDERS_LOG_LEVEL"`
	// MaxOutboxLag is the age of the oldest unpublished outbox message
	// beyond which creates, payments, cancellations and extensions answer
	// 503 with Retry-After until the relay catches up
	// (ORDERS_MAX_OUTBOX_LAG, a Go duration); default 10s.
	MaxOutboxLag time.Duration `env:"ORDERS_MAX_OUTBOX_LAG"`
	// SingleCommands makes the relay publish one message per timeout
	// command, as before command batches (ORDERS_SINGLE_COMMANDS=true): for
	// an upgrade while a timeoutd older than batches still runs, which
	// would dead-letter them. Default false: the relay packs each claim's
	// commands into batches per partition (events.Batch).
	SingleCommands bool `env:"ORDERS_SINGLE_COMMANDS"`
	// StatementTimeout is the statement_timeout of every database session
	// (ORDERS_STATEMENT_TIMEOUT); default 30s. A statement_timeout in
	// DatabaseURL wins.
	StatementTimeout time.Duration `env:"ORDERS_STATEMENT_TIMEOUT"`
	// IdleInTransactionTimeout is the idle_in_transaction_session_timeout of
	// every database session (ORDERS_IDLE_IN_TRANSACTION_TIMEOUT); default
	// 60s. An idle_in_transaction_session_timeout in DatabaseURL wins.
	IdleInTransactionTimeout time.Duration `env:"ORDERS_IDLE_IN_TRANSACTION_TIMEOUT"`
	// CancelAckWait is the AckWait of the cancel events' durable consumer
	// (ORDERS_CANCEL_ACK_WAIT, at least 1s): how long the events an
	// instance held when it crashed wait before another instance gets
	// them; the events an instance holds are kept in progress meanwhile.
	// Default 2s (jetstream.AckWaitDefault).
	CancelAckWait time.Duration `env:"ORDERS_CANCEL_ACK_WAIT"`
	// Logger is the daemon's logger; default slog.Default(). cmd/orders
	// makes it from LogLevel.
	Logger *slog.Logger
}

// FromEnv reads the configuration from environ (envconfig.Environ() in
// cmd/orders; see services/orders/README.md) over the defaults and
// validates it; every error is reported, each naming its variable.
func FromEnv(environ map[string]string) (Config, error) {
	c := Config{
		HTTPAddr:                 HTTPAddrDefault,
		Limits:                   orders.Limits{PayWithinMin: orders.PayWithinMinDefault, PayWithinMax: orders.PayWithinMaxDefault},
		PaymentGrace:             orders.PaymentGraceDefault,
		ReconcileMargin:          orders.ReconcileMarginDefault,
		ReconcileInterval:        orders.ReconcileIntervalDefault,
		MaxOutboxLag:             orders.MaxOutboxLagDefault,
		StatementTimeout:         pgparams.StatementTimeoutDefault,
		IdleInTransactionTimeout: pgparams.IdleInTransactionTimeoutDefault,
		CancelAckWait:            ojs.AckWaitDefault,
	}
	err := envconfig.Parse(&c, environ) // a variable that does not parse keeps its default
	c.APITokens = slices.DeleteFunc(c.APITokens, func(t string) bool { return t == "" })
	if err = errors.Join(err, c.Validate()); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate reports every setting out of its range, naming its variable.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.DatabaseURL == "", "ORDERS_DATABASE_URL is required")
	check(c.NATSURL == "", "ORDERS_NATS_URL is required")
	check(len(c.APITokens) == 0, "ORDERS_API_TOKENS: at least one bearer token is required")
	check(c.Limits.PayWithinMin <= 0, "ORDERS_PAY_WITHIN_MIN must be positive, got %s", c.Limits.PayWithinMin)
	check(c.Limits.PayWithinMax < c.Limits.PayWithinMin, "ORDERS_PAY_WITHIN_MAX (%s) must not be below ORDERS_PAY_WITHIN_MIN (%s)", c.Limits.PayWithinMax, c.Limits.PayWithinMin)
	check(c.MaxOutboxLag <= 0, "ORDERS_MAX_OUTBOX_LAG must be positive, got %s", c.MaxOutboxLag)
	check(c.ReconcileMargin <= 0, "ORDERS_RECONCILE_MARGIN must be positive, got %s", c.ReconcileMargin)
	check(c.ReconcileInterval <= 0, "ORDERS_RECONCILE_INTERVAL must be positive, got %s", c.ReconcileInterval)
	check(c.StatementTimeout < time.Millisecond, "ORDERS_STATEMENT_TIMEOUT must be at least 1ms, got %s", c.StatementTimeout)
	check(c.CancelAckWait < time.Second, "ORDERS_CANCEL_ACK_WAIT must be at least 1s, got %s", c.CancelAckWait)
	check(c.IdleInTransactionTimeout < time.Millisecond, "ORDERS_IDLE_IN_TRANSACTION_TIMEOUT must be at least 1ms, got %s", c.IdleInTransactionTimeout)
	if _, err := c.NATSTLS.Config(NATSTLSPrefix); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
