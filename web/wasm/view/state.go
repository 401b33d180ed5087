package view

import (
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// Conn is the state of the dashboard's event stream.
type Conn int

// The connection states, in the order a page normally goes through them.
const (
	// Connecting is the state before the first snapshot arrived.
	Connecting Conn = iota
	// Live means the stream is open and snapshots arrive.
	Live
	// Reconnecting means the stream broke; the browser retries, and the
	// first snapshot after it reopens replaces the whole state.
	Reconnecting
)

// String returns the label shown in the header.
func (c Conn) String() string {
	switch c {
	case Live:
		return "live"
	case Reconnecting:
		return "reconnecting"
	default:
		return "connecting"
	}
}

// State is everything the dashboard shows. The zero value is a page that
// waits for its first snapshot.
type State struct {
	// Conn is the stream's state.
	Conn Conn
	// Snapshots counts the snapshots applied since the page loaded.
	Snapshots int
	// Stats, Soonest and Recent are the last snapshot's, as sent.
	Stats   api.Stats
	Soonest []api.Timeout
	Recent  []api.Expiry
	// Cluster is the last snapshot's view of the timeoutd cluster.
	Cluster api.Cluster
	// Skew is the server's clock minus the browser's when the last
	// snapshot arrived; countdowns add it so a browser with a wrong clock
	// still counts down to the server's deadlines.
	Skew time.Duration
	// Browse is the search and paging state of the pending list.
	Browse Browse
}

// HasData reports whether at least one snapshot was applied.
func (s *State) HasData() bool { return s.Snapshots > 0 }

// ApplySnapshot replaces the shown data by snap, received at the browser's
// instant now, and marks the stream live. A snapshot always replaces the
// whole state, which is how the page resyncs after a reconnect.
func (s *State) ApplySnapshot(snap api.Snapshot, now time.Time) {
	s.Stats = snap.Stats
	s.Soonest = snap.Soonest
	s.Recent = snap.Recent
	s.Cluster = snap.Cluster
	s.Conn = Live
	s.Snapshots++
	if !snap.Stats.Now.IsZero() {
		s.Skew = snap.Stats.Now.Sub(now)
	}
}

// Disconnected records that the stream broke. The shown data stays (marked
// stale by the connection state) until a new snapshot replaces it.
func (s *State) Disconnected() {
	if s.Conn == Live {
		s.Conn = Reconnecting
	}
}

// ServerNow is the server's current time estimated from the browser's
// instant now.
func (s *State) ServerNow(now time.Time) time.Time { return now.Add(s.Skew) }

// Pending is the list the pending table shows: the live soonest timeouts,
// or the browsed page when the operator searches or pages.
func (s *State) Pending() []api.Timeout {
	if s.Browse.Active() {
		return s.Browse.Page.Items
	}
	return s.Soonest
}

// Row is one line of the pending table, formatted.
type Row struct {
	Key     string
	Version int64
	// Deadline is the deadline in UTC, with its date when it is not today.
	Deadline  string
	Countdown string
	// Due is true once the deadline passed (the expiry is on its way).
	Due bool
	// Soon is true when fewer than SoonThreshold remain.
	Soon bool
}

// SoonThreshold is the remaining time under which a row is highlighted.
const SoonThreshold = 10 * time.Second

// Rows formats the pending table at the browser's instant now.
func (s *State) Rows(now time.Time) []Row {
	server := s.ServerNow(now)
	items := s.Pending()
	rows := make([]Row, len(items))
	for i, t := range items {
		left := t.Deadline.Sub(server)
		rows[i] = Row{
			Key:       t.Key,
			Version:   t.Version,
			Deadline:  FormatInstant(t.Deadline, server),
			Countdown: Countdown(left),
			Due:       left <= 0,
			Soon:      left > 0 && left < SoonThreshold,
		}
	}
	return rows
}

// FeedItem is one line of the recent-expiries feed, formatted.
type FeedItem struct {
	Key     string
	Version int64
	// FiredAt is the instant of the fire in UTC, with its date when it is
	// not today.
	FiredAt  string
	Lateness string
	// Missed is true when the timeout was too late and not fired.
	Missed bool
}

// Feed formats the recent expiries, newest first as the server sends them,
// at the browser's instant now.
func (s *State) Feed(now time.Time) []FeedItem {
	server := s.ServerNow(now)
	items := make([]FeedItem, len(s.Recent))
	for i, e := range s.Recent {
		items[i] = FeedItem{
			Key:      e.Key,
			Version:  e.Version,
			FiredAt:  FormatInstant(e.FiredAt, server),
			Lateness: FormatMillis(e.LatenessMs),
			Missed:   e.Outcome == "missed",
		}
	}
	return items
}

// Header is the header's figures, formatted.
type Header struct {
	// Conn is the connection state, with ", recovering" while timeoutd
	// still loads its pending timeouts.
	Conn      string
	Pending   string
	Scheduled string
	Fired     string
	Cleared   string
	// OutboxAge is the age of the oldest unpublished cancel event, or "none".
	OutboxAge string
}

// Header formats the header.
func (s *State) Header() Header {
	h := Header{Conn: s.Conn.String(), Pending: "–", Scheduled: "–", Fired: "–", Cleared: "–", OutboxAge: "–"}
	if !s.HasData() {
		return h
	}
	st := s.Stats
	if s.Conn == Live && !st.Ready {
		h.Conn = "live, recovering"
	}
	h.Pending = FormatCount(st.Pending)
	h.Scheduled = FormatRate(st.Rates.ScheduledPerSec)
	h.Fired = FormatRate(st.Rates.FiredPerSec)
	h.Cleared = FormatRate(st.Rates.ClearedPerSec)
	h.OutboxAge = "none"
	if st.Outbox.Rows > 0 {
		h.OutboxAge = FormatMillis(st.Outbox.OldestAgeMs)
	}
	return h
}
