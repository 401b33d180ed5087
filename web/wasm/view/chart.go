package view

import (
	"math"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// Bar is one bar of an SVG chart, in the chart's user units (its viewBox).
type Bar struct {
	X, Y, W, H float64
	// Label names the bar (a horizon, or an order id); Value is its
	// formatted value. Both also go into the bar's accessible title.
	Label, Value string
	// Alert marks a bar drawn in the warning colour (a missed expiry).
	Alert bool
}

// Chart is the geometry of one chart.
type Chart struct {
	// Width and Height are the viewBox's size.
	Width, Height float64
	Bars          []Bar
	// Max is the formatted value of a full-length bar.
	Max string
}

// Geometry of the charts, in viewBox units; CSS scales the SVG to its box.
const (
	// HistWidth and HistHeight are the size of the upcoming-expiries chart.
	HistWidth, HistHeight = 320.0, 96.0
	// HistLabelWidth is the space left of the bars for the horizons' names.
	HistLabelWidth = 96.0
	// HistValueWidth is the space right of the bars for the counts.
	HistValueWidth = 64.0
	// LatWidth and LatHeight are the size of the lateness chart.
	LatWidth, LatHeight = 320.0, 64.0
	// minBar is the shortest drawn length of a non-zero bar, so that 3
	// next to 1,000,000 stays visible.
	minBar = 2.0
)

// Histogram lays out the upcoming-expiry buckets as horizontal bars, one
// row per bucket in the order given, lengths proportional to the counts.
func Histogram(buckets []api.Bucket) Chart {
	c := Chart{Width: HistWidth, Height: HistHeight}
	var peak int64
	for _, b := range buckets {
		peak = max(peak, b.Count)
	}
	c.Max = FormatCount(peak)
	if len(buckets) == 0 {
		return c
	}
	rowH := HistHeight / float64(len(buckets))
	span := HistWidth - HistLabelWidth - HistValueWidth
	for i, b := range buckets {
		w := 0.0
		if peak > 0 && b.Count > 0 {
			w = max(minBar, span*float64(b.Count)/float64(peak))
		}
		c.Bars = append(c.Bars, Bar{
			X: HistLabelWidth, Y: float64(i)*rowH + rowH*0.2, W: w, H: rowH * 0.6,
			Label: b.Label, Value: FormatCount(b.Count),
		})
	}
	return c
}

// Lateness lays out the lateness of recent expiries as vertical bars,
// oldest on the left; recent is newest first, as the API sends it. Heights
// are proportional to the largest lateness shown.
func Lateness(recent []api.Expiry) Chart {
	c := Chart{Width: LatWidth, Height: LatHeight}
	peak := 0.0
	for _, e := range recent {
		if !math.IsNaN(e.LatenessMs) {
			peak = max(peak, e.LatenessMs)
		}
	}
	c.Max = FormatMillis(peak)
	n := len(recent)
	if n == 0 {
		return c
	}
	slot := LatWidth / float64(n)
	for i := range n {
		e := recent[n-1-i]
		h := 0.0
		if peak > 0 && e.LatenessMs > 0 {
			h = max(minBar, LatHeight*e.LatenessMs/peak)
		}
		c.Bars = append(c.Bars, Bar{
			X: float64(i)*slot + slot*0.15, Y: LatHeight - h, W: slot * 0.7, H: h,
			Label: e.Key, Value: FormatMillis(e.LatenessMs), Alert: e.Outcome == "missed",
		})
	}
	return c
}
