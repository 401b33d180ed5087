package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// The auditor of the soak (docs/RELIABILITY.md defines each figure): it
// reads the orders database directly (pgx through the Postgres container's
// published port), every cancel event and orders.cancelled event stored in
// JetStream (an ephemeral consumer of its own, from the start of the
// streams, written against pkg/events only), and the load generator's log,
// and cross-checks them.

// dbOrder is an order row as the auditor reads it.
type dbOrder struct {
	ID, Status, CancelReason string
	Version                  int64
	PayBy, UpdatedAt         time.Time
	// Reconciled says the orders reconciler cancelled it (reconciled_at is
	// set) because its cancel event had not come a margin after pay_by.
	Reconciled bool
}

// seenExpiry is a cancel event stored in TIMEOUT_EXPIRIES.
type seenExpiry struct {
	Version           int64
	Outcome           events.Outcome
	Deadline, FiredAt time.Time
	Stored            time.Time // the stream's timestamp: when JetStream stored it
}

// seenCancelled is an orders.cancelled event stored in ORDER_EVENTS.
type seenCancelled struct {
	Version    int64
	Reason     string
	At, Stored time.Time
	PayBy      time.Time
}

// seenEvents is everything the auditor read from the streams.
type seenEvents struct {
	Expiries     map[string][]seenExpiry
	Cancelled    map[string][]seenCancelled
	DeadLetters  map[string]int // by subject
	Undecodable  []string
	MissingMsgID int
}

// pgURL returns the URL of database db of the stack's Postgres, from the
// host.
func (s *stack) pgURL(db string) string {
	return "postgres://postgres:postgres@" + s.pgHosts(false) + "/" + db + "?" + s.pgQuery("sslmode=disable")
}

// queryOrders reads every order of the orders database.
func queryOrders(ctx context.Context, url string) (map[string]dbOrder, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect orders db: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, status, coalesce(cancel_reason, ''), version, pay_by, updated_at, reconciled_at IS NOT NULL FROM orders`)
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	out := map[string]dbOrder{}
	var o dbOrder
	_, err = pgx.ForEachRow(rows, []any{&o.ID, &o.Status, &o.CancelReason, &o.Version, &o.PayBy, &o.UpdatedAt, &o.Reconciled}, func() error {
		out[o.ID] = o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	return out, nil
}

// queryInt runs a query returning one integer on database url.
func queryInt(ctx context.Context, url, sql string, args ...any) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", sql, err)
	}
	return n, nil
}

// tableSizes returns, for each table of db, its row count and total size
// (heap, indexes and TOAST), and for timeoutd's table the rows per state.
func tableSizes(ctx context.Context, url string) ([]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid), coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'goose_db_version' ORDER BY c.relname`)
	if err != nil {
		return nil, fmt.Errorf("table sizes: %w", err)
	}
	var lines []string
	var (
		name             string
		size, live, dead int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &size, &live, &dead}, func() error {
		lines = append(lines, fmt.Sprintf("%s: %d live rows (%d dead), %.1f MiB with indexes", name, live, dead, float64(size)/(1<<20)))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("table sizes: %w", err)
	}
	// Exact counts of the tables that must stay bounded.
	for _, q := range []struct{ table, sql string }{
		{"outbox", `SELECT count(*) FROM outbox`}, // orders' (timeoutd's rows are its outbox)
		{"timeouts", `SELECT string_agg(state::text || '=' || n::text, ' ' ORDER BY state) FROM (SELECT state, count(*) n FROM timeouts GROUP BY state) x`},
	} {
		var v *string
		err := conn.QueryRow(ctx, `SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL ELSE '' END`, q.table).Scan(&v)
		if err != nil || v == nil {
			continue
		}
		var out any
		if err := conn.QueryRow(ctx, q.sql).Scan(&out); err != nil {
			return nil, fmt.Errorf("%s: %w", q.sql, err)
		}
		lines = append(lines, fmt.Sprintf("%s exact: %v", q.table, out))
	}
	return lines, nil
}

