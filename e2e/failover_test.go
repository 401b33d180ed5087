package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
)

// Postgres fails over (issue 44): the faults of the Postgres cluster
// (stackOptions.Patroni), in the chaos run's mix when it runs on the
// cluster, and TestPostgresFailover, which fails the primary over under
// load inside `make test`.

// chaosFailovers are the faults of the Postgres cluster.
var chaosFailovers = []chaosKind{
	{"kill-primary", 2, (*chaos).planKillPrimary},
	{"freeze-primary", 1, (*chaos).planFreezePrimary},
	{"netcut-primary", 1, (*chaos).planNetcutPrimary},
	{"switchover", 1, (*chaos).planSwitchover},
	{"kill-sync-standby", 1, (*chaos).planKillSyncStandby},
	{"kill-etcd-leader", 1, (*chaos).planKillEtcdLeader},
}

// failoverShort is the run of TestPostgresFailover: the chaos run's load
// for 50 s against the cluster on Patroni, with two of its faults, one of
// them the primary killed. Not the frozen primary under load: thawed, its
// Patroni once hung offline for good (docs/RELIABILITY.md "Postgres fails
// over"), which would stall the run; TestAThawedPrimaryGivesTheLeadUp
// thaws one three times without the load, and `make chaos
// CHAOS_PG=patroni` keeps it in its mix.
var failoverShort = chaosConfig{Load: chaosLoad(40, 50*time.Second).onPatroni(), Faults: 2,
	Kinds: slices.DeleteFunc(slices.Clone(chaosFailovers), func(k chaosKind) bool { return k.Name == "freeze-primary" }),
	Must:  []string{"kill-primary"}}

// pgFailoverBound is the most a failover (the primary lost, then a write
// committed by the next one) may take: Patroni's ttl (6 s) and the
// promotion (the target, 10 s) with a margin for a loaded 2-core machine.
const pgFailoverBound = 30 * time.Second

// pgFailover is a fault of the Postgres cluster as measured: when the
// primary (or the synchronous standby) was lost, and when a write through
// the services' multi-host URL committed again.
type pgFailover struct {
	Kind           string
	Lost, Writable time.Time
}

// TestPostgresFailover runs the chaos run's load and audit on the cluster
// with Postgres under Patroni while the primary fails over: the test fails
// on a lost deadline (a reconciled order counts as lost), an early
// cancellation, a cancel event stored twice, an unfenced write, an order
// acknowledged by the API and missing afterwards (RPO 0), or a failover
// longer than pgFailoverBound. CHAOS_SEED replays a schedule.
func TestPostgresFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e test: needs Docker and the built images; run without -short (make test)")
	}
	for _, seed := range chaosSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			row, _ := runChaos(t, failoverShort, seed)
			fmt.Println("FAILOVER " + row)
		})
	}
}

// TestAThawedPrimaryGivesTheLeadUp freezes the primary past the leader
// key's ttl, commits a row on the member promoted meanwhile, and thaws the
// former primary, three times: each time the former primary must come
// back a replica, never leading again on its old timeline, and every row
// must stay. Debian's Patroni 3.0.2 took the lead back on a thaw (its
// etcd3 heartbeat overwrote the new leader's key), and the promoted
// member's commits were rewound away: chaos seed 106 lost 713 orders
// acknowledged by the API (deploy/images/patroni/patch-etcd3-leader.py).
func TestAThawedPrimaryGivesTheLeadUp(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e test: needs Docker and the built images; run without -short (make test)")
	}
	t.Parallel()
	s := newPatroniCluster(t)
	checkPatroniAlertMetrics(t, s) // the cluster's alert rules read what its members serve
	c := &chaos{s: s}
	ctx := t.Context()
	exec := func(sql string, args ...any) error {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.pgURL("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, sql, args...)
		return err
	}
	if err := exec("CREATE TABLE e2e_thawed (round int PRIMARY KEY, timeline int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 3; round++ {
		name, _, tl, _ := c.pgHealthy(t)
		s.Pause(t, name)
		lost := time.Now()
		at := c.awaitWrites(t, "freeze-primary", lost, tl)
		if err := exec("INSERT INTO e2e_thawed VALUES ($1, $2)", round, tl+1); err != nil {
			t.Fatalf("round %d: the row committed on the promoted member: %v", round, err)
		}
		time.Sleep(max(0, 13*time.Second-time.Since(lost))) // frozen for 13 s in all, past the ttl of 6 s
		s.Unpause(t, name)
		t.Logf("round %d: primary %s (timeline %d) frozen 13s; writes accepted again after %s; %s", round, name, tl,
			at.Sub(lost).Round(time.Millisecond), c.rejoined(t, name, tl, time.Now(), "its thaw"))
	}
	c.pgHealthy(t)
	var rounds int
	conn, err := pgx.Connect(ctx, s.pgURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM e2e_thawed").Scan(&rounds); err != nil {
		t.Fatal(err)
	}
	if rounds != 3 {
		c.problem("%d of the 3 rows committed on a promoted member remain", rounds)
	}
	for _, p := range c.problems {
		t.Error(p)
	}
}

