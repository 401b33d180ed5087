package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/ordertimeout/ordertimeout/deploy/natsconf"
	"github.com/ordertimeout/ordertimeout/internal/tenants"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// The third tenant of the matrix, beside orders and reservations.
const userInvoices = "invoices"

// matrixTenants are the tenants of TestTenantIsolation: the shipped two
// and invoices, each with its own fire subject prefix.
var matrixTenants = []tenants.Tenant{
	{Name: userOrders, FirePrefixes: []string{events.OrderCancelSubjectPrefix}},
	{Name: userReservations, FirePrefixes: []string{"reservations.expire."}, PasswordEnv: "NATS_RESERVATIONS_PASSWORD"},
	{Name: userInvoices, FirePrefixes: []string{"invoices.due."}, PasswordEnv: "NATS_INVOICES_PASSWORD"},
}

// tenantClient is a tenant's NATS connection, as its own user.
type tenantClient struct {
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
}

// connectAs connects to the stack's NATS as user with its password and
// inbox prefix, the way a tenant's service does; violations are read
// with LastError.
func connectAs(t *testing.T, s *stack, user, password string) *tenantClient {
	t.Helper()
	nc, err := nats.Connect(s.NATSURL, nats.UserInfo(user, password), nats.CustomInboxPrefix("_INBOX_"+user),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &tenantClient{name: user, nc: nc, js: js}
}

// commandJSON is a command's JSON, issued now.
func commandJSON(kind events.CommandKind, key string, version int64, deadline time.Time, fire string) []byte {
	c := events.Command{Schema: events.SchemaVersion, Kind: kind, Key: key, Version: version, IssuedAt: time.Now().UTC()}
	if kind == events.KindSet {
		c.Deadline, c.FireSubject = deadline.UTC(), fire
	}
	data, _ := json.Marshal(c)
	return data
}

// consumerJSON is the body of a request that creates the durable name on
// stream with filter.
func consumerJSON(stream, name, filter string) []byte {
	data, _ := json.Marshal(map[string]any{"stream_name": stream,
		"config": map[string]any{"durable_name": name, "filter_subject": filter, "ack_policy": "explicit"}})
	return data
}

// TestTenantIsolation is the cross-tenant matrix against the real stack
// (NATS with the rendered configuration and each tenant's user, timeoutd
// with the tenant registry, Postgres): three tenants, orders,
// reservations and invoices, each hold a timeout; then every tenant tries,
// against each other tenant, to set (move) and clear the victim's key on
// the victim's subject, on its own subject with the victim's key in the
// payload, through a partition subject and through orders' subject form,
// to set a deadline of its own that fires on the victim's subject, and to
// read the victim's expiries and dead letters. Each attempt must be
// refused: by NATS, a permissions violation at the producer, or by
// timeoutd, a dead letter with its reason on the
// attacker's dlq.timeoutd.<tenant>.>. Every victim's timeout is then
// unchanged. Then the header dimension (testHeaderMatrix): every header a
// tenant chooses, on each shared stream, aimed at each other tenant's
// next message. Last, a fourth tenant is added to the running stack (NATS
// configuration reloaded, registry rewritten, no restart) and its
// deadline fires on its own subject; then it is removed with a deadline
// pending, which ends as a missed event and fires nothing.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{ShippedNATSConf: true, Tenants: matrixTenants})
	ctx := t.Context()
	run := time.Now().UnixNano()
	clients := map[string]*tenantClient{}
	for _, tn := range matrixTenants {
		clients[tn.Name] = connectAs(t, s, tn.Name, natsPassword(tn.Name))
	}

	// Each tenant's timeout: version 5, an hour ahead, on its own subject.
	type held struct {
		key, fire string
		deadline  time.Time
	}
	victims := map[string]held{}
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for _, tn := range matrixTenants {
		key := events.TenantKey(tn.Name, fmt.Sprintf("victim-%d", run))
		h := held{key: key, fire: tn.FirePrefixes[0] + strings.ReplaceAll(key, ".", "-"), deadline: deadline}
		if _, err := clients[tn.Name].js.Publish(ctx, events.CommandSubject(key), commandJSON(events.KindSet, key, 5, deadline, h.fire),
			jetstream.WithMsgID(fmt.Sprintf("set:%s:5:%s", key, events.NewNonce()))); err != nil {
			t.Fatalf("%s sets its own timeout: %v", tn.Name, err)
		}
		victims[tn.Name] = h
	}
	for name, h := range victims {
		waitFor(t, 30*time.Second, name+"'s timeout pending", func() bool { _, ok := pendingTimeout(t, s, h.key); return ok })
	}

	// dead letters of timeoutd, as the observer reads them.
	var mu sync.Mutex
	dead := map[string]events.DeadLetter{} // by deadID
	obs := connectAs(t, s, userObserver, natsPassword(userObserver))
	cons, err := obs.js.OrderedConsumer(ctx, events.StreamDeadLetters, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.DeadLetterSubjectPrefix + "timeoutd.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var d events.DeadLetter
		if json.Unmarshal(m.Data(), &d) == nil {
			if c, _ := events.DecodeCommand(d.Data); c.Key != "" {
				mu.Lock()
				dead[deadID(d.Tenant, c.Key, c.Version)] = d
				mu.Unlock()
			}
			if !strings.HasPrefix(m.Subject(), events.TenantDeadLetterSubject("timeoutd", d.Tenant, "")) {
				t.Errorf("dead letter of tenant %q on %s", d.Tenant, m.Subject())
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()

	// attempt is one cell: attacker publishes data on subject; NATS must
	// refuse it (nats) or timeoutd dead-letter it with reason.
	type attempt struct {
		attacker, victim, what, subject string
		data                            []byte
		reason                          events.Reason // "" for a permissions violation
		deadID                          string        // the dead letter's deadID
	}
	var cells []attempt
	for _, a := range matrixTenants {
		for _, v := range matrixTenants {
			if a.Name == v.Name {
				continue
			}
			vk := victims[v.Name].key
			_, local := events.SplitKey(vk)
			own := events.TenantKey(a.Name, fmt.Sprintf("own-%s-%d", v.Name, run))
			past := time.Now().Add(-time.Second)
			cells = append(cells,
				attempt{a.Name, v.Name, "move the victim's deadline on its subject", events.CommandSubject(vk),
					commandJSON(events.KindSet, vk, 1000, time.Now().Add(time.Second), victims[v.Name].fire), "", ""},
				attempt{a.Name, v.Name, "clear the victim's key on its subject", events.CommandSubject(vk),
					commandJSON(events.KindClear, vk, 1000, time.Time{}, ""), "", ""},
				attempt{a.Name, v.Name, "clear the victim's key through its partition subject", events.PartitionedCommandSubject(vk),
					commandJSON(events.KindClear, vk, 1001, time.Time{}, ""), "", ""},
				attempt{a.Name, v.Name, "clear the victim's key under the victim's token", events.CommandSubjectPrefix + v.Name + "." + local,
					commandJSON(events.KindClear, vk, 1002, time.Time{}, ""), "", ""},
				attempt{a.Name, v.Name, "clear the victim's key on its own subject", events.CommandSubject(events.TenantKey(a.Name, local)),
					commandJSON(events.KindClear, vk, 1003, time.Time{}, ""), events.ReasonForeignKey, deadID(a.Name, vk, 1003)},
				attempt{a.Name, v.Name, "move the victim's key on its own subject", events.CommandSubject(events.TenantKey(a.Name, local)),
					commandJSON(events.KindSet, vk, 1004, time.Now().Add(time.Second), victims[v.Name].fire), events.ReasonForeignKey, deadID(a.Name, vk, 1004)},
				attempt{a.Name, v.Name, "fire on the victim's subject", events.CommandSubject(own),
					commandJSON(events.KindSet, own, 1, past, v.FirePrefixes[0]+"own-"+a.Name), events.ReasonSubjectNotAllowed, deadID(a.Name, own, 1)},
				// Reads: a consumer of the victim's expiries or dead letters,
				// under the attacker's own consumer names.
				attempt{a.Name, v.Name, "read the victim's expiries", "$JS.API.CONSUMER.CREATE." + events.StreamExpiries + "." + a.Name + "." + v.FirePrefixes[0] + ">",
					consumerJSON(events.StreamExpiries, a.Name, v.FirePrefixes[0]+">"), "", ""},
				attempt{a.Name, v.Name, "read the victim's expiries, the filter outside the subject", "$JS.API.CONSUMER.CREATE." + events.StreamExpiries + "." + a.Name,
					consumerJSON(events.StreamExpiries, a.Name, v.FirePrefixes[0]+">"), "", ""},
				attempt{a.Name, v.Name, "read the victim's dead letters", "$JS.API.CONSUMER.CREATE." + events.StreamDeadLetters + "." + a.Name + "-dlq." + events.TenantDeadLetterSubject("timeoutd", v.Name, ">"),
					consumerJSON(events.StreamDeadLetters, a.Name+"-dlq", events.TenantDeadLetterSubject("timeoutd", v.Name, ">")), "", ""},
			)
		}
	}
	for _, c := range cells {
		t.Run(c.attacker+"/"+c.victim+"/"+c.what, func(t *testing.T) {
			// A connection per cell: its LastError is this cell's.
			cl := connectAs(t, s, c.attacker, natsPassword(c.attacker))
			m := nats.NewMsg(c.subject)
			m.Data = c.data
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("matrix-%d-%s-%s-%s", run, c.attacker, c.victim, strings.ReplaceAll(c.what, " ", "-")))
			if c.reason == "" {
				if err := cl.nc.PublishMsg(m); err != nil {
					t.Fatal(err)
				}
				if err := cl.nc.Flush(); err != nil {
					t.Fatal(err)
				}
				if v := cl.nc.LastError(); !errors.Is(v, nats.ErrPermissionViolation) {
					t.Fatalf("%s on %s: accepted by NATS (last error %v), want a permissions violation", c.what, c.subject, v)
				}
				return
			}
			if _, err := cl.js.PublishMsg(ctx, m); err != nil {
				t.Fatalf("%s on its own subject %s: %v, want it stored (timeoutd refuses it)", c.what, c.subject, err)
			}
		})
	}
	// timeoutd's refusals: each with its reason, of the attacker's tenant,
	// and nothing published on the victim's fire subject.
	for _, c := range cells {
		if c.reason == "" {
			continue
		}
		t.Run("dead letter/"+c.attacker+"/"+c.victim+"/"+c.what, func(t *testing.T) {
			waitForExplained(t, 20*time.Second, fmt.Sprintf("%s's dead letter of %q against %s", c.attacker, c.what, c.victim), func() bool {
				mu.Lock()
				defer mu.Unlock()
				d, ok := dead[c.deadID]
				return ok && d.Reason == c.reason
			}, func() string {
				mu.Lock()
				defer mu.Unlock()
				d, ok := dead[c.deadID]
				if !ok {
					return fmt.Sprintf("no dead letter %s: timeoutd accepted it", c.deadID)
				}
				return fmt.Sprintf("dead letter %s: reason %s (%s)", c.deadID, d.Reason, d.Detail)
			})
		})
	}
	for _, c := range cells {
		if c.reason != events.ReasonSubjectNotAllowed {
			continue
		}
		var fire string
		for _, v := range matrixTenants {
			if v.Name == c.victim {
				fire = v.FirePrefixes[0] + "own-" + c.attacker
			}
		}
		cons, err := obs.js.OrderedConsumer(ctx, events.StreamExpiries, jetstream.OrderedConsumerConfig{FilterSubjects: []string{fire}})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := cons.Next(jetstream.FetchMaxWait(200 * time.Millisecond)); err == nil {
			t.Errorf("%s's deadline fired on %s's subject %s: %s", c.attacker, c.victim, m.Subject(), m.Data())
		}
	}
	// Every victim unchanged.
	for name, h := range victims {
		got, ok := pendingTimeout(t, s, h.key)
		if !ok || got.Version != 5 || !got.Deadline.Equal(h.deadline) || got.FireSubject != h.fire {
			t.Errorf("%s's timeout after the matrix: pending %v, %+v; want version 5, deadline %v, fire subject %s", name, ok, got, h.deadline, h.fire)
		}
	}
	if !t.Failed() {
		t.Logf("matrix: %d cells, %d refused by NATS, %d dead-lettered by timeoutd; every victim unchanged", len(cells),
			countIf(cells, func(c attempt) bool { return c.reason == "" }), countIf(cells, func(c attempt) bool { return c.reason != "" }))
	}

	t.Run("headers", func(t *testing.T) {
		testHeaderMatrix(t, s, clients, func(id string) (events.DeadLetter, bool) {
			mu.Lock()
			defer mu.Unlock()
			d, ok := dead[id]
			return d, ok
		})
	})
	var live []tenants.Tenant
	t.Run("tenant added live", func(t *testing.T) { live = addTenantLive(t, s) })
	t.Run("tenant removed live", func(t *testing.T) { removeTenantLive(t, s, obs, live) })
}

// deadID names a dead letter of the matrix: the tenant it was
// dead-lettered for, its command's key and version.
func deadID(tenant, key string, version int64) string {
	return fmt.Sprintf("%s|%s|%d", tenant, key, version)
}

func countIf[T any](xs []T, f func(T) bool) int {
	n := 0
	for _, x := range xs {
		if f(x) {
			n++
		}
	}
	return n
}

// addTenantLive adds the tenant loyalty to the running stack as
// scripts/tenant.sh add does (the registry and NATS's configuration
// rendered again, NATS told to reload, the streams bootstrap run again,
// timeoutd reading the registry within a second), then, as loyalty, sets a
// deadline and receives its expiry on its own subject: nothing restarted.
func addTenantLive(t *testing.T, s *stack) []tenants.Tenant {
	ctx := t.Context()
	const name, password = liveTenant, "loyalty-live-pw"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tenants.Add(s.tenants, tenants.Tenant{Name: name, FirePrefixes: []string{"loyalty.expire."}, PasswordBcrypt: string(hash)})
	if err != nil {
		t.Fatal(err)
	}
	started := s.container(s.NATSNodes[0])
	before, err := started.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applyTenantsLive(t, s, ts, true)

	var cl *tenantClient
	waitFor(t, 15*time.Second, "NATS to accept the new tenant's user", func() bool {
		nc, err := nats.Connect(s.NATSURL, nats.UserInfo(name, password), nats.CustomInboxPrefix("_INBOX_"+name), nats.MaxReconnects(0))
		if err != nil {
			return false
		}
		nc.Close()
		cl = connectAs(t, s, name, password)
		return true
	})
	cons, err := cl.js.CreateOrUpdateConsumer(ctx, events.StreamExpiries, jetstream.ConsumerConfig{Durable: name,
		FilterSubject: "loyalty.expire.>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("the new tenant's consumer: %v", err)
	}
	key := events.TenantKey(name, "points-1")
	at := time.Now().Add(time.Second)
	// Until timeoutd has read the registry, the command may be refused as
	// unknown_tenant: the tenant replays it (a version later) until set.
	waitFor(t, 15*time.Second, "timeoutd to accept the new tenant's deadline", func() bool {
		v := time.Now().UnixNano()
		if _, err := cl.js.Publish(ctx, events.CommandSubject(key), commandJSON(events.KindSet, key, v, at, "loyalty.expire.points-1"),
			jetstream.WithMsgID(fmt.Sprintf("set:%s:%d:%s", key, v, events.NewNonce()))); err != nil {
			t.Fatalf("the new tenant publishes: %v", err)
		}
		_, ok := pendingTimeout(t, s, key)
		return ok || time.Now().After(at)
	})
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got *events.Expiry
	for m := range msgs.Messages() {
		e, err := events.DecodeExpiry(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		got = &e
		_ = m.Ack()
	}
	if got == nil || got.Key != key || got.FiredAt.Before(at) {
		t.Fatalf("the new tenant's expiry: %+v, want %s fired after %v", got, key, at)
	}
	after, err := started.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.StartedAt != before.StartedAt {
		t.Fatalf("NATS restarted (%s, then %s), want a reload", before.StartedAt, after.StartedAt)
	}
	// A deadline of its own pending, for removeTenantLive.
	pending := events.TenantKey(name, "points-2")
	v := time.Now().UnixNano()
	if _, err := cl.js.Publish(ctx, events.CommandSubject(pending), commandJSON(events.KindSet, pending, v, time.Now().Add(6*time.Second), "loyalty.expire.points-2"),
		jetstream.WithMsgID(fmt.Sprintf("set:%s:%d:%s", pending, v, events.NewNonce()))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the new tenant's second deadline pending", func() bool { _, ok := pendingTimeout(t, s, pending); return ok })
	return ts
}

// liveTenant is the tenant addTenantLive adds and removeTenantLive removes.
const liveTenant = "loyalty"

// removeTenantLive removes the tenant loyalty from the running stack as
// scripts/tenant.sh remove does, while a deadline of its own is pending:
// at its deadline, timeoutd publishes it as missed with the reason
// unknown_tenant on loyalty's missed subject, and nothing on its fire
// subject.
func removeTenantLive(t *testing.T, s *stack, obs *tenantClient, ts []tenants.Tenant) {
	ctx := t.Context()
	ts, err := tenants.Remove(ts, liveTenant)
	if err != nil {
		t.Fatal(err)
	}
	applyTenantsLive(t, s, ts, false)
	key := events.TenantKey(liveTenant, "points-2")
	missed, err := obs.js.OrderedConsumer(ctx, events.StreamExpiries, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.MissedSubject(key)}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := missed.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("no missed event of the removed tenant's deadline: %v", err)
	}
	e, err := events.DecodeExpiry(m.Data())
	if err != nil || e.Key != key || e.Outcome != events.OutcomeMissed || e.Reason != events.ReasonUnknownTenant {
		t.Fatalf("the removed tenant's deadline ended as %+v, %v; want missed, reason %s", e, err, events.ReasonUnknownTenant)
	}
	if n := storedOn(t, obs.js, events.StreamExpiries, "loyalty.expire.points-2"); n != 0 {
		t.Fatalf("%d events on the removed tenant's fire subject", n)
	}
}

// applyTenantsLive makes ts the running stack's tenants as
// scripts/tenant.sh does: NATS's configuration rendered again and
// reloaded, timeoutd's registry rewritten (read within a second), and,
// with bootstrap, the streams bootstrap run again for new fire subjects.
func applyTenantsLive(t *testing.T, s *stack, ts []tenants.Tenant, bootstrap bool) {
	ctx := t.Context()
	tmpl, err := os.ReadFile("../deploy/compose/nats.conf.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	var conf bytes.Buffer
	if err := natsconf.Render(&conf, string(tmpl), ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.container(s.NATSNodes[0]).CopyToContainer(ctx, conf.Bytes(), "/etc/nats/nats.conf", 0o644); err != nil {
		t.Fatal(err)
	}
	s.docker(t, func(ctx context.Context, c *client.Client, id string) error {
		_, err := c.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "HUP"})
		return err
	}, "reload nats", s.NATSNodes[0])
	for _, name := range s.Timeoutds {
		if err := s.container(name).CopyToContainer(ctx, tenants.Marshal(ts), tenantsFile, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bootstrap {
		return
	}
	if err := runStreamsBootstrap(ctx, s.network, natsUserURL("nats://"+svcNATS+":4222", userBootstrap), 1,
		strings.Join(tenants.FirePrefixes(ts), ",")); err != nil {
		t.Fatal(err)
	}
}
