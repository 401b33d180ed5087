package harness

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Line is one line of a results file as Report.Line printed it: its kind
// ("result", "machine", "workload", ...) and its key=value pairs.
type Line struct {
	Kind string
	KV   map[string]string
}

// ReadLines parses the report lines of a results file; comment lines
// ("# ...") and blank lines are skipped.
func ReadLines(r io.Reader) ([]Line, error) {
	var out []Line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		kind, pairs, _ := strings.Cut(text, " ")
		kv, err := ParsePairs(pairs)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, Line{Kind: kind, KV: kv})
	}
	return out, sc.Err()
}

// ParsePairs splits the pairs of a report line (key=value key="quoted
// value" ...).
func ParsePairs(rest string) (map[string]string, error) {
	kv := map[string]string{}
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		if !ok {
			return nil, fmt.Errorf("no '=' in %q", rest)
		}
		var val string
		if strings.HasPrefix(after, `"`) {
			q, err := strconv.QuotedPrefix(after)
			if err != nil {
				return nil, fmt.Errorf("value of %s: %w", key, err)
			}
			val, _ = strconv.Unquote(q)
			after = after[len(q):]
		} else {
			val, after, _ = strings.Cut(after, " ")
		}
		kv[key] = val
		rest = strings.TrimLeft(after, " ")
	}
	return kv, nil
}
