package inflight

import "time"

// PullExpiry and PullHeartbeat are the settings of a consumer's pull
// requests. With nats.go's defaults (a 30 s expiry, a heartbeat every
// 15 s) a pull request lost with its consumer's leader (a NATS node killed
// while the client stays connected to another) is noticed only after two
// missed heartbeats, 30 s, and the events wait that long: with these, it
// is pulled again within 2 s, once a new leader is elected.
const (
	PullExpiry    = 5 * time.Second
	PullHeartbeat = time.Second
)
