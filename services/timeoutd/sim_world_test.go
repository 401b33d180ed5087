package timeoutd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/eventstest"
	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// The simulation's world (TestSimulation): in-memory models of what
// timeoutd relies on, faithful where its correctness depends on them, run
// inside a testing/synctest bubble whose clock, time.Now, is Postgres's
// clock and the reference every invariant is judged by.
//
//   - Postgres: versioned rows (pending, cleared, fired), the lease table
//     with owners, epochs and expiries by its clock, the instance registry
//     with crash detection (an instance whose sessions are all gone for
//     crashGrace is dead, its partitions takeable at once). Each statement
//     runs atomically at one instant, its fence checked in the same step,
//     as the row locks make it in Postgres. Per instance, a statement can
//     hang until its context ends or the link heals (then it fails without
//     running), or commit and lose its reply (ambiguous). A restart drops
//     every session and refuses every statement until it is back; an
//     instance whose last heartbeat came before it keeps its leases for
//     a TTL after it, and is not judged by its sessions until it beats
//     again (the store's graceExpiry and sessionlessSQL). A freeze holds
//     every statement until it thaws (or its context ends, when it fails
//     without running), the sessions kept and the clock running; a
//     heartbeat or probe that finds no instance seen for a third of the
//     TTL marks the cluster resumed, with the grace of a restart (the
//     store's resumedCTE). Either grace is for the rows still live when
//     the quiet began, the last time any instance was seen before it.
//   - JetStream: a work queue per partition read through one durable
//     consumer (ack, term, nak with delay, redelivery after ackWait, reset
//     on Add), the expiry stream with its dedupe window by Nats-Msg-Id, a
//     PubAck lost after the store, hangs, latency.
//   - Clocks: each instance's wall clock is the reference plus a skew that
//     the nemesis steps forward and back.
//
// The world records the history the checker reads: every command
// produced and acknowledged, every publish with its instance and whether
// that instance held the partition's lease at that moment.
type world struct {
	mu     sync.Mutex
	rows   map[string]*simRow
	leases [events.Partitions]simLease
	insts  map[string]*simInstance
	links  map[string]*link
	parts  [events.Partitions]*simStream
	stored map[string]storedEvent // the expiry stream, by Nats-Msg-Id
	// notify is closed, and replaced, whenever a command may have become
	// available to a consumer.
	notify chan struct{}
	hist   history
	cfg    worldConfig
	// nodes are the instances, by id, for the checks made as the
	// history unfolds.
	nodes map[string]*simNode
	// refused are the commands dead-lettered, as key@version.
	refused map[string]bool
	// down is true while Postgres restarts: every statement fails, and
	// every session is gone. started is when it last came back
	// (pg_postmaster_start_time()).
	down    bool
	started time.Time
	// thawed is non-nil while Postgres is frozen: every statement waits
	// for it to be closed. resumed is when a heartbeat or probe last
	// found the cluster silent for a third of the TTL. quiet is when the
	// quiet that the latest restart or resume ended began: the last time
	// an instance was seen before it.
	thawed  chan struct{}
	resumed time.Time
	quiet   time.Time
}

// worldConfig is what the models need of the run.
type worldConfig struct {
	ackWait     time.Duration // of the command consumers
	dedupe      time.Duration // the expiry stream's duplicate window
	crashGrace  time.Duration // sessions gone this long: dead
	ttl         time.Duration // the instances' lease TTL, for a restart's grace
	batch       int           // the most commands one Next returns
	pubAckLossP float64       // per publish, a PubAck lost after the store
	// latency is the most a statement or a publish takes on a healthy
	// link (each draws up to it), but for the slow tail (see draw).
	latency time.Duration
	rand    func() float64
	// fits, when positive, is the MaxPending of an instance that holds
	// every partition (the full-schedule seeds): the pending rows must
	// never exceed it (the check "committed fits").
	fits int
}

type simRow struct {
	version  int64
	state    State
	deadline time.Time
	plain    bool
	payload  []byte
	subject  string
	maxLate  time.Duration
}

type simLease struct {
	owner   string
	epoch   int64
	expires time.Time
}

