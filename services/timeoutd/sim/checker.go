package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
)

// checkScheduled checks, as instance id acknowledges cmd, that a set it
// acknowledges for a partition open there is held by its schedule, unless
// Postgres already moved past it (a newer version, or fired): an
// acknowledged set must never be pending in Postgres alone while its
// partition's owner runs (a restart's load would hide such a loss from
// the end's checks). Under w.mu.
// checkFits checks, under w.mu, as key's set commits, that the pending
// rows fit the schedule of the instance that holds every partition
// (Config.fits): a set committed beyond it (admitted without room)
// leaves a row that no schedule holds, and that a restart cannot load.
// The rows count what ingest commits ahead of its apply, so this sees a
// set that took another's room at its commit, whether or not an apply
// meets the full schedule afterwards.
func (w *World) checkFits(key string, now time.Time) {
	if w.cfg.Fits <= 0 {
		return
	}
	n := 0
	for _, r := range w.pg.rows {
		if r.state == timeoutd.StatePending {
			n++
		}
	}
	if n > w.cfg.Fits {
		w.hist.violate(now, "committed fits", key, fmt.Sprintf("the pending rows now number %d, beyond MaxPending %d", n, w.cfg.Fits))
	}
}

func (w *World) checkScheduled(id string, cmd events.Command, now time.Time) {
	n := w.nodes[id]
	if cmd.Kind != events.KindSet || n == nil {
		return
	}
	svc := n.svc.Load()
	if svc == nil || !svc.Open(events.PartitionOf(cmd.Key)) {
		return
	}
	if r := w.pg.rows[cmd.Key]; r == nil || r.version != cmd.Version || r.state != timeoutd.StatePending {
		return
	}
	if v, held := svc.Scheduled(cmd.Key); !held || v < cmd.Version {
		w.hist.violate(now, "acknowledged is scheduled", cmd.Key, fmt.Sprintf("v%d acknowledged by %s, pending in Postgres, not held by its schedule (held %v, v%d)", cmd.Version, id, held, v))
	}
}

// history is what happened, for the checker and for the account of a
// failing seed; guarded by w.mu.
type history struct {
	lines []string
	// acks is the first acknowledgement of each command, by key: version
	// → time.
	acks map[string]map[int64]time.Time
	// pubs is every publish, in order.
	pubs       []publish
	violations []string
	firstKey   string // the key of the first violation
	// idle is, by partition, since when it has been takeable (zero: it
	// is held), and idleReported whether its idleness was reported.
	idle         [events.Partitions]time.Time
	idleReported [events.Partitions]bool
}

type publish struct {
	at time.Time
	// dbAt is the same moment by the database's clock in force then
	// (the promoted standby's after a failover): deadlines are judged by
	// it.
	dbAt  time.Time
	by    string
	event events.Expiry
	held  bool // the publisher held the partition's lease at that moment
	// storedAt is when the event reached the stream (zero: it did not, or
	// was a duplicate), and heldStored whether the publisher held the
	// lease then, or the stream stored it under the partition's last fence
	// (no newer owner had fenced it): what consumers see is judged then.
	storedAt   time.Time
	heldStored bool
}

func (h *history) add(at time.Time, what, who, key string, version int64, detail string) {
	who = cmp.Or(who, "-")
	h.lines = append(h.lines, fmt.Sprintf("%s %-8s %-3s %s v%d %s", at.Format("15:04:05.000000"), what, who, key, version, detail))
}

func (h *history) acked(cmd events.Command, at time.Time) {
	if h.acks == nil {
		h.acks = map[string]map[int64]time.Time{}
	}
	if h.acks[cmd.Key] == nil {
		h.acks[cmd.Key] = map[int64]time.Time{}
	}
	if _, ok := h.acks[cmd.Key][cmd.Version]; !ok {
		h.acks[cmd.Key][cmd.Version] = at
	}
}

