package main

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const sample = `# date: 2026-11-25T12:00:00Z
machine nproc=2 model="AMD EPYC" mem=24684096kB loadavg=1.00,1.00,1.00 go=go1.26.8
result peer=timeoutd workload=storm measured=arrival_at_consumer n=100000 complete=true lateness_p99_ms=171.209 loadavg=1.52,1.94,2.95
result peer=timeoutd workload=sustained measured=storm storm=0 t_s=20.004 n=100000 complete=true received=100000 arrival_p50_ms=74.796 arrival_p99_ms=171.209 fired_p50_ms=42.477 fired_p99_ms=127.550 loadavg=1.52,1.94,2.95
result peer=timeoutd workload=sustained measured=interval t_s=60.000 commands=60000 expiries=0 loadavg=1.00,1.00,1.00
result peer=timeoutd workload=sustained measured=storm storm=1 t_s=320.010 n=100000 complete=false received=99000 arrival_p50_ms=80.5 arrival_p99_ms=200 fired_p50_ms=50 fired_p99_ms=150 loadavg="1.52,1.94,2.95"
`

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []storm
		wantErr string
	}{
		{"storm lines only", sample, []storm{
			{T: 20.004, ArrivalP50: 74.796, ArrivalP99: 171.209, FiredP50: 42.477, FiredP99: 127.55, Complete: true},
			{T: 320.01, ArrivalP50: 80.5, ArrivalP99: 200, FiredP50: 50, FiredP99: 150},
		}, ""},
		{"none", "# nothing\nresult peer=river workload=storm\n", nil, ""},
		{"missing figure", "result workload=sustained measured=storm t_s=1 arrival_p50_ms=1 arrival_p99_ms=2 fired_p50_ms=1\n", nil, "fired_p99_ms"},
		{"broken pair", "result workload=sustained measured storm\n", nil, "no '='"},
		{"broken quote", "result workload=\"sustained\n", nil, "value of workload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parse(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parse error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("parse = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRunRendersAPNG(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "run.txt"), filepath.Join(dir, "storms.png")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(in, out); err != nil {
		t.Fatalf("run: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode the PNG: %v", err)
	}
	if got := img.Bounds().Size(); got.X != width || got.Y != height {
		t.Errorf("size %v, want %dx%d", got, width, height)
	}
	// The p99 series' colour is somewhere in the picture.
	found := false
	for y := 0; y < height && !found; y++ {
		for x := 0; x < width && !found; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			c := series[0].c
			found = r>>8 == uint32(c.R) && g>>8 == uint32(c.G) && b>>8 == uint32(c.B)
		}
	}
	if !found {
		t.Error("no pixel of the arrival p99 series")
	}
	// Steep segments: a line once drew past its end on these.
	steep := "result workload=sustained measured=storm t_s=110 arrival_p50_ms=2218 arrival_p99_ms=6222 fired_p50_ms=1946 fired_p99_ms=5439 complete=true\n" +
		"result workload=sustained measured=storm t_s=410 arrival_p50_ms=475 arrival_p99_ms=3508 fired_p50_ms=294 fired_p99_ms=3260 complete=true\n" +
		"result workload=sustained measured=storm t_s=1310 arrival_p50_ms=13 arrival_p99_ms=65 fired_p50_ms=7 fired_p99_ms=48 complete=true\n"
	if err := os.WriteFile(in, []byte(steep), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(in, out); err != nil {
		t.Fatalf("run with steep segments: %v", err)
	}
	if err := run(filepath.Join(dir, "missing.txt"), out); err == nil {
		t.Error("run with a missing input: want an error")
	}
}

func TestLogAxis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lo, hi, wantLo, wantHi float64
	}{
		{5.1, 6222.9, 1, 10000},
		{12, 100, 10, 100},
		{0, 0, 0.1, 1},
		{3, 3, 1, 10},
	}
	for _, tt := range tests {
		if lo, hi := logAxis(tt.lo, tt.hi); math.Abs(lo-tt.wantLo) > 1e-9 || math.Abs(hi-tt.wantHi) > 1e-9 {
			t.Errorf("logAxis(%v, %v) = %v, %v; want %v, %v", tt.lo, tt.hi, lo, hi, tt.wantLo, tt.wantHi)
		}
	}
}

func TestNiceAxis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v, step, end float64
	}{
		{0, 1, 1},
		{171.2, 50, 200},
		{27.5, 10, 30},
		{4.3, 1, 5},
		{1000, 200, 1000},
	}
	for _, tt := range tests {
		if step, end := niceAxis(tt.v); step != tt.step || end != tt.end {
			t.Errorf("niceAxis(%v) = %v, %v; want %v, %v", tt.v, step, end, tt.step, tt.end)
		}
	}
}