// simInstance is an instance as the registry and crash detection see it.
type simInstance struct {
	expires time.Time
	serving bool
	// lostAt is when its sessions were all gone (zero: it has some).
	lostAt time.Time
	// beatAt is its last heartbeat's time, seenAt its last heartbeat's
	// or probe's.
	beatAt, seenAt time.Time
}

// link is one instance's connectivity, set by the nemesis.
type link struct {
	dbCut       bool // statements hang, running nothing
	natsCut     bool // NATS calls hang
	ambiguousP  float64
	natsLatency time.Duration
	dbLatency   time.Duration
	// healed is closed when the link changes, so that hung calls fail.
	healed chan struct{}
}

type storedEvent struct {
	at    time.Time
	by    string
	event events.Expiry
}

var (
	errSimCut       = errors.New("sim: connection reset")
	errSimDown      = errors.New("sim: the database system is starting up")
	errSimAmbiguous = errors.New("sim: commit reply lost")
	errSimPubAck    = errors.New("sim: PubAck lost")
)

func newWorld(cfg worldConfig) *world {
	w := &world{rows: map[string]*simRow{}, insts: map[string]*simInstance{}, links: map[string]*link{},
		stored: map[string]storedEvent{}, notify: make(chan struct{}), cfg: cfg}
	for p := range w.parts {
		w.parts[p] = &simStream{}
	}
	return w
}

// linkOf returns id's link, under w.mu.
func (w *world) linkOf(id string) *link {
	l := w.links[id]
	if l == nil {
		l = &link{healed: make(chan struct{})}
		w.links[id] = l
	}
	return l
}

// setLink changes id's link with f and wakes its hung calls.
func (w *world) setLink(id string, f func(*link)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.linkOf(id)
	f(l)
	close(l.healed)
	l.healed = make(chan struct{})
}

// loseSessions records that id's sessions are all gone now (a crash, or the
// database dropping a cut-off instance's connections).
func (w *world) loseSessions(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in := w.insts[id]; in != nil && in.lostAt.IsZero() {
		in.lostAt = time.Now()
	}
}

// restartDB restarts Postgres for d: every session is gone at once, every
// statement meanwhile fails (one in its latency is rolled back), and when
// it is back, pg_postmaster_start_time() is now. Hung statements stay hung:
// their links drop what the server would have answered.
func (w *world) restartDB(ctx context.Context, d time.Duration) {
	w.mu.Lock()
	w.down = true
	for _, in := range w.insts {
		if in.lostAt.IsZero() {
			in.lostAt = time.Now()
		}
	}
	w.mu.Unlock()
	retry.Sleep(ctx, d)
	w.mu.Lock()
	w.down, w.started, w.quiet = false, time.Now(), w.lastSeen()
	w.mu.Unlock()
}

// freezeDB freezes Postgres for d: every statement waits until it thaws,
// sessions and clock alive, as a stalled disk or a paused VM does.
func (w *world) freezeDB(ctx context.Context, d time.Duration) {
	w.mu.Lock()
	thawed := make(chan struct{})
	w.thawed = thawed
	w.mu.Unlock()
	retry.Sleep(ctx, d)
	w.mu.Lock()
	w.thawed = nil
	close(thawed)
	w.mu.Unlock()
}

// graceExpiry returns when a row that expires at expires, of instance in
// (a lease of its, or its own row), expires as the lease statements see it,
// under w.mu: an instance whose last heartbeat came before Postgres
// (re)started lost its sessions to the restart, and its rows count for one
// TTL after the start, so that it renews its leases before another takes
// them; so do they after the cluster resumed from a silence (the store's
// graceExpiry). The fence, and so the check of fencing, take the lease's
// own expiry.
func (w *world) graceExpiry(expires time.Time, in *simInstance) time.Time {
	if at := later(w.started, w.resumed); in != nil && in.beatAt.Before(at) && expires.After(w.quiet) {
		return later(expires, at.Add(w.cfg.ttl))
	}
	return expires
}

