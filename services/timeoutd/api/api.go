// Package api holds the JSON types of timeoutd's HTTP API under /api/v1,
// shared by the server and the WebAssembly dashboard (web/wasm). It depends
// on the standard library only, so it compiles for GOOS=js.
//
// Endpoints (all GET, JSON unless noted; errors are application/problem+json):
//
//	/api/v1/timeouts?limit=50&cursor=…&key=…   Page of pending timeouts sorted by (deadline, key);
//	                                             key filters by key prefix; cursor is NextCursor
//	/api/v1/timeouts/{key}                       one Timeout (404 when the key is not pending)
//	/api/v1/stats                                Stats
//	/api/v1/expiries?limit=50                    ExpiryList, newest first
//	/api/v1/stream?soonest=20&recent=20          text/event-stream of "snapshot" events (Snapshot)
//
// When timeoutd has a read token (TIMEOUTD_READ_TOKEN), the payloads of
// pending timeouts are sent only to requests with "Authorization: Bearer
// <read token>" (or the operator token); others get them withheld
// (Timeout.PayloadHidden), and a request with a wrong token gets 401. The
// stream (EventSource sends no header) therefore carries no payloads then.
// Beyond TIMEOUTD_MAX_STREAMS concurrent streams, /api/v1/stream answers
// 503 with Retry-After.
//
// When Stats.OperatorActions is true (TIMEOUTD_OPERATOR_TOKEN set), two POST
// routes forward to the orders API with timeoutd's own token and relay its
// status and body; they need "Authorization: Bearer <operator token>":
//
//	POST /api/v1/orders/{id}/cancel              no body
//	POST /api/v1/orders/{id}/extend              {"pay_within":"15m"} or {"pay_by":"<RFC 3339>"}
package api

import (
	"encoding/json"
	"time"
)

// Limits of the list endpoints.
const (
	// LimitDefault is the page size when limit is absent.
	LimitDefault = 50
	// LimitMax is the largest accepted limit; a larger one is a 400.
	LimitMax = 500
)

