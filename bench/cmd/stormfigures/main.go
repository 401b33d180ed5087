// Command stormfigures summarizes repeated expiry storms run with the
// peers side by side (loadgen timeoutd -steps storm -peers
// timeoutd,river,natsched, see `make bench-storms`): for each peer, and for
// timeoutd each packing of its commands, the median over the runs of the
// independent consumer's lateness p50 and p99 and of the platform's CPU
// per expiry (the peer's processes: timeoutd + Postgres + nats-server,
// River's Postgres, nats-server), each with its range, as a Markdown
// table, followed by the runs' dates and machines.
//
//	go run ./cmd/stormfigures results/2026-11-26-storms/*.txt
package main

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: stormfigures results-file...")
	}
	flag.Parse()
	if err := run(os.Stdout, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "stormfigures:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, paths []string) error {
	if len(paths) == 0 {
		return errors.New("no results files")
	}
	var s summary
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		lines, err := harness.ReadLines(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		// The report's header: "# date: 2026-11-26T14:05:56Z".
		if _, after, ok := bytes.Cut(data, []byte("# date: ")); ok && len(after) >= 10 {
			s.dates = appendNew(s.dates, string(after[:10]))
		}
		if err := s.add(lines); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if len(s.rows) == 0 {
		return errors.New("no storm results in the files")
	}
	_, err := io.WriteString(w, s.markdown())
	return err
}

// storm is one storm's figures, in milliseconds and microseconds.
type storm struct {
	row                   string
	p50, p99, cpu         float64
	early, dupes, missing int
}

// summary gathers the storms by row (peer and variant), in the order
// they first appear.
type summary struct {
	rows     []string
	storms   map[string][]storm
	machines []string
	dates    []string
}

// add takes the storms of one results file.
func (s *summary) add(lines []harness.Line) error {
	if s.storms == nil {
		s.storms = map[string][]storm{}
	}
	batch := "0"
	// A storm's arrival figures, awaiting its cpu line, by peer and
	// River's mode (its cpu line names no more).
	pending := map[string]storm{}
	for _, l := range lines {
		switch l.Kind {
		case "machine":
			s.machines = appendNew(s.machines, l.KV["model"]+", "+l.KV["nproc"]+" CPUs")
		case "workload":
			batch = cmp.Or(l.KV["command_batch"], "0")
		}
		if l.Kind != "result" || l.KV["workload"] != "storm" {
			continue
		}
		key := l.KV["peer"] + " " + l.KV["mode"]
		switch m := l.KV["measured"]; {
		case m == "cpu":
			st, ok := pending[key]
			if !ok {
				return fmt.Errorf("%s: a cpu line without its storm line", key)
			}
			cpu, err := number(l.KV, "expiry_us_per_expiry_total", "expiry_us_per_job_total")
			if err != nil {
				return fmt.Errorf("%s: %w", st.row, err)
			}
			st.cpu = cpu
			delete(pending, key)
			if _, seen := s.storms[st.row]; !seen {
				s.rows = append(s.rows, st.row)
			}
			s.storms[st.row] = append(s.storms[st.row], st)
		case m == "arrival_at_consumer" || (m == "" && l.KV["peer"] == "river"):
			st := storm{row: rowOf(l.KV, batch)}
			row := st.row
			var err error
			if st.p50, err = number(l.KV, "lateness_p50_ms"); err != nil {
				return fmt.Errorf("%s: %w", row, err)
			}
			if st.p99, err = number(l.KV, "lateness_p99_ms"); err != nil {
				return fmt.Errorf("%s: %w", row, err)
			}
			n, _ := strconv.Atoi(l.KV["n"])
			received, _ := strconv.Atoi(l.KV["received"])
			st.early, _ = strconv.Atoi(l.KV["early"])
			st.dupes, _ = strconv.Atoi(l.KV["duplicates"])
			st.missing = n - received
			pending[key] = st
		}
	}
	return nil
}

// rowOf names the table row of a storm line: the peer, River's fetch mode
// and timeoutd's command packing.
func rowOf(kv map[string]string, batch string) string {
	switch kv["peer"] {
	case "timeoutd":
		if batch == "0" {
			return "timeoutd, single commands"
		}
		return "timeoutd, commands packed by " + batch
	case "river":
		return fmt.Sprintf("River, %s %s/%s", kv["mode"], kv["fetch_cooldown"], kv["fetch_poll_interval"])
	case "natsched":
		return "NATS message schedules"
	}
	return kv["peer"]
}

// number returns the first of keys present in kv, parsed.
func number(kv map[string]string, keys ...string) (float64, error) {
	for _, k := range keys {
		if v, ok := kv[k]; ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s", strings.Join(keys, " or "))
}

func appendNew(list []string, v string) []string {
	if v == "" || slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

// markdown renders the table.
func (s *summary) markdown() string {
	var b strings.Builder
	b.WriteString("| peer | runs | consumer p50, ms | consumer p99, ms | CPU per expiry, µs | early / duplicates / missing |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, row := range s.rows {
		st := s.storms[row]
		var early, dupes, missing int
		for _, x := range st {
			early, dupes, missing = early+x.early, dupes+x.dupes, missing+x.missing
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %d / %d / %d |\n", row, len(st),
			spread(st, func(x storm) float64 { return x.p50 }), spread(st, func(x storm) float64 { return x.p99 }),
			spread(st, func(x storm) float64 { return x.cpu }), early, dupes, missing)
	}
	fmt.Fprintf(&b, "\nMedian (range) of each row's runs; runs on %s; %s.\n", strings.Join(s.dates, ", "), strings.Join(s.machines, "; "))
	return b.String()
}

// spread formats the median of f over st and its range.
func spread(st []storm, f func(storm) float64) string {
	v := make([]float64, len(st))
	for i, x := range st {
		v[i] = f(x)
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return fmt.Sprintf("%s (%s–%s)", num(med), num(v[0]), num(v[len(v)-1]))
}

// num prints a figure with three significant digits or more.
func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
