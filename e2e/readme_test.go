package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The README examples: every curl of a ```sh block of the READMEs below is
// run against the shared stack, and its status must be the one the README
// shows as "# → STATUS" on the command's last line or the next line. In
// those blocks, "NAME=<the field>" sets NAME to that field of the previous
// answer (the id of the order just created, a next_cursor), `sleep` is
// skipped (the status codes do not depend on it) and other lines set shell
// variables for the commands after them. The stack's addresses and token
// replace localhost:8081, localhost:8080 and dev-token.

// readmes are the files whose examples are kept honest, from e2e/.
var readmes = []string{"../README.md", "../services/orders/README.md"}

// example is one step of a README's walk-through.
type example struct {
	// Line is the line number of the step's first line.
	Line int
	// Shell is a curl command (its lines joined, without its comment) or a
	// variable assignment; empty for a capture.
	Shell string
	// Curl says Shell is a curl command whose answer has status Status.
	Curl   bool
	Status int
	// Capture, Field: set variable Capture to Field of the last answer.
	Capture, Field string
}

var (
	statusMark  = regexp.MustCompile(`#\s*→\s*(\d{3})\b`)
	captureLine = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=<the ([a-z_]+)>$`)
	assignLine  = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`)
)

// parseExamples returns the steps of the ```sh blocks of file that contain
// a curl, or an error naming the line that breaks the conventions above.
func parseExamples(file string) ([]example, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var blocks [][]example
	var cur []example
	inBlock, hasCurl, awaiting := false, false, -1
	var blockErr error // an unknown line, an error only in a block with a curl
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case !inBlock:
			if line == "```sh" {
				inBlock, hasCurl, cur, awaiting, blockErr = true, false, nil, -1, nil
			}
			continue
		case line == "```":
			if awaiting >= 0 {
				return nil, fmt.Errorf("%s:%d: a curl without its status (# → STATUS)", file, cur[awaiting].Line)
			}
			if hasCurl && blockErr != nil {
				return nil, blockErr
			}
			if hasCurl {
				blocks = append(blocks, cur)
			}
			inBlock = false
			continue
		}
		first := n
		for strings.HasSuffix(line, `\`) && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(sc.Text())
		}
		if strings.HasPrefix(line, "#") || line == "" {
			if m := statusMark.FindStringSubmatch(line); m != nil && awaiting >= 0 {
				cur[awaiting].Status, _ = strconv.Atoi(m[1])
				awaiting = -1
			}
			continue
		}
		if awaiting >= 0 {
			return nil, fmt.Errorf("%s:%d: a curl without its status (# → STATUS)", file, cur[awaiting].Line)
		}
		cmd, comment := splitComment(line)
		switch m := captureLine.FindStringSubmatch(cmd); {
		case strings.HasPrefix(cmd, "curl "):
			hasCurl = true
			cur = append(cur, example{Line: first, Shell: cmd, Curl: true})
			if m := statusMark.FindStringSubmatch(comment); m != nil {
				cur[len(cur)-1].Status, _ = strconv.Atoi(m[1])
			} else {
				awaiting = len(cur) - 1
			}
		case m != nil:
			cur = append(cur, example{Line: first, Capture: m[1], Field: m[2]})
		case strings.HasPrefix(cmd, "sleep "):
		case assignLine.MatchString(cmd):
			cur = append(cur, example{Line: first, Shell: cmd})
		case blockErr == nil:
			blockErr = fmt.Errorf("%s:%d: %q is neither a curl, a variable nor a capture", file, first, cmd)
		}
	}
	var all []example
	for _, b := range blocks {
		all = append(all, b...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%s: no curl examples", file)
	}
	return all, nil
}

// splitComment splits a shell line at its comment: a # after a blank,
// outside quotes.
func splitComment(line string) (cmd, comment string) {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && i > 0 && (line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i]), line[i:]
		}
	}
	return strings.TrimSpace(line), ""
}

func TestParseExamples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		want       []example // nil = an error
	}{
		{"status on the line and the next", "```sh\nB=x\ncurl -s $B/a   # → 200 ok\ncurl -s -X POST \\\n  $B/b -d '{\"a\":\"#1\"}'\n# → 409 {...}\nID=<the id>\nsleep 6\n```\n",
			[]example{{Line: 2, Shell: "B=x"}, {Line: 3, Shell: "curl -s $B/a", Curl: true, Status: 200},
				{Line: 4, Shell: `curl -s -X POST  $B/b -d '{"a":"#1"}'`, Curl: true, Status: 409}, {Line: 7, Capture: "ID", Field: "id"}}},
		{"a curl without status", "```sh\ncurl -s x\ncurl -s y # → 200\n```\n", nil},
		{"a curl without status at the end", "```sh\ncurl -s x\n```\n", nil},
		{"an unknown command", "```sh\ncurl -s x # → 200\nrm -rf /\n```\n", nil},
		{"blocks without curl are not examples", "```sh\nmake up\n```\n```sh\ncurl -s x # → 200\n```\n",
			[]example{{Line: 5, Shell: "curl -s x", Curl: true, Status: 200}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(t.TempDir(), "README.md")
			if err := os.WriteFile(f, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := parseExamples(f)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("parsed %+v, want an error", got)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("parsed %+v (%v)\nwant   %+v", got, err, tt.want)
			}
		})
	}
}