// newPatroniCluster starts the Postgres cluster of stackOptions.Patroni
// alone, on a network of its own, for t.
func newPatroniCluster(t *testing.T) *stack {
	t.Helper()
	s := &stack{ctrs: map[string]testcontainers.Container{}, roots: map[string]string{}, instanceEnv: map[string]map[string]string{},
		PGNodes: names("pg", 3)}
	t.Cleanup(s.terminate)
	s.printLogsOnFailure(t)
	ctx := t.Context()
	if err := requireImages(ctx, patroniImage); err != nil {
		t.Fatal(err)
	}
	nw, err := tcnetwork.New(ctx)
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	s.network = nw
	if err := s.startPatroni(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// onPatroni returns cfg run against the cluster with Postgres under
// Patroni.
func (cfg soakConfig) onPatroni() soakConfig {
	cfg.HA, cfg.Patroni = true, true
	return cfg
}

// pgStable is how long the cluster must stay healthy before a fault of
// it: two of Patroni's loops (loop_wait 1 s) and a margin. Right after a
// thaw the leader may still drop its synchronous standby, not streaming
// yet, from the synchronous set ("Updating synchronous privilege
// temporarily"); a primary frozen then has no standby Patroni may
// promote in strict mode, and writes stop until it thaws (seed 105,
// 2026-12-03: a freeze of the primary 1 s after another's thaw).
const pgStable = 2500 * time.Millisecond

// pgHealthy waits until every member of the Postgres cluster runs, a
// leader with a synchronous standby on its timeline, for pgStable, and
// returns them with the timeline and how long it waited: every fault of
// the cluster starts from a healthy one (two members out at once stop
// every commit, as strict synchronous replication must: that is not the
// fault drawn).
func (c *chaos) pgHealthy(t *testing.T) (leader, sync string, timeline int, waited time.Duration) {
	t.Helper()
	began := time.Now()
	var ms []pgMember
	var err error
	var stableSince time.Time
	// seen is the leader, sync and timeline since stableSince.
	var seen string
	for deadline := began.Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) { // polling Patroni's view
		if ms, err = c.s.pgMembers(t.Context()); err != nil {
			stableSince = time.Time{}
			continue
		}
		running := 0
		for _, m := range ms {
			if m.State == "running" || m.State == "streaming" {
				running++
			}
		}
		leader = pgRole(ms, "leader", 0)
		sync = pgRole(ms, "sync_standby", 0)
		if running == len(c.s.PGNodes) && leader != "" && sync != "" {
			for _, m := range ms {
				if m.Name == leader {
					timeline = m.Timeline
				}
			}
			// Every member on the leader's timeline: a former primary
			// runs as a replica on its old one before Patroni rewinds it
			// from the leader, and a fault of the leader then would leave
			// the rewind hanging and the cluster without a standby.
			if !slices.ContainsFunc(ms, func(m pgMember) bool { return m.Timeline != timeline }) {
				now := fmt.Sprint(leader, sync, timeline)
				if stableSince.IsZero() || now != seen {
					stableSince, seen = time.Now(), now
				}
				if time.Since(stableSince) >= pgStable {
					return leader, sync, timeline, time.Since(began)
				}
				continue
			}
		}
		stableSince = time.Time{}
	}
	t.Fatalf("the Postgres cluster not healthy within 3 min (members: %s, %v)", pgSorted(ms), err)
	return "", "", 0, 0
}

// healthyNote says how long a fault waited for a healthy cluster, when it
// waited more than the stable time.
func healthyNote(waited time.Duration) string {
	if waited < pgStable+time.Second {
		return ""
	}
	return fmt.Sprintf(" (after %s waiting for a healthy cluster)", waited.Round(100*time.Millisecond))
}

// awaitWrites returns when a write through the multi-host URL first
// committed after from, on a primary whose timeline is above after (0: any):
// a probe starts every 250 ms, each on a new connection, so that a probe
// stuck on a dead host does not hide the next one's success.
func (c *chaos) awaitWrites(t *testing.T, kind string, from time.Time, after int) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*pgFailoverBound)
	defer cancel()
	var (
		once sync.Once
		done = make(chan time.Time, 1)
		wg   sync.WaitGroup
	)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	probe := func() {
		if tl, err := c.s.pgWritable(ctx); err == nil && tl > after {
			at := time.Now()
			once.Do(func() { done <- at })
		}
	}
	for {
		wg.Go(probe)
		select {
		case at := <-done:
			cancel()
			wg.Wait()
			c.mu.Lock()
			c.failovers = append(c.failovers, pgFailover{Kind: kind, Lost: from, Writable: at})
			c.mu.Unlock()
			if d := at.Sub(from); d > pgFailoverBound {
				c.problem("%s: writes accepted again %s after the fault, more than %s", kind, d.Round(time.Millisecond), pgFailoverBound)
			}
			return at
		case <-ctx.Done():
			wg.Wait()
			ms, _ := c.s.pgMembers(t.Context())
			t.Fatalf("%s: no write committed within %s of the fault (members: %s)", kind, 2*pgFailoverBound, pgSorted(ms))
		case <-tick.C:
		}
	}
}