// see records a heartbeat or probe of in at now, under w.mu: one that
// finds no instance seen for a third of the TTL marks the cluster resumed
// from the quiet since the last instance was seen (the store's
// resumedCTE).
func (w *world) see(in *simInstance, now time.Time) {
	if last := w.lastSeen(); !last.IsZero() && now.Sub(last) >= w.cfg.ttl/3 {
		w.resumed, w.quiet = now, last
	}
	if in != nil {
		in.seenAt = now
	}
}

// lastSeen is the last time a heartbeat or probe of any instance was
// recorded, under w.mu.
func (w *world) lastSeen() time.Time {
	var last time.Time
	for _, o := range w.insts {
		last = later(last, o.seenAt)
	}
	return last
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// draw returns a healthy link's latency, under w.mu: up to cfg.latency,
// and one time in slowOneIn slowFactor times that, a statement or a
// publish that meets a busy server (a checkpoint, a vacuum, a leader's
// fsync). The tail widens the windows between an admission, a commit and
// its apply, where another lane's statement may overtake.
func (w *world) draw() time.Duration {
	d := time.Duration(w.cfg.rand() * float64(w.cfg.latency))
	if w.cfg.rand() < 1.0/slowOneIn {
		d *= slowFactor
	}
	return d
}

// slowOneIn and slowFactor shape the tail of a healthy link's latency.
const (
	slowOneIn  = 20
	slowFactor = 20
)

// hang blocks until ctx ends or the link changes, and fails.
func hang(ctx context.Context, healed <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-healed:
		return errSimCut
	}
}

// statement runs fn as one statement of instance id against Postgres:
// atomically, at one instant, unless the link hangs it; a write may commit
// and lose its reply. A statement that runs proves id's sessions live.
func (w *world) statement(ctx context.Context, id string, write bool, fn func(now time.Time) error) error {
	w.mu.Lock()
	l := w.linkOf(id)
	cut, healed, latency, ambiguous := l.dbCut, l.healed, l.dbLatency+w.draw(), l.ambiguousP
	w.mu.Unlock()
	if cut {
		return hang(ctx, healed)
	}
	if latency > 0 && !retry.Sleep(ctx, latency) {
		return ctx.Err()
	}
	w.mu.Lock()
	for w.thawed != nil { // frozen: held until it thaws
		thawed := w.thawed
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-thawed:
		}
		w.mu.Lock()
	}
	if l.dbCut { // cut during the latency
		w.mu.Unlock()
		return hang(ctx, healed)
	}
	if w.down { // refused, or rolled back by the restart
		w.mu.Unlock()
		return errSimDown
	}
	if in := w.insts[id]; in != nil {
		in.lostAt = time.Time{} // a session of its own is back
	}
	err := fn(time.Now())
	lost := write && err == nil && ambiguous > 0 && w.cfg.rand() < ambiguous
	w.mu.Unlock()
	if lost {
		return errSimAmbiguous
	}
	return err
}

// fenced returns the partitions of parts whose lease fence does not hold
// for fence at now, under w.mu.
func (w *world) fenced(fence lease.Fence, parts []int, now time.Time) (refused []int) {
	for _, p := range parts {
		i := slices.IndexFunc(fence.Leases, func(l lease.Lease) bool { return l.Partition == p })
		if i < 0 {
			refused = append(refused, p)
			continue
		}
		l := w.leases[p]
		if l.owner != fence.Owner || l.epoch != fence.Leases[i].Epoch || !l.expires.After(now) {
			refused = append(refused, p)
		}
	}
	return refused
}

// holds reports whether id holds p's lease at now, by the reference, under
// w.mu.
func (w *world) holds(id string, p int, now time.Time) bool {
	l := w.leases[p]
	return l.owner == id && l.expires.After(now)
}

// gone reports whether instance id is dead by crash detection, under w.mu:
// its sessions gone for the crash grace, after a heartbeat since Postgres
// last started (before it, the restart took them).
func (w *world) gone(id string, now time.Time) bool {
	in := w.insts[id]
	return in != nil && !in.lostAt.IsZero() && now.Sub(in.lostAt) >= w.cfg.crashGrace && in.beatAt.After(w.started)
}

// simStore is instance id's Store.
type simStore struct {
	w  *world
	id string
}

var _ Store = simStore{}

