package ordersbench

import (
	"slices"
	"testing"
	"time"
)

func TestParseTPS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		out     string
		want    float64
		wantErr bool
	}{
		{"pgbench 15", "number of transactions actually processed: 7924\nlatency average = 1.0 ms\ntps = 3997.296125 (without initial connection time)\n", 3997.296125, false},
		{"no tps line", "pgbench: error: connection refused\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseTPS(tt.out)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseTPS = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseLatencies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		logs string
		want []time.Duration
	}{
		{"two threads' logs", "0 1 46765 0 1795413507 588052\n2 1 2984 0 1795413507 599152\n", []time.Duration{46765 * time.Microsecond, 2984 * time.Microsecond}},
		{"short and garbage lines skipped", "0 1\nx y z\n\n1 1 10 0 1 2\n", []time.Duration{10 * time.Microsecond}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := parseLatencies(tt.logs); !slices.Equal(got, tt.want) {
				t.Errorf("parseLatencies = %v, want %v", got, tt.want)
			}
		})
	}
}
