package natschedbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

// TestOnARealServer runs the peer's storm and cancel, small, on the NATS
// image the benchmarks use: every schedule fires at or after its deadline,
// once, and no purged schedule fires.
func TestOnARealServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n, err := harness.StartNATS(ctx, fmt.Sprintf("natschedbench-test-%d", os.Getpid()))
	if n != nil {
		defer n.Remove()
	}
	if err != nil {
		t.Fatal(err)
	}
	pid, err := n.PID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	natsCPU, err := n.CPU(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	b, err := New(ctx, Config{NATSURL: n.URL, PID: pid, CPUs: harness.CPUs{{Name: "nats", Platform: true, Time: natsCPU}}}, harness.NewReport(&out))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	keys, deadlines := spread("s", 300, time.Now().Add(2*time.Second))
	lateness, err := b.Storm(ctx, keys, deadlines, 10*time.Second)
	if err != nil {
		t.Fatalf("storm: %v\n%s", err, out.String())
	}
	if lateness.N != len(keys) || lateness.Min < 0 {
		t.Errorf("storm: %d arrivals, earliest %s after its deadline; want %d, none early", lateness.N, lateness.Min, len(keys))
	}
	keys, deadlines = spread("c", 200, time.Now().Add(3*time.Second))
	if err := b.Cancel(ctx, keys, deadlines, 8, 10*time.Second); err != nil {
		t.Fatalf("cancel: %v\n%s", err, out.String())
	}
	for _, want := range []string{"workload=storm measured=arrival_at_consumer n=300 ", "complete=true received=300 early=0 duplicates=0",
		"workload=cancel scheduled=200 cancelled=100", "kept_complete=true fired_after_cancel=0 received=100 early=0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// spread returns n keys and deadlines spread over a second from first.
func spread(prefix string, n int, first time.Time) ([]string, []time.Time) {
	keys := make([]string, n)
	deadlines := make([]time.Time, n)
	for i := range n {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
		deadlines[i] = first.Add(time.Duration(i) * time.Second / time.Duration(n))
	}
	return keys, deadlines
}
