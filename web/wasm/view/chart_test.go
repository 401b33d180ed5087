package view

import (
	"testing"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

func TestDeadlines(t *testing.T) {
	t.Parallel()
	area := HistHeight - HistAxisHeight
	tests := []struct {
		name    string
		d       api.Deadlines
		labels  []string
		heights []float64
		alerts  []bool
		ticks   []string
		caption string
		summary string
	}{
		{"nothing pending", api.Deadlines{WidthMs: 1000, Counts: []int64{}}, nil, nil, nil, nil,
			"nothing pending", "Upcoming expiries: nothing pending."},
		{"seconds", api.Deadlines{WidthMs: 1000, Counts: []int64{1, 0, 2}},
			[]string{"in 0s–1s", "in 1s–2s", "in 2s–3s"}, []float64{area / 2, 0, area}, []bool{false, false, false},
			[]string{"now", "+3s"}, "bars of 1s, tallest 2", "Upcoming expiries of 3 pending, bars of 1s: in 0s–1s 1; in 1s–2s 0; in 2s–3s 2."},
		{"due and later apart, tiny counts visible", api.Deadlines{WidthMs: 3600000, Due: 1, Counts: []int64{1000000, 0, 0, 5}, Later: 3},
			[]string{"due", "in 0s–1h", "in 1h–2h", "in 2h–3h", "in 3h–4h", "after 4h"}, []float64{minBar, area, 0, 0, minBar, minBar},
			[]bool{true, false, false, false, false, false}, []string{"now", "+2h", "+4h"}, "bars of 1h, tallest 1,000,000",
			"Upcoming expiries of 1,000,009 pending, bars of 1h: due 1; in 0s–1h 1,000,000; in 1h–2h 0; in 2h–3h 0; in 3h–4h 5; after 4h 3."},
		{"only due", api.Deadlines{WidthMs: 1000, Due: 4, Counts: []int64{}}, []string{"due"}, []float64{area}, []bool{true}, nil,
			"bars of 1s, tallest 4", "Upcoming expiries of 4 pending, bars of 1s: due 4."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := Deadlines(tt.d)
			if h.Caption != tt.caption || h.Summary != tt.summary || len(h.Bars) != len(tt.labels) || len(h.Ticks) != len(tt.ticks) {
				t.Fatalf("Deadlines = %+v, want caption %q, summary %q, %d bars, ticks %q", h, tt.caption, tt.summary, len(tt.labels), tt.ticks)
			}
			for i, b := range h.Bars {
				if b.Label != tt.labels[i] || b.H != tt.heights[i] || b.Alert != tt.alerts[i] || b.Y+b.H != area {
					t.Errorf("bar %d = %+v, want %q of height %v, alert %v, on the axis", i, b, tt.labels[i], tt.heights[i], tt.alerts[i])
				}
				if b.X < 0 || b.X+b.W > HistWidth || (i > 0 && b.X <= h.Bars[i-1].X+h.Bars[i-1].W) {
					t.Errorf("bar %d = %+v leaves the chart or meets its neighbour", i, b)
				}
			}
			for i, tk := range h.Ticks {
				if tk.Text != tt.ticks[i] || tk.X < 0 || tk.X > HistWidth {
					t.Errorf("tick %d = %+v, want %q within the chart", i, tk, tt.ticks[i])
				}
			}
		})
	}
}

func TestLateness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		recent  []api.Expiry // newest first
		heights []float64    // oldest first
		alerts  []bool
		max     string
	}{
		{"none", nil, nil, nil, "0.0 ms"},
		{"zero lateness draws nothing", []api.Expiry{{Key: "a"}}, []float64{0}, []bool{false}, "0.0 ms"},
		{"oldest on the left, scaled to the peak", []api.Expiry{
			{Key: "new", LatenessMs: 5, Outcome: "fired"},
			{Key: "old", LatenessMs: 20, Outcome: "missed"},
		}, []float64{LatHeight, LatHeight / 4}, []bool{true, false}, "20 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Lateness(tt.recent)
			if c.Max != tt.max || len(c.Bars) != len(tt.heights) {
				t.Fatalf("Lateness = %+v, want max %q and %d bars", c, tt.max, len(tt.heights))
			}
			for i, b := range c.Bars {
				if b.H != tt.heights[i] || b.Alert != tt.alerts[i] || b.Y+b.H != LatHeight {
					t.Errorf("bar %d = %+v, want height %v alert %v on the baseline", i, b, tt.heights[i], tt.alerts[i])
				}
				if b.X < 0 || b.X+b.W > LatWidth {
					t.Errorf("bar %d = %+v leaves the chart", i, b)
				}
			}
		})
	}
}
