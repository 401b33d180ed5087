package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// readiness polls a /readyz every 5 ms until stop is closed and records
// each change of its answer: "200", "503", or "down" (no answer).
type readiness struct {
	mu      sync.Mutex
	changes []readyChange
}

// readyChange is an answer of /readyz different from the previous one, and
// when it was first seen.
type readyChange struct {
	State string
	At    time.Time
}

func (c readyChange) String() string { return c.State + "@" + c.At.Format("15:04:05.000") }

func pollReadiness(url string, stop <-chan struct{}) (*readiness, <-chan struct{}) {
	r := &readiness{}
	done := make(chan struct{})
	hc := http.Client{Timeout: 500 * time.Millisecond}
	go func() {
		defer close(done)
		last := ""
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			state := "down"
			if resp, err := hc.Get(url); err == nil {
				resp.Body.Close()
				state = fmt.Sprint(resp.StatusCode)
			}
			if state != last {
				r.mu.Lock()
				r.changes = append(r.changes, readyChange{state, time.Now()})
				r.mu.Unlock()
				last = state
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	return r, done
}

// TestTimeoutdGracefulShutdownUnderLoad sends SIGTERM to timeoutd while
// orders are created, paid and cancelled continuously: /readyz must answer
// 503 before the server stops answering, the process must exit 0 without
// hitting its shutdown timeout (the fire batches in flight finished), and
// once it is started again every unpaid order
// is cancelled exactly once, none early, no paid order cancelled.
func TestTimeoutdGracefulShutdownUnderLoad(t *testing.T) {
	s := startStack(t, stackOptions{})
	c := watch(t, s.NATSURL)
	cl := s.orders()
	lo := load{
		N: 3000, Over: 12 * time.Second, Workers: 16,
		Deadline: func(time.Time) ordersclient.Deadline { return within(3*time.Second + rand.N(3*time.Second)) },
		PayShare: 0.3,
		PayAt:    payBetween(2*time.Second, time.Second),
	}
	done := make(chan loadResult)
	go func() { done <- lo.run(t, cl) }()

	<-time.After(5 * time.Second) // deadlines are firing continuously by now
	stop := make(chan struct{})
	ready, polled := pollReadiness(s.TimeoutdURL+"/readyz", stop)
	waitFor(t, 5*time.Second, "the readiness poller to see timeoutd ready", func() bool {
		ready.mu.Lock()
		defer ready.mu.Unlock()
		return len(ready.changes) > 0 && ready.changes[0].State == "200"
	})
	ctx := context.Background()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatalf("docker: %v", err)
	}
	defer cli.Close()
	id := s.container(svcTimeoutd).GetContainerID()
	termAt := time.Now()
	if _, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "TERM"}); err != nil {
		t.Fatalf("SIGTERM timeoutd: %v", err)
	}
	var exitCode int
	waitFor(t, 30*time.Second, "timeoutd to exit after SIGTERM", func() bool {
		info, err := s.container(svcTimeoutd).Inspect(ctx)
		if err != nil || info.State.Running {
			return false
		}
		exitCode = info.State.ExitCode
		return true
	})
	exited := time.Since(termAt)
	close(stop)
	<-polled
	unpublished, err := queryInt(ctx, s.pgURL("timeouts"), unpublishedSQL)
	if err != nil {
		t.Fatal(err)
	}
	logs := testinfra.Logs(s.container(svcTimeoutd))
	var answers []string
	for _, ch := range ready.changes {
		answers = append(answers, fmt.Sprintf("%s (%+dms)", ch.State, ch.At.Sub(termAt).Milliseconds()))
	}
	t.Logf("SIGTERM: timeoutd exited with code %d after %s; /readyz answers, relative to the signal: %s; %d timeouts past their deadline left to the next process",
		exitCode, exited.Round(time.Millisecond), strings.Join(answers, " → "), unpublished)
	if exitCode != 0 {
		t.Errorf("timeoutd exited with code %d after SIGTERM, want 0", exitCode)
	}
	if strings.Contains(logs, "graceful shutdown timed out") || !strings.Contains(logs, "timeoutd shutting down") {
		t.Errorf("timeoutd's log does not show a graceful shutdown within its timeout")
	}
	// Readiness goes false first: /readyz answers 503 soon after the signal
	// (within signalDelay: timeoutd's 1 s TIMEOUTD_SHUTDOWN_DELAY bounds how
	// long it keeps serving 503, and Docker's delivery and the poll period
	// on a loaded 2-core machine take a few hundred milliseconds) and keeps
	// answering 503 until the drain is over, before the listener closes.
	const signalDelay = time.Second
	if len(ready.changes) < 2 || ready.changes[1].State != "503" || ready.changes[1].At.Sub(termAt) > signalDelay {
		t.Errorf("/readyz after SIGTERM: %s; want 503 within %s of the signal, before the server stops answering",
			strings.Join(answers, " → "), signalDelay)
	}

	started := s.Start(t, svcTimeoutd)
	readyAt := waitReady(t, s.TimeoutdURL+"/readyz", time.Minute)
	t.Logf("timeoutd ready %s after its restart", readyAt.Sub(started).Round(time.Millisecond))
	res := <-done
	late, fired := summarise(verifyOutcomes(t, cl, c, res, 90*time.Second, 2*time.Second), nil)
	t.Logf("lateness of the cancel events: arrival %s; fired_at %s", late, fired)
}
