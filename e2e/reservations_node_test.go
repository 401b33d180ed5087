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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
)

// nodeExampleDir is the Node.js producer written from the AsyncAPI
// document alone (docs/contract/asyncapi.yaml).
const nodeExampleDir = "../examples/reservations-node"

// TestReservationsNodeExample runs the Node.js producer
// examples/reservations-node against a stack whose NATS has the compose
// stack's users and permissions: as the reservations user it sets, moves
// and clears deadlines and consumes its own expiries through its durable
// consumer. Every deadline left must fire once, at its last version, never
// before it; nothing cleared may fire. It runs twice, the first time
// after the Go library made the durable and an older client set it to
// other settings, which the example updates to the contract's.
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
	for _, f := range []string{"package.json", "package-lock.json", ".npmrc", "producer.mjs", "contract.mjs"} {
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

	// The durable as the Go example's library makes it (pkg/timeouts),
	// then updated to an older reading of the contract (a 30 s AckWait):
	// the example must take it over, not die.
	tc := connectAs(t, s, userReservations, natsPassword(userReservations))
	if _, err := timeouts.NewConsumer(t.Context(), tc.js, timeouts.ConsumerConfig[events.Expiry]{Durable: userReservations,
		FilterSubject: "reservations.expire.>", Decode: timeouts.DecodeExpiry,
		Handle: func(context.Context, events.Expiry) error { return nil }}); err != nil {
		t.Fatalf("the Go library's consumer: %v", err)
	}
	older := jetstream.ConsumerConfig{Durable: userReservations, FilterSubject: "reservations.expire.>", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxDeliver: -1, MaxAckPending: 100}
	if _, err := tc.js.UpdateConsumer(t.Context(), events.StreamExpiries, older); err != nil {
		t.Fatalf("the durable with older settings: %v", err)
	}
	for _, run := range []string{"with the durable at older settings", "a second time"} {
		runNodeProducer(t, s, dir, run)
	}
	// A publish the tenant may not make (on orders' subject), explained
	// as the docs say: the status stream's permissions violation.
	probe := `import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { watchRefusals } from './contract.mjs';
const nc = await connect({ servers: process.env.NATS_URL, user: process.env.NATS_USER, pass: process.env.NATS_PASSWORD, inboxPrefix: '_INBOX_' + process.env.NATS_USER });
const refusals = watchRefusals(nc);
try {
  await jetstream(nc, { timeout: 1000 }).publish('timeouts.cmd.o-1', '{}');
  console.log('published');
} catch (err) {
  console.log(refusals.explain(err, 'timeouts.cmd.o-1').message);
}
await nc.close();
`
	if err := os.WriteFile(filepath.Join(dir, "probe.mjs"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runIn(t.Context(), dir, 30*time.Second, []string{"NATS_URL=" + s.NATSURL, "NATS_USER=" + userReservations,
		"NATS_PASSWORD=" + natsPassword(userReservations)}, "node", "probe.mjs")
	if err != nil || !strings.Contains(string(out), "refused by the NATS server's permissions") || !strings.Contains(string(out), "timeouts.cmd."+strconv.Itoa(events.PartitionOf("o-1"))+".o-1") {
		t.Fatalf("a refused publish: %v\n%s\nwant it explained, with the subject as mapped", err, out)
	}
	t.Logf("a refused publish, as the example explains it: %s", strings.TrimSpace(string(out)))
	c, err := tc.js.Consumer(t.Context(), events.StreamExpiries, userReservations)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.AckWait != 2*time.Second || cfg.MaxAckPending != 1000 {
		t.Fatalf("the durable after the example: AckWait %v, MaxAckPending %d; want the contract's 2s and 1000", cfg.AckWait, cfg.MaxAckPending)
	}
}

// runNodeProducer runs producer.mjs, installed in dir, against s as the
// reservations tenant, and checks its report: every deadline it left
// fired once, at its last version, never before it; nothing cleared
// fired.
func runNodeProducer(t *testing.T, s *stack, dir, what string) {
	t.Helper()
	const keys = 40
	began := time.Now()
	out, err := runIn(t.Context(), dir, 90*time.Second, []string{
		"NATS_URL=" + s.NATSURL, "NATS_USER=" + userReservations, "NATS_PASSWORD=" + natsPassword(userReservations),
		"KEYS=" + strconv.Itoa(keys), "DEADLINE_MS=2000", "TIMEOUT_MS=40000",
	}, "node", "producer.mjs")
	t.Logf("node producer.mjs %s, %v:\n%s", what, time.Since(began).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("node producer.mjs %s: %v", what, err)
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
		t.Fatalf("%s: report %+v: want %d set, %d moved, %d cleared, %d fired and no problem", what, report, keys, keys/5, keys/5, keys-keys/5)
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
