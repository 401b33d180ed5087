package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/eventstest"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Scenario 6: malformed commands published on the command subjects are
// dead-lettered with a reason naming the problem, timeoutd stays healthy,
// and valid traffic keeps flowing.
func TestMalformedCommandsAreDeadLettered(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	c := watch(t, s.NATSURL)
	nc, err := nats.Connect(s.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	run := time.Now().UnixNano()
	set := func(key, deadline, extra string) string {
		return fmt.Sprintf(`{"schema":1,"kind":"set","key":%q,"version":1,"deadline":%q,"fire_subject":%q%s}`,
			key, deadline, events.OrderCancelSubject(key), extra)
	}
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	tests := []struct {
		name   string
		key    string // subject token
		body   func(key string) string
		reason events.Reason
	}{
		{"bad json", "bad-json", func(string) string { return `{"kind":"set","key":` }, events.ReasonMalformed},
		{"not an object", "not-object", func(string) string { return `[1,2,3]` }, events.ReasonMalformed},
		{"unknown schema version", "schema-9", func(k string) string {
			return strings.Replace(set(k, soon, ""), `"schema":1`, `"schema":9`, 1)
		}, events.ReasonUnsupportedSchema},
		{"zero version", "version-0", func(k string) string {
			return strings.Replace(set(k, soon, ""), `"version":1`, `"version":0`, 1)
		}, events.ReasonInvalidVersion},
		{"bad key", "bad-key", func(string) string { return set("no spaces allowed", soon, "") }, events.ReasonInvalidKey},
		{"huge payload", "huge-payload", func(k string) string {
			return set(k, soon, `,"payload":"`+strings.Repeat("x", 64*1024)+`"`)
		}, events.ReasonPayloadTooLarge},
		{"deadline in year 9999", "year-9999", func(k string) string { return set(k, "9999-12-31T23:59:59Z", "") }, events.ReasonDeadlineOutOfRange},
		{"fire subject not allowed", "foreign-subject", func(k string) string {
			return strings.Replace(set(k, soon, ""), events.OrderCancelSubject(k), "payments.refund."+k, 1)
		}, events.ReasonSubjectNotAllowed},
	}
	t.Run("dead letters", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				key := fmt.Sprintf("e2e-%s-%d", tt.key, run)
				subject := events.CommandSubject(key)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := js.Publish(ctx, subject, []byte(tt.body(key)), jetstream.WithMsgID("e2e-bad:"+key)); err != nil {
					t.Fatalf("publish: %v", err)
				}
				var d events.DeadLetter
				waitFor(t, 10*time.Second, "the dead letter of "+subject, func() bool {
					var ok bool
					d, ok = c.deadLetterOf(subject)
					return ok
				})
				if d.Reason != tt.reason || d.Detail == "" || len(d.Data) == 0 {
					t.Fatalf("dead letter %+v, want reason %s with a detail and the original data", d, tt.reason)
				}
				t.Logf("dead-lettered: reason %s, field %q: %s", d.Reason, d.Field, d.Detail)
			})
		}
	})
	t.Run("batches", func(t *testing.T) {
		prefix := fmt.Sprintf("e2e-batch-%d-", run)
		keys := eventstest.KeysOfPartition(prefix, events.PartitionOf(prefix+"0"), 4)
		publish := func(lines []string, count string) {
			t.Helper()
			m := &nats.Msg{Subject: events.CommandSubject(keys[0]), Data: []byte(strings.Join(lines, "\n")), Header: nats.Header{}}
			m.Header.Set(jetstream.MsgIDHeader, "e2e-batch:"+count+":"+events.NewNonce())
			m.Header.Set(events.HeaderBatch, count)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatalf("publish a batch: %v", err)
			}
		}
		// One command of a batch is refused: it alone is dead-lettered.
		foreign := strings.Replace(set(keys[1], soon, ""), events.OrderCancelSubject(keys[1]), "payments.refund."+keys[1], 1)
		publish([]string{set(keys[0], soon, ""), foreign, set(keys[2], soon, "")}, "3")
		var d events.DeadLetter
		waitFor(t, 10*time.Second, "the dead letter of the refused command", func() bool {
			var ok bool
			d, ok = c.deadLetterOf(events.CommandSubject(keys[1]))
			return ok
		})
		if d.Reason != events.ReasonSubjectNotAllowed || d.Line != 2 || string(d.Data) != foreign {
			t.Fatalf("dead letter %+v, want line 2 alone, subject_not_allowed", d)
		}
		for _, k := range []string{keys[0], keys[2]} {
			waitFor(t, 10*time.Second, k+" pending in timeoutd", func() bool { _, ok := pendingTimeout(t, s, k); return ok })
		}
		// A batch whose count is not its lines is dead-lettered whole.
		publish([]string{set(keys[3], soon, "")}, "2")
		waitFor(t, 10*time.Second, "the dead letter of the broken batch", func() bool {
			var ok bool
			d, ok = c.deadLetterOf(events.CommandSubject(keys[0]))
			return ok
		})
		if d.Reason != events.ReasonMalformed || d.Field != events.HeaderBatch || d.Line != 0 {
			t.Fatalf("dead letter %+v, want the whole batch, malformed %s", d, events.HeaderBatch)
		}
		if _, ok := pendingTimeout(t, s, keys[3]); ok {
			t.Fatalf("%s pending: a broken batch must be applied in nothing", keys[3])
		}
	})
	t.Run("service healthy and valid traffic flows", func(t *testing.T) {
		// Runs once the parallel subtests of "dead letters" have finished.
		for _, path := range []string{"/healthz", "/readyz"} {
			resp, err := http.Get(s.TimeoutdURL + path)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("timeoutd %s after malformed commands: %v %v", path, resp, err)
			}
			resp.Body.Close()
		}
		cl := s.orders()
		o := createOrder(t, cl, within(1500*time.Millisecond))
		expectOnTimeCancellation(t, cl, c, o)
	})
	t.Run("the alert rules' metrics are served", func(t *testing.T) {
		// After a dead letter and a cancellation, so that the labelled
		// counters the rules name have a series.
		checkAlertMetrics(t, s)
	})
}