// rejoin starts the member name again (after the failover: started while
// its leader key lived, a former primary would take the lead back) and
// returns how long until it ran as a replica again.
func (c *chaos) rejoin(t *testing.T, name string, tl int) string {
	t.Helper()
	return c.rejoined(t, name, tl, c.s.Start(t, name), "its start")
}

// rejoined returns how long after since, described by what, the member
// name, the primary of timeline tl before the failover, ran as a replica
// again on the leader's timeline (rewound first if it had to be). Leading again on tl or before is a problem at once: the lock was
// taken back from the member promoted meanwhile, whose commits are then
// rewound away.
func (c *chaos) rejoined(t *testing.T, name string, tl int, since time.Time, what string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ms, err := c.s.pgMembers(t.Context())
		if err == nil && slices.ContainsFunc(ms, func(m pgMember) bool { return m.Name == name && m.Role == "leader" && m.Timeline <= tl }) {
			c.problem("%s took the lead back on timeline %d after %s, from the member promoted meanwhile (members: %s)", name, tl, what, pgSorted(ms))
			return name + " took the lead back"
		}
		lead := slices.IndexFunc(ms, func(m pgMember) bool { return m.Role == "leader" })
		if err == nil && lead >= 0 && slices.ContainsFunc(ms, func(m pgMember) bool {
			return m.Name == name && m.Role != "leader" && (m.State == "running" || m.State == "streaming") && m.Timeline == ms[lead].Timeline
		}) {
			return fmt.Sprintf("%s a replica again %s after %s", name, time.Since(since).Round(time.Millisecond), what)
		}
		time.Sleep(250 * time.Millisecond) // polling Patroni's view; no event to wait on
	}
	ms, _ := c.s.pgMembers(t.Context())
	c.problem("%s not a replica again 2 min after %s (members: %s)", name, what, pgSorted(ms))
	return name + " not a replica again after 2 min"
}

