package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run1 and run2 are two runs' results files as loadgen prints them, cut
// to the lines the summary reads.
const (
	run1 = `# date: 2026-11-26T14:05:56Z
machine nproc=2 model="AMD EPYC" mem=24683656kB loadavg=1.00,1.00,1.00 go=go1.26.8
workload name=timeoutd n=1000 storm_n=100000 peers=timeoutd,river,natsched command_batch=0
result peer=timeoutd workload=storm measured=arrival_at_consumer n=100000 complete=true early_fired_at=0 received=100000 early=0 duplicates=0 undecodable=0 lateness_p50_ms=10.000 lateness_p99_ms=40.000 loadavg=1,1,1
result peer=timeoutd workload=storm measured=arrival_timeline slot_ms=500 worst_ms=1.0 slots_over_p99=0 loadavg=1,1,1
result peer=timeoutd workload=storm measured=cpu n=100000 expiry_us_per_expiry_timeoutd=40.000 expiry_us_per_expiry_total=130.000 loadavg=1,1,1
result peer=river workload=storm mode=available workers=1000 fetch_cooldown=10ms fetch_poll_interval=50ms n=100000 complete=true received=100000 early=0 lateness_p50_ms=150.000 lateness_p99_ms=250.000 loadavg=1,1,1
result peer=river workload=storm mode=available measured=cpu n=100000 expiry_us_per_job_total=120.000 loadavg=1,1,1
result peer=natsched workload=storm measured=arrival_at_consumer n=100000 complete=false received=99990 early=0 duplicates=0 undecodable=0 lateness_p50_ms=380.000 lateness_p99_ms=600.000 loadavg=1,1,1
result peer=natsched workload=storm measured=cpu n=100000 expiry_us_per_expiry_total=50.000 loadavg=1,1,1
`
	run2 = `# date: 2026-11-27T10:00:00Z
machine nproc=2 model="AMD EPYC" mem=24683656kB loadavg=1.00,1.00,1.00 go=go1.26.8
workload name=timeoutd n=1000 storm_n=100000 peers=timeoutd,natsched command_batch=1000
result peer=timeoutd workload=storm measured=arrival_at_consumer n=100000 complete=true received=100000 early=0 duplicates=2 lateness_p50_ms=8.000 lateness_p99_ms=30.000 loadavg=1,1,1
result peer=timeoutd workload=storm measured=cpu n=100000 expiry_us_per_expiry_total=120.000 loadavg=1,1,1
result peer=natsched workload=storm measured=arrival_at_consumer n=100000 complete=true received=100000 early=0 duplicates=0 lateness_p50_ms=390.000 lateness_p99_ms=620.000 loadavg=1,1,1
result peer=natsched workload=storm measured=cpu n=100000 expiry_us_per_expiry_total=48.000 loadavg=1,1,1
`
)

func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name    string
		files   []string
		want    []string
		wantErr string
	}{
		{"two runs", []string{run1, run2}, []string{
			"| timeoutd, single commands | 1 | 10.0 (10.0–10.0) | 40.0 (40.0–40.0) | 130 (130–130) | 0 / 0 / 0 |",
			"| River, available 10ms/50ms | 1 | 150 (150–150) | 250 (250–250) | 120 (120–120) | 0 / 0 / 0 |",
			"| NATS message schedules | 2 | 385 (380–390) | 610 (600–620) | 49.0 (48.0–50.0) | 0 / 0 / 10 |",
			"| timeoutd, commands packed by 1000 | 1 | 8.00 (8.00–8.00) | 30.0 (30.0–30.0) | 120 (120–120) | 0 / 2 / 0 |",
			"runs on 2026-11-26, 2026-11-27; AMD EPYC, 2 CPUs.",
		}, ""},
		{"no storm", []string{"# date: 2026-11-26T00:00:00Z\nresult peer=timeoutd workload=bytes pending=1\n"}, nil, "no storm results"},
		{"cpu without its storm", []string{"result peer=natsched workload=storm measured=cpu expiry_us_per_expiry_total=1\n"}, nil, "without its storm line"},
		{"missing figure", []string{"result peer=natsched workload=storm measured=arrival_at_consumer lateness_p50_ms=1\n"}, nil, "no lateness_p99_ms"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var paths []string
			for j, f := range tt.files {
				p := filepath.Join(dir, strings.Repeat("x", i+1)+string(rune('a'+j))+".txt")
				if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
					t.Fatal(err)
				}
				paths = append(paths, p)
			}
			var out strings.Builder
			sum, err := read(paths)
			if err == nil {
				out.WriteString(sum.markdown())
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("run = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestUpdate writes the table between the markers and the two headline
// rows of a document, leaving the rest as it was.
func TestUpdate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var paths []string
	for i, f := range []string{run1, run2} {
		p := filepath.Join(dir, string(rune('a'+i))+".txt")
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	sum, err := read(paths)
	if err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "BENCHMARKS.md")
	before := "| what | ordertimeout | peer | measured | command |\n|---|---|---|---|---|\n" +
		"| [expiry storm 10k/s, old](#x) | 1 ms | 2 ms | then | cmd |\n| [other](#y) | kept | kept | kept | kept |\n" +
		"| [CPU per expiry, old](#x) | 1 µs | 2 µs | then | cmd |\n\n## The expiry storm, three peers\n\n" + beginMarker + "\nold table\n" + endMarker + "\n\nafter\n"
	if err := os.WriteFile(doc, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sum.update(doc); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(doc)
	for _, want := range []string{
		"| [expiry storm 10k/s, consumer p99, median of 2 runs](#the-expiry-storm-three-peers) | 30.0 ms (30.0–30.0) packed; 40.0 ms (40.0–40.0) single | NATS 610 ms (600–620); River 250 ms (250–250) | 2026-11-26–2026-11-27, EPYC | `make bench-storms` |",
		"| [CPU per expiry, whole platform, median of 2 runs](#the-expiry-storm-three-peers) | 120 µs (120–120) packed; 130 µs (130–130) single | NATS 49.0 µs (48.0–50.0); River 120 µs (120–120) |",
		"| [other](#y) | kept | kept | kept | kept |",
		"| NATS message schedules | 2 | 385 (380–390) |",
		"\n\nafter\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the document lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(string(got), "old table") {
		t.Errorf("the old table is still there:\n%s", got)
	}
	if err := os.WriteFile(doc, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sum.update(doc); err == nil || !strings.Contains(err.Error(), "lacks the markers") {
		t.Errorf("update of a document without markers = %v, want an error naming them", err)
	}
}