func (s simStore) Apply(ctx context.Context, fence lease.Fence, cmds []events.Command, now time.Time) (changes []Change, refused []int, err error) {
	err = s.w.statement(ctx, s.id, true, func(at time.Time) error {
		changes, refused = nil, nil
		var parts []int
		for _, c := range cmds {
			parts = appendPartitions(parts, events.PartitionOf(c.Key))
		}
		refused = s.w.fenced(fence, parts, at)
		for _, c := range cmds {
			if slices.Contains(refused, events.PartitionOf(c.Key)) {
				continue
			}
			r := s.w.rows[c.Key]
			want := StatePending
			if c.Kind == events.KindClear {
				want = StateCleared
			}
			if r != nil && r.version >= c.Version {
				if r.version == c.Version && r.state == want {
					changes = append(changes, Change{Key: c.Key, Version: r.version, State: r.state, Deadline: r.deadline, Plain: r.plain})
				}
				continue
			}
			r = &simRow{version: c.Version, state: want, deadline: c.Deadline, payload: c.Payload, subject: c.FireSubject,
				maxLate: time.Duration(c.MaxLatenessMs) * time.Millisecond}
			if want == StateCleared {
				r.deadline = now
			} else {
				r.plain = len(c.Payload) == 0 && c.FireSubject == events.OrderCancelSubject(c.Key) && c.MaxLatenessMs == 0 && c.TraceParent == ""
			}
			s.w.rows[c.Key] = r
			s.w.hist.add(at, "commit", s.id, c.Key, c.Version, string(c.Kind))
			changes = append(changes, Change{Key: c.Key, Version: r.version, State: r.state, Deadline: r.deadline, Plain: r.plain})
			if want == StatePending {
				s.w.checkFits(c.Key, at)
			}
		}
		return nil
	})
	return changes, refused, err
}

func (s simStore) DueRows(ctx context.Context, due []Due) (out []Timeout, err error) {
	err = s.w.statement(ctx, s.id, false, func(time.Time) error {
		out = nil
		for _, d := range due {
			if r := s.w.rows[d.Key]; r != nil && r.version == d.Version && r.state == StatePending {
				out = append(out, Timeout{Key: d.Key, Partition: events.PartitionOf(d.Key), Version: r.version, State: r.state,
					Deadline: r.deadline, MaxLateness: r.maxLate, FireSubject: r.subject, Payload: r.payload, Plain: r.plain})
			}
		}
		return nil
	})
	return out, err
}

func (s simStore) MarkFired(ctx context.Context, fence lease.Fence, due []Due, firedAt time.Time) (refused []int, err error) {
	err = s.w.statement(ctx, s.id, true, func(at time.Time) error {
		var parts []int
		for _, d := range due {
			parts = appendPartitions(parts, events.PartitionOf(d.Key))
		}
		refused = s.w.fenced(fence, parts, at)
		for _, d := range due {
			r := s.w.rows[d.Key]
			if slices.Contains(refused, events.PartitionOf(d.Key)) || r == nil || r.version != d.Version || r.state != StatePending {
				continue
			}
			r.state, r.deadline = StateFired, firedAt
		}
		return nil
	})
	return refused, err
}

func (s simStore) LoadPending(ctx context.Context, partition int, afterKey string, limit int) (out []Timeout, err error) {
	err = s.w.statement(ctx, s.id, false, func(time.Time) error {
		out = nil
		for k, r := range s.w.rows {
			if r.state == StatePending && events.PartitionOf(k) == partition && k > afterKey {
				out = append(out, Timeout{Key: k, Version: r.version, Deadline: r.deadline, Plain: r.plain})
			}
		}
		slices.SortFunc(out, func(a, b Timeout) int { return strings.Compare(a.Key, b.Key) })
		out = out[:min(len(out), limit)]
		return nil
	})
	return out, err
}

