package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	ojs "github.com/ordertimeout/ordertimeout/services/orders/jetstream"
	tjs "github.com/ordertimeout/ordertimeout/services/timeoutd/jetstream"
)

// The NATS users of deploy/compose/nats.conf.
const (
	userBootstrap = "bootstrap"
	userOrders    = "orders"
	userTimeoutd  = "timeoutd"
	userObserver  = "observer"
	// userReservations is the example producer's (examples/reservations).
	userReservations = "reservations"
)

// inboxOf is each user's inbox prefix: the only subjects it may subscribe to.
var inboxOf = map[string]string{
	userBootstrap: streams.InboxBootstrap,
	userOrders:    streams.InboxOrders,
	userTimeoutd:  streams.InboxTimeoutd,
	userObserver:  streams.InboxObserver,
	// userReservations: the inbox examples/reservations/cmd connects with.
	userReservations: "_INBOX_reservations",
}

// permClient is one connection of a user, with the JetStream API on it.
type permClient struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// permFixture is a NATS server started with the compose configuration, its
// streams made by the bootstrap container, the services' durable consumers,
// and one held (fetched, unacked) message on each.
type permFixture struct {
	connect func(t *testing.T, user string) *permClient
	// held are in-flight messages whose ack must be refused to everyone;
	// own are in-flight messages their owner acks.
	heldOrders, ownOrders, heldTimeoutd, ownTimeoutd jetstream.Msg
	// partition is the command partition whose consumer timeoutd holds;
	// cmdStream is its stream.
	partition int
	cmdStream string
	// created is the subject of an order event the observer reads.
	created string
}

