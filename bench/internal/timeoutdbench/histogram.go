package timeoutdbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// pubAckMetric is timeoutd's histogram of an expiry event's PubAck time
// minus its deadline: the lateness the storm target is stated for.
const pubAckMetric = "timeoutd_fire_lateness_seconds"

// histogram is a Prometheus histogram read from the text exposition:
// cumulative counts by upper bound (seconds), and the total.
type histogram struct {
	le         map[string]float64 // the le label as printed → cumulative count
	sum, count float64
}

// parseHistogram reads the histogram name from a text exposition.
func parseHistogram(r io.Reader, name string) (histogram, error) {
	h := histogram{le: map[string]float64{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			return h, fmt.Errorf("metric line %q: %w", line, err)
		}
		switch series := rest[:i]; {
		case strings.HasPrefix(series, `_bucket{le="`):
			h.le[strings.TrimSuffix(strings.TrimPrefix(series, `_bucket{le="`), `"}`)] = v
		case series == "_sum":
			h.sum = v
		case series == "_count":
			h.count = v
		}
	}
	if err := sc.Err(); err != nil {
		return h, err
	}
	if len(h.le) == 0 {
		return h, fmt.Errorf("no histogram %s", name)
	}
	return h, nil
}

// since returns the observations made after earlier.
func (h histogram) since(earlier histogram) histogram {
	d := histogram{le: map[string]float64{}, sum: h.sum - earlier.sum, count: h.count - earlier.count}
	for le, v := range h.le {
		d.le[le] = v - earlier.le[le]
	}
	return d
}

// share returns the fraction of observations at or below the bucket bound
// le (as printed, e.g. "0.02"), or an error if there is no such bucket.
func (h histogram) share(le string) (float64, error) {
	v, ok := h.le[le]
	if !ok {
		return 0, fmt.Errorf("no bucket le=%q", le)
	}
	if h.count == 0 {
		return 0, nil
	}
	return v / h.count, nil
}

// pubAckHistogram reads timeoutd's PubAck lateness histogram from /metrics.
func (b *Bench) pubAckHistogram(ctx context.Context) (histogram, error) {
	var h histogram
	err := b.metrics(ctx, func(r io.Reader) (err error) {
		h, err = parseHistogram(r, pubAckMetric)
		return err
	})
	return h, err
}

// metrics hands timeoutd's /metrics text exposition to read.
func (b *Bench) metrics(ctx context.Context, read func(io.Reader) error) error {
	return harness.Get(ctx, b.http, b.base+"/metrics", read)
}

// parseValues reads the samples of the label-less series names (such as
// go_gc_duration_seconds_count) from a text exposition; a name without a
// sample is an error.
func parseValues(r io.Reader, names ...string) (map[string]float64, error) {
	vals := make(map[string]float64, len(names))
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", name, err)
		}
		vals[name] = f
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, name := range names {
		if _, ok := vals[name]; !ok {
			return nil, fmt.Errorf("no metric %s", name)
		}
	}
	return vals, nil
}