func (s simStore) RetireTombstones(context.Context, lease.Fence, time.Time, int) (int, error) {
	return 0, nil
}
func (s simStore) ForgetMarks(context.Context, lease.Fence, time.Time, int) (int, error) {
	return 0, nil
}
func (s simStore) ListPending(context.Context, Query) ([]Timeout, error) { return nil, nil }
func (s simStore) GetPending(context.Context, string) (Timeout, error)   { return Timeout{}, ErrNotFound }
func (s simStore) Ping(ctx context.Context) error {
	return s.w.statement(ctx, s.id, false, func(time.Time) error { return nil })
}

// simLeases is instance id's Leases.
type simLeases struct {
	w  *world
	id string
}

var _ lease.Table = simLeases{}

// cluster returns what a heartbeat or probe learns, under w.mu.
func (l simLeases) cluster(now time.Time) lease.Beat {
	b := lease.Beat{Live: 1, DBTime: now}
	for id, in := range l.w.insts {
		if id != l.id && in.serving && l.w.graceExpiry(in.expires, in).After(now) && !l.w.gone(id, now) {
			b.Live++
		}
	}
	for _, ls := range l.w.leases {
		if ls.owner == "" || l.w.gone(ls.owner, now) {
			b.Takeable++
			continue
		}
		if d := l.w.graceExpiry(ls.expires, l.w.insts[ls.owner]).Sub(now); ls.owner != l.id && d > 0 && (b.NextExpiry == 0 || d < b.NextExpiry) {
			b.NextExpiry = d
		}
	}
	return b
}

func (l simLeases) Heartbeat(ctx context.Context, id string, ttl time.Duration, _ []byte, serving bool) (b lease.Beat, err error) {
	err = l.w.statement(ctx, l.id, true, func(now time.Time) error {
		in := l.w.insts[id]
		l.w.see(in, now)
		if in == nil {
			in = &simInstance{seenAt: now}
			l.w.insts[id] = in
		}
		in.expires, in.serving, in.beatAt = now.Add(ttl), serving, now
		b = l.cluster(now)
		return nil
	})
	return b, err
}

func (l simLeases) Probe(ctx context.Context, id string, _ time.Duration) (live, takeable int, err error) {
	err = l.w.statement(ctx, l.id, true, func(now time.Time) error {
		l.w.see(l.w.insts[id], now)
		b := l.cluster(now)
		live, takeable = b.Live, b.Takeable
		return nil
	})
	return live, takeable, err
}

func (l simLeases) Acquire(ctx context.Context, id string, n int, held []int, ttl time.Duration) (got []lease.Lease, err error) {
	err = l.w.statement(ctx, l.id, true, func(now time.Time) error {
		got = nil
		for p := range l.w.leases {
			ls := &l.w.leases[p]
			if len(got) == n || slices.Contains(held, p) {
				continue
			}
			if ls.owner == "" || ls.owner == id || !l.w.graceExpiry(ls.expires, l.w.insts[ls.owner]).After(now) || l.w.gone(ls.owner, now) {
				ls.owner, ls.epoch, ls.expires = id, ls.epoch+1, now.Add(ttl)
				got = append(got, lease.Lease{Partition: p, Epoch: ls.epoch})
			}
		}
		if len(got) > 0 {
			l.w.hist.add(now, "acquire", id, "-", 0, fmt.Sprint(got))
		}
		return nil
	})
	return got, err
}

func (l simLeases) Renew(ctx context.Context, id string, held []lease.Lease, ttl time.Duration) (out []lease.Lease, err error) {
	err = l.w.statement(ctx, l.id, true, func(now time.Time) error {
		out = nil
		for _, h := range held {
			if ls := &l.w.leases[h.Partition]; ls.owner == id && ls.epoch == h.Epoch {
				ls.expires = now.Add(ttl)
				out = append(out, h)
			}
		}
		return nil
	})
	return out, err
}

func (l simLeases) Release(ctx context.Context, id string, leases []lease.Lease) error {
	return l.w.statement(ctx, l.id, true, func(now time.Time) error {
		for _, h := range leases {
			if ls := &l.w.leases[h.Partition]; ls.owner == id && ls.epoch == h.Epoch {
				ls.owner, ls.expires = "", time.Time{}
			}
		}
		l.w.hist.add(now, "release", id, "-", 0, fmt.Sprint(leases))
		return nil
	})
}