// published records a publish of e by by at at, dbAt by the database's
// clock, and returns its index for stored.
func (h *history) published(by string, e events.Expiry, at, dbAt time.Time, held bool) int {
	h.pubs = append(h.pubs, publish{at: at, dbAt: dbAt, by: by, event: e, held: held})
	h.add(at, "publish", by, e.Key, e.Version, fmt.Sprintf("%s deadline %s held %v, the database's clock %s", e.Outcome, e.Deadline.Format("15:04:05.000000"),
		held, dbAt.Format("15:04:05.000000")))
	return len(h.pubs) - 1
}

// stored records that publish i reached the stream at at, held telling
// whether its publisher held the lease then.
func (h *history) stored(i int, at time.Time, held bool) {
	p := &h.pubs[i]
	p.storedAt, p.heldStored = at, held
	if at.After(p.at) {
		h.add(at, "stored", p.by, p.event.Key, p.event.Version, fmt.Sprintf("%v after its publish, held %v", at.Sub(p.at), held))
	}
}

func (h *history) violate(at time.Time, invariant, key, detail string) {
	v := fmt.Sprintf("%s: %s: %s (at %s)", invariant, key, detail, at.Format("15:04:05.000000"))
	if h.firstKey == "" {
		h.firstKey = key
	}
	h.violations = append(h.violations, v)
	h.lines = append(h.lines, "VIOLATION "+v)
}

// firstViolation returns the index in lines of the first violation, or -1.
func (h *history) firstViolation() int {
	return slices.IndexFunc(h.lines, func(l string) bool { return strings.HasPrefix(l, "VIOLATION ") })
}

// check asserts the invariants over the history, under w.mu; end is when
// the run ended, after the settling time.
func check(w *World, keys map[string]*keyState, end time.Time) {
	h := &w.hist
	for _, p := range h.pubs {
		e := p.event
		if p.dbAt.Before(e.Deadline) {
			h.violate(p.at, "never early", e.Key, fmt.Sprintf("v%d published by %s %v before its deadline by the database's clock", e.Version, p.by, e.Deadline.Sub(p.dbAt)))
		}
		if !p.held {
			h.violate(p.at, "fencing", e.Key, fmt.Sprintf("v%d published by %s, which did not hold partition %d's lease", e.Version, p.by, events.PartitionOf(e.Key)))
		} else if !p.storedAt.IsZero() && !p.heldStored {
			h.violate(p.storedAt, "fencing", e.Key, fmt.Sprintf("v%d published by %s, stored %v later, when it held neither partition %d's lease nor its fence",
				e.Version, p.by, p.storedAt.Sub(p.at), events.PartitionOf(e.Key)))
		}
		seen := p.at
		if !p.storedAt.IsZero() {
			seen = p.storedAt
		}
		for v, at := range h.acks[e.Key] {
			if v > e.Version && at.Before(seen) {
				h.violate(seen, "latest wins", e.Key, fmt.Sprintf("v%d published by %s and stored %v after v%d was acknowledged", e.Version, p.by, seen.Sub(at), v))
			}
		}
	}
	perVersion := map[string]int{}
	for _, s := range w.js.stored {
		perVersion[fmt.Sprintf("%s v%d", s.event.Key, s.event.Version)]++
	}
	for kv, n := range perVersion {
		if n > 1 {
			h.violate(end, "effectively once", kv, fmt.Sprintf("%d events stored (fired and missed)", n))
		}
	}
	for _, k := range keys {
		if k.last.Kind != events.KindSet || k.deadline.After(end) {
			continue // cleared, or not due yet
		}
		msgID := events.Expiry{Outcome: events.OutcomeFired, Key: k.key, Version: k.version}.MsgID()
		missed := events.Expiry{Outcome: events.OutcomeMissed, Key: k.key, Version: k.version}.MsgID()
		_, fired := w.js.stored[msgID]
		_, skipped := w.js.stored[missed]
		if !fired && !skipped {
			h.violate(end, "nothing lost", k.key, fmt.Sprintf("v%d (deadline %s) acknowledged, latest, never published",
				k.version, k.deadline.Format("15:04:05.000000")))
		}
	}
	for p, s := range w.js.parts {
		for _, m := range s.msgs {
			if !m.done {
				c := m.cmds[0]
				h.violate(end, "nothing lost", c.Key, fmt.Sprintf("v%d %s (partition %d, seq %d, %d commands) never acknowledged", c.Version, c.Kind, p, m.seq, len(m.cmds)))
			}
		}
	}
}

