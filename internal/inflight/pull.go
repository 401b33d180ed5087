package inflight

import "time"

// PullExpiry and PullHeartbeat are the settings of a consumer's pull
// requests, as timeoutd's command consumers have them. With nats.go's
// defaults (a 30 s expiry, a heartbeat every 15 s) a pull request the
// server lost without a word is noticed only after two missed heartbeats,
// 30 s, and the events wait that long; with these, within 2 s.
const (
	PullExpiry    = 5 * time.Second
	PullHeartbeat = time.Second
)