// TestREADMEExamples runs the READMEs' curl examples against the shared
// stack and compares each status with the one shown.
func TestREADMEExamples(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	hosts := strings.NewReplacer("localhost:8081", strings.TrimPrefix(s.OrdersURL, "http://"),
		"localhost:8080", strings.TrimPrefix(s.TimeoutdURL, "http://"), "dev-token", s.APIToken)
	for _, file := range readmes {
		t.Run(strings.TrimPrefix(file, "../"), func(t *testing.T) {
			steps, err := parseExamples(file)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "body")
			var prelude []string
			env := os.Environ()
			var last []byte
			for _, st := range steps {
				switch {
				case st.Capture != "":
					v, err := field(last, st.Field)
					if err != nil {
						t.Fatalf("line %d: %s=<the %s>: %v", st.Line, st.Capture, st.Field, err)
					}
					env = append(env, st.Capture+"="+v)
				case !st.Curl:
					prelude = append(prelude, hosts.Replace(st.Shell))
				default:
					script := strings.Join(prelude, "\n") + "\n" +
						strings.Replace(hosts.Replace(st.Shell), "curl ", `curl -o "$README_OUT" -w '%{http_code}' `, 1)
					// Reads are retried for a while: timeoutd shows a
					// deadline once it has ingested its command.
					read := !strings.Contains(st.Shell, "-X POST") && !strings.Contains(st.Shell, " -d ")
					var code int
					deadline := time.Now().Add(10 * time.Second)
					for {
						cmd := exec.Command("bash", "-c", script)
						cmd.Env = append(env, "README_OUT="+out)
						stdout, err := cmd.Output()
						if err != nil {
							t.Fatalf("line %d: %v: %s", st.Line, err, stdout)
						}
						code, _ = strconv.Atoi(string(stdout))
						if last, err = os.ReadFile(out); err != nil {
							t.Fatal(err)
						}
						if code == st.Status || !read || time.Now().After(deadline) {
							break
						}
						time.Sleep(200 * time.Millisecond)
					}
					if code != st.Status {
						t.Errorf("%s:%d: %s\nanswered %d, the README shows %d: %.300s", file, st.Line, st.Shell, code, st.Status, last)
					}
				}
			}
		})
	}
}

// field returns the string member name of the JSON object in an answer
// (after the headers when curl -i printed them).
func field(answer []byte, name string) (string, error) {
	if i := bytes.Index(answer, []byte("\r\n\r\n")); bytes.HasPrefix(answer, []byte("HTTP/")) && i >= 0 {
		answer = answer[i+4:]
	}
	var m map[string]any
	if err := json.Unmarshal(answer, &m); err != nil {
		return "", fmt.Errorf("the answer is not a JSON object: %.200s", answer)
	}
	v, ok := m[name].(string)
	if !ok {
		return "", fmt.Errorf("no string %q in %.200s", name, answer)
	}
	return v, nil
}
