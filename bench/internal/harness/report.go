package harness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/machine"
)

// Report prints measurements as lines of key=value pairs, to stdout and to
// an optional results file.
type Report struct {
	mu sync.Mutex
	w  io.Writer
}

// NewReport writes to stdout and, when f is not nil, to f.
func NewReport(f io.Writer) *Report {
	if f == nil {
		return &Report{w: os.Stdout}
	}
	return &Report{w: io.MultiWriter(os.Stdout, f)}
}

// Line prints one line: kind followed by the key=value pairs of kv, in
// order (keys at even indexes). Floats get 3 decimals, durations are
// printed in milliseconds. A "result" line ends with the machine's load
// average, since the figures are only as quiet as the machine was.
func (r *Report) Line(kind string, kv ...any) {
	var b strings.Builder
	b.WriteString(kind)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteByte(' ')
		fmt.Fprint(&b, kv[i])
		b.WriteByte('=')
		switch v := kv[i+1].(type) {
		case float64:
			b.WriteString(strconv.FormatFloat(v, 'f', 3, 64))
		case time.Duration:
			b.WriteString(strconv.FormatFloat(ms(v), 'f', 3, 64))
		case string:
			if strings.ContainsAny(v, " \t\n\"=") {
				b.WriteString(strconv.Quote(v))
			} else {
				b.WriteString(v)
			}
		default:
			fmt.Fprint(&b, v)
		}
	}
	if kind == "result" {
		b.WriteString(" loadavg=" + LoadAvg())
	}
	b.WriteByte('\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	io.WriteString(r.w, b.String())
}

// Note prints a free-text comment line starting with "# ".
func (r *Report) Note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "# "+format+"\n", args...)
}

// Machine prints the date, the command line (with the services' settings
// taken from the environment), nproc, the CPU model and the memory of the
// machine.
func (r *Report) Machine() {
	model := machine.CPUModel()
	mem := "unknown"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Join(strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:], "")
	}
	r.Note("date: %s", time.Now().UTC().Format(time.RFC3339))
	r.Note("command (in bench/): %sgo run ./cmd/%s %s", serviceEnv(), filepath.Base(os.Args[0]), strings.Join(os.Args[1:], " "))
	r.Line("machine", "nproc", runtime.NumCPU(), "model", model, "mem", mem, "loadavg", LoadAvg(), "go", runtime.Version())
}

// Summary is the distribution of a set of latency samples.
type Summary struct {
	N                   int
	P50, P99, P999, Max time.Duration
	Min                 time.Duration
	Mean                time.Duration
}

// Summarize sorts samples in place and returns their distribution.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	q := func(p float64) time.Duration {
		i := int(p * float64(len(samples)-1))
		return samples[i]
	}
	return Summary{
		N: len(samples), Min: samples[0], P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: samples[len(samples)-1],
		Mean: sum / time.Duration(len(samples)),
	}
}

// KV returns the summary as key=value pairs with the given key prefix, in
// milliseconds.
func (s Summary) KV(prefix string) []any {
	return []any{
		prefix + "p50_ms", s.P50, prefix + "p99_ms", s.P99, prefix + "p999_ms", s.P999,
		prefix + "max_ms", s.Max, prefix + "min_ms", s.Min, prefix + "mean_ms", s.Mean,
	}
}

// PerSec returns n divided by d in seconds.
func PerSec(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// LoadAvg returns the 1, 5 and 15 minute load averages, comma-separated:
// the other work on the machine while a figure was measured.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], ",")
}

// ErrIncomplete is wrapped by a storm whose events or jobs did not all
// arrive within its grace: the peer fell behind the load, which is a
// measurement (a capacity step stops there), not a failure of the harness.
var ErrIncomplete = errors.New("harness: storm incomplete")

// serviceEnv returns the variables of this process's environment that the
// services it starts read (TIMEOUTD_…, ORDERS_…, OTEL_… for tracing: they
// inherit it), sorted,
// each followed by a space, as they would prefix the command.
func serviceEnv() string {
	var vars []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TIMEOUTD_") || strings.HasPrefix(kv, "ORDERS_") || strings.HasPrefix(kv, "OTEL_") {
			vars = append(vars, kv+" ")
		}
	}
	slices.Sort(vars)
	return strings.Join(vars, "")
}
