// Command plotstorms draws the storms of a sustained run (loadgen timeoutd
// -steps sustained) into a PNG: the p50 and p99 lateness of each storm's
// cancel events at the consumer and of timeoutd's fired_at, against the
// time of the storm since the start of the run.
//
//	go run ./cmd/plotstorms -in results/2026-11-25-expiry-key-lookup/sustained-30m.txt -out ../docs/sustained-storms.png
//
// It uses the standard library only; the few labels are drawn with a tiny
// bitmap font of its own.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ordertimeout/ordertimeout/bench/internal/harness"
)

func main() {
	in := flag.String("in", "", "result file of a sustained run")
	out := flag.String("out", "sustained-storms.png", "PNG to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "plotstorms:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" {
		return errors.New("-in is required")
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	storms, err := parse(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(storms) == 0 {
		return fmt.Errorf("%s: no \"workload=sustained measured=storm\" lines", in)
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := render(w, storms); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// storm is one storm of a sustained run, lateness in milliseconds.
type storm struct {
	// T is the time of its first deadline since the start, in seconds.
	T                      float64
	ArrivalP50, ArrivalP99 float64
	FiredP50, FiredP99     float64
	Complete               bool
}

// parse reads the storm lines of a result file.
func parse(r io.Reader) ([]storm, error) {
	var storms []storm
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for line := 1; sc.Scan(); line++ {
		pairs, ok := strings.CutPrefix(sc.Text(), "result ")
		if !ok {
			continue
		}
		kv, err := harness.ParsePairs(pairs)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if kv["workload"] != "sustained" || kv["measured"] != "storm" {
			continue
		}
		var s storm
		for _, f := range []struct {
			key string
			dst *float64
		}{{"t_s", &s.T}, {"arrival_p50_ms", &s.ArrivalP50}, {"arrival_p99_ms", &s.ArrivalP99}, {"fired_p50_ms", &s.FiredP50}, {"fired_p99_ms", &s.FiredP99}} {
			v, err := strconv.ParseFloat(kv[f.key], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", line, f.key, err)
			}
			*f.dst = v
		}
		s.Complete = kv["complete"] == "true"
		storms = append(storms, s)
	}
	return storms, sc.Err()
}