// report prints a seed's replay line, its settings and its history up to
// the first violation, around the keys involved.
func report(t *testing.T, seed uint64, settings []string, h *history, logs string, verbose bool) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "replay: go test ./services/timeoutd/sim -run 'TestSimulation' -sim.seed=%d -sim.history -v\n", seed)
	fmt.Fprintf(&b, "settings: %s\n", strings.Join(settings, "; "))
	for i, v := range h.violations {
		if i == 10 {
			fmt.Fprintf(&b, "… and %d more violations\n", len(h.violations)-i)
			break
		}
		fmt.Fprintf(&b, "VIOLATION %s\n", v)
	}
	// The history shrunk to the faults, leases and the first violating
	// key's lines, up to its violation.
	lines := h.lines
	first := h.firstViolation()
	key := h.firstKey
	if first >= 0 {
		lines = lines[:first+1]
	}
	b.WriteString("history (faults, leases and the first violation's key):\n")
	for _, l := range lines {
		f := strings.Fields(l)
		if verbose || len(f) < 4 || slices.Contains([]string{"FAULT", "acquire", "release", "failed", "promoted"}, f[1]) || f[3] == key || strings.HasPrefix(l, "VIOLATION") {
			b.WriteString(l + "\n")
		}
	}
	if logs != "" {
		b.WriteString("logs:\n" + logs)
	}
	if len(h.violations) > 0 {
		t.Error(b.String())
	} else {
		t.Log(b.String())
	}
}

// takenBound is how long a partition may stay takeable, unexcused,
// beside an instance calm for as long: a membership round, its probes,
// and a margin.
const takenBound = 2 * time.Second

// checkTaken checks, under w.mu, that no partition stays takeable (free,
// expired by the lease rules, or its owner dead) for takenBound beside an
// instance calm (running, its links healthy and its clock unchanged) for
// as long. A partition's wait is excused while Postgres is not calm
// (down, frozen, or back within a TTL: a restart's grace), and while an
// instance the lease rules count live is faulty and beat within three
// TTLs (its share waits for it; none may count an instance silent for
// longer). An unexcused wait is a deadline late for nothing: a dead
// instance counted live shrinks the survivors' shares, and they release
// what nobody takes. now is the reference; the lease rules are judged by
// the database's clock.
func (w *World) checkTaken(now time.Time) {
	h := &w.hist
	db := w.dbNow()
	excused := w.pg.down > 0 || w.pg.thawed != nil || now.Sub(w.pg.calm) < w.cfg.TTL+takenBound
	calm := 0
	for id, in := range w.pg.insts {
		n, l := w.nodes[id], w.linkOf(id)
		healthy := n != nil && n.svc.Load() != nil && !l.dbCut && !l.natsCut && l.dbLatency == 0 && l.natsLatency == 0 && l.ambiguousP == 0
		switch live := in.serving && w.graceExpiry(in.expires, in).After(db) && !w.gone(id, db); {
		case healthy && now.Sub(w.net.calm[id]) >= takenBound:
			calm++
		case !healthy && live && db.Sub(in.beatAt) <= 3*w.cfg.TTL:
			excused = true
		}
	}
	for p, ls := range w.pg.leases {
		switch {
		case excused || ls.owner != "" && w.graceExpiry(ls.expires, w.pg.insts[ls.owner]).After(db) && !w.gone(ls.owner, db):
			h.idle[p], h.idleReported[p] = time.Time{}, false
		case h.idle[p].IsZero():
			h.idle[p] = now
		case calm > 0 && now.Sub(h.idle[p]) >= takenBound && !h.idleReported[p]:
			h.idleReported[p] = true
			h.violate(now, "partitions taken", fmt.Sprintf("partition-%d", p), fmt.Sprintf("takeable for %v, unexcused (owner %q), beside %d calm instances",
				now.Sub(h.idle[p]), ls.owner, calm))
		}
	}
}
