package natsconf

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testcerts"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/timeouts"
	"github.com/ordertimeout/ordertimeout/services/orders"
	ojs "github.com/ordertimeout/ordertimeout/services/orders/jetstream"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	tjs "github.com/ordertimeout/ordertimeout/services/timeoutd/jetstream"
)

// TestServicesCallsAreAllowed runs the NATS adapters of timeoutd and
// orders, as their users, against a server of the plaintext rendering, and
// records from the server's protocol trace every subject each publishes to
// and subscribes on: the JetStream API calls ($JS.API.…), the acks
// ($JS.ACK.…), the events and the dead letters. Each path that calls the
// API is driven: timeoutd's streams check, a partition's first takeover
// (create), a takeover after its owner's connection closed (reset), its
// commands consumed, acked and handed back, the partition's mark and
// progress, a fire batch and the lookup of a stored event, a dead letter;
// orders' streams and mapping checks, its relay's publishes, its consumer
// created, pulling, acking, naking an early event, marking one in progress
// and dead-lettering one; and pkg/timeouts' Consumer as the example
// producer's user (examples/reservations). The server must refuse none of
// them, and every recorded subject must be allowed to its user by each
// rendering (plaintext, TLS, cluster), whose permissions nats-server
// itself parses.
func TestServicesCallsAreAllowed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a NATS server")
	}
	_, opts := parse(t, nil)
	rec := &recorder{}
	o := opts.Clone()
	o.Host, o.Port, o.HTTPPort, o.StoreDir, o.NoSigs, o.Trace, o.TraceVerbose = "127.0.0.1", -1, 0, t.TempDir(), true, true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLoggerV2(rec, false, true, false)
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	connect := func(user, inbox string) jetstream.JetStream {
		t.Helper()
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, "nats_"+user+"_password"), nats.CustomInboxPrefix(inbox),
			nats.Name("calls-"+user), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	fire := []string{events.OrderCancelSubjectPrefix, "reservations.expire."}
	if err := streams.Ensure(ctx, connect("bootstrap", streams.InboxBootstrap), streams.Config{FireSubjectPrefixes: fire}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	driveTimeoutd(ctx, t, connect, fire)
	driveOrders(ctx, t, connect("orders", streams.InboxOrders), connect("timeoutd", streams.InboxTimeoutd))
	driveLibrary(ctx, t, connect("reservations", "_INBOX_reservations"), connect("timeoutd", streams.InboxTimeoutd))

	if v := rec.violations(); len(v) > 0 {
		t.Errorf("the server refused the services' calls:\n%s", strings.Join(v, "\n"))
	}
	certs, err := testcerts.Write(t.TempDir(), "nats")
	if err != nil {
		t.Fatal(err)
	}
	files := TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA}
	cluster := files
	cluster.Cluster = true
	renderings := []struct {
		name string
		tls  *TLS
	}{{"plaintext", nil}, {"TLS", &files}, {"cluster", &cluster}}
	// Each service's calls, and one a service must make on each path
	// driven above (the test would pass vacuously if a path stopped
	// calling the API).
	want := map[string][]string{
		"timeoutd": {"$JS.API.STREAM.INFO.", "$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.DELETE.", "$JS.API.CONSUMER.INFO.",
			"$JS.API.CONSUMER.RESET.", "$JS.API.CONSUMER.MSG.NEXT.", "$JS.ACK.", "$JS.API.STREAM.MSG.GET.", "orders.cancel.",
			"timeouts.missed.", "timeouts.fence.", "reservations.expire.", "dlq.timeoutd."},
		"orders": {"$JS.API.STREAM.INFO.", "$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.MSG.NEXT.", "$JS.ACK.",
			"timeouts.cmd.", "orders.created.", "orders.paid.", "orders.cancelled.", "dlq.orders."},
		"reservations": {"$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.MSG.NEXT.", "$JS.ACK.", "dlq.reservations.", "timeouts.cmd.",
			"$JS.API.CONSUMER.CREATE.DEAD_LETTERS.reservations-dlq.", "$JS.ACK.DEAD_LETTERS."},
	}
	// The headers each service sets: none but these, so that no message of
	// the platform asks the shared streams for a rollup, a TTL, a
	// schedule, a counter or an atomic batch (docs/ARCHITECTURE.md,
	// "Tenant isolation"). The expected-stream and last-subject-sequence
	// checks are the command mapping probe's, which stores nothing, and
	// timeoutd's fences (the last-subject-sequence of a partition's fence
	// subject, on the expiry stream only it publishes to).
	allowedHeaders := []string{jetstream.MsgIDHeader, jetstream.ExpectedStreamHeader, jetstream.ExpectedLastSubjSeqHeader,
		jetstream.ExpectedLastSubjSeqSubjHeader, events.HeaderBatch, events.HeaderBatchTraceParents, "traceparent"}
	for _, user := range []string{"timeoutd", "orders", "reservations"} {
		names := rec.headerNames(user)
		t.Logf("%s publishes the headers %v", user, names)
		if !slices.Contains(names, jetstream.MsgIDHeader) {
			t.Errorf("%s published no %s: the trace of headers is not read", user, jetstream.MsgIDHeader)
		}
		for _, h := range names {
			if !slices.Contains(allowedHeaders, h) {
				t.Errorf("%s publishes the header %s, which the platform does not use on its shared streams", user, h)
			}
		}
	}
	for _, user := range []string{"timeoutd", "orders", "reservations"} {
		pubs, subs := rec.subjects(user)
		t.Logf("%s publishes to %d subjects, subscribes on %d:\n  %s", user, len(pubs), len(subs), strings.Join(pubs, "\n  "))
		for _, prefix := range want[user] {
			if !slices.ContainsFunc(pubs, func(s string) bool { return strings.HasPrefix(s, prefix) }) {
				t.Errorf("%s published nothing on %s…: a path of the test no longer calls it", user, prefix)
			}
		}
		for _, r := range renderings {
			t.Run(r.name+"/"+user, func(t *testing.T) {
				_, opts := parse(t, r.tls)
				perms := permissionsOf(t, opts, user)
				for _, subj := range pubs {
					if !allowed(perms.Publish, mapped(subj)) {
						t.Errorf("%s may not publish to %s (%s)", user, subj, mapped(subj))
					}
				}
				for _, subj := range subs {
					if !allowed(perms.Subscribe, subj) {
						t.Errorf("%s may not subscribe to %s", user, subj)
					}
				}
			})
		}
	}
}

