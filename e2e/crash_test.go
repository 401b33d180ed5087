package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// stats reads timeoutd's /api/v1/stats.
func stats(t *testing.T, s *stack) api.Stats {
	t.Helper()
	var st api.Stats
	if err := getJSON(s.TimeoutdURL+"/api/v1/stats", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// getJSON decodes the JSON answer of a GET of url into v; an answer other
// than 200 is an error.
func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", url, err)
	}
	return nil
}

// Scenario 4: timeoutd is killed with SIGKILL while 10,000 deadlines are
// pending and restarted: every unpaid order is still cancelled exactly once,
// none early, none of the paid ones. Every deadline is pending at the kill;
// the outage lasts at least 2 s and until the first inOutage deadlines after
// the kill have passed, whatever the machine's speed, so unpaid orders are
// always due while timeoutd is down and fire late, at recovery (asserted);
// payments happen while timeoutd is down and after.
func TestTimeoutdKilledWithPendingDeadlines(t *testing.T) {
	const n = 10_000
	// inOutage is how many deadlines must pass while timeoutd is down: with
	// half the orders paid, some unpaid order is among them but with
	// probability 2^-200.
	const inOutage = 200
	s := startStack(t, stackOptions{})
	c := watch(t, s.NATSURL)
	cl := s.orders()
	t0 := time.Now()
	// Deadlines 12 to 24 s after each order's creation; payments 1 to 6 s
	// before them, but held back until timeoutd is killed, so all 10,000
	// deadlines are pending then.
	payGate := make(chan struct{})
	var mu sync.Mutex
	var deadlines []time.Time // of every order asked for
	lo := load{
		N: n, Workers: 32,
		Deadline: func(now time.Time) ordersclient.Deadline {
			d := now.Add(12*time.Second + rand.N(12*time.Second))
			mu.Lock()
			deadlines = append(deadlines, d)
			mu.Unlock()
			return payBy(d)
		},
		PayShare: 0.5,
		PayAt:    payBetween(6*time.Second, time.Second),
		PayGate:  payGate,
	}
	done := make(chan loadResult)
	go func() { done <- lo.run(t, cl) }()

	// Kill timeoutd once every order is created and its deadline durably
	// ingested: the orders' creation and timeoutd's ingest run concurrently.
	// (On a slow machine, the first deadlines may fire before the kill.)
	var killedPending atomic.Int64
	waitFor(t, 2*time.Minute, "10,000 deadlines ingested by timeoutd", func() bool {
		st := stats(t, s)
		killedPending.Store(st.Pending)
		return st.Pending+int64(st.Totals.Cleared+st.Totals.Fired) >= n
	})
	created := time.Since(t0)
	s.Kill(t, svcTimeoutd)
	killedAt := time.Now()
	close(payGate)
	t.Logf("created %d orders in %s; SIGKILLed timeoutd with %d deadlines pending", n, created.Round(time.Millisecond), killedPending.Load())

	// Keep timeoutd down at least 2 s, and until the first inOutage
	// deadlines after the kill have passed (every order exists by now).
	mu.Lock()
	var due []time.Time
	for _, d := range deadlines {
		if d.After(killedAt) {
			due = append(due, d)
		}
	}
	mu.Unlock()
	if len(due) < inOutage {
		t.Fatalf("only %d deadlines after the kill, want at least %d", len(due), inOutage)
	}
	slices.SortFunc(due, time.Time.Compare)
	<-time.After(max(2*time.Second, time.Until(due[inOutage-1].Add(100*time.Millisecond))))
	started := s.Start(t, svcTimeoutd)
	ready := waitReady(t, s.TimeoutdURL+"/readyz", time.Minute)
	recovery := ready.Sub(started)
	t.Logf("RECOVERY: timeoutd ready %s after its process started (%s after the kill), %d pending after recovery",
		recovery.Round(time.Millisecond), ready.Sub(killedAt).Round(time.Millisecond), stats(t, s).Pending)

	res := <-done
	if len(res.Unpaid)+len(res.Paid) != n {
		t.Fatalf("load accounted for %d orders, want %d", len(res.Unpaid)+len(res.Paid), n)
	}
	late := verifyOutcomes(t, cl, c, res, 90*time.Second, 2*time.Second)
	duringOutage := func(payBy time.Time) bool { return payBy.After(killedAt) && payBy.Before(started) }
	unpaidDown, cancelledDown := 0, 0
	for _, o := range res.Unpaid {
		if duringOutage(o.PayBy) {
			unpaidDown++
		}
	}
	for _, l := range late {
		if duringOutage(l.PayBy) {
			cancelledDown++
		}
	}
	t.Logf("deadlines while timeoutd was down: %d unpaid orders, %d cancel events seen for them", unpaidDown, cancelledDown)
	if unpaidDown == 0 || cancelledDown == 0 {
		t.Errorf("no unpaid order fell due while timeoutd was down (%d, %d cancel events): the fire-late-at-recovery path went untested", unpaidDown, cancelledDown)
	}
	for _, part := range []struct {
		name string
		keep func(lateSample) bool
	}{
		{"due before ready", func(s lateSample) bool { return s.PayBy.Before(ready) }},
		{"due after ready", func(s lateSample) bool { return !s.PayBy.Before(ready) }},
	} {
		arrived, fired := summarise(late, part.keep)
		t.Logf("lateness of the cancel events %s: arrival at the outside consumer %s; timeoutd's fired_at %s", part.name, arrived, fired)
	}
}

// Scenario 5: the NATS container is restarted mid-run: orders keep being
// created and paid during the outage, and once NATS is back nothing is lost.
func TestNATSRestartedMidRun(t *testing.T) {
	s := startStack(t, stackOptions{})
	cl := s.orders()
	var createErrors atomic.Int64
	lo := load{
		N: 400, Over: 6 * time.Second, Workers: 8,
		Deadline: func(time.Time) ordersclient.Deadline { return within(3*time.Second + rand.N(5*time.Second)) },
		PayShare: 0.5,
		PayAt:    payBetween(2*time.Second, time.Second),
		OnCreateError: func(err error) {
			if createErrors.Add(1) == 1 {
				t.Logf("first create error while NATS restarts: %v", err)
			}
		},
	}
	done := make(chan loadResult)
	go func() { done <- lo.run(t, cl) }()
	<-time.After(2 * time.Second) // let the load run before the outage
	restartAt := time.Now()
	s.Restart(t, svcNATS)
	t.Logf("NATS restarted in %s", time.Since(restartAt).Round(time.Millisecond))
	res := <-done
	t.Logf("%d orders created (%d create errors during the outage)", len(res.Unpaid)+len(res.Paid), createErrors.Load())
	if len(res.Unpaid)+len(res.Paid) < 300 {
		t.Fatalf("only %d of 400 orders created", len(res.Unpaid)+len(res.Paid))
	}
	// A consumer connected after the outage reads both streams from the start.
	c := watch(t, s.NATSURL)
	verifyOutcomes(t, cl, c, res, time.Minute, 2*time.Second)
}