func (l simLeases) Leave(ctx context.Context, id string) error {
	return l.w.statement(ctx, l.id, true, func(time.Time) error {
		delete(l.w.insts, id)
		return nil
	})
}

func (l simLeases) Instances(ctx context.Context) ([]lease.Instance, error) {
	return nil, l.w.statement(ctx, l.id, false, func(time.Time) error { return nil })
}

// simStream is a partition's command stream and its durable consumer.
type simStream struct {
	msgs []*simMsg
}

type simMsg struct {
	seq     uint64
	subject string
	msgID   string
	data    []byte
	cmds    []events.Command // one, or a batch's (events.HeaderBatch)
	done    bool             // acked or terminated
	availAt time.Time        // delivered (or nak'ed) until then
}

// pending returns the number of pending rows.
func (w *world) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.rows {
		if r.state == StatePending {
			n++
		}
	}
	return n
}

// produce appends cmd to its partition's stream, as a producer's publish.
func (w *world) produce(cmd events.Command) { w.produceBatch([]events.Command{cmd}) }

// produceBatch publishes cmds as pkg/timeouts' writer does: packed into
// batches of one partition's commands (events.Batch), each appended to its
// partition's stream.
func (w *world) produceBatch(cmds []events.Command) {
	msgs := make([]events.CommandMessage, len(cmds))
	for i, cmd := range cmds {
		data, err := json.Marshal(cmd)
		if err != nil {
			panic(err)
		}
		msgs[i] = events.CommandMessage{Subject: events.CommandSubject(cmd.Key), MsgID: eventstest.MsgID(cmd), Data: data, Count: 1}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, m := range events.Batch(msgs) {
		var members []events.Command
		for line := range bytes.SplitSeq(m.Data, []byte("\n")) {
			var c events.Command
			if err := json.Unmarshal(line, &c); err != nil {
				panic(err)
			}
			members = append(members, c)
		}
		key := members[0].Key
		s := w.parts[events.PartitionOf(key)]
		s.msgs = append(s.msgs, &simMsg{seq: uint64(len(s.msgs) + 1), subject: events.PartitionedCommandSubject(key), msgID: m.MsgID, data: m.Data, cmds: members})
		for _, c := range members {
			detail := string(c.Kind) + " " + c.Deadline.Format("15:04:05.000")
			if len(members) > 1 {
				detail += fmt.Sprintf(" (batch of %d)", len(members))
			}
			w.hist.add(now, "produce", "", c.Key, c.Version, detail)
		}
	}
	w.wake()
}

// wake tells the consumers that a command may be available, under w.mu.
func (w *world) wake() {
	close(w.notify)
	w.notify = make(chan struct{})
}

// simSource is instance id's Source.
type simSource struct {
	w     *world
	id    string
	parts map[int]bool // guarded by w.mu
}

var _ Source = (*simSource)(nil)

func (s *simSource) Next(ctx context.Context) ([]Message, error) {
	for {
		s.w.mu.Lock()
		l := s.w.linkOf(s.id)
		if l.natsCut {
			healed := l.healed
			s.w.mu.Unlock()
			if err := hang(ctx, healed); ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		now := time.Now()
		var out []Message
		var next time.Time
		for p := range s.parts {
			for _, m := range s.w.parts[p].msgs {
				if m.done || len(out) == s.w.cfg.batch {
					continue
				}
				if m.availAt.After(now) {
					if next.IsZero() || m.availAt.Before(next) {
						next = m.availAt
					}
					continue
				}
				m.availAt = now.Add(s.w.cfg.ackWait)
				out = append(out, simMessage{w: s.w, m: m, id: s.id})
			}
		}
		notify := s.w.notify
		s.w.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		var timer <-chan time.Time
		if !next.IsZero() {
			t := time.NewTimer(next.Sub(now))
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-notify:
		case <-timer:
		}
	}
}

// Add starts fetching p's commands: the durable consumer is reset, so
// what a previous owner left unacked is redelivered at once.
func (s *simSource) Add(_ context.Context, p int) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.parts[p] = true
	for _, m := range s.w.parts[p].msgs {
		if !m.done {
			m.availAt = time.Time{}
		}
	}
	s.w.wake()
	return nil
}

func (s *simSource) Remove(p int) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	delete(s.parts, p)
}

