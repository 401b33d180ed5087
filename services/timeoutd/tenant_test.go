package timeoutd

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// tenantsMap is a Tenants of fixed tenants.
type tenantsMap map[string][]string

func (m tenantsMap) FirePrefixes(tenant string) ([]string, bool) {
	p, ok := m[tenant]
	return p, ok
}

// TestTenantRules: a command is its subject's tenant's, whatever its
// payload says: a key of another tenant, a fire subject outside the
// tenant's prefixes and an unknown tenant are dead-lettered with their
// reasons, on the tenant's own dead-letter subject; commands stored before
// tenants (timeouts.cmd.<p>.<key>) are the orders tenant's.
func TestTenantRules(t *testing.T) {
	t.Parallel()
	now := time.Now().Add(time.Hour).UTC()
	set := func(key, fire string) events.Command {
		return events.Command{Schema: 1, Kind: events.KindSet, Key: key, Version: 1, Deadline: now.Add(time.Minute), FireSubject: fire}
	}
	clear := func(key string) events.Command {
		return events.Command{Schema: 1, Kind: events.KindClear, Key: key, Version: 1000}
	}
	tests := []struct {
		name    string
		subject string
		cmd     events.Command
		reason  events.Reason // empty: accepted
	}{
		{"orders' own", events.PartitionedCommandSubject("o-1"), set("o-1", "orders.cancel.o-1"), ""},
		{"a tenant's own", events.PartitionedCommandSubject("res.r-1"), set("res.r-1", "res.expire.r-1"), ""},
		{"a tenant's own clear", events.PartitionedCommandSubject("res.r-1"), clear("res.r-1"), ""},
		{"orders' key on a tenant's subject", events.PartitionedCommandSubject("res.o-1"), clear("o-1"), events.ReasonForeignKey},
		{"orders' key and fire subject on a tenant's subject", events.PartitionedCommandSubject("res.o-1"), set("o-1", "orders.cancel.o-1"), events.ReasonForeignKey},
		{"another tenant's key on a tenant's subject", events.PartitionedCommandSubject("res.r-1"), clear("inv.r-1"), events.ReasonForeignKey},
		{"a tenant's key on orders' subject", events.PartitionedCommandSubject("r-1"), clear("res.r-1"), events.ReasonForeignKey},
		{"orders' fire subject from a tenant", events.PartitionedCommandSubject("res.r-2"), set("res.r-2", "orders.cancel.o-1"), events.ReasonSubjectNotAllowed},
		{"a tenant's fire subject from orders", events.PartitionedCommandSubject("o-2"), set("o-2", "res.expire.o-2"), events.ReasonSubjectNotAllowed},
		{"a partition subject published as it is", "timeouts.cmd." + strconv.Itoa(events.PartitionOf("o-1")) + ".3.o-1", clear("o-1"), events.ReasonSubjectMismatch},
		{"unknown tenant", events.PartitionedCommandSubject("ghost.g-1"), set("ghost.g-1", "res.expire.g-1"), events.ReasonUnknownTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _, dlq := newTestService(t, newClock(now))
			s.ingest.cfg.Tenants = tenantsMap{"orders": {"orders.cancel."}, "res": {"res.expire."}, "inv": {"inv.due."}}
			checkCommandFate(t, s, dlq, tt.subject, tt.cmd, now, tt.reason)
			if tt.reason == "" {
				return
			}
			if want := tenantOfStored(tt.subject); events.ValidTenant(want) && dlq.got[0].Tenant != want {
				t.Errorf("dead letter's tenant %q, want the subject's, %q", dlq.got[0].Tenant, want)
			}
		})
	}
}

