package orders

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/pgparams"
)

// Defaults of Config.
const (
	HTTPAddrDefault     = ":8081"
	PayWithinMinDefault = time.Second
	PayWithinMaxDefault = 24 * time.Hour
	LogLevelDefault     = "info"
	// MaxOutboxLagDefault is the outbox lag beyond which mutating requests
	// are refused with 503 (backpressure).
	MaxOutboxLagDefault = 10 * time.Second
	// PaymentGraceDefault is how long after pay_by a payment is accepted.
	PaymentGraceDefault = time.Duration(0)
	// ReconcileMarginDefault is how long past its pay_by a pending order
	// waits for timeoutd's cancel event before the reconciler cancels it.
	ReconcileMarginDefault = 30 * time.Second
	// ReconcileIntervalDefault is the time between two reconciler sweeps.
	ReconcileIntervalDefault = 10 * time.Second
)

// Config is the configuration of the orders binary, read from the
// environment by ConfigFromEnv.
type Config struct {
	// DatabaseURL is the Postgres connection string (ORDERS_DATABASE_URL);
	// required. pgxpool parameters such as pool_max_conns are honoured.
	DatabaseURL string
	// NATSURL is the NATS server URL (ORDERS_NATS_URL); required.
	NATSURL string
	// HTTPAddr is the listen address of the API, health and metrics
	// (ORDERS_HTTP_ADDR); default ":8081".
	HTTPAddr string
	// APITokens are the bearer tokens accepted on mutating endpoints
	// (ORDERS_API_TOKENS, comma-separated); at least one is required.
	APITokens []string
	// Limits bound payment deadlines (ORDERS_PAY_WITHIN_MIN, default 1s, and
	// ORDERS_PAY_WITHIN_MAX, default 24h; Go durations).
	Limits Limits
	// PaymentGrace is how long after an order's pay_by a payment is still
	// accepted (ORDERS_PAYMENT_GRACE, a Go duration, not negative); default
	// 0: the deadline is the rule.
	PaymentGrace time.Duration
	// ReconcileMargin is how long past its pay_by an order may stay
	// pending_payment before the reconciler cancels it itself
	// (ORDERS_RECONCILE_MARGIN, positive); default 30s.
	ReconcileMargin time.Duration
	// ReconcileInterval is the time between reconciler sweeps
	// (ORDERS_RECONCILE_INTERVAL, positive); default 10s.
	ReconcileInterval time.Duration
	// LogLevel is debug, info, warn or error (ORDERS_LOG_LEVEL); default info.
	LogLevel slog.Level
	// MaxOutboxLag is the age of the oldest unpublished outbox message
	// beyond which creates, payments, cancellations and extensions answer
	// 503 with Retry-After until the relay catches up
	// (ORDERS_MAX_OUTBOX_LAG, a Go duration); default 10s.
	MaxOutboxLag time.Duration
	// StatementTimeout is the statement_timeout of every database session
	// (ORDERS_STATEMENT_TIMEOUT); default 30s. A statement_timeout in
	// DatabaseURL wins.
	StatementTimeout time.Duration
	// IdleInTransactionTimeout is the idle_in_transaction_session_timeout of
	// every database session (ORDERS_IDLE_IN_TRANSACTION_TIMEOUT); default
	// 60s. An idle_in_transaction_session_timeout in DatabaseURL wins.
	IdleInTransactionTimeout time.Duration
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv in main)
// and validates it; errors name the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		DatabaseURL: getenv("ORDERS_DATABASE_URL"),
		NATSURL:     getenv("ORDERS_NATS_URL"),
		HTTPAddr:    cmp.Or(getenv("ORDERS_HTTP_ADDR"), HTTPAddrDefault),
	}
	for _, t := range strings.Split(getenv("ORDERS_API_TOKENS"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.APITokens = append(c.APITokens, t)
		}
	}
	var err error
	if c.Limits.PayWithinMin, err = envDuration(getenv, "ORDERS_PAY_WITHIN_MIN", PayWithinMinDefault); err != nil {
		return Config{}, err
	}
	if c.Limits.PayWithinMax, err = envDuration(getenv, "ORDERS_PAY_WITHIN_MAX", PayWithinMaxDefault); err != nil {
		return Config{}, err
	}
	if c.MaxOutboxLag, err = envDuration(getenv, "ORDERS_MAX_OUTBOX_LAG", MaxOutboxLagDefault); err != nil {
		return Config{}, err
	}
	if c.PaymentGrace, err = envDuration(getenv, "ORDERS_PAYMENT_GRACE", PaymentGraceDefault); err != nil {
		return Config{}, err
	}
	if c.ReconcileMargin, err = envDuration(getenv, "ORDERS_RECONCILE_MARGIN", ReconcileMarginDefault); err != nil {
		return Config{}, err
	}
	if c.ReconcileInterval, err = envDuration(getenv, "ORDERS_RECONCILE_INTERVAL", ReconcileIntervalDefault); err != nil {
		return Config{}, err
	}
	if c.StatementTimeout, err = envDuration(getenv, "ORDERS_STATEMENT_TIMEOUT", pgparams.StatementTimeoutDefault); err != nil {
		return Config{}, err
	}
	if c.IdleInTransactionTimeout, err = envDuration(getenv, "ORDERS_IDLE_IN_TRANSACTION_TIMEOUT", pgparams.IdleInTransactionTimeoutDefault); err != nil {
		return Config{}, err
	}
	if err := c.LogLevel.UnmarshalText([]byte(cmp.Or(getenv("ORDERS_LOG_LEVEL"), LogLevelDefault))); err != nil {
		return Config{}, fmt.Errorf("ORDERS_LOG_LEVEL: %w", err)
	}
	switch {
	case c.DatabaseURL == "":
		return Config{}, fmt.Errorf("ORDERS_DATABASE_URL is required")
	case c.NATSURL == "":
		return Config{}, fmt.Errorf("ORDERS_NATS_URL is required")
	case len(c.APITokens) == 0:
		return Config{}, fmt.Errorf("ORDERS_API_TOKENS: at least one bearer token is required")
	case c.Limits.PayWithinMin <= 0:
		return Config{}, fmt.Errorf("ORDERS_PAY_WITHIN_MIN must be positive, got %s", c.Limits.PayWithinMin)
	case c.Limits.PayWithinMax < c.Limits.PayWithinMin:
		return Config{}, fmt.Errorf("ORDERS_PAY_WITHIN_MAX (%s) must not be below ORDERS_PAY_WITHIN_MIN (%s)", c.Limits.PayWithinMax, c.Limits.PayWithinMin)
	case c.MaxOutboxLag <= 0:
		return Config{}, fmt.Errorf("ORDERS_MAX_OUTBOX_LAG must be positive, got %s", c.MaxOutboxLag)
	case c.PaymentGrace < 0:
		return Config{}, fmt.Errorf("ORDERS_PAYMENT_GRACE must not be negative, got %s", c.PaymentGrace)
	case c.ReconcileMargin <= 0:
		return Config{}, fmt.Errorf("ORDERS_RECONCILE_MARGIN must be positive, got %s", c.ReconcileMargin)
	case c.ReconcileInterval <= 0:
		return Config{}, fmt.Errorf("ORDERS_RECONCILE_INTERVAL must be positive, got %s", c.ReconcileInterval)
	case c.StatementTimeout < time.Millisecond:
		return Config{}, fmt.Errorf("ORDERS_STATEMENT_TIMEOUT must be at least 1ms, got %s", c.StatementTimeout)
	case c.IdleInTransactionTimeout < time.Millisecond:
		return Config{}, fmt.Errorf("ORDERS_IDLE_IN_TRANSACTION_TIMEOUT must be at least 1ms, got %s", c.IdleInTransactionTimeout)
	}
	return c, nil
}

func envDuration(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}
