package timeoutdbench

import (
	"maps"
	"strings"
	"testing"
)

func TestHistogramSince(t *testing.T) {
	t.Parallel()
	const before = `# HELP timeoutd_fire_lateness_seconds Expiry event PubAck time minus the timeout's deadline.
# TYPE timeoutd_fire_lateness_seconds histogram
timeoutd_fire_lateness_seconds_bucket{le="0.005"} 10
timeoutd_fire_lateness_seconds_bucket{le="0.02"} 20
timeoutd_fire_lateness_seconds_bucket{le="+Inf"} 30
timeoutd_fire_lateness_seconds_sum 1.5
timeoutd_fire_lateness_seconds_count 30
timeoutd_pending 7
`
	const after = `timeoutd_fire_lateness_seconds_bucket{le="0.005"} 60
timeoutd_fire_lateness_seconds_bucket{le="0.02"} 119
timeoutd_fire_lateness_seconds_bucket{le="+Inf"} 130
timeoutd_fire_lateness_seconds_sum 2.5
timeoutd_fire_lateness_seconds_count 130
`
	h0, err := parseHistogram(strings.NewReader(before), pubAckMetric)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := parseHistogram(strings.NewReader(after), pubAckMetric)
	if err != nil {
		t.Fatal(err)
	}
	d := h1.since(h0)
	tests := []struct {
		le   string
		want float64
	}{
		{"0.005", 0.50},
		{"0.02", 0.99},
		{"+Inf", 1},
	}
	for _, tc := range tests {
		got, err := d.share(tc.le)
		if err != nil || got != tc.want {
			t.Errorf("share(%s) = %v, %v; want %v", tc.le, got, err, tc.want)
		}
	}
	if d.count != 100 || d.sum != 1 {
		t.Errorf("count, sum = %v, %v; want 100, 1", d.count, d.sum)
	}
	if _, err := d.share("0.1"); err == nil {
		t.Error("share of a missing bucket: no error")
	}
	if _, err := parseHistogram(strings.NewReader("timeoutd_pending 7\n"), pubAckMetric); err == nil {
		t.Error("parse without the histogram: no error")
	}
}

func TestParseValues(t *testing.T) {
	t.Parallel()
	const text = `# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.0001
go_gc_duration_seconds_sum 0.25
go_gc_duration_seconds_count 42
go_gc_duration_seconds_countx 9
`
	tests := []struct {
		name    string
		names   []string
		want    map[string]float64
		wantErr bool
	}{
		{"label-less samples", []string{"go_gc_duration_seconds_count", "go_gc_duration_seconds_sum"},
			map[string]float64{"go_gc_duration_seconds_count": 42, "go_gc_duration_seconds_sum": 0.25}, false},
		{"a labelled series is not a label-less one", []string{"go_gc_duration_seconds"}, nil, true},
		{"missing", []string{"go_gc_duration_seconds_count", "timeoutd_pending"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseValues(strings.NewReader(text), tc.names...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
