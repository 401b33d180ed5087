package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nodeExampleDir is the Node.js producer written from the AsyncAPI
// document alone (docs/contract/asyncapi.yaml).
const nodeExampleDir = "../examples/reservations-node"

// TestReservationsNodeExample runs the Node.js producer
// examples/reservations-node against a stack whose NATS has the compose
// stack's users and permissions: as the reservations user it sets, moves
// and clears deadlines and consumes its own expiries through its durable
// consumer. Every deadline left must fire once, at its last version, never
// before it; nothing cleared may fire.
func TestReservationsNodeExample(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not on PATH: install Node.js 18 or newer with npm (make node)", tool)
		}
	}
	// Install the example's locked dependencies into a directory of the
	// test's own, so that the work tree stays as it is.
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", ".npmrc", "producer.mjs"} {
		data, err := os.ReadFile(filepath.Join(nodeExampleDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// While the stack starts.
	type result struct {
		out []byte
		err error
	}
	installed := make(chan result, 1)
	go func() {
		out, err := runIn(t.Context(), dir, 2*time.Minute, nil, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
		installed <- result{out, err}
	}()
	t.Cleanup(func() { <-installed }) // after the context ended, the install too

	s := startStack(t, stackOptions{ShippedNATSConf: true})
	if r := <-installed; r.err != nil {
		t.Fatalf("npm ci in a copy of %s: %v (is an npm registry reachable?)\n%s", nodeExampleDir, r.err, r.out)
	}
	installed <- result{} // for the cleanup
	const keys = 40
	began := time.Now()
	out, err := runIn(t.Context(), dir, 90*time.Second, []string{
		"NATS_URL=" + s.NATSURL, "NATS_USER=" + userReservations, "NATS_PASSWORD=" + natsPassword(userReservations),
		"KEYS=" + strconv.Itoa(keys), "DEADLINE_MS=2000", "TIMEOUT_MS=40000",
	}, "node", "producer.mjs")
	t.Logf("node producer.mjs, %v:\n%s", time.Since(began).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("node producer.mjs: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var report struct {
		Set, Moved, Cleared, Fired                            int
		Early, Stale, Duplicate, Unexpected, Invalid, Missing int
		OK                                                    bool
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &report); err != nil {
		t.Fatalf("the example's last line is not its report: %v", err)
	}
	if !report.OK || report.Set != keys || report.Moved != keys/5 || report.Cleared != keys/5 || report.Fired != keys-report.Cleared ||
		report.Early+report.Stale+report.Duplicate+report.Unexpected+report.Invalid+report.Missing != 0 {
		t.Fatalf("report %+v: want %d set, %d moved, %d cleared, %d fired and no problem", report, keys, keys/5, keys/5, keys-keys/5)
	}
}

// runIn runs a command in dir with env added to the test's, within
// timeout, and returns its combined output.
func runIn(ctx context.Context, dir string, timeout time.Duration, env []string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