// Timeout is one pending timeout.
type Timeout struct {
	Key         string    `json:"key"`
	Version     int64     `json:"version"`
	Deadline    time.Time `json:"deadline"`
	FireSubject string    `json:"fire_subject"`
	Partition   int       `json:"partition"`
	// MaxLatenessMs is the misfire bound; 0 means fire however late.
	MaxLatenessMs int64           `json:"max_lateness_ms,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	// PayloadHidden is true when the timeout has a payload that was
	// withheld: timeoutd has a read token (TIMEOUTD_READ_TOKEN) and the
	// request did not carry it.
	PayloadHidden bool `json:"payload_hidden,omitempty"`
}

// Page is a page of pending timeouts.
type Page struct {
	Items []Timeout `json:"items"`
	// NextCursor fetches the next page; empty on the last one.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Expiry is a timeout that expired recently.
type Expiry struct {
	Key      string    `json:"key"`
	Version  int64     `json:"version"`
	Deadline time.Time `json:"deadline"`
	FiredAt  time.Time `json:"fired_at"`
	// LatenessMs is FiredAt minus Deadline, in milliseconds; never negative.
	LatenessMs float64 `json:"lateness_ms"`
	// Outcome is "fired" or "missed" (see pkg/events).
	Outcome string `json:"outcome"`
}

// ExpiryList is the answer of /api/v1/expiries.
type ExpiryList struct {
	Items []Expiry `json:"items"`
}

// Counters are totals since the process started.
type Counters struct {
	Scheduled    uint64 `json:"scheduled"`
	Cleared      uint64 `json:"cleared"`
	Fired        uint64 `json:"fired"`
	Missed       uint64 `json:"missed"`
	DeadLettered uint64 `json:"dead_lettered"`
}

// Rates are per-second rates over the last few seconds.
type Rates struct {
	ScheduledPerSec float64 `json:"scheduled_per_sec"`
	ClearedPerSec   float64 `json:"cleared_per_sec"`
	FiredPerSec     float64 `json:"fired_per_sec"`
}

// Outbox describes the fire path's backlog: the expiry events fired and not
// yet marked published (the timeout rows are the outbox), and the time since
// the oldest one's fire.
type Outbox struct {
	Rows        int64   `json:"rows"`
	OldestAgeMs float64 `json:"oldest_age_ms"`
}

// Bucket counts the pending timeouts due within a horizon from Stats.Now,
// the overdue included.
type Bucket struct {
	// Label is a human name, e.g. "next minute".
	Label string `json:"label"`
	// WithinMs is the horizon in milliseconds.
	WithinMs int64 `json:"within_ms"`
	Count    int64 `json:"count"`
}

// Deadlines is the histogram of the pending timeouts' deadlines, counted
// from timeoutd's memory at the same instant as Stats.Pending, so that Due,
// the Counts and Later add up to Pending. A deadline counts by its second:
// one within From's second is in the first bucket.
type Deadlines struct {
	// From is the start of the first bucket: Stats.Now truncated to the
	// second.
	From time.Time `json:"from"`
	// WidthMs is every bucket's width in milliseconds: the narrowest of
	// 1 s, 5 s, 10 s, 30 s, 1 min, 5 min, 10 min, 30 min and 1 h of which
	// at most 24 buckets reach the latest deadline, or a day.
	WidthMs int64 `json:"width_ms"`
	// Due counts the timeouts whose deadline second is before From's: due
	// and being fired.
	Due int64 `json:"due"`
	// Counts[i] counts the deadlines from From + i×WidthMs to From +
	// (i+1)×WidthMs, end excluded; empty when nothing is due after From.
	Counts []int64 `json:"counts"`
	// Later counts the deadlines after the last bucket: more than a day
	// ahead.
	Later int64 `json:"later"`
}

// Stats is the answer of /api/v1/stats.
type Stats struct {
	// OperatorActions tells the dashboard that the operator routes
	// (extend, cancel) are enabled.
	OperatorActions bool      `json:"operator_actions,omitempty"`
	Now             time.Time `json:"now"`
	Ready           bool      `json:"ready"`
	Pending         int64     `json:"pending"`
	Totals          Counters  `json:"totals"`
	Rates           Rates     `json:"rates"`
	Outbox          Outbox    `json:"outbox"`
	// Deadlines is the histogram of the pending deadlines (the dashboard's
	// "Upcoming expiries").
	Deadlines Deadlines `json:"deadlines"`
	// Upcoming has the buckets next minute, next 10 minutes, next hour, in
	// that order; each count includes the shorter horizons. Counted with
	// Deadlines, it is kept for clients from before the histogram.
	Upcoming []Bucket `json:"upcoming"`
}

// Instance is one live timeoutd instance of the cluster.
type Instance struct {
	ID        string    `json:"id"`
	StartedAt time.Time `json:"started_at"`
	// Self marks the instance that answered.
	Self bool `json:"self,omitempty"`
	// Partitions are the key partitions it owns (of Cluster.Partitions).
	Partitions []int `json:"partitions"`
	// Pending is the number of timeouts it holds.
	Pending     int64   `json:"pending"`
	Fired       uint64  `json:"fired"`
	FiredPerSec float64 `json:"fired_per_sec"`
	// LatenessP50Ms and LatenessMaxMs are over its recent expiries.
	LatenessP50Ms float64 `json:"lateness_p50_ms"`
	LatenessMaxMs float64 `json:"lateness_max_ms"`
}

// Cluster is the answer of /api/v1/cluster: every live instance, as of the
// answering instance's last lease round (about a second old at most).
type Cluster struct {
	// Partitions is the number of key partitions (pkg/events.Partitions).
	Partitions int        `json:"partitions"`
	Instances  []Instance `json:"instances"`
	// Ownership is every partition's owner as it really is, by partition
	// (empty before the first lease round); MayFire counts those whose
	// owner may fire them now.
	Ownership []PartitionOwner `json:"ownership"`
	MayFire   int              `json:"may_fire"`
}

// PartitionOwner is a partition's owner as it really is: its lease by the
// rules the instances apply (the grace after a restart of Postgres or a
// silence of the cluster, crash detection), and whether its owner may
// fire it now, by the owner's own gate.
type PartitionOwner struct {
	Partition int    `json:"partition"`
	Owner     string `json:"owner,omitempty"`
	Epoch     int64  `json:"epoch"`
	// Lease is "held", "grace" (expired by its own expiry, kept for its
	// owner to renew), "expired", "orphaned" (its owner crashed) or
	// "free".
	Lease string `json:"lease"`
	// MayFire is true when its owner may fire it now; Why says why not:
	// "unowned", "in_grace", "opening" (its takeover not done),
	// "untrusted" (its owner's leases not renewed in time) or
	// "out_of_contact" (its owner cut off from Postgres).
	MayFire bool   `json:"may_fire"`
	Why     string `json:"why,omitempty"`
}

// Snapshot is the data of each "snapshot" event of /api/v1/stream: the whole
// state a dashboard shows, so a reconnecting client resyncs from one event.
// The server coalesces changes and sends at most a few per second, and a
// comment line as heartbeat when nothing changes.
type Snapshot struct {
	Stats   Stats     `json:"stats"`
	Soonest []Timeout `json:"soonest"`
	Recent  []Expiry  `json:"recent"`
	Cluster Cluster   `json:"cluster"`
}
