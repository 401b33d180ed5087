package view

import (
	"slices"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

var t0 = time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)

func snapshot(pending int64, keys ...string) api.Snapshot {
	s := api.Snapshot{Stats: api.Stats{Now: t0, Ready: true, Pending: pending}}
	for i, k := range keys {
		s.Soonest = append(s.Soonest, api.Timeout{Key: k, Version: int64(i + 1), Deadline: t0.Add(time.Duration(i+1) * 10 * time.Second)})
	}
	return s
}

func TestStateConnection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps func(s *State)
		want  Conn
		snaps int
	}{
		{"new page connects", func(s *State) {}, Connecting, 0},
		{"error before any data stays connecting", func(s *State) { s.Disconnected() }, Connecting, 0},
		{"first snapshot is live", func(s *State) { s.ApplySnapshot(snapshot(1, "a"), t0) }, Live, 1},
		{"error after data reconnects", func(s *State) {
			s.ApplySnapshot(snapshot(1, "a"), t0)
			s.Disconnected()
		}, Reconnecting, 1},
		{"snapshot after reconnect is live again", func(s *State) {
			s.ApplySnapshot(snapshot(1, "a"), t0)
			s.Disconnected()
			s.ApplySnapshot(snapshot(2, "b", "c"), t0)
		}, Live, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s State
			tt.steps(&s)
			if s.Conn != tt.want || s.Snapshots != tt.snaps {
				t.Errorf("conn %v after %d snapshots, want %v after %d", s.Conn, s.Snapshots, tt.want, tt.snaps)
			}
		})
	}
}

func TestApplySnapshotReplacesState(t *testing.T) {
	t.Parallel()
	var s State
	s.ApplySnapshot(snapshot(3, "a", "b", "c"), t0)
	s.Disconnected()
	s.ApplySnapshot(snapshot(1, "z"), t0)
	if got := s.Rows(t0); len(got) != 1 || got[0].Key != "z" {
		t.Fatalf("rows after resync = %+v, want only z", got)
	}
	if h := s.Header(); h.Pending != "1" || h.Conn != "live" {
		t.Errorf("header after resync = %+v", h)
	}
}

func TestRowsCountDownWithServerClock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		browserSkew time.Duration // browser clock minus server clock
		elapsed     time.Duration // since the snapshot arrived
		want        []string
		due, soon   []bool
	}{
		{"on arrival", 0, 0, []string{"10s", "20s"}, []bool{false, false}, []bool{false, false}},
		{"ticks down", 0, 3 * time.Second, []string{"7s", "17s"}, []bool{false, false}, []bool{true, false}},
		{"due after the deadline", 0, 12 * time.Second, []string{"due", "8s"}, []bool{true, false}, []bool{false, true}},
		{"browser clock an hour fast", time.Hour, 3 * time.Second, []string{"7s", "17s"}, []bool{false, false}, []bool{true, false}},
		{"browser clock a minute slow", -time.Minute, 0, []string{"10s", "20s"}, []bool{false, false}, []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s State
			arrived := t0.Add(tt.browserSkew)
			s.ApplySnapshot(snapshot(2, "a", "b"), arrived)
			rows := s.Rows(arrived.Add(tt.elapsed))
			for i, r := range rows {
				if r.Countdown != tt.want[i] || r.Due != tt.due[i] || r.Soon != tt.soon[i] {
					t.Errorf("row %d = %+v, want countdown %q due %v soon %v", i, r, tt.want[i], tt.due[i], tt.soon[i])
				}
			}
			if rows[0].Deadline != "06:00:10.000" || rows[1].Version != 2 {
				t.Errorf("row fields = %+v", rows)
			}
		})
	}
}

func TestRowsDateDeadlinesNotTodayOnTheServer(t *testing.T) {
	t.Parallel()
	lateEvening := time.Date(2026, 11, 23, 23, 59, 50, 0, time.UTC)
	tests := []struct {
		name        string
		browserSkew time.Duration // browser clock minus server clock
		elapsed     time.Duration // since the snapshot arrived
		want        []string
	}{
		{"today, then tomorrow", 0, 0, []string{"23:59:55.000", "Nov 24 00:00:30.000"}},
		{"after midnight, yesterday and today", 0, 20 * time.Second, []string{"Nov 23 23:59:55.000", "00:00:30.000"}},
		{"a browser a day ahead follows the server's day", 24 * time.Hour, 0, []string{"23:59:55.000", "Nov 24 00:00:30.000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s State
			s.ApplySnapshot(api.Snapshot{Stats: api.Stats{Now: lateEvening}, Soonest: []api.Timeout{
				{Key: "a", Deadline: lateEvening.Add(5 * time.Second)},
				{Key: "b", Deadline: lateEvening.Add(40 * time.Second)},
			}}, lateEvening.Add(tt.browserSkew))
			rows := s.Rows(lateEvening.Add(tt.browserSkew + tt.elapsed))
			if got := []string{rows[0].Deadline, rows[1].Deadline}; !slices.Equal(got, tt.want) {
				t.Errorf("deadlines = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHeader(t *testing.T) {
	t.Parallel()
	full := api.Stats{
		Now: t0, Ready: true, Pending: 1234567,
		Rates:  api.Rates{ScheduledPerSec: 12345, FiredPerSec: 3.21, ClearedPerSec: 0},
		Outbox: api.Outbox{Rows: 2, OldestAgeMs: 340},
	}
	tests := []struct {
		name  string
		stats *api.Stats
		want  Header
	}{
		{"before data", nil, Header{Conn: "connecting", Pending: "–", Scheduled: "–", Fired: "–", Cleared: "–", OutboxAge: "–"}},
		{"figures", &full, Header{Conn: "live", Pending: "1,234,567", Scheduled: "12.3k/s", Fired: "3.2/s", Cleared: "0/s", OutboxAge: "340 ms"}},
		{"recovering, empty outbox", &api.Stats{Now: t0}, Header{Conn: "live, recovering", Pending: "0", Scheduled: "0/s", Fired: "0/s", Cleared: "0/s", OutboxAge: "none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s State
			if tt.stats != nil {
				s.ApplySnapshot(api.Snapshot{Stats: *tt.stats}, t0)
			}
			if got := s.Header(); got != tt.want {
				t.Errorf("Header() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFeed(t *testing.T) {
	t.Parallel()
	var s State
	s.ApplySnapshot(api.Snapshot{Stats: api.Stats{Now: t0}, Recent: []api.Expiry{
		{Key: "o-2", Version: 3, FiredAt: t0.Add(1500 * time.Microsecond), LatenessMs: 1.5, Outcome: "fired"},
		{Key: "o-1", Version: 1, FiredAt: t0.Add(-time.Minute), LatenessMs: 90000, Outcome: "missed"},
		{Key: "o-0", Version: 1, FiredAt: t0.Add(-7 * time.Hour), LatenessMs: 2, Outcome: "fired"},
	}}, t0)
	want := []FeedItem{
		{Key: "o-2", Version: 3, FiredAt: "06:00:00.001", Lateness: "1.5 ms"},
		{Key: "o-1", Version: 1, FiredAt: "05:59:00.000", Lateness: "1m30s", Missed: true},
		{Key: "o-0", Version: 1, FiredAt: "Nov 22 23:00:00.000", Lateness: "2.0 ms"},
	}
	got := s.Feed(t0)
	if len(got) != len(want) {
		t.Fatalf("Feed() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("item %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