// planKillPrimary: SIGKILL the primary's container (Postgres and Patroni
// with it); the synchronous standby is promoted once the leader key's ttl
// expires. The killed member is started again after the failover.
func (c *chaos) planKillPrimary(*rand.Rand) func(*testing.T) string {
	return func(t *testing.T) string {
		name, _, tl, waited := c.pgHealthy(t)
		c.s.Kill(t, name)
		lost := time.Now()
		at := c.awaitWrites(t, "kill-primary", lost, tl)
		return fmt.Sprintf("primary %s (timeline %d) SIGKILLed%s; writes accepted again after %s; %s", name, tl, healthyNote(waited),
			at.Sub(lost).Round(time.Millisecond), c.rejoin(t, name, tl))
	}
}

// planFreezePrimary: docker pause the primary for 12–16 s, longer than the
// leader key's ttl: the standby is promoted while the former primary's
// connections stay open and nothing on it answers; thawed, it finds
// another leader and rejoins as a replica.
func (c *chaos) planFreezePrimary(r *rand.Rand) func(*testing.T) string {
	return c.primaryOut(r, "freeze-primary", "frozen", (*stack).Pause, (*stack).Unpause)
}

// planNetcutPrimary: cut the primary off the network for 12–16 s: it loses
// etcd and demotes itself, the standby is promoted, and every connection
// to it hangs until its clients' deadlines.
func (c *chaos) planNetcutPrimary(r *rand.Rand) func(*testing.T) string {
	return c.primaryOut(r, "netcut-primary", "cut off", (*stack).Disconnect, (*stack).Reconnect)
}

// primaryOut returns the fault kind: the primary taken out by out for
// 12–16 s, longer than the leader key's ttl, then back by in.
func (c *chaos) primaryOut(r *rand.Rand, kind, what string, out, in func(*stack, *testing.T, string)) func(*testing.T) string {
	hold := 12*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
	return func(t *testing.T) string {
		name, _, tl, waited := c.pgHealthy(t)
		out(c.s, t, name)
		lost := time.Now()
		at := c.awaitWrites(t, kind, lost, tl)
		time.Sleep(max(0, hold-time.Since(lost))) // the fault's length
		in(c.s, t, name)
		return fmt.Sprintf("primary %s (timeline %d) %s %s%s; writes accepted again after %s; %s", name, tl, what, hold.Round(time.Millisecond),
			healthyNote(waited), at.Sub(lost).Round(time.Millisecond), c.rejoined(t, name, tl, time.Now(), "it was back"))
	}
}

// planSwitchover: a planned switchover to the synchronous standby
// (patronictl switchover --force), as an operator runs it.
func (c *chaos) planSwitchover(*rand.Rand) func(*testing.T) string {
	return func(t *testing.T) string {
		leader, sync, tl, waited := c.pgHealthy(t)
		began := time.Now()
		if out, err := c.s.execOutput(t.Context(), leader, "patronictl", "-c", "/etc/patroni/patroni.yml", "switchover",
			"--leader", leader, "--candidate", sync, "--force"); err != nil {
			t.Fatalf("switchover: %v: %s", err, out)
		}
		at := c.awaitWrites(t, "switchover", began, tl)
		return fmt.Sprintf("switchover %s → %s (timeline %d)%s; writes accepted again after %s", leader, sync, tl, healthyNote(waited),
			at.Sub(began).Round(time.Millisecond))
	}
}

// planKillSyncStandby: SIGKILL the synchronous standby: commits wait
// (strict mode) until Patroni names the other replica synchronous; the
// killed member is started again 5 s later.
func (c *chaos) planKillSyncStandby(*rand.Rand) func(*testing.T) string {
	return func(t *testing.T) string {
		_, name, tl, waited := c.pgHealthy(t)
		c.s.Kill(t, name)
		lost := time.Now()
		at := c.awaitWrites(t, "kill-sync-standby", lost, 0)
		time.Sleep(max(0, 5*time.Second-time.Since(lost))) // down for 5 s
		return fmt.Sprintf("synchronous standby %s SIGKILLed%s; writes committed again after %s; %s", name, healthyNote(waited),
			at.Sub(lost).Round(time.Millisecond), c.rejoin(t, name, tl))
	}
}

