package view

import (
	"testing"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

func TestHistogram(t *testing.T) {
	t.Parallel()
	span := HistWidth - HistLabelWidth - HistValueWidth
	tests := []struct {
		name    string
		buckets []api.Bucket
		widths  []float64
		max     string
	}{
		{"no buckets", nil, nil, "0"},
		{"all empty", []api.Bucket{{Label: "next minute"}, {Label: "next hour"}}, []float64{0, 0}, "0"},
		{"proportional", []api.Bucket{{Label: "next minute", Count: 25}, {Label: "next 10 minutes", Count: 50}, {Label: "next hour", Count: 100}},
			[]float64{span / 4, span / 2, span}, "100"},
		{"tiny counts stay visible", []api.Bucket{{Label: "next minute", Count: 1}, {Label: "next hour", Count: 1000000}},
			[]float64{minBar, span}, "1,000,000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Histogram(tt.buckets)
			if c.Max != tt.max || len(c.Bars) != len(tt.widths) {
				t.Fatalf("Histogram = %+v, want max %q and %d bars", c, tt.max, len(tt.widths))
			}
			for i, b := range c.Bars {
				if b.W != tt.widths[i] || b.Label != tt.buckets[i].Label {
					t.Errorf("bar %d = %+v, want width %v", i, b, tt.widths[i])
				}
				if b.X+b.W > HistWidth-HistValueWidth || b.Y < 0 || b.Y+b.H > HistHeight {
					t.Errorf("bar %d = %+v leaves its area", i, b)
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