// startPermFixture starts NATS with deploy/compose/nats.conf on a network of
// its own and runs the real bootstrap step (/streams of the NATS image) as
// user bootstrap.
func startPermFixture(t *testing.T) *permFixture {
	t.Helper()
	ctx := t.Context()
	conf, err := os.ReadFile("../deploy/compose/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	passwords := map[string]string{userBootstrap: "b-pw-0", userOrders: "o-pw-1", userTimeoutd: "t-pw-2", userObserver: "ob-pw-3", userReservations: "r-pw-4"}
	nw, err := tcnetwork.New(ctx)
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	t.Cleanup(func() { _ = nw.Remove(context.Background()) })
	ctr, err := testcontainers.Run(ctx, testinfra.NATSImage,
		tcnetwork.WithNetwork([]string{svcNATS}, nw),
		testcontainers.WithExposedPorts("4222/tcp"),
		testcontainers.WithEnv(map[string]string{
			"NATS_BOOTSTRAP_PASSWORD": passwords[userBootstrap], "NATS_ORDERS_PASSWORD": passwords[userOrders],
			"NATS_TIMEOUTD_PASSWORD": passwords[userTimeoutd], "NATS_OBSERVER_PASSWORD": passwords[userObserver],
			"NATS_RESERVATIONS_PASSWORD": passwords[userReservations],
		}),
		testcontainers.WithFiles(testcontainers.ContainerFile{Reader: bytes.NewReader(conf), ContainerFilePath: "/etc/nats/compose.conf", FileMode: 0o644}),
		testcontainers.WithCmdArgs("-c", "/etc/nats/compose.conf"),
		testcontainers.WithWaitStrategy(wait.ForExec([]string{"/healthcheck", "http://127.0.0.1:8222/healthz?js-enabled-only=true"}).
			WithPollInterval(100*time.Millisecond).WithStartupTimeout(30*time.Second)),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("start nats with the compose configuration: %v", err)
	}
	endpoint, err := ctr.PortEndpoint(ctx, "4222/tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	// The bootstrap step, as compose runs it, with compose's default fire
	// subject prefixes.
	if err := runStreamsBootstrap(ctx, nw, fmt.Sprintf("nats://%s:%s@%s:4222", userBootstrap, passwords[userBootstrap], svcNATS), 1,
		"orders.cancel.,reservations.expire."); err != nil {
		t.Fatal(err)
	}

	url := func(user, password string) string {
		if user == "" {
			return "nats://" + endpoint
		}
		return fmt.Sprintf("nats://%s:%s@%s", user, password, endpoint)
	}
	for _, tc := range []struct{ name, user, password string }{
		{"anonymous", "", ""},
		{"wrong password", userOrders, "guess"},
		{"unknown user", "admin", "admin"},
	} {
		if nc, err := nats.Connect(url(tc.user, tc.password)); err == nil {
			nc.Close()
			t.Errorf("%s: connected, want an authorization error", tc.name)
		}
	}

	f := &permFixture{}
	f.connect = func(t *testing.T, user string) *permClient {
		t.Helper()
		nc, err := nats.Connect(url(user, passwords[user]), nats.Name("e2e-perm-"+user), nats.CustomInboxPrefix(inboxOf[user]),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return &permClient{nc: nc, js: js}
	}

	// The services' durable consumers, as they create them, each with two
	// messages fetched and not acked.
	run := time.Now().UnixNano()
	orders, timeoutd := f.connect(t, userOrders), f.connect(t, userTimeoutd)
	oc, err := orders.js.CreateOrUpdateConsumer(ctx, events.StreamExpiries, jetstream.ConsumerConfig{
		Durable: ojs.DurableDefault, FilterSubject: events.OrderCancelSubjects, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatalf("orders creates its consumer: %v", err)
	}
	// timeoutd's consumer of one partition, holding two commands of it.
	held := []string{fmt.Sprintf("perm-%d-held-0", run)}
	f.partition = events.PartitionOf(held[0])
	f.cmdStream = events.CommandStream(f.partition)
	for i := 1; len(held) < 2; i++ {
		if k := fmt.Sprintf("perm-%d-held-%d", run, i); events.PartitionOf(k) == f.partition {
			held = append(held, k)
		}
	}
	tc, err := timeoutd.js.CreateOrUpdateConsumer(ctx, f.cmdStream,
		tjs.ConsumerSettings(f.partition, tjs.ConsumerConfig{AckWait: time.Minute, BatchSize: 10}))
	if err != nil {
		t.Fatalf("timeoutd creates its consumer: %v", err)
	}
	for _, key := range held {
		if _, err := timeoutd.js.Publish(ctx, events.OrderCancelSubject(key), []byte(`{}`)); err != nil {
			t.Fatalf("timeoutd publishes a cancel event: %v", err)
		}
		if _, err := orders.js.Publish(ctx, events.CommandSubject(key), []byte(`{}`)); err != nil {
			t.Fatalf("orders publishes a command: %v", err)
		}
	}
	fetch2 := func(c jetstream.Consumer) (jetstream.Msg, jetstream.Msg) {
		t.Helper()
		b, err := c.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		var got []jetstream.Msg
		for m := range b.Messages() {
			got = append(got, m)
		}
		if len(got) != 2 {
			t.Fatalf("fetched %d messages, want 2 (%v)", len(got), b.Error())
		}
		return got[0], got[1]
	}
	f.heldOrders, f.ownOrders = fetch2(oc)
	f.heldTimeoutd, f.ownTimeoutd = fetch2(tc)
	f.created = events.OrderEventSubject(events.OrderCreated, fmt.Sprintf("perm-%d-created", run))
	if _, err := orders.js.Publish(ctx, f.created, []byte(`{}`)); err != nil {
		t.Fatalf("orders publishes an order event: %v", err)
	}
	return f
}

// permCase is one cell of the matrix: user tries action; allowed or refused.
type permCase struct {
	user, action string
	allowed      bool
	// subject is the subject the server must name in its permissions
	// violation when the action is refused.
	subject string
	do      func(ctx context.Context, c *permClient) error
}

// TestNATSPermissionMatrix starts NATS with the compose stack's
// configuration (deploy/compose/nats.conf), creates the streams with the real
// bootstrap step, and for every user (bootstrap, orders, timeoutd,
// observer) tries every forbidden action (read another's inbox or _INBOX.>,
// ack or pull another's consumer's message, delete or purge a stream, delete
// or rewrite another's consumer, create or update streams, publish another
// service's subjects, …), each of which the server must refuse with a
// permissions violation naming the subject, and every action the user needs,
// which must work. It then checks that nothing a refused action aimed at
// changed. docs/RELIABILITY.md, "NATS permissions", has the matrix.
func TestNATSPermissionMatrix(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs Docker and the NATS image; run without -short (make test)")
	}
	f := startPermFixture(t)
	run := time.Now().UnixNano()
	users := []string{userBootstrap, userOrders, userTimeoutd, userObserver, userReservations}

	request := func(subject, body string) func(context.Context, *permClient) error {
		return func(ctx context.Context, c *permClient) error {
			_, err := c.nc.RequestWithContext(ctx, subject, []byte(body))
			return err
		}
	}
	publish := func(subject string) func(context.Context, *permClient) error {
		return func(ctx context.Context, c *permClient) error {
			_, err := c.js.Publish(ctx, subject, []byte(`{}`), jetstream.WithMsgID(fmt.Sprintf("perm:%d:%s", run, subject)))
			return err
		}
	}
	subscribe := func(subject string) func(context.Context, *permClient) error {
		return func(ctx context.Context, c *permClient) error {
			_, err := c.nc.SubscribeSync(subject)
			return err
		}
	}
	ack := func(m jetstream.Msg) func(context.Context, *permClient) error {
		return func(ctx context.Context, c *permClient) error { return c.nc.Publish(m.Reply(), []byte("+ACK")) }
	}
	api := func(format string, args ...any) string { return "$JS.API." + fmt.Sprintf(format, args...) }

	var cases []permCase
	add := func(user, action string, allowed bool, subject string, do func(context.Context, *permClient) error) {
		cases = append(cases, permCase{user: user, action: action, allowed: allowed, subject: subject, do: do})
	}
	for _, u := range users {
		// Inboxes: only one's own.
		add(u, "subscribe to its own inbox", true, inboxOf[u]+".x", subscribe(inboxOf[u]+".x"))
		add(u, "subscribe to _INBOX.>", false, "_INBOX.>", subscribe("_INBOX.>"))
		for _, v := range users {
			if v != u {
				add(u, "subscribe to "+v+"'s inbox", false, inboxOf[v]+".>", subscribe(inboxOf[v]+".>"))
			}
		}
		add(u, "subscribe to the command subjects", false, events.CommandSubjects, subscribe(events.CommandSubjects))
		// Streams: nobody deletes, purges or edits; only bootstrap creates
		// and updates the platform's streams, and no other stream.
		for _, s := range []string{f.cmdStream, events.StreamExpiries} {
			add(u, "delete stream "+s, false, api("STREAM.DELETE.%s", s), request(api("STREAM.DELETE.%s", s), ""))
			add(u, "purge stream "+s, false, api("STREAM.PURGE.%s", s), request(api("STREAM.PURGE.%s", s), "{}"))
			add(u, "delete a message of "+s, false, api("STREAM.MSG.DELETE.%s", s), request(api("STREAM.MSG.DELETE.%s", s), `{"seq":1}`))
		}
		// Only bootstrap deletes the single command stream the partitions'
		// replace (streams.Ensure, once it is empty).
		if u != userBootstrap {
			s := events.StreamCommandsLegacy
			add(u, "delete stream "+s, false, api("STREAM.DELETE.%s", s), request(api("STREAM.DELETE.%s", s), ""))
		}
		add(u, "create a stream of its own", false, api("STREAM.CREATE.ROGUE"), func(ctx context.Context, c *permClient) error {
			_, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ROGUE", Subjects: []string{"rogue.>"}})
			return err
		})
		if u == userBootstrap {
			add(u, "create or update the platform's streams (streams.Ensure)", true, "", func(ctx context.Context, c *permClient) error {
				return streams.Ensure(ctx, c.js, streams.Config{})
			})
		} else {
			add(u, "update stream "+events.StreamExpiries, false, api("STREAM.UPDATE.%s", events.StreamExpiries), func(ctx context.Context, c *permClient) error {
				for _, sc := range streams.Specs(streams.Config{}) {
					if sc.Name == events.StreamExpiries {
						_, err := c.js.UpdateStream(ctx, sc)
						return err
					}
				}
				return errors.New("no spec of " + events.StreamExpiries)
			})
		}
		// The services' consumers: only the owner reads and acks, and only
		// timeoutd deletes its own (a takeover creates it again); nobody
		// rewrites them.
		for _, cons := range []struct {
			owner, stream, name string
			held, own           jetstream.Msg
		}{
			{userOrders, events.StreamExpiries, ojs.DurableDefault, f.heldOrders, f.ownOrders},
			{userTimeoutd, f.cmdStream, tjs.DurableName(f.partition), f.heldTimeoutd, f.ownTimeoutd},
		} {
			whose := cons.owner + "'s consumer " + cons.name
			if u == userTimeoutd && u == cons.owner {
				// A takeover deletes the partition's consumer and creates it
				// again (shown on another partition's, not to disturb the
				// fixtures of this one).
				p := (f.partition + 1) % events.Partitions
				add(u, "delete and create again its own consumer "+tjs.DurableName(p), true, "", func(ctx context.Context, c *permClient) error {
					if _, err := c.js.CreateConsumer(ctx, events.CommandStream(p), tjs.ConsumerSettings(p, tjs.ConsumerConfig{})); err != nil {
						return err
					}
					return c.js.DeleteConsumer(ctx, events.CommandStream(p), tjs.DurableName(p))
				})
			} else {
				add(u, "delete "+whose, false, api("CONSUMER.DELETE.%s.%s", cons.stream, cons.name), request(api("CONSUMER.DELETE.%s.%s", cons.stream, cons.name), ""))
			}
			if u == cons.owner {
				add(u, "ack a message of its own consumer "+cons.name, true, "", ack(cons.own))
				add(u, "read info of its own consumer "+cons.name, true, "", request(api("CONSUMER.INFO.%s.%s", cons.stream, cons.name), ""))
				continue
			}
			add(u, "reset "+whose, false, api("CONSUMER.RESET.%s.%s", cons.stream, cons.name), request(api("CONSUMER.RESET.%s.%s", cons.stream, cons.name), ""))
			add(u, "ack an in-flight message of "+whose, false, cons.held.Reply(), ack(cons.held))
			add(u, "pull from "+whose, false, api("CONSUMER.MSG.NEXT.%s.%s", cons.stream, cons.name),
				request(api("CONSUMER.MSG.NEXT.%s.%s", cons.stream, cons.name), `{"batch":1,"no_wait":true}`))
			hijack := api("CONSUMER.CREATE.%s.%s.%s", cons.stream, cons.name, "hijack.>")
			add(u, "rewrite "+whose+" (new filter)", false, hijack, func(ctx context.Context, c *permClient) error {
				_, err := c.js.CreateOrUpdateConsumer(ctx, cons.stream, jetstream.ConsumerConfig{Durable: cons.name, FilterSubject: "hijack.>", AckPolicy: jetstream.AckExplicitPolicy})
				return err
			})
		}
		// Nobody but timeoutd may have a consumer on a command work queue.
		if u != userTimeoutd {
			subj := api("CONSUMER.CREATE.%s.%s-rogue", f.cmdStream, u)
			add(u, "create a consumer on "+f.cmdStream, false, subj, func(ctx context.Context, c *permClient) error {
				_, err := c.js.CreateConsumer(ctx, f.cmdStream, jetstream.ConsumerConfig{Name: u + "-rogue", AckPolicy: jetstream.AckExplicitPolicy})
				return err
			})
		}
	}

	// Publishing: each service only its own messages; bootstrap and observer
	// nothing but the observer's own dead letters. Every subject is unique.
	// The server maps timeouts.cmd.<key> to timeouts.cmd.<partition>.<key>
	// before it checks a right, so a refusal names the mapped subject.
	refused := func(subject string) string {
		rest, ok := strings.CutPrefix(subject, events.CommandSubjectPrefix)
		switch tokens := strings.Split(rest, "."); {
		case ok && len(tokens) == 1:
			return events.PartitionedCommandSubject(rest)
		case ok && len(tokens) == 2: // the tenants' mapping, whatever the tokens
			return events.CommandSubjectPrefix + strconv.Itoa(events.PartitionOf(tokens[1])) + "." + rest
		}
		return subject
	}
	pubs := []struct {
		user, subject string
		allowed       bool
	}{
		{userOrders, events.CommandSubject(fmt.Sprintf("perm-%d-1", run)), true},
		{userOrders, events.OrderEventSubject(events.OrderCreated, fmt.Sprintf("perm-%d-2", run)), true},
		{userOrders, events.OrderEventSubject(events.OrderCancelled, fmt.Sprintf("perm-%d-3", run)), true},
		{userOrders, events.DeadLetterSubject("orders", events.ReasonMalformed), true},
		// The mapped subject is not the producers': published as it is, the
		// tenants' mapping takes its partition token for a tenant's.
		{userOrders, events.PartitionedCommandSubject(fmt.Sprintf("perm-%d-1b", run)), false},
		// Another tenant's key.
		{userOrders, events.CommandSubject(events.TenantKey(userReservations, fmt.Sprintf("perm-%d-1c", run))), false},
		{userOrders, events.OrderCancelSubject(fmt.Sprintf("perm-%d-4", run)), false},
		{userOrders, events.MissedSubject(fmt.Sprintf("perm-%d-5", run)), false},
		{userOrders, events.DeadLetterSubject("timeoutd", events.ReasonInvalidKey), false},
		{userTimeoutd, events.OrderCancelSubject(fmt.Sprintf("perm-%d-6", run)), true},
		{userTimeoutd, events.MissedSubject(fmt.Sprintf("perm-%d-7", run)), true},
		{userTimeoutd, events.DeadLetterSubject("timeoutd", events.ReasonMalformed), true},
		{userTimeoutd, events.CommandSubject(fmt.Sprintf("perm-%d-8", run)), false},
		{userTimeoutd, events.OrderEventSubject(events.OrderCancelled, fmt.Sprintf("perm-%d-9", run)), false},
		{userTimeoutd, events.OrderEventSubject(events.OrderPaid, fmt.Sprintf("perm-%d-10", run)), false},
		{userTimeoutd, events.DeadLetterSubject("orders", events.ReasonInvalidKey), false},
		{userObserver, events.OrderCancelSubject(fmt.Sprintf("perm-%d-11", run)), false},
		{userObserver, events.CommandSubject(fmt.Sprintf("perm-%d-12", run)), false},
		{userObserver, events.OrderEventSubject(events.OrderCancelled, fmt.Sprintf("perm-%d-13", run)), false},
		{userObserver, events.DeadLetterSubject("inventory", events.ReasonMalformed), true},
		{userObserver, events.DeadLetterSubject("orders", events.ReasonInvalidVersion), false},
		// A tenant publishes only under its own token: not orders' keys,
		// not orders' partition subjects, not the orders token.
		{userReservations, events.CommandSubject(events.TenantKey(userReservations, fmt.Sprintf("perm-%d-16", run))), true},
		{userReservations, events.CommandSubject(fmt.Sprintf("perm-%d-16a", run)), false},
		{userReservations, events.PartitionedCommandSubject(fmt.Sprintf("perm-%d-16b", run)), false},
		// Its own subject as stored: allowed, unmapped (on a partition not
		// its key's, timeoutd dead-letters it).
		{userReservations, events.PartitionedCommandSubject(events.TenantKey(userReservations, fmt.Sprintf("perm-%d-16c", run))), true},
		{userReservations, events.CommandSubjectPrefix + "orders." + fmt.Sprintf("perm-%d-16d", run), false},
		{userReservations, events.TenantDeadLetterSubject("timeoutd", userReservations, events.ReasonMalformed), false},
		{userReservations, events.DeadLetterSubject("reservations", events.ReasonMalformed), true},
		{userReservations, "reservations.expire." + fmt.Sprintf("perm-%d-17", run), false},
		{userReservations, events.OrderCancelSubject(fmt.Sprintf("perm-%d-18", run)), false},
		// Nor on the expiry stream at all, its own missed subject
		// included: only timeoutd publishes there, so no tenant's id is
		// a channel into another's expiries.
		{userReservations, events.MissedSubject(events.TenantKey(userReservations, fmt.Sprintf("perm-%d-18a", run))), false},
		{userReservations, events.OrderEventSubject(events.OrderCancelled, fmt.Sprintf("perm-%d-19", run)), false},
		{userReservations, events.DeadLetterSubject("orders", events.ReasonMalformed), false},
		{userTimeoutd, "reservations.expire." + fmt.Sprintf("perm-%d-20", run), true},
		{userBootstrap, events.CommandSubject(fmt.Sprintf("perm-%d-14", run)), false},
		{userBootstrap, events.OrderCancelSubject(fmt.Sprintf("perm-%d-15", run)), false},
	}
	for _, p := range pubs {
		add(p.user, "publish "+p.subject, p.allowed, refused(p.subject), publish(p.subject))
	}
	add(userObserver, "publish into orders' inbox", false, streams.InboxOrders+".fake", func(ctx context.Context, c *permClient) error {
		return c.nc.Publish(streams.InboxOrders+".fake", []byte(`{}`))
	})

	// What each service needs at start (streams.Verify) and the observer's
	// reading: its own ephemeral, ordered and durable consumers.
	add(userOrders, "verify its streams and the command mapping (start-up)", true, "", func(ctx context.Context, c *permClient) error {
		if err := streams.Verify(ctx, c.js, streams.Config{}, events.StreamOrderEvents, events.StreamExpiries, events.StreamDeadLetters); err != nil {
			return err
		}
		return streams.VerifyCommandMapping(ctx, c.js)
	})
	add(userTimeoutd, "verify its streams (start-up)", true, "", func(ctx context.Context, c *permClient) error {
		return streams.Verify(ctx, c.js, streams.Config{}, append(events.CommandStreams(), events.StreamExpiries, events.StreamDeadLetters)...)
	})
	// Taking a partition over reads the sequence of its stream's last
	// command (its info); before publishing a missed event, the fire path
	// reads the last event on the row's fire subject. Only timeoutd may
	// read either.
	for _, get := range []struct{ what, api, body string }{
		{"the info of a partition's command stream", api("STREAM.INFO.%s", f.cmdStream), ""},
		{"the last expiry event on a fire subject", api("STREAM.MSG.GET.%s", events.StreamExpiries),
			fmt.Sprintf(`{"last_by_subj":%q}`, events.OrderCancelSubject(fmt.Sprintf("perm-%d-last", run)))},
	} {
		for _, u := range []string{userTimeoutd, userOrders, userObserver} {
			subject := get.api
			if u == userTimeoutd {
				subject = ""
			}
			add(u, "read "+get.what+" ("+get.api+")", u == userTimeoutd, subject, request(get.api, get.body))
		}
	}
	add(userObserver, "read, ack and delete an ephemeral consumer of its own on "+events.StreamOrderEvents, true, "", func(ctx context.Context, c *permClient) error {
		cons, err := c.js.CreateConsumer(ctx, events.StreamOrderEvents, jetstream.ConsumerConfig{
			FilterSubject: f.created, AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Minute,
		})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		if err := nextAndAck(ctx, cons, f.created); err != nil {
			return err
		}
		return c.js.DeleteConsumer(ctx, events.StreamOrderEvents, cons.CachedInfo().Name)
	})
	add(userObserver, "read through an ordered consumer on "+events.StreamExpiries, true, "", func(ctx context.Context, c *permClient) error {
		cons, err := c.js.OrderedConsumer(ctx, events.StreamExpiries, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.OrderCancelSubjects}})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return fmt.Errorf("next: %w", err)
		}
		if !strings.HasPrefix(m.Subject(), events.OrderCancelSubjectPrefix) {
			return fmt.Errorf("read %s", m.Subject())
		}
		return nil
	})
	add(userObserver, "read and ack through a durable consumer of its own, as examples/consumer does", true, "", func(ctx context.Context, c *permClient) error {
		cons, err := c.js.CreateOrUpdateConsumer(ctx, events.StreamOrderEvents, jetstream.ConsumerConfig{
			Durable: "inventory", FilterSubject: f.created, AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		return nextAndAck(ctx, cons, f.created)
	})

	t.Run("matrix", func(t *testing.T) {
		for _, tc := range cases {
			verb := map[bool]string{true: "may", false: "may not"}[tc.allowed]
			t.Run(fmt.Sprintf("%s %s %s", tc.user, verb, tc.action), func(t *testing.T) {
				t.Parallel()
				c := f.connect(t, tc.user)
				// A refused request gets no answer: its result does not
				// matter, the violation does, so it need not wait long. An
				// allowed one may be slow beside the suite's other tests
				// (streams.Ensure and Verify ask about every stream): its
				// bound is a hang's, not a latency target.
				timeout := 20 * time.Second
				if !tc.allowed {
					timeout = 300 * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(t.Context(), timeout)
				defer cancel()
				err := tc.do(ctx, c)
				// A violation reaches the client before the answer to the
				// PING that Flush waits for.
				if ferr := c.nc.Flush(); ferr != nil {
					t.Fatalf("flush: %v", ferr)
				}
				violation := c.nc.LastError()
				if tc.allowed {
					if err != nil || violation != nil {
						t.Fatalf("refused: %v (violation: %v), want it allowed", err, violation)
					}
					return
				}
				if !errors.Is(violation, nats.ErrPermissionViolation) || !strings.Contains(violation.Error(), `"`+tc.subject+`"`) {
					t.Fatalf("allowed (result %v, last error %v), want a permissions violation naming %q", err, violation, tc.subject)
				}
			})
		}
	})

	// Nothing a refused action aimed at changed.
	ctx := t.Context()
	bootstrap := f.connect(t, userBootstrap)
	for _, s := range []string{f.cmdStream, events.StreamExpiries, events.StreamOrderEvents, events.StreamDeadLetters} {
		st, err := bootstrap.js.Stream(ctx, s)
		if err != nil {
			t.Fatalf("stream %s after the matrix: %v", s, err)
		}
		if s == f.cmdStream && st.CachedInfo().State.Consumers != 1 {
			t.Errorf("%s has %d consumers, want timeoutd's only", s, st.CachedInfo().State.Consumers)
		}
		if s != events.StreamDeadLetters && st.CachedInfo().State.Msgs == 0 {
			t.Errorf("%s is empty after the matrix: purged", s)
		}
	}
	for _, cons := range []struct {
		user, stream, name, filter string
	}{
		{userOrders, events.StreamExpiries, ojs.DurableDefault, events.OrderCancelSubjects},
		{userTimeoutd, f.cmdStream, tjs.DurableName(f.partition), ""},
	} {
		c, err := f.connect(t, cons.user).js.Consumer(ctx, cons.stream, cons.name)
		if err != nil {
			t.Fatalf("%s's consumer after the matrix: %v", cons.user, err)
		}
		info := c.CachedInfo()
		if info.Config.FilterSubject != cons.filter {
			t.Errorf("%s's consumer filter = %q, want %q", cons.user, info.Config.FilterSubject, cons.filter)
		}
		if info.NumAckPending != 1 {
			t.Errorf("%s's consumer has %d messages pending ack, want 1: the held one (acked by someone else?)", cons.user, info.NumAckPending)
		}
	}
}

// nextAndAck reads one message of cons, checks its subject and acks it.
func nextAndAck(ctx context.Context, cons jetstream.Consumer, subject string) error {
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		return fmt.Errorf("next: %w", err)
	}
	if m.Subject() != subject {
		return fmt.Errorf("read %s, want %s", m.Subject(), subject)
	}
	if err := m.DoubleAck(ctx); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	return nil
}