// planKillEtcdLeader: SIGKILL the etcd member that leads etcd's raft for
// 6–10 s, then start it again. The two left elect a leader and keep
// their quorum; Patroni's agents move to them (retry_timeout), so the
// primary keeps its leader key and Postgres keeps committing: the fault
// reports the longest time without a committed write, and a promotion it
// caused shows in the run's promotions line as unasked.
func (c *chaos) planKillEtcdLeader(r *rand.Rand) func(*testing.T) string {
	hold := 6*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
	return func(t *testing.T) string {
		_, _, tl, waited := c.pgHealthy(t)
		name := c.s.etcdLeader(t)
		c.s.Kill(t, name)
		lost := time.Now()
		gaps, last := c.writeGaps(t, lost, hold)
		c.s.Start(t, name)
		return fmt.Sprintf("etcd leader %s SIGKILLed for %s%s; time between committed writes: max %s, median %s; timeline %d, then %d",
			name, hold.Round(time.Millisecond), healthyNote(waited), slices.Max(gaps).Round(time.Millisecond),
			gaps[len(gaps)/2].Round(time.Millisecond), tl, last)
	}
}

// writeGaps commits a write through the multi-host URL (on a new
// connection each) 250 ms after the last one ended, from from for d, and
// returns the times between committed writes, sorted (the first from
// from, the last to the end), and the timeline of the last one.
func (c *chaos) writeGaps(t *testing.T, from time.Time, d time.Duration) (gaps []time.Duration, timeline int) {
	t.Helper()
	ok := from
	for time.Since(from) < d {
		if tl, err := c.s.pgWritable(t.Context()); err == nil {
			gaps, ok, timeline = append(gaps, time.Since(ok)), time.Now(), tl
		}
		time.Sleep(250 * time.Millisecond) // the probes' pace
	}
	gaps = append(gaps, time.Since(ok))
	slices.Sort(gaps)
	return gaps, timeline
}

// promotingFaults are the faults after which one standby is promoted:
// each moves the cluster to the next timeline, once (restart-postgres
// restarts the primary, whose Patroni hands the leader key over as it
// stops).
var promotingFaults = []string{"kill-primary", "freeze-primary", "netcut-primary", "switchover", "restart-postgres"}

// reportPromotions says how many promotions the run had beside the faults
// of plan that ask for one, from the timelines of the primary at the start
// (from) and now: a promotion no fault asked for is a primary that demoted
// itself (its Patroni lost etcd for retry_timeout, or its loop stalled
// past the ttl): no commit is lost in strict mode, but writes stop for a
// failover's length. It is the cost of a short ttl, reported, not failed.
func (c *chaos) reportPromotions(t *testing.T, plan chaosPlan, from int) string {
	t.Helper()
	_, _, now, _ := c.pgHealthy(t)
	asked := 0
	for _, f := range plan.Faults {
		if slices.Contains(promotingFaults, f.Kind.Name) {
			asked++
		}
	}
	line := fmt.Sprintf("%d promotions (timeline %d to %d), %d asked for by the faults, %d unasked", now-from, from, now, asked, now-from-asked)
	t.Log("promotions: " + line)
	return line
}

