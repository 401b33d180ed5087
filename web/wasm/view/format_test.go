package view

import (
	"math"
	"testing"
	"time"
)

func TestCountdown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		left time.Duration
		want string
	}{
		{"passed", -time.Second, "due"},
		{"exactly now", 0, "due"},
		{"a nanosecond left rounds up", time.Nanosecond, "1s"},
		{"under a second", 400 * time.Millisecond, "1s"},
		{"whole seconds", 42 * time.Second, "42s"},
		{"just under a minute", 59*time.Second + time.Millisecond, "1m00s"},
		{"minutes pad seconds", 4*time.Minute + 5*time.Second, "4m05s"},
		{"hours pad minutes", 3*time.Hour + 4*time.Minute, "3h04m"},
		{"days", 2*24*time.Hour + 3*time.Hour, "2d03h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Countdown(tt.left); got != tt.want {
				t.Errorf("Countdown(%v) = %q, want %q", tt.left, got, tt.want)
			}
		})
	}
}

func TestFormatMillis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ms   float64
		want string
	}{
		{"zero", 0, "0.0 ms"},
		{"sub-millisecond", 0.42, "0.4 ms"},
		{"tens", 12.4, "12 ms"},
		{"seconds", 3400, "3.4 s"},
		{"minutes", 125000, "2m05s"},
		{"negative is invalid", -1, "–"},
		{"NaN is invalid", math.NaN(), "–"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatMillis(tt.ms); got != tt.want {
				t.Errorf("FormatMillis(%v) = %q, want %q", tt.ms, got, tt.want)
			}
		})
	}
}

func TestFormatRate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		perSec float64
		want   string
	}{
		{"idle", 0, "0/s"},
		{"slow", 3.46, "3.5/s"},
		{"hundreds", 120.4, "120/s"},
		{"thousands", 12345, "12.3k/s"},
		{"NaN", math.NaN(), "0/s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatRate(tt.perSec); got != tt.want {
				t.Errorf("FormatRate(%v) = %q, want %q", tt.perSec, got, tt.want)
			}
		})
	}
}

func TestFormatCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		n    int64
		want string
	}{
		{"zero", 0, "0"},
		{"three digits", 999, "999"},
		{"four digits", 1000, "1,000"},
		{"a million", 1000000, "1,000,000"},
		{"negative", -1234567, "-1,234,567"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatCount(tt.n); got != tt.want {
				t.Errorf("FormatCount(%d) = %q, want %q", tt.n, got, tt.want)
			}
		})
	}
}

func TestFormatInstant(t *testing.T) {
	t.Parallel()
	today := time.Date(2026, 11, 23, 23, 59, 0, 0, time.UTC)
	tests := []struct {
		name string
		t    time.Time
		want string
	}{
		{"zero", time.Time{}, "–"},
		{"today: the time only", time.Date(2026, 11, 23, 7, 4, 5, 6e6, time.UTC), "07:04:05.006"},
		{"converted to UTC", time.Date(2026, 11, 23, 7, 4, 5, 6e6, time.FixedZone("CET", 3600)), "06:04:05.006"},
		{"tomorrow: the date", time.Date(2026, 11, 24, 0, 0, 1, 0, time.UTC), "Nov 24 00:00:01.000"},
		{"yesterday: the date", time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC), "Nov 22 23:00:00.000"},
		{"another year: the year", time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC), "2027-01-02 03:04:05.000"},
		{"UTC day, whatever the zone of today", time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), "12:00:00.000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatInstant(tt.t, today); got != tt.want {
				t.Errorf("FormatInstant(%v) = %q, want %q", tt.t, got, tt.want)
			}
		})
	}
}

func TestFormatSpan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {30 * time.Second, "30s"}, {90 * time.Second, "1m30s"}, {5 * time.Minute, "5m"},
		{2 * time.Hour, "2h"}, {90 * time.Minute, "1h30m"}, {24 * time.Hour, "1d"}, {27 * time.Hour, "1d03h"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := FormatSpan(tt.d); got != tt.want {
				t.Errorf("FormatSpan(%v) = %q, want %q", tt.d, got, tt.want)
			}
		})
	}
}

func TestShortKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, want string
	}{
		{"short stays", "o-1", "o-1"},
		{"at the limit stays", "abcdefghijklmnop", "abcdefghijklmnop"},
		{"uuid keeps its random tail", "01a206f7-04ab-77d2-aa89-6952a6a6d5aa", "…a6a6d5aa"},
		{"ids of one second differ in the tail", "019abb2c-7d1e-7f00-8b3a-1c2d3e4f5a6b", "…3e4f5a6b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ShortKey(tt.key); got != tt.want {
				t.Errorf("ShortKey(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}