// driveTimeoutd runs timeoutd's adapters through each of their calls.
func driveTimeoutd(ctx context.Context, t *testing.T, connect func(user, inbox string) jetstream.JetStream, fire []string) {
	t.Helper()
	js := connect("timeoutd", streams.InboxTimeoutd)
	if err := streams.Verify(ctx, js, streams.Config{FireSubjectPrefixes: fire},
		append(events.CommandStreams(), events.StreamExpiries, events.StreamDeadLetters)...); err != nil {
		t.Fatalf("timeoutd verifies the streams: %v", err)
	}
	const key = "calls-1"
	p := events.PartitionOf(key)
	// The partition's first owner creates its consumer, then goes away
	// (its connection closes, as a crashed process's does).
	first, err := tjs.NewConsumer(js, tjs.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Add(ctx, p); err != nil {
		t.Fatalf("first takeover: %v", err)
	}
	_ = first.Close()
	js.Conn().Close()

	// The next owner finds the consumer idle and resets it.
	js = connect("timeoutd", streams.InboxTimeoutd)
	c, err := tjs.NewConsumer(js, tjs.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Add(ctx, p); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if reset, recreated := c.Takeovers(); reset != 1 || recreated != 0 {
		t.Errorf("takeover of an idle consumer: %d resets, %d recreated; want a reset", reset, recreated)
	}
	producer := connect("orders", streams.InboxOrders)
	for i := range 2 {
		if _, err := producer.Publish(ctx, events.CommandSubject(key), fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatalf("orders publishes a command: %v", err)
		}
	}
	// The first command is handed back (as when ingest's fence refuses
	// it) and redelivered; every other is acked.
	naked, acked := false, 0
	for acked < 2 {
		batch, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("next commands: %v", err)
		}
		for _, m := range batch {
			if !naked {
				naked = true
				_ = m.NakWithDelay(0)
				continue
			}
			if err := m.Ack(); err != nil {
				t.Fatalf("ack a command: %v", err)
			}
			acked++
		}
	}
	mark, err := c.Mark(ctx, p)
	if err != nil {
		t.Fatalf("mark: %v", err)
	}
	pollFor(t, "timeoutd's consumer to ack the commands", func() bool {
		done, err := c.Consumed(ctx, p, mark)
		return err == nil && done
	})

	pub := tjs.NewPublisher(js, 0)
	// The takeover's fence, then fires under it, and a fence again as
	// after one aged out (read first).
	fenced, err := pub.Fence(ctx, timeoutd.Fence{Owner: "t1", Leases: []timeoutd.Lease{{Partition: p, Epoch: 1}}}, nil)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	if last, err := pub.LastFence(ctx, p); err != nil || last.Seq != fenced[0] || last.Owner != "t1" {
		t.Fatalf("last fence = %+v, %v; want t1's at %d", last, err, fenced[0])
	}
	if _, err := pub.Fence(ctx, timeoutd.Fence{Owner: "t1", Leases: []timeoutd.Lease{{Partition: p, Epoch: 2}}}, fenced); err != nil {
		t.Fatalf("fence again: %v", err)
	}
	last, err := pub.LastFence(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	seq := last.Seq
	ev := timeoutd.Event{Subject: events.OrderCancelSubject(key), MsgID: key + "-fired", Data: []byte(`{}`), Partition: p, Fence: seq}
	others := []timeoutd.Event{ // a missed event, a fire on another allowed prefix
		{Subject: events.MissedSubject(key), MsgID: key + "-missed", Data: []byte(`{}`), Partition: p, Fence: seq},
		{Subject: fire[1] + key, MsgID: key + "-reservation", Data: []byte(`{}`), Partition: p, Fence: seq},
	}
	if _, err := pub.Publish(ctx, append([]timeoutd.Event{ev}, others...)); err != nil {
		t.Fatalf("publish fires: %v", err)
	}
	if ok, err := pub.Stored(ctx, ev.Subject, ev.MsgID); err != nil || !ok {
		t.Fatalf("stored = %v, %v; want the fire found", ok, err)
	}
	dl := events.NewDeadLetter(events.CommandSubject(key), []byte(`{`), "", 1, &events.Error{Reason: events.ReasonMalformed}, time.Now())
	if err := tjs.NewDeadLetters(js).DeadLetter(ctx, dl); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
}

// driveOrders runs orders' adapters through each of their calls; timeoutd
// publishes the cancel events it consumes.
func driveOrders(ctx context.Context, t *testing.T, js, fires jetstream.JetStream) {
	t.Helper()
	if err := streams.Verify(ctx, js, streams.Config{}, events.StreamOrderEvents, events.StreamExpiries, events.StreamDeadLetters); err != nil {
		t.Fatalf("orders verifies the streams: %v", err)
	}
	if err := streams.VerifyCommandMapping(ctx, js); err != nil {
		t.Fatalf("orders verifies the mapping: %v", err)
	}
	// What the relay publishes: commands and order events, asynchronously.
	for _, subj := range []string{events.CommandSubject("calls-2"), events.OrderEventSubject(events.OrderCreated, "calls-2"),
		events.OrderEventSubject(events.OrderPaid, "calls-2"), events.OrderEventSubject(events.OrderCancelled, "calls-3")} {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: []byte(`{}`), Header: nats.Header{jetstream.MsgIDHeader: {subj}}})
		if err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publish %s: %v", subj, err)
		case <-ctx.Done():
			t.Fatalf("publish %s: %v", subj, ctx.Err())
		}
	}
	exp := &scriptedExpirer{slow: 3 * time.Second / 2, seen: map[string]int{}}
	c, err := ojs.NewConsumer(ctx, js, exp, ojs.Config{AckWait: time.Second, RetryDelay: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("orders creates its consumer: %v", err)
	}
	c.Start(ctx)
	defer c.Stop()
	d := time.Now().Add(-time.Minute).UTC()
	for _, key := range []string{"calls-applied", "calls-early", "calls-slow"} {
		data, _ := json.Marshal(events.Expiry{Schema: 1, Outcome: events.OutcomeFired, Key: key, Version: 1, Deadline: d, FiredAt: d})
		if _, err := fires.Publish(ctx, events.OrderCancelSubject(key), data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fires.Publish(ctx, events.OrderCancelSubject("calls-bad"), []byte(`{`)); err != nil {
		t.Fatal(err)
	}
	pollFor(t, "orders to apply the cancel events", func() bool {
		exp.mu.Lock()
		defer exp.mu.Unlock()
		return exp.seen["calls-applied"] >= 1 && exp.seen["calls-early"] >= 2 && exp.seen["calls-slow"] >= 1 && exp.done
	})
	cons, err := js.Consumer(ctx, events.StreamExpiries, ojs.DurableDefault)
	if err != nil {
		t.Fatal(err)
	}
	pollFor(t, "orders to settle every cancel event", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// mapped returns subject as the server's command mappings turn it
// before it checks a right: timeouts.cmd.<key> into
// timeouts.cmd.<partition>.<key>, timeouts.cmd.<a>.<b> into
// timeouts.cmd.<partition of b>.<a>.<b>.
func mapped(subject string) string {
	rest, ok := strings.CutPrefix(subject, events.CommandSubjectPrefix)
	switch tokens := strings.Split(rest, "."); {
	case ok && len(tokens) == 1:
		return events.PartitionedCommandSubject(rest)
	case ok && len(tokens) == 2:
		return events.CommandSubjectPrefix + strconv.Itoa(events.PartitionOf(tokens[1])) + "." + rest
	}
	return subject
}

// driveLibrary runs pkg/timeouts' Consumer as the example producer's user
// (examples/reservations) through its calls: its durable created, events
// pulled, a slow one kept in progress and acked, one dead-lettered;
// timeoutd publishes the events.
func driveLibrary(ctx context.Context, t *testing.T, js, fires jetstream.JetStream) {
	t.Helper()
	var mu sync.Mutex
	handled := 0
	c, err := timeouts.NewConsumer(ctx, js, timeouts.ConsumerConfig[events.Expiry]{
		Durable: "reservations", FilterSubject: "reservations.expire.>", Decode: timeouts.DecodeExpiry, AckWait: time.Second,
		Logger: slog.New(slog.DiscardHandler),
		Handle: func(context.Context, events.Expiry) error {
			time.Sleep(1500 * time.Millisecond) // the handler's work, kept in progress
			mu.Lock()
			handled++
			mu.Unlock()
			return nil
		},
	})
	if err != nil {
		t.Fatalf("the library creates its consumer: %v", err)
	}
	d := time.Now().UTC()
	data, _ := json.Marshal(events.Expiry{Schema: 1, Outcome: events.OutcomeFired, Key: "calls-r", Version: 1, Deadline: d, FiredAt: d})
	for _, m := range [][]byte{data, []byte(`{`)} {
		if _, err := fires.Publish(ctx, "reservations.expire.calls-r", m); err != nil {
			t.Fatalf("timeoutd publishes a reservation's expiry: %v", err)
		}
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	cons, err := js.Consumer(ctx, events.StreamExpiries, "reservations")
	if err != nil {
		t.Fatalf("the library reads its consumer: %v", err)
	}
	pollFor(t, "the library to settle its events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		info, err := cons.Info(ctx)
		return handled > 0 && err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("the library's Run: %v", err)
	}

	// The tenant's commands, a dead letter timeoutd made of one, read
	// and replayed by the tenant.
	key := events.TenantKey("reservations", "calls-r")
	if _, err := js.Publish(ctx, events.CommandSubject(key), []byte(`{}`)); err != nil {
		t.Fatalf("the tenant publishes a command: %v", err)
	}
	dl := events.NewDeadLetter(events.CommandSubject(key), []byte(`{`), "", 1, &events.Error{Reason: events.ReasonMalformed}, time.Now())
	dl.Tenant = "reservations"
	if err := tjs.NewDeadLetters(fires).DeadLetter(ctx, dl); err != nil {
		t.Fatalf("timeoutd dead-letters the tenant's command: %v", err)
	}
	replayed := 0
	if err := timeouts.ReadDeadLetters(ctx, js, "reservations", func(d events.DeadLetter) error {
		replayed++
		return timeouts.Replay(ctx, js, d, []byte(`{}`))
	}); err != nil || replayed != 1 {
		t.Fatalf("the tenant reads and replays its dead letters: %d replayed, %v", replayed, err)
	}
}

// scriptedExpirer applies every cancel event, but calls one early the
// first time (redelivered at pay_by) and takes slow over calls-slow, past
// the consumer's AckWait.
type scriptedExpirer struct {
	slow time.Duration
	mu   sync.Mutex
	seen map[string]int
	done bool
}

func (e *scriptedExpirer) ExpireAll(_ context.Context, exps []orders.Expiry) ([]orders.ExpireResult, error) {
	results := make([]orders.ExpireResult, len(exps))
	for i, x := range exps {
		e.mu.Lock()
		e.seen[x.ID]++
		n := e.seen[x.ID]
		e.mu.Unlock()
		switch {
		case x.ID == "calls-early" && n == 1:
			results[i].Err = &orders.EarlyError{PayBy: time.Now().Add(100 * time.Millisecond)}
		case x.ID == "calls-slow" && n == 1:
			time.Sleep(e.slow) // the work under way, kept in progress
			e.mu.Lock()
			e.done = true
			e.mu.Unlock()
			results[i].Applied = true
		default:
			results[i].Applied = true
		}
	}
	return results, nil
}

// permissionsOf returns user's permissions in opts.
func permissionsOf(t *testing.T, opts *server.Options, user string) *server.Permissions {
	t.Helper()
	for _, u := range opts.Users {
		if u.Username == user {
			if u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Subscribe == nil {
				t.Fatalf("user %s has no publish and subscribe permissions", user)
			}
			return u.Permissions
		}
	}
	t.Fatalf("no user %s", user)
	return nil
}

// allowed reports whether p lets a client use subject, as nats-server
// decides: some allow matches it and no deny does.
func allowed(p *server.SubjectPermission, subject string) bool {
	match := func(filters []string) bool {
		return slices.ContainsFunc(filters, func(f string) bool { return server.SubjectMatchesFilter(subject, f) })
	}
	return (p.Allow == nil || match(p.Allow)) && !match(p.Deny)
}

// pollFor waits up to 30s for cond, naming what it waits for.
func pollFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clientOp matches a client's protocol operation in nats-server's trace:
// the connection's account and user, then PUB or HPUB and its subject, or
// SUB and its subject.
var clientOp = regexp.MustCompile(`"\$G/user:([a-z]+)" - <<- \[(PUB|HPUB|SUB) (\S+)`)

// msgHeaders matches the verbose trace of a message's headers: the
// user, then the header lines as the trace quotes them.
var msgHeaders = regexp.MustCompile(`"\$G/user:([a-z]+)" - <<- MSG_PAYLOAD: \["NATS/1\.0\\r\\n(.*?)\\r\\n\\r\\n`)

// recorder is nats-server's logger: it keeps each user's published and
// subscribed subjects and the names of the headers it published from the
// trace, and every permissions violation.
type recorder struct {
	mu         sync.Mutex
	pubs, subs map[string]map[string]bool
	headers    map[string]map[string]bool
	violated   []string
}

func (r *recorder) log(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.Contains(line, "Permissions Violation") {
		r.violated = append(r.violated, line)
	}
	if h := msgHeaders.FindStringSubmatch(line); h != nil {
		if r.headers == nil {
			r.headers = map[string]map[string]bool{}
		}
		if r.headers[h[1]] == nil {
			r.headers[h[1]] = map[string]bool{}
		}
		for _, kv := range strings.Split(h[2], `\r\n`) {
			name, _, _ := strings.Cut(kv, ":")
			r.headers[h[1]][name] = true
		}
		return
	}
	m := clientOp.FindStringSubmatch(line)
	if m == nil {
		return
	}
	set := &r.pubs
	if m[2] == "SUB" {
		set = &r.subs
	}
	if *set == nil {
		*set = map[string]map[string]bool{}
	}
	if (*set)[m[1]] == nil {
		(*set)[m[1]] = map[string]bool{}
	}
	(*set)[m[1]][m[3]] = true
}

// subjects returns user's published and subscribed subjects, sorted.
func (r *recorder) subjects(user string) (pubs, subs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := func(m map[string]bool) []string {
		var s []string
		for k := range m {
			s = append(s, k)
		}
		slices.Sort(s)
		return s
	}
	return keys(r.pubs[user]), keys(r.subs[user])
}

// headerNames returns the names of the headers user published, sorted.
func (r *recorder) headerNames(user string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for k := range r.headers[user] {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

func (r *recorder) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.violated)
}

func (r *recorder) Noticef(format string, v ...any) { r.log(fmt.Sprintf(format, v...)) }
func (r *recorder) Warnf(format string, v ...any)   { r.log(fmt.Sprintf(format, v...)) }
func (r *recorder) Fatalf(format string, v ...any)  { r.log(fmt.Sprintf(format, v...)) }
func (r *recorder) Errorf(format string, v ...any)  { r.log(fmt.Sprintf(format, v...)) }
func (r *recorder) Debugf(format string, v ...any)  { r.log(fmt.Sprintf(format, v...)) }
func (r *recorder) Tracef(format string, v ...any)  { r.log(fmt.Sprintf(format, v...)) }