// readStream calls fn for every message stored in stream under filter, in
// stream order, through an ephemeral consumer, and returns how many it read.
// The consumer has one replica, so that it has a leader at once on a
// cluster (the streams it reads keep their messages by limits); a request
// nobody answers (a NATS node just restarted, JetStream's API or the
// consumer's leader in an election) is retried for leaderlessMax.
func readStream(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(jetstream.Msg)) (int, error) {
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		FilterSubject: filter, DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute, MemoryStorage: true, Replicas: 1,
	})
	if err != nil {
		return 0, fmt.Errorf("consumer on %s: %w", stream, err)
	}
	defer js.DeleteConsumer(context.WithoutCancel(ctx), stream, cons.CachedInfo().Name)
	total := cons.CachedInfo().NumPending
	var got uint64
	leaderless := time.Now().Add(leaderlessMax)
	for empty := 0; got < total; {
		n := 0
		batch, err := cons.Fetch(2000, jetstream.FetchMaxWait(2*time.Second))
		if err == nil {
			for m := range batch.Messages() {
				fn(m)
				n++
			}
			if err = batch.Error(); errors.Is(err, nats.ErrTimeout) {
				err = nil
			}
		}
		got += uint64(n)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(leaderless) {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		if err != nil {
			return int(got), fmt.Errorf("fetch %s: %w", stream, err)
		}
		if n == 0 {
			if empty++; empty == 5 {
				return int(got), fmt.Errorf("%s: read %d of %d messages, then nothing", stream, got, total)
			}
		}
	}
	return int(got), nil
}

// leaderlessMax bounds readStream's retries of requests nobody answers.
const leaderlessMax = 30 * time.Second

// readEvents reads the cancel events, the orders.cancelled events and the
// dead letters stored in the stack's JetStream; opts adjust the connection
// (a TLS stack's certificates and inbox).
func readEvents(ctx context.Context, natsURL string, opts ...nats.Option) (seenEvents, error) {
	ev := seenEvents{Expiries: map[string][]seenExpiry{}, Cancelled: map[string][]seenCancelled{}, DeadLetters: map[string]int{}}
	nc, err := nats.Connect(natsURL, append([]nats.Option{nats.Name("e2e-auditor")}, opts...)...)
	if err != nil {
		return ev, fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return ev, fmt.Errorf("jetstream: %w", err)
	}
	undecodable := func(m jetstream.Msg, err error) {
		if len(ev.Undecodable) < 20 {
			ev.Undecodable = append(ev.Undecodable, fmt.Sprintf("%s: %v", m.Subject(), err))
		}
	}
	stored := func(m jetstream.Msg) time.Time {
		md, err := m.Metadata()
		if err != nil {
			return time.Time{}
		}
		return md.Timestamp
	}
	if _, err := readStream(ctx, js, events.StreamExpiries, events.OrderCancelSubjects, func(m jetstream.Msg) {
		e, err := events.DecodeExpiry(m.Data())
		if err != nil {
			undecodable(m, err)
			return
		}
		if m.Headers().Get(jetstream.MsgIDHeader) != e.MsgID() {
			ev.MissingMsgID++
		}
		ev.Expiries[e.Key] = append(ev.Expiries[e.Key], seenExpiry{e.Version, e.Outcome, e.Deadline, e.FiredAt, stored(m)})
	}); err != nil {
		return ev, err
	}
	if _, err := readStream(ctx, js, events.StreamOrderEvents, events.OrderEventSubjects(events.OrderCancelled), func(m jetstream.Msg) {
		e, err := events.DecodeOrderEvent(m.Data())
		if err != nil {
			undecodable(m, err)
			return
		}
		if m.Headers().Get(jetstream.MsgIDHeader) != e.MsgID() {
			ev.MissingMsgID++
		}
		ev.Cancelled[e.OrderID] = append(ev.Cancelled[e.OrderID], seenCancelled{Version: e.Version, Reason: e.CancelReason, At: e.At, Stored: stored(m), PayBy: e.PayBy})
	}); err != nil {
		return ev, err
	}
	if _, err := readStream(ctx, js, events.StreamDeadLetters, events.DeadLetterSubjectPrefix+">", func(m jetstream.Msg) {
		ev.DeadLetters[m.Subject()]++
	}); err != nil {
		return ev, err
	}
	return ev, nil
}

