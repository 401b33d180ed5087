package view

import (
	"math"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// Bar is one bar of an SVG chart, in the chart's user units (its viewBox).
type Bar struct {
	X, Y, W, H float64
	// Label names the bar (a span of deadlines, or an order id); Value is
	// its formatted value. Both also go into the bar's accessible title.
	Label, Value string
	// Alert marks a bar drawn in the warning colour (a missed expiry, the
	// deadlines already due).
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
	// HistWidth and HistHeight are the size of the deadlines' histogram,
	// its axis labels included.
	HistWidth, HistHeight = 320.0, 112.0
	// HistAxisHeight is the space under the histogram's bars for the
	// axis labels.
	HistAxisHeight = 16.0
	// LatWidth and LatHeight are the size of the lateness chart.
	LatWidth, LatHeight = 320.0, 64.0
	// minBar is the shortest drawn length of a non-zero bar, so that 3
	// next to 1,000,000 stays visible.
	minBar = 2.0
)

// Tick is a label of the histogram's time axis, centred on X unless
// Anchor says "start" or "end" (SVG's text-anchor).
type Tick struct {
	X            float64
	Text, Anchor string
}

// Histogram is the geometry and the texts of the deadlines' histogram.
type Histogram struct {
	Chart
	// Ticks label the time axis: "now", the middle and the end of the
	// buckets ("+6m", "+12m").
	Ticks []Tick
	// Caption says what a bar spans and the tallest count, "bars of 30s,
	// tallest 1,234", or "nothing pending".
	Caption string
	// Summary is the whole chart as one sentence, for screen readers.
	Summary string
}

// Deadlines lays out the histogram of pending deadlines as vertical bars
// along a time axis, left to right: the deadlines already due (when any,
// in the warning colour), one bar per bucket from now on, and the
// deadlines beyond the last bucket (when any). Heights are proportional
// to the tallest bar.
func Deadlines(d api.Deadlines) Histogram {
	h := Histogram{Chart: Chart{Width: HistWidth, Height: HistHeight}}
	width := time.Duration(d.WidthMs) * time.Millisecond
	type slot struct {
		label string
		count int64
		alert bool
	}
	var slots []slot
	if d.Due > 0 {
		slots = append(slots, slot{"due", d.Due, true})
	}
	for i, c := range d.Counts {
		slots = append(slots, slot{"in " + FormatSpan(time.Duration(i)*width) + "–" + FormatSpan(time.Duration(i+1)*width), c, false})
	}
	end := time.Duration(len(d.Counts)) * width
	if d.Later > 0 {
		slots = append(slots, slot{"after " + FormatSpan(end), d.Later, false})
	}
	pending, peak := int64(0), int64(0)
	for _, s := range slots {
		pending += s.count
		peak = max(peak, s.count)
	}
	h.Max = FormatCount(peak)
	if len(slots) == 0 {
		h.Caption, h.Summary = "nothing pending", "Upcoming expiries: nothing pending."
		return h
	}
	h.Caption = "bars of " + FormatSpan(width) + ", tallest " + h.Max
	step, area := HistWidth/float64(len(slots)), HistHeight-HistAxisHeight
	parts := make([]string, len(slots))
	for i, s := range slots {
		bh := 0.0
		if s.count > 0 {
			bh = max(minBar, area*float64(s.count)/float64(peak))
		}
		h.Bars = append(h.Bars, Bar{X: float64(i)*step + step*0.1, Y: area - bh, W: step * 0.8, H: bh,
			Label: s.label, Value: FormatCount(s.count), Alert: s.alert})
		parts[i] = s.label + " " + FormatCount(s.count)
	}
	h.Summary = "Upcoming expiries of " + FormatCount(pending) + " pending, bars of " + FormatSpan(width) + ": " + strings.Join(parts, "; ") + "."
	if n := len(d.Counts); n > 0 {
		// The ticks at the chart's edges align inwards; between two bars,
		// on the boundary.
		first, firstAnchor, lastAnchor := 0.0, "start", "end"
		if d.Due > 0 {
			first, firstAnchor = step, "middle"
		}
		if d.Later > 0 {
			lastAnchor = "middle"
		}
		h.Ticks = append(h.Ticks, Tick{X: first, Text: "now", Anchor: firstAnchor})
		if n >= 4 {
			h.Ticks = append(h.Ticks, Tick{X: first + float64(n/2)*step, Text: "+" + FormatSpan(time.Duration(n/2)*width), Anchor: "middle"})
		}
		h.Ticks = append(h.Ticks, Tick{X: first + float64(n)*step, Text: "+" + FormatSpan(end), Anchor: lastAnchor})
	}
	return h
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