// reportFailovers logs each failover of the run with the lateness, at the
// order, of the deadlines due during it, against the promise: within the
// failover's length and 1 s.
func (c *chaos) reportFailovers(t *testing.T, samples []lateSample) []string {
	t.Helper()
	var out []string
	for _, f := range c.failovers {
		down := f.Writable.Sub(f.Lost)
		due := func(ls lateSample) bool { return !ls.PayBy.Before(f.Lost) && !ls.PayBy.After(f.Writable) }
		in, _ := atTheOrder(samples, due)
		stored, _ := summarise(samples, due)
		line := fmt.Sprintf("%s: writes refused %s; the %d orders due meanwhile cancelled in their database late by p50 %s, max %s "+
			"(promise: %s; their cancel events stored late by p50 %s, max %s)",
			f.Kind, down.Round(time.Millisecond), in.N, in.P50.Round(time.Millisecond), in.Max.Round(time.Millisecond),
			(down + time.Second).Round(time.Millisecond), stored.P50.Round(time.Millisecond), stored.Max.Round(time.Millisecond))
		t.Log("failover " + line)
		out = append(out, line)
	}
	return out
}

// TestAFailoverPromotesTheStandbyFurthestAhead: a standby can hold WAL
// another lacks: the primary streams to both at once, and a commit waits
// only for its synchronous standbys. Here one standby is frozen while a
// large insert streams to the other, and the primary is killed meanwhile.
// With a single synchronous standby behind the other, Patroni promoted
// nobody (the synchronous one refuses while another member is ahead; the
// one ahead may not promote), and no write committed (awaitWrites fails);
// had it promoted the one behind, the other would need a rewind. With
// both standbys synchronous (PATRONI_SYNCHRONOUS_NODE_COUNT 2), the one
// furthest ahead is promoted and the other follows it without a rewind.
func TestAFailoverPromotesTheStandbyFurthestAhead(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e test: needs Docker and the built images; run without -short (make test)")
	}
	t.Parallel()
	s := newPatroniCluster(t)
	c := &chaos{s: s}
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, s.pgURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE e2e_ahead (x int)"); err != nil {
		t.Fatal(err)
	}
	leader, standby, tl, _ := c.pgHealthy(t)
	var other string
	for _, n := range s.PGNodes {
		if n != leader && n != standby {
			other = n
		}
	}
	received := func(name string) int64 {
		t.Helper()
		out, err := s.execOutput(ctx, name, "psql", "-h", "/var/run/postgresql", "-U", "postgres", "-tAc",
			"SELECT pg_last_wal_receive_lsn() - '0/0'::pg_lsn")
		n, perr := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil || perr != nil {
			t.Fatalf("the WAL %s received: %v %v (%q)", name, err, perr, out)
		}
		return n
	}
	before := received(other)
	s.Pause(t, standby)
	go func() { // its commit waits for the frozen standby, and dies with the primary
		_, _ = conn.Exec(context.Background(), "INSERT INTO e2e_ahead SELECT generate_series(1, 400000)")
	}()
	waitFor(t, 30*time.Second, other+" to receive the insert's WAL", func() bool { return received(other)-before > 4<<20 })
	ahead := received(other)
	s.Kill(t, leader)
	lost := time.Now()
	s.Unpause(t, standby)
	if behind := received(standby); behind >= ahead {
		t.Fatalf("precondition: %s received %d bytes of WAL, not behind %s's %d", standby, behind, other, ahead)
	}
	at := c.awaitWrites(t, "kill-primary", lost, tl)
	var promoted string
	waitFor(t, 30*time.Second, "the promoted member in Patroni's view", func() bool {
		ms, err := s.pgMembers(ctx)
		i := slices.IndexFunc(ms, func(m pgMember) bool { return m.Role == "leader" && m.Timeline > tl })
		if err == nil && i >= 0 {
			promoted = ms[i].Name
		}
		return promoted != ""
	})
	t.Logf("%s killed with %s frozen behind %s; %s promoted; writes accepted again after %s",
		leader, standby, other, promoted, at.Sub(lost).Round(time.Millisecond))
	for _, n := range []string{standby, other} {
		if n == promoted {
			continue
		}
		r, err := s.container(n).Logs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		if bytes.Contains(b, []byte("running pg_rewind")) {
			t.Errorf("%s (the standby not promoted) was rewound onto %s's timeline: the standby behind was promoted", n, promoted)
		}
	}
	s.Start(t, leader)
}