// auditResult is the auditor's figures; Violations lists what breaks an
// invariant (the soak fails when it is not empty).
type auditResult struct {
	Lines      []string
	Violations []string
	// Lost, Early, PaidCancelled and Reconciled count the orders of each
	// violation (a reconciled order is a lost deadline for any consumer
	// but orders); FiredTwice counts cancel events stored twice for the
	// same (key, version); CancelEvents the distinct ones seen.
	Lost, Early, PaidCancelled, Reconciled, FiredTwice, CancelEvents int
	// Samples are the orders cancelled by their cancel event: the deadline
	// and how late the event was stored in JetStream (Late) and fired
	// (Fired), the order cancelled in its database (Cancelled) and its
	// orders.cancelled event stored (Announced).
	Samples []lateSample
}

// audit cross-checks the database, read once every deadline had passed and
// no order was pending any more (or the settle time ran out), the events and
// the load generator's log.
func audit(db map[string]dbOrder, ev seenEvents, acked map[string]soakOrder) auditResult {
	var (
		r                                                 auditResult
		lost, early, paidCancelled, wrongState, missing   []string
		reconciled                                        []string
		paid, byTimeout, byCustomer, pending              int
		cancelEvents, expiryMsgs, dupExpiries, dupCancels int
		paidFired, missed                                 int
		published, fired, applied                         []time.Duration
		outliers                                          int
		outFrom, outTo                                    time.Time
	)
	note := func(list *[]string, format string, args ...any) {
		if len(*list) < 10 {
			*list = append(*list, fmt.Sprintf(format, args...))
		} else {
			*list = append(*list, "")
		}
	}
	for id := range acked {
		if _, ok := db[id]; !ok {
			note(&lost, "order %s: created (201) but not in the database", id)
		}
	}
	for id, o := range db {
		switch {
		case o.Status == events.StatusPaid:
			paid++
		case o.Status == events.StatusCancelled && o.CancelReason == events.CancelPaymentTimeout:
			byTimeout++
		case o.Status == events.StatusCancelled:
			byCustomer++
		default:
			pending++
			note(&lost, "order %s: still %s, deadline %s", id, o.Status, o.PayBy.Format(time.RFC3339Nano))
		}
		a, isAcked := acked[id]
		if isAcked && a.Pay == payOK && o.Status != events.StatusPaid {
			note(&paidCancelled, "order %s: paid (200) but %s/%s", id, o.Status, o.CancelReason)
		}
		if isAcked && (a.Pay == payNone || a.Pay == payRefused) && o.Status != events.StatusPendingPayment &&
			!(o.Status == events.StatusCancelled && o.CancelReason == events.CancelPaymentTimeout) {
			note(&wrongState, "order %s: never paid, ends %s/%s", id, o.Status, o.CancelReason)
		}
		if o.CancelReason == events.CancelPaymentTimeout && o.UpdatedAt.Before(o.PayBy) {
			note(&early, "order %s: cancelled at %s, before its deadline %s", id, o.UpdatedAt, o.PayBy)
		}

		exps := ev.Expiries[id]
		expiryMsgs += len(exps)
		distinct := map[int64]bool{}
		var first *seenExpiry
		for i, e := range exps {
			if e.Outcome == events.OutcomeMissed {
				missed++
			}
			if distinct[e.Version] {
				dupExpiries++
			}
			distinct[e.Version] = true
			if e.FiredAt.Before(e.Deadline) || e.Stored.Before(e.Deadline) {
				note(&early, "order %s: cancel event v%d deadline %s, fired_at %s, stored %s", id, e.Version, e.Deadline, e.FiredAt, e.Stored)
			}
			if e.Outcome == events.OutcomeFired && sameInstant(e.Deadline, o.PayBy) && (first == nil || e.Stored.Before(first.Stored)) {
				first = &exps[i]
			}
		}
		cancelEvents += len(distinct)
		if o.Status == events.StatusPaid && len(exps) > 0 {
			paidFired++
		}
		cans := ev.Cancelled[id]
		if len(cans) > 1 {
			dupCancels += len(cans) - 1
		}
		for _, c := range cans {
			if o.Status == events.StatusPaid {
				note(&paidCancelled, "order %s: paid, yet an orders.cancelled event (v%d, %s)", id, c.Version, c.Reason)
			}
			if c.Reason == events.CancelPaymentTimeout && (c.At.Before(o.PayBy) || c.Stored.Before(o.PayBy)) {
				note(&early, "order %s: orders.cancelled at %s (stored %s) before its deadline %s", id, c.At, c.Stored, o.PayBy)
			}
		}
		if o.CancelReason != events.CancelPaymentTimeout {
			continue
		}
		if o.Reconciled {
			// Cancelled by the orders reconciler: no cancel event came
			// within its margin (timeoutd lost or never got the deadline).
			note(&reconciled, "order %s: cancelled by the reconciler at %s, deadline %s; %d cancel events, %d orders.cancelled events",
				id, o.UpdatedAt.Format(time.RFC3339Nano), o.PayBy.Format(time.RFC3339Nano), len(exps), len(cans))
			continue
		}
		if first == nil || len(cans) == 0 {
			note(&missing, "order %s: cancelled by timeout, but %d cancel events with its deadline and %d orders.cancelled events stored", id, len(exps), len(cans))
			continue
		}
		if late := first.Stored.Sub(o.PayBy); late > lateOutlier {
			outliers++
			if outFrom.IsZero() || o.PayBy.Before(outFrom) {
				outFrom = o.PayBy
			}
			if o.PayBy.After(outTo) {
				outTo = o.PayBy
			}
		}
		published = append(published, first.Stored.Sub(o.PayBy))
		announced := cans[0].Stored
		for _, c := range cans[1:] {
			if c.Stored.Before(announced) {
				announced = c.Stored
			}
		}
		r.Samples = append(r.Samples, lateSample{PayBy: o.PayBy, Late: first.Stored.Sub(o.PayBy), Fired: first.FiredAt.Sub(first.Deadline),
			Cancelled: o.UpdatedAt.Sub(o.PayBy), Announced: announced.Sub(o.PayBy)})
		fired = append(fired, first.FiredAt.Sub(first.Deadline))
		applied = append(applied, o.UpdatedAt.Sub(o.PayBy))
	}
	var payOKs, refused, unknown int
	for _, a := range acked {
		switch a.Pay {
		case payOK:
			payOKs++
		case payRefused:
			refused++
		case payUnknown:
			unknown++
		}
	}
	r.Lost, r.Early, r.PaidCancelled, r.Reconciled = len(lost), len(early), len(paidCancelled), len(reconciled)
	r.FiredTwice, r.CancelEvents = dupExpiries, cancelEvents
	r.Lines = append(r.Lines,
		fmt.Sprintf("orders created: %d acknowledged (201), %d in the database (%d created despite an unknown outcome)", len(acked), len(db), len(db)-len(acked)+countMissing(acked, db)),
		fmt.Sprintf("payments: %d acknowledged (200), %d refused (409, the deadline won), %d unknown outcome", payOKs, refused, unknown),
		fmt.Sprintf("final states: %d paid, %d cancelled by timeout, %d cancelled by customer, %d still pending", paid, byTimeout, byCustomer, pending),
		fmt.Sprintf("cancel events seen: %d distinct (key, version) in %d messages (%d missed outcome); %d for orders that were paid (stale, ignored)", cancelEvents, expiryMsgs, missed, paidFired),
		fmt.Sprintf("duplicates absorbed: %d cancel events and %d orders.cancelled events stored twice (beyond JetStream's dedupe window)", dupExpiries, dupCancels),
		fmt.Sprintf("LOST: %d   EARLY: %d   PAID-BUT-CANCELLED: %d   RECONCILED: %d   never paid but not cancelled by timeout: %d   events missing: %d",
			len(lost), len(early), len(paidCancelled), len(reconciled), len(wrongState), len(missing)),
		"lateness, cancel event stored in JetStream minus deadline: "+summary(published).String(),
		"lateness, timeoutd's fired_at minus deadline: "+summary(fired).String(),
		"lateness, order cancelled in the database minus deadline: "+summary(applied).String(),
		fmt.Sprintf("cancel events stored more than %s late: %d, deadlines from %s to %s (compare with the fault times)",
			lateOutlier, outliers, outFrom.Format("15:04:05.000"), outTo.Format("15:04:05.000")),
	)
	for _, v := range []struct {
		what string
		list []string
	}{{"lost", lost}, {"early", early}, {"paid but cancelled", paidCancelled}, {"never paid, not cancelled by timeout", wrongState}, {"events missing", missing},
		{"reconciled (the deadline held only through the orders reconciler: a cancel event did not come within its margin)", reconciled}} {
		for _, l := range v.list {
			if l != "" {
				r.Violations = append(r.Violations, v.what+": "+l)
			}
		}
		if n := len(v.list); n > 10 {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: … %d in all", v.what, n))
		}
	}
	if len(ev.Undecodable) > 0 || ev.MissingMsgID > 0 {
		r.Violations = append(r.Violations, fmt.Sprintf("%d events without the right Nats-Msg-Id; undecodable: %s", ev.MissingMsgID, strings.Join(ev.Undecodable, "; ")))
	}
	if len(ev.DeadLetters) > 0 {
		var dl []string
		for subj, n := range ev.DeadLetters {
			dl = append(dl, fmt.Sprintf("%s=%d", subj, n))
		}
		slices.Sort(dl)
		r.Violations = append(r.Violations, "dead letters during the soak (all its input is valid): "+strings.Join(dl, " "))
	}
	return r
}

