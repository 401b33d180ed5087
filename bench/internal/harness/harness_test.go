package harness

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(100 - i) // reversed: Summarize sorts
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []time.Duration{ms(7)}, Summary{N: 1, Min: ms(7), P50: ms(7), P99: ms(7), P999: ms(7), Max: ms(7), Mean: ms(7)}},
		{"hundred", hundred, Summary{N: 100, Min: ms(1), P50: ms(50), P99: ms(99), P999: ms(99), Max: ms(100), Mean: 50500 * time.Microsecond}},
		{"negative lateness kept", []time.Duration{ms(-2), ms(4)}, Summary{N: 2, Min: ms(-2), P50: ms(-2), P99: ms(-2), P999: ms(-2), Max: ms(4), Mean: ms(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Summarize(tt.in); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReportLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kv   []any
		want string
	}{
		{"ints and strings", []any{"peer", "river", "n", 3}, "workload peer=river n=3\n"},
		{"float three decimals", []any{"per_sec", 1234.56789}, "workload per_sec=1234.568\n"},
		{"duration in ms", []any{"p99_ms", 1500 * time.Microsecond}, "workload p99_ms=1.500\n"},
		{"spaces quoted", []any{"model", "Intel Xeon"}, "workload model=\"Intel Xeon\"\n"},
		{"newline and quote quoted", []any{"error", "a\n\"b\""}, "workload error=\"a\\n\\\"b\\\"\"\n"},
		{"odd trailing key dropped", []any{"a", 1, "b"}, "workload a=1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			r := &Report{w: &buf}
			r.Line("workload", tt.kv...)
			if got := buf.String(); got != tt.want {
				t.Errorf("Line = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadMemory(t *testing.T) {
	t.Parallel()
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatalf("ReadMemory: %v", err)
	}
	if m.RSSBytes <= 0 || m.HWMBytes < m.RSSBytes {
		t.Errorf("ReadMemory = %+v, want 0 < RSS <= HWM", m)
	}
	if _, err := ReadMemory(-1); err == nil {
		t.Error("ReadMemory(-1): want an error")
	}
}

func TestPoll(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		cond    func(calls int) (bool, error)
		wantErr error
	}{
		{"true at the third call", func(c int) (bool, error) { return c == 3, nil }, nil},
		{"error stops", func(int) (bool, error) { return false, boom }, boom},
		{"gives up", func(int) (bool, error) { return false, nil }, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := Poll(context.Background(), 200*time.Millisecond, time.Millisecond, func() (bool, error) {
				calls++
				return tt.cond(calls)
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Poll = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestProcessStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
	}{
		{"running: SIGTERM ends it", "#!/bin/sh\nexec sleep 60\n"},
		{"exited already", "#!/bin/sh\nexit 0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			bin := dir + "/svc"
			if err := os.WriteFile(bin, []byte(tt.script), 0o755); err != nil {
				t.Fatal(err)
			}
			p, err := Start(bin, nil, dir+"/log")
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if tt.name == "exited already" {
				<-p.Exited()
			}
			// Stop twice: the second call must not block on the exit.
			for i := range 2 {
				if err := p.Stop(5 * time.Second); err != nil {
					t.Fatalf("Stop #%d: %v", i+1, err)
				}
			}
			select {
			case <-p.Exited():
			default:
				t.Fatal("Exited not closed after Stop")
			}
		})
	}
}

func TestDiskWait(t *testing.T) {
	t.Parallel()
	const stats = ` 254       0 vda 100 0 200 300 400 0 500 600 0 700 1500 0 0 0 0 0 0
 254       1 vda1 90 0 180 280 390 0 490 590 0 690 1400 0 0 0 0 0 0
   7       0 loop0 1 0 2 3 0 0 0 0 0 4 99 0 0 0 0 0 0
 254      16 vdb 1 0 2 3 4 0 5 6 0 7 25
`
	got, err := diskWait(strings.NewReader(stats), func(dev string) bool { return dev == "vda" || dev == "vdb" })
	if err != nil || got != 1525*time.Millisecond {
		t.Errorf("diskWait = %v, %v; want 1.525s", got, err)
	}
	if _, err := diskWait(strings.NewReader(" 254 0 vda 1 2 3 4 5 6 7 8 9 10 x\n"), func(string) bool { return true }); err == nil {
		t.Error("a malformed field: no error")
	}
}

// TestServiceEnv checks that the results' command line carries the
// services' settings from the environment, sorted, and nothing else of it.
func TestServiceEnv(t *testing.T) {
	t.Setenv("TIMEOUTD_LINGER", "5ms")
	t.Setenv("ORDERS_BATCH", "10")
	t.Setenv("PGPASSWORD", "secret")
	got := serviceEnv()
	o, l := strings.Index(got, "ORDERS_BATCH=10 "), strings.Index(got, "TIMEOUTD_LINGER=5ms ")
	if o < 0 || l < o || strings.Contains(got, "PGPASSWORD") {
		t.Errorf("serviceEnv() = %q, want ORDERS_BATCH=10 then TIMEOUTD_LINGER=5ms, without PGPASSWORD", got)
	}
}