func (s *simSource) Close() error { return nil }

func (s *simSource) Mark(_ context.Context, p int) (uint64, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return uint64(len(s.w.parts[p].msgs)), nil
}

func (s *simSource) Consumed(_ context.Context, p int, mark uint64) (bool, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	for _, m := range s.w.parts[p].msgs[:mark] {
		if !m.done {
			return false, nil
		}
	}
	return true, nil
}

// simMessage is one delivery of a command to instance id.
type simMessage struct {
	w  *world
	m  *simMsg
	id string
}

func (m simMessage) Subject() string { return m.m.subject }
func (m simMessage) Data() []byte    { return m.m.data }
func (m simMessage) Header(name string) string {
	switch {
	case name == events.HeaderBatch && len(m.m.cmds) > 1:
		return strconv.Itoa(len(m.m.cmds))
	case name == events.HeaderMsgID:
		return m.m.msgID
	}
	return ""
}

func (m simMessage) Seq() uint64 { return m.m.seq }

func (m simMessage) settle(what string, f func(now time.Time)) error {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	if m.w.linkOf(m.id).natsCut {
		return errSimCut // lost: redelivered after ackWait
	}
	now := time.Now()
	f(now)
	for _, c := range m.m.cmds {
		m.w.hist.add(now, what, m.id, c.Key, c.Version, string(c.Kind))
	}
	m.w.wake()
	return nil
}

func (m simMessage) Ack() error {
	return m.settle("ack", func(now time.Time) {
		if !m.m.done {
			m.m.done = true
			for _, c := range m.m.cmds {
				if m.w.refused[c.Key+"@"+strconv.FormatInt(c.Version, 10)] {
					continue
				}
				m.w.hist.acked(c, now)
				m.w.checkScheduled(m.id, c, now)
			}
		}
	})
}

// checkScheduled checks, as instance id acknowledges cmd, that a set it
// acknowledges for a partition open there is held by its schedule, unless
// Postgres already moved past it (a newer version, or fired): an
// acknowledged set must never be pending in Postgres alone while its
// partition's owner runs (a restart's load would hide such a loss from
// the end's checks). Under w.mu.
// checkFits checks, under w.mu, as key's set commits, that the pending
// rows fit the schedule of the instance that holds every partition
// (worldConfig.fits): a set committed beyond it (admitted without room)
// leaves a row that no schedule holds, and that a restart cannot load.
// The rows count what ingest commits ahead of its apply, so this sees a
// set that took another's room at its commit, whether or not an apply
// meets the full schedule afterwards.
func (w *world) checkFits(key string, now time.Time) {
	if w.cfg.fits <= 0 {
		return
	}
	n := 0
	for _, r := range w.rows {
		if r.state == StatePending {
			n++
		}
	}
	if n > w.cfg.fits {
		w.hist.violate(now, "committed fits", key, fmt.Sprintf("the pending rows now number %d, beyond MaxPending %d", n, w.cfg.fits))
	}
}

func (w *world) checkScheduled(id string, cmd events.Command, now time.Time) {
	n := w.nodes[id]
	if cmd.Kind != events.KindSet || n == nil {
		return
	}
	svc := n.svc.Load()
	if svc == nil || !svc.own.Open(events.PartitionOf(cmd.Key)) {
		return
	}
	if r := w.rows[cmd.Key]; r == nil || r.version != cmd.Version || r.state != StatePending {
		return
	}
	if v, held := svc.sched.Version(cmd.Key); !held || v < cmd.Version {
		w.hist.violate(now, "acknowledged is scheduled", cmd.Key, fmt.Sprintf("v%d acknowledged by %s, pending in Postgres, not held by its schedule (held %v, v%d)", cmd.Version, id, held, v))
	}
}

func (m simMessage) Term() error {
	return m.settle("term", func(time.Time) { m.m.done = true })
}

func (m simMessage) NakWithDelay(d time.Duration) error {
	return m.settle("nak", func(now time.Time) {
		if !m.m.done {
			m.m.availAt = now.Add(d)
		}
	})
}