// lateOutlier is the lateness beyond which the audit reports the range of
// the deadlines concerned, to relate them to the faults.
const lateOutlier = 5 * time.Second

// countMissing counts the acknowledged orders absent from db.
func countMissing(acked map[string]soakOrder, db map[string]dbOrder) int {
	n := 0
	for id := range acked {
		if _, ok := db[id]; !ok {
			n++
		}
	}
	return n
}

// TestAuditReportsReconciledOrders: the auditor counts the orders the
// orders reconciler cancelled (reconciled_at set) apart from those
// timeoutd's cancel event cancelled, and fails the soak on any: when nothing
// is broken, every deadline is kept by timeoutd.
func TestAuditReportsReconciledOrders(t *testing.T) {
	t.Parallel()
	payBy := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	cancelled := func(id string, reconciled bool) dbOrder {
		return dbOrder{ID: id, Status: events.StatusCancelled, CancelReason: events.CancelPaymentTimeout, Version: 2,
			PayBy: payBy, UpdatedAt: payBy.Add(31 * time.Second), Reconciled: reconciled}
	}
	ev := seenEvents{
		Expiries: map[string][]seenExpiry{"fired": {{Version: 1, Outcome: events.OutcomeFired, Deadline: payBy,
			FiredAt: payBy.Add(time.Millisecond), Stored: payBy.Add(2 * time.Millisecond)}}},
		Cancelled: map[string][]seenCancelled{
			"fired":      {{Version: 2, Reason: events.CancelPaymentTimeout, At: payBy.Add(31 * time.Second), Stored: payBy.Add(31 * time.Second), PayBy: payBy}},
			"reconciled": {{Version: 2, Reason: events.CancelPaymentTimeout, At: payBy.Add(31 * time.Second), Stored: payBy.Add(31 * time.Second), PayBy: payBy}},
		},
	}
	tests := []struct {
		name string
		db   map[string]dbOrder
		want string
		fail bool
	}{
		{"nothing broken", map[string]dbOrder{"fired": cancelled("fired", false)}, "RECONCILED: 0 ", false},
		{"one reconciled", map[string]dbOrder{"fired": cancelled("fired", false), "reconciled": cancelled("reconciled", true)}, "RECONCILED: 1 ", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := audit(tt.db, ev, map[string]soakOrder{})
			if !slices.ContainsFunc(res.Lines, func(l string) bool { return strings.Contains(l, tt.want) }) {
				t.Errorf("report lacks %q:\n%s", tt.want, strings.Join(res.Lines, "\n"))
			}
			failed := slices.ContainsFunc(res.Violations, func(v string) bool { return strings.HasPrefix(v, "reconciled") })
			if failed != tt.fail || (!tt.fail && len(res.Violations) > 0) {
				t.Errorf("violations = %q, want a reconciled one: %v", res.Violations, tt.fail)
			}
		})
	}
}
