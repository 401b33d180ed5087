package main

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
)

// The picture's size and the plot area's margins, in pixels.
const (
	width, height            = 900, 540
	left, right, top, bottom = 80, 30, 60, 60
	scale                    = 2 // pixels per font dot
)

// series are the four lines drawn, in legend order.
var series = []struct {
	label string
	c     color.RGBA
	value func(storm) float64
}{
	{"arrival p99", color.RGBA{200, 30, 30, 255}, func(s storm) float64 { return s.ArrivalP99 }},
	{"arrival p50", color.RGBA{240, 140, 40, 255}, func(s storm) float64 { return s.ArrivalP50 }},
	{"fired_at p99", color.RGBA{30, 60, 200, 255}, func(s storm) float64 { return s.FiredP99 }},
	{"fired_at p50", color.RGBA{80, 170, 230, 255}, func(s storm) float64 { return s.FiredP50 }},
}

var (
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{225, 225, 225, 255}
)

// render draws the storms' lateness (ms, on a log scale: the storms of one
// run can differ a hundredfold) against their time since the start
// (minutes): axes with ticks, one line and marker per series, a legend. An
// incomplete storm's markers are hollow.
func render(w io.Writer, storms []storm) error {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	xMax, yMin, yMax := 0.0, math.Inf(1), 0.0
	for _, s := range storms {
		xMax = max(xMax, s.T/60)
		for _, sr := range series {
			yMin, yMax = min(yMin, sr.value(s)), max(yMax, sr.value(s))
		}
	}
	xStep, xMax := niceAxis(xMax)
	lo, hi := logAxis(yMin, yMax)
	x0, y0, x1, y1 := left, height-bottom, width-right, top
	px := func(min float64) int { return x0 + int(math.Round(min/xMax*float64(x1-x0))) }
	py := func(ms float64) int {
		f := (math.Log10(max(ms, lo)) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		return y0 - int(math.Round(f*float64(y0-y1)))
	}
	for e := math.Round(math.Log10(lo)); e <= math.Round(math.Log10(hi)); e++ {
		v := math.Pow(10, e)
		y := py(v)
		hline(img, x0, x1, y, grey)
		hline(img, x0-5, x0, y, black)
		s := strconv.FormatFloat(v, 'f', -1, 64)
		text(img, x0-8-textWidth(s), y-5*scale/2, s, black)
	}
	for v := 0.0; v <= xMax+xStep/2; v += xStep {
		x := px(v)
		vline(img, x, y1, y0, grey)
		vline(img, x, y0, y0+5, black)
		s := strconv.FormatFloat(v, 'f', -1, 64)
		text(img, x-textWidth(s)/2, y0+10, s, black)
	}
	hline(img, x0, x1, y0, black)
	vline(img, x0, y1, y0, black)
	text(img, x0-8-textWidth("ms"), y1-20, "ms", black)
	text(img, x1-textWidth("min since start"), y0+30, "min since start", black)
	text(img, x0, 15, "storm lateness under churn", black)
	for i, sr := range series {
		lx := x0 + 20 + i*(x1-x0-20)/len(series)
		fill(img, image.Rect(lx, 40, lx+12, 48), sr.c)
		text(img, lx+18, 39, sr.label, black)
		for j, s := range storms {
			x, y := px(s.T/60), py(sr.value(s))
			if j > 0 {
				p := storms[j-1]
				line(img, px(p.T/60), py(sr.value(p)), x, y, sr.c)
			}
			marker(img, x, y, sr.c, s.Complete)
		}
	}
	return png.Encode(w, img)
}

// logAxis returns the powers of ten around [lo, hi], lo at least 0.1.
func logAxis(lo, hi float64) (float64, float64) {
	lo = math.Pow(10, math.Floor(math.Log10(max(lo, 0.1))))
	hi = math.Pow(10, math.Ceil(math.Log10(max(hi, lo*10))))
	return lo, hi
}

// niceAxis returns a tick step of 1, 2 or 5 times a power of ten giving
// about five ticks up to v, and the axis end, a multiple of the step at or
// above v.
func niceAxis(v float64) (step, end float64) {
	if v <= 0 {
		return 1, 1
	}
	raw := v / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * pow
	for _, m := range []float64{1, 2, 5} {
		if m*pow >= raw {
			step = m * pow
			break
		}
	}
	return step, math.Ceil(v/step) * step
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) { fill(img, image.Rect(x0, y, x1+1, y+1), c) }
func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) { fill(img, image.Rect(x, y0, x+1, y1+1), c) }

// line draws a two-pixel-wide segment (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		fill(img, image.Rect(x0, y0, x0+2, y0+2), c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

// marker draws a 9-pixel square at (x, y), hollow when solid is false.
func marker(img *image.RGBA, x, y int, c color.RGBA, solid bool) {
	fill(img, image.Rect(x-4, y-4, x+5, y+5), c)
	if !solid {
		fill(img, image.Rect(x-2, y-2, x+3, y+3), color.RGBA{255, 255, 255, 255})
	}
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
