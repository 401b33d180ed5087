package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestTimeoutdRestartTakesItsConsumersOverByReset: a single timeoutd,
// SIGKILLed with one deadline pending and started again, takes every
// partition's command consumer over by a reset to its ack floor (the NATS
// configuration the project ships lets it: CONSUMER.RESET), none by a
// delete and a create, and holds the deadline again. It logs the time from
// its process's start to /readyz answering 200.
func TestTimeoutdRestartTakesItsConsumersOverByReset(t *testing.T) {
	s := startStack(t, stackOptions{ShippedNATSConf: true})
	createOrder(t, s.orders(), within(time.Hour))
	waitFor(t, 30*time.Second, "timeoutd to hold the deadline", func() bool { return stats(t, s).Pending == 1 })
	s.Kill(t, svcTimeoutd)
	started := s.Start(t, svcTimeoutd)
	ready := waitReady(t, s.TimeoutdURL+"/readyz", time.Minute)
	t.Logf("RESTART: timeoutd ready %s after its process started, %d pending", ready.Sub(started).Round(time.Millisecond), stats(t, s).Pending)
	hc := &http.Client{Timeout: 5 * time.Second}
	reset, _ := scrapeGauge(hc, s.TimeoutdURL+"/metrics", `timeoutd_consumer_takeovers_total{kind="reset"}`)
	recreated, _ := scrapeGauge(hc, s.TimeoutdURL+"/metrics", `timeoutd_consumer_takeovers_total{kind="recreated"}`)
	if reset == 0 || recreated != 0 {
		t.Errorf("takeovers after the restart: %v reset, %v recreated; want every partition reset (is CONSUMER.RESET refused? look for a permissions violation in timeoutd's log)", reset, recreated)
	}
	if p := stats(t, s).Pending; p != 1 {
		t.Errorf("pending after the restart = %d, want the 1 deadline", p)
	}
}