// simPublisher is instance id's Publisher and DeadLetterer.
type simPublisher struct {
	w  *world
	id string
}

var (
	_ Publisher    = simPublisher{}
	_ DeadLetterer = simPublisher{}
)

func (p simPublisher) Publish(ctx context.Context, evs []Event) (time.Time, error) {
	now := time.Now() // the moment of the publish: the checks judge it
	p.w.mu.Lock()
	l := p.w.linkOf(p.id)
	cut, healed, latency := l.natsCut, l.healed, l.natsLatency+p.w.draw()
	for _, ev := range evs {
		e, err := events.DecodeExpiry(ev.Data)
		if err != nil {
			p.w.mu.Unlock()
			return time.Time{}, fmt.Errorf("sim: the fire path published what DecodeExpiry refuses: %w", err)
		}
		p.w.hist.published(p.id, e, now, p.w.holds(p.id, events.PartitionOf(e.Key), now))
	}
	p.w.mu.Unlock()
	if cut {
		return time.Time{}, hang(ctx, healed)
	}
	if latency > 0 && !retry.Sleep(ctx, latency) {
		return time.Time{}, ctx.Err()
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	at := time.Now()
	for _, ev := range evs {
		e, _ := events.DecodeExpiry(ev.Data)
		if s, ok := p.w.stored[ev.MsgID]; ok && at.Sub(s.at) < p.w.cfg.dedupe {
			continue // a duplicate within the window
		}
		if _, ok := p.w.stored[ev.MsgID]; ok {
			p.w.hist.violate(at, "effectively once", e.Key, fmt.Sprintf("%s stored again by %s after the dedupe window", ev.MsgID, p.id))
		}
		p.w.stored[ev.MsgID] = storedEvent{at: at, by: p.id, event: e}
	}
	if p.w.cfg.pubAckLossP > 0 && p.w.cfg.rand() < p.w.cfg.pubAckLossP {
		return time.Time{}, errSimPubAck
	}
	return at, nil
}

func (p simPublisher) Stored(_ context.Context, _ string, msgID string) (bool, error) {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	_, ok := p.w.stored[msgID]
	return ok, nil
}

// DeadLetter stores a dead letter as a publish would: it hangs while NATS
// is cut, and takes the link's latency.
func (p simPublisher) DeadLetter(ctx context.Context, d events.DeadLetter) error {
	p.w.mu.Lock()
	l := p.w.linkOf(p.id)
	cut, healed, latency := l.natsCut, l.healed, l.natsLatency+p.w.draw()
	p.w.hist.add(time.Now(), "dlq", p.id, "-", 0, string(d.Reason))
	p.w.mu.Unlock()
	if cut {
		return hang(ctx, healed)
	}
	if latency > 0 && !retry.Sleep(ctx, latency) {
		return ctx.Err()
	}
	// A batch's acknowledgement does not accept the commands of it that
	// were dead-lettered.
	var c events.Command
	if json.Unmarshal(d.Data, &c) == nil && c.Key != "" {
		p.w.mu.Lock()
		if p.w.refused == nil {
			p.w.refused = map[string]bool{}
		}
		p.w.refused[c.Key+"@"+strconv.FormatInt(c.Version, 10)] = true
		p.w.mu.Unlock()
	}
	return nil
}

// history is what happened, for the checker and for the account of a
// failing seed; guarded by w.mu.
type history struct {
	lines []string
	// acks is the first acknowledgement of each command, by key: version
	// → time.
	acks map[string]map[int64]time.Time
	// pubs is every publish, in order.
	pubs       []simPublish
	violations []string
	firstKey   string // the key of the first violation
}

type simPublish struct {
	at    time.Time
	by    string
	event events.Expiry
	held  bool // the publisher held the partition's lease at that moment
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

func (h *history) published(by string, e events.Expiry, at time.Time, held bool) {
	h.pubs = append(h.pubs, simPublish{at: at, by: by, event: e, held: held})
	h.add(at, "publish", by, e.Key, e.Version, fmt.Sprintf("%s deadline %s held %v", e.Outcome, e.Deadline.Format("15:04:05.000000"), held))
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