// TestFireRefusedOutsideTheTenantsPrefixes: a deadline fires only on a
// subject under its tenant's prefixes as the registry holds them when it
// passes. One whose tenant was removed, or given other prefixes, or whose
// prefix went to another tenant since it was set, ends as a missed event
// with the reason on its own missed subject, and nothing is published on
// the old subject.
func TestFireRefusedOutsideTheTenantsPrefixes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tenants tenantsMap
		reason  events.Reason // empty: fired
	}{
		{"its own", tenantsMap{"res": {"res.expire."}}, ""},
		{"the tenant removed", tenantsMap{"orders": {"orders.cancel."}}, events.ReasonUnknownTenant},
		{"the tenant given another prefix", tenantsMap{"res": {"res.due."}}, events.ReasonSubjectNotAllowed},
		{"its prefix given to another tenant", tenantsMap{"res": {"res.due."}, "inv": {"res.expire."}}, events.ReasonSubjectNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			deadline := time.Now().UTC()
			s, st, _ := newTestService(t, newClock(deadline.Add(time.Millisecond)))
			s.fire.cfg.Tenants = tt.tenants
			st.rows["res.r-1"] = Timeout{FireSubject: "res.expire.r-1"}
			applyOwned(s, []Change{{Key: "res.r-1", Version: 1, Deadline: deadline}})
			waitFor(t, "res.r-1 done", func() bool { return len(st.firedKeys()) == 1 })
			st.mu.Lock()
			defer st.mu.Unlock()
			if len(st.built) != 1 {
				t.Fatalf("published %+v, want one event", st.built)
			}
			var e events.Expiry
			if err := json.Unmarshal(st.built[0].Data, &e); err != nil {
				t.Fatal(err)
			}
			want, subject := events.OutcomeMissed, events.MissedSubject("res.r-1")
			if tt.reason == "" {
				want, subject = events.OutcomeFired, "res.expire.r-1"
			}
			if st.built[0].Subject != subject || e.Outcome != want || e.Reason != tt.reason {
				t.Fatalf("published %s on %s with reason %q, want %s on %s with reason %q", e.Outcome, st.built[0].Subject, e.Reason, want, subject, tt.reason)
			}
		})
	}
}

func TestProducerSubject(t *testing.T) {
	t.Parallel()
	for stored, want := range map[string]string{
		events.PartitionedCommandSubject("o-1"):     "timeouts.cmd.o-1",
		events.PartitionedCommandSubject("res.r-1"): "timeouts.cmd.res.r-1",
		"timeouts.cmd.3.res.r-1":                    "timeouts.cmd.3.res.r-1", // not its partition
		"orders.cancel.1":                           "orders.cancel.1",
	} {
		if got := producerSubject(stored); got != want {
			t.Errorf("producerSubject(%q) = %q, want %q", stored, got, want)
		}
	}
}

// TestGuessableMsgIDsAreRefused: a command message, or a batch, whose
// Nats-Msg-Id does not end in a nonce is dead-lettered
// (guessable_msg_id) with the id it came with and terminated: its
// producer would let other tenants have its commands dropped. One with a
// nonce, and a replayed dead letter's id, are taken.
func TestGuessableMsgIDsAreRefused(t *testing.T) {
	t.Parallel()
	now := time.Now().Add(time.Hour).UTC()
	set := events.Command{Schema: 1, Kind: events.KindSet, Key: "res.r-1", Version: 3, Deadline: now.Add(time.Minute), FireSubject: "res.expire.r-1"}
	tests := []struct {
		name, id string
		batch    bool
		refused  bool
	}{
		{"a command's id", set.MsgID(events.NewNonce()), false, false},
		{"a replay's id", "replay:" + events.NewDeadLetter("timeouts.cmd.res.r-1", nil, "", 9, errors.New("x"), now).MsgID(), false, false},
		{"the id before nonces", "set:res.r-1:3", false, true},
		{"none", "", false, true},
		{"a batch's id", events.BatchMsgID([]string{set.MsgID(events.NewNonce())}), true, false},
		{"a batch of an id before nonces", "set:res.r-1:3", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _, dlq := newTestService(t, newClock(now))
			s.ingest.cfg.Tenants = tenantsMap{"res": {"res.expire."}}
			m := cmdMsg(t, 1, set)
			if tt.batch {
				m = batchMsg(t, 1, set, set)
			}
			m.header[events.HeaderMsgID] = tt.id
			got, err := s.ingest.commands(context.Background(), m, now)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.refused {
				if len(got) == 0 || len(dlq.got) != 0 {
					t.Fatalf("got %+v, dead letters %+v; want the command taken", got, dlq.got)
				}
				return
			}
			if len(got) != 0 || len(dlq.got) != 1 || m.fate != "term" {
				t.Fatalf("got %+v, dead letters %+v, fate %q; want one dead letter and the message terminated", got, dlq.got, m.fate)
			}
			if d := dlq.got[0]; d.Reason != events.ReasonGuessableMsgID || d.Field != "Nats-Msg-Id" || d.RejectedMsgID != tt.id || d.Tenant != "res" {
				t.Fatalf("dead letter %+v, want reason %s on Nats-Msg-Id with the id %q, of tenant res", d, events.ReasonGuessableMsgID, tt.id)
			}
		})
	}
}
