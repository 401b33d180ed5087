package orders

import "time"

// Defaults of the service's settings (daemon.Config reads them from the
// environment).
const (
	PayWithinMinDefault = time.Second
	PayWithinMaxDefault = 24 * time.Hour
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
