package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/ordertimeout/ordertimeout/internal/machine"
	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// The cluster's tests (issue 13): timeoutd as three instances sharing the
// 64 key partitions by fenced leases, NATS as a three-node JetStream cluster
// with every stream at three replicas, two orders instances, one Postgres.

// lease is a partition's lease row as the tests read it.
type lease struct {
	Owner string
	Epoch int64
	Live  bool // held and not expired, by Postgres's clock
	// Expires is the lease's expiry and Read Postgres's clock when it was
	// read.
	Expires, Read time.Time
}

// readLeases reads the lease rows of the timeouts database.
func readLeases(ctx context.Context, db *pgxpool.Pool) ([events.Partitions]lease, error) {
	var out [events.Partitions]lease
	rows, _ := db.Query(ctx, `SELECT part, coalesce(owner, ''), epoch, owner IS NOT NULL AND expires_at > now(),
		CASE WHEN expires_at = '-infinity' THEN now() - interval '1 hour' ELSE expires_at END, now() FROM timeout_leases`)
	var (
		part int16
		l    lease
	)
	_, err := pgx.ForEachRow(rows, []any{&part, &l.Owner, &l.Epoch, &l.Live, &l.Expires, &l.Read}, func() error {
		out[part] = l
		return nil
	})
	return out, err
}

// byOwner returns the live leases' partitions by owner.
func byOwner(ls [events.Partitions]lease) map[string][]int {
	out := map[string][]int{}
	for p, l := range ls {
		if l.Live {
			out[l.Owner] = append(out[l.Owner], p)
		}
	}
	return out
}

// distribution formats how many partitions each instance owns.
func distribution(owners map[string][]int) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(owners)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, len(owners[name])))
	}
	return strings.Join(parts, ", ")
}

// spread reports whether instances own every partition between them, each
// as many as the balance gives it: at most ceil(P/N), and so at least
// P - (N-1)·ceil(P/N).
func spread(owners map[string][]int, instances []string) bool {
	share := (events.Partitions + len(instances) - 1) / len(instances)
	least := events.Partitions - (len(instances)-1)*share
	total := 0
	for name, ps := range owners {
		if !slices.Contains(instances, name) || len(ps) > share || len(ps) < least {
			return false
		}
		total += len(ps)
	}
	return total == events.Partitions && len(owners) == len(instances)
}

// writeAuditSQL installs, in the timeouts database, a trigger that records
// every write of a timeout row (a set, a clear, a fire; not the janitor's
// retirement into a version mark) with the Postgres session's
// application_name, which timeoutd sets to timeoutd/<instance id>, and the
// partition's lease as it stood at the write. The fence share-locks the
// lease row until the write commits, so the lease read is the one in force:
// a write by an instance that did not hold the partition's live lease is a
// fencing failure, whatever the instance believed.
const writeAuditSQL = `
CREATE TABLE e2e_writes (part smallint, state smallint, writer text, owner text, epoch bigint, expired boolean, at timestamptz,
	key text, version bigint);
CREATE FUNCTION e2e_audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.state < 3 THEN
		INSERT INTO e2e_writes SELECT NEW.part, NEW.state, current_setting('application_name'),
			l.owner, l.epoch, l.expires_at <= now(), clock_timestamp(), NEW.key::text, NEW.version
		FROM timeout_leases l WHERE l.part = NEW.part;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER e2e_audit AFTER INSERT OR UPDATE ON timeouts FOR EACH ROW EXECUTE FUNCTION e2e_audit_write();`

// writeAudit is what the write audit found.
type writeAudit struct {
	Writes, Fires int64
	// Unfenced are writes by an instance that did not hold the live lease.
	Unfenced []string
}

func readWriteAudit(ctx context.Context, db *pgxpool.Pool) (writeAudit, error) {
	var a writeAudit
	if err := db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 2) FROM e2e_writes`).Scan(&a.Writes, &a.Fires); err != nil {
		return a, err
	}
	rows, _ := db.Query(ctx, `SELECT format('partition %s state %s written by %s at %s while the lease was %s epoch %s (expired %s)',
		part, state, writer, at, owner, epoch, expired)
		FROM e2e_writes WHERE writer IS DISTINCT FROM 'timeoutd/' || owner OR expired ORDER BY at LIMIT 20`)
	var err error
	a.Unfenced, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return a, err
}

// stuckRows describes the timeouts still pending past their deadline, each
// with every write of its row the audit saw, to tell why none fired.
func stuckRows(ctx context.Context, db *pgxpool.Pool) ([]string, error) {
	rows, _ := db.Query(ctx, `SELECT format('%s v%s partition %s due %s: %s', t.key::text, t.version, t.part,
			to_timestamp(t.deadline_ns / 1e9), coalesce(string_agg(format('[state %s v%s by %s at %s, lease %s epoch %s%s]',
				w.state, w.version, w.writer, w.at, w.owner, w.epoch, CASE WHEN w.expired THEN ' expired' ELSE '' END), ' ' ORDER BY w.at), 'no write audited'))
		FROM timeouts t LEFT JOIN e2e_writes w ON w.key = t.key::text
		WHERE t.state = 0 AND t.deadline_ns < extract(epoch FROM now()) * 1e9
		GROUP BY t.key, t.version, t.part, t.deadline_ns ORDER BY t.deadline_ns LIMIT 20`)
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// firstFires returns, for each partition of parts that had one, the time
// (Postgres's clock) of the first fire written after since.
func firstFires(ctx context.Context, db *pgxpool.Pool, parts []int, since time.Time) (map[int]time.Time, error) {
	rows, _ := db.Query(ctx, `SELECT part, min(at) FROM e2e_writes WHERE state = 2 AND part = ANY($1) AND at > $2 GROUP BY part`, parts, since)
	out := map[int]time.Time{}
	var (
		part int16
		at   time.Time
	)
	_, err := pgx.ForEachRow(rows, []any{&part, &at}, func() error {
		out[int(part)] = at
		return nil
	})
	return out, err
}

// openedSince returns, for each partition of parts, when a timeoutd of s
// first logged it open (the "partitions open" line of a takeover: from
// then on its fires may go) at or after since, read from the containers'
// logs; a partition with no such line is missing.
func openedSince(ctx context.Context, s *stack, parts []int, since time.Time) map[int]time.Time {
	out := map[int]time.Time{}
	for _, name := range s.Timeoutds {
		ctr := s.container(name)
		if ctr == nil {
			continue
		}
		r, err := ctr.Logs(ctx)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct {
				Time       time.Time `json:"time"`
				Msg        string    `json:"msg"`
				Partitions []int     `json:"partitions"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "partitions open" || l.Time.Before(since) {
				continue
			}
			for _, p := range l.Partitions {
				if at, ok := out[p]; slices.Contains(parts, p) && (!ok || l.Time.Before(at)) {
					out[p] = l.Time
				}
			}
		}
		_ = r.Close()
	}
	return out
}

// cluster drives the faults of TestCluster against s and keeps what they
// measured for the report.
type cluster struct {
	s  *stack
	db *pgxpool.Pool // the timeouts database, from the host
	// live are the timeoutd instances running.
	mu   sync.Mutex
	live []string

	// costs are cost's lines, in the order measured.
	costs []string
	// killed, killedAt and killedParts are the SIGKILLed owner, when it
	// was killed and the partitions it owned then.
	killed      string
	killedAt    time.Time
	killedParts []int
}

func (c *cluster) instances() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.live)
}

func (c *cluster) setLive(names []string) {
	c.mu.Lock()
	c.live = names
	c.mu.Unlock()
}

func (c *cluster) leases(t *testing.T) [events.Partitions]lease {
	t.Helper()
	ls, err := readLeases(t.Context(), c.db)
	if err != nil {
		t.Fatalf("read leases: %v", err)
	}
	return ls
}

// waitSpread waits until the live instances own every partition between
// them, evenly, and returns the distribution and how long it took.
func (c *cluster) waitSpread(t *testing.T, since time.Time) string {
	t.Helper()
	var owners map[string][]int
	waitFor(t, 60*time.Second, "the partitions to spread over "+strings.Join(c.instances(), ", "), func() bool {
		owners = byOwner(c.leases(t))
		return spread(owners, c.instances())
	})
	return fmt.Sprintf("spread (%s) %s after", distribution(owners), time.Since(since).Round(10*time.Millisecond))
}

// scaleUp starts the instance name beside the live ones.
func (c *cluster) scaleUp(name string) func(*testing.T) string {
	return func(t *testing.T) string {
		began := time.Now()
		if err := c.s.startTimeoutd(context.Background(), name); err != nil {
			t.Fatal(err)
		}
		c.setLive(append(c.instances(), name))
		return fmt.Sprintf("%d -> %d instances: %s", len(c.instances())-1, len(c.instances()), c.waitSpread(t, began))
	}
}

// cpuTime returns the CPU time the container name has used, from its
// cgroup (docker stats).
func (s *stack) cpuTime(t *testing.T, name string) time.Duration {
	t.Helper()
	var used time.Duration
	s.docker(t, func(ctx context.Context, cli *client.Client, id string) error {
		res, err := cli.ContainerStats(ctx, id, client.ContainerStatsOptions{})
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var st container.StatsResponse
		if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
			return err
		}
		used = time.Duration(st.CPUStats.CPUUsage.TotalUsage)
		return nil
	}, "stats of "+name, name)
	return used
}

// work is what the live instances did: commands applied (sets and
// clears) and expiries (fires and misses), from their /api/v1/stats.
func (c *cluster) work(t *testing.T) (cpu time.Duration, commands, expiries uint64) {
	t.Helper()
	for _, name := range c.instances() {
		var st api.Stats
		if err := getJSON(strings.TrimSuffix(c.s.readyURL(name), "/readyz")+"/api/v1/stats", &st); err != nil {
			t.Fatal(err)
		}
		cpu += c.s.cpuTime(t, name)
		commands += st.Totals.Scheduled + st.Totals.Cleared
		expiries += st.Totals.Fired + st.Totals.Missed
	}
	return cpu, commands, expiries
}

// costWindow is how long cost measures.
const costWindow = 10 * time.Second

// cost measures, over costWindow of the steady load, the CPU the live
// timeoutd instances used together (their cgroups) per command and expiry
// they handled; a unit is one command or one expiry.
func (c *cluster) cost(t *testing.T) string {
	cpu0, cmd0, exp0 := c.work(t)
	time.Sleep(costWindow)
	cpu1, cmd1, exp1 := c.work(t)
	cpu, cmds, exps := cpu1-cpu0, cmd1-cmd0, exp1-exp0
	units := cmds + exps
	if units == 0 {
		t.Fatalf("no work in %s", costWindow)
	}
	line := fmt.Sprintf("%d instance(s): %.1f CPU-µs per command or expiry (%d commands + %d expiries in %s, %.3f CPU-s, %.0f%% of one core)",
		len(c.instances()), float64(cpu.Microseconds())/float64(units), cmds, exps, costWindow, cpu.Seconds(), 100*cpu.Seconds()/costWindow.Seconds())
	c.costs = append(c.costs, line)
	return line
}

// killOwner SIGKILLs the instance owning the most partitions, waits until
// the survivors own them all, then starts it again.
func (c *cluster) killOwner(t *testing.T) string {
	owners := byOwner(c.leases(t))
	for name, ps := range owners {
		if len(ps) > len(c.killedParts) {
			c.killed, c.killedParts = name, ps
		}
	}
	c.killedAt = time.Now()
	c.s.Kill(t, c.killed)
	survivors := slices.DeleteFunc(c.instances(), func(n string) bool { return n == c.killed })
	waitFor(t, 30*time.Second, "the survivors to take the killed instance's partitions", func() bool {
		ls := c.leases(t)
		for _, p := range c.killedParts {
			if !ls[p].Live || !slices.Contains(survivors, ls[p].Owner) {
				return false
			}
		}
		return true
	})
	took := time.Since(c.killedAt)
	restarted := time.Now()
	c.s.Start(t, c.killed)
	waitReady(t, c.s.readyURL(c.killed), 2*time.Minute)
	return fmt.Sprintf("%s (%d partitions): leases taken by the survivors %s after the kill; restarted, %s",
		c.killed, len(c.killedParts), took.Round(10*time.Millisecond), c.waitSpread(t, restarted))
}

// pause freezes an instance for three lease TTLs, waits until the others
// own its partitions, thaws it and waits for the spread; the write audit
// then shows whether it wrote anything for a partition it no longer held.
func (c *cluster) pause(t *testing.T) string {
	name := c.instances()[1]
	parts := byOwner(c.leases(t))[name]
	paused := time.Now()
	c.s.Pause(t, name)
	others := slices.DeleteFunc(c.instances(), func(n string) bool { return n == name })
	waitFor(t, 30*time.Second, "the others to take the paused instance's partitions", func() bool {
		ls := c.leases(t)
		for _, p := range parts {
			if !ls[p].Live || !slices.Contains(others, ls[p].Owner) {
				return false
			}
		}
		return true
	})
	moved := time.Since(paused)
	time.Sleep(max(0, 9*time.Second-moved)) // three TTLs of 3 s in all
	frozen := time.Since(paused)
	thawed := time.Now()
	c.s.Unpause(t, name)
	spread := c.waitSpread(t, thawed)
	return fmt.Sprintf("%s (%d partitions) frozen %s: moved %s after the pause; thawed, %s",
		name, len(parts), frozen.Round(10*time.Millisecond), moved.Round(10*time.Millisecond), spread)
}

// rollingRestart stops (SIGTERM) and starts each instance in turn, waiting
// for the spread before the next; each stop must hand over at once
// (stopHandingOver).
func (c *cluster) rollingRestart(t *testing.T) string {
	var out []string
	for _, name := range c.instances() {
		began := time.Now()
		handover := c.stopHandingOver(t, name)
		stopped := time.Since(began)
		c.s.Start(t, name)
		waitReady(t, c.s.readyURL(name), 2*time.Minute)
		out = append(out, fmt.Sprintf("%s stopped in %s, %s, %s", name, stopped.Round(10*time.Millisecond), handover, c.waitSpread(t, began)))
	}
	return strings.Join(out, "; ")
}

// scaleDown stops timeoutd-2 and timeoutd-3 (SIGTERM) together: timeoutd
// takes every partition back, at once (stopHandingOver).
func (c *cluster) scaleDown(t *testing.T) string {
	began := time.Now()
	handover := c.stopHandingOver(t, "timeoutd-2", "timeoutd-3")
	c.setLive([]string{svcTimeoutd})
	return "3 -> 1 instances: " + handover + ", " + c.waitSpread(t, began)
}

// stopHandingOver stops the instances stopping (SIGTERM, docker stop)
// while it reads the leases every 50 ms, fails t unless every partition
// they held live was owned live by another instance within 30 s, and
// reports when the last was taken and how many were taken only after the
// lease as they last renewed it could have expired. That a graceful stop
// hands over before its leases expire is asserted by the in-process
// cluster test (services/timeoutd/daemon), whose TTL keeps the two apart:
// here, with the 3 s TTL on a loaded 2-core machine, a survivor's round
// behind Postgres's fsyncs can come after the expiry even though the lease
// was released (CI measured 70 ms to 1.3 s), so the figure is reported.
func (c *cluster) stopHandingOver(t *testing.T, stopping ...string) string {
	t.Helper()
	held := map[int]time.Time{} // partition: the latest expiry of the stopping owner's live lease
	taken := map[int]time.Time{}
	for p, l := range c.leases(t) {
		if l.Live && slices.Contains(stopping, l.Owner) {
			held[p] = l.Expires
		}
	}
	ended := make(chan time.Time, 1)
	polled := make(chan error, 1)
	go func() {
		defer close(polled)
		var end time.Time
		for {
			ls, err := readLeases(t.Context(), c.db)
			if err != nil {
				polled <- err
				return
			}
			for p := range held {
				switch l := ls[p]; {
				case l.Live && slices.Contains(stopping, l.Owner):
					held[p] = l.Expires
				case l.Live && taken[p].IsZero():
					taken[p] = l.Read
				}
			}
			select {
			case end = <-ended:
			default:
			}
			if !end.IsZero() && (len(taken) == len(held) || time.Since(end) > 30*time.Second) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for _, name := range stopping {
		wg.Go(func() { c.s.Stop(t, name) })
	}
	wg.Wait()
	stopped := time.Now()
	ended <- stopped
	if err := <-polled; err != nil {
		t.Fatalf("read leases: %v", err)
	}
	var last time.Time
	late, worst := 0, time.Duration(0)
	for p, expires := range held {
		at := taken[p]
		switch {
		case at.IsZero():
			t.Errorf("graceful stop of %s: partition %d not taken by another instance within 30 s", strings.Join(stopping, ", "), p)
		case !at.Before(expires):
			late, worst = late+1, max(worst, at.Sub(expires))
		}
		if at.After(last) {
			last = at
		}
	}
	return fmt.Sprintf("%d partitions handed over, the last %s after the stop ended, %d taken after their lease could have expired (worst by %s)",
		len(held), last.Sub(stopped).Round(10*time.Millisecond), late, worst.Round(time.Millisecond))
}

// failover reports the failover of the owner TestCluster killed
// (failoverOf), failing t for each of its partitions with no fire after
// the kill.
func (c *cluster) failover(t *testing.T, ev seenEvents) (string, time.Duration) {
	t.Helper()
	f, err := failoverOf(t.Context(), c.db, c.killed, c.killedAt, c.killedParts, ev, openedSince(t.Context(), c.s, c.killedParts, c.killedAt))
	if err != nil {
		t.Fatalf("first fires after the kill: %v", err)
	}
	for _, p := range f.Unfired {
		t.Errorf("partition %d of the killed instance: no fire after the kill", p)
	}
	return f.Line, f.Worst
}

// failoverStats is what failoverOf measured of one kill.
type failoverStats struct {
	// Line is the report; Worst the slowest partition's kill to first
	// fire; LateP99 the lateness p99 of the deadlines due meanwhile;
	// Unfired the partitions with no fire after the kill.
	Line           string
	Worst, LateP99 time.Duration
	Unfired        []int
	// Opens are the kill to each partition's opening by its new owner
	// (openedSince), for the partitions whose opening was found.
	Opens []time.Duration
}

// failoverOf reports, for each partition of parts that the instance killed
// owned when it was killed at killedAt, the time from the kill to its
// opening by its new owner (opened, from openedSince: its fires may go)
// and to its first fire by it (from the write audit: padded by the wait
// for the partition's next deadline when none was due), and the lateness
// of the deadlines of those partitions that fell due between the kill and
// the last partition's first fire.
func failoverOf(ctx context.Context, db *pgxpool.Pool, killed string, killedAt time.Time, parts []int, ev seenEvents,
	opened map[int]time.Time) (failoverStats, error) {
	first, err := firstFires(ctx, db, parts, killedAt)
	if err != nil {
		return failoverStats{}, err
	}
	var times []time.Duration
	var worstAt time.Time
	var unfired []int
	for _, p := range parts {
		at, ok := first[p]
		if !ok {
			unfired = append(unfired, p)
			continue
		}
		times = append(times, at.Sub(killedAt))
		if at.After(worstAt) {
			worstAt = at
		}
	}
	if len(times) == 0 {
		return failoverStats{Line: "no fire after the kill", Unfired: unfired}, nil
	}
	slices.Sort(times)
	var late []time.Duration
	for key, es := range ev.Expiries {
		if !slices.Contains(parts, events.PartitionOf(key)) {
			continue
		}
		for _, e := range es {
			if e.Deadline.After(killedAt) && !e.Deadline.After(worstAt) {
				late = append(late, e.FiredAt.Sub(e.Deadline))
			}
		}
	}
	slices.Sort(late)
	pct := func(ds []time.Duration, q float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[int(q*float64(len(ds)-1))].Round(time.Millisecond)
	}
	var opens []time.Duration
	for _, p := range parts {
		if at, ok := opened[p]; ok {
			opens = append(opens, at.Sub(killedAt))
		}
	}
	slices.Sort(opens)
	worst := times[len(times)-1]
	line := fmt.Sprintf("failover of %s's %d partitions: kill to the new owner's opening median %s, max %s (%d found in the logs); "+
		"to its first fire median %s, max %s; lateness of the %d deadlines due meanwhile: median %s, p99 %s, max %s",
		killed, len(parts), pct(opens, 0.5), pct(opens, 1), len(opens), pct(times, 0.5), worst.Round(time.Millisecond),
		len(late), pct(late, 0.5), pct(late, 0.99), pct(late, 1))
	return failoverStats{Line: line, Worst: worst, LateP99: pct(late, 0.99), Unfired: unfired, Opens: opens}, nil
}

// failoverBound is the test's bound on the failover of a killed owner: a
// hang's bound, generous enough for a loaded 2-core machine (CI runs beside
// other work). The failover's figures come from the report this test logs
// and from the chaos run (docs/RELIABILITY.md), not from this bound.
const failoverBound = 10 * time.Second

// TestCluster runs issue 13's cluster scenarios in turn on one cluster
// under one steady load of orders (created on both orders instances, a
// third paid at random moments), then audits everything as the soak does
// (lost 0, early 0, paid-but-cancelled 0, duplicates counted) and checks
// every write of a timeout row against the lease in force:
//  1. scale from 1 to 2 to 3 instances: the partitions spread evenly; the
//     CPU cost per command or expiry of 1, 2 and 3 instances sharing the
//     load is measured (and the idle cost of the lease traffic before);
//  2. SIGKILL the owner of the most partitions: the survivors take them,
//     and the failover (kill to the first fire of the new owner of each of
//     its partitions) is within a hang's bound, failoverBound;
//  3. docker pause an instance for three lease TTLs, then unpause it: its
//     partitions move, and it writes nothing for them afterwards;
//  4. a rolling restart of the three instances, one at a time;
//  5. SIGKILL one NATS node of the three, then start it again;
//  6. scale from 3 back to 1 instance: it takes every partition back.
//
// docs/RELIABILITY.md records the figures of the last run.
func TestCluster(t *testing.T) {
	cfg := soakConfig{
		Rate: 150, Duration: 150 * time.Second, MinDeadline: time.Second, MaxDeadline: 10 * time.Second,
		PayShare: 1.0 / 3, Workers: 48, Settle: time.Minute, Stall: 30 * time.Second,
	}
	s := startStack(t, stackOptions{NATSNodes: 3, Timeoutds: 1, Orders: 2,
		OrdersEnv: map[string]string{"ORDERS_RECONCILE_MARGIN": soakReconcileMargin.String()}})
	// scaleUp adds timeoutd-2 and timeoutd-3 beside the stack's timeoutd.
	db, err := pgxpool.New(t.Context(), s.pgURL("timeouts"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := &cluster{s: s, db: db, live: s.Timeoutds}
	if _, err := db.Exec(t.Context(), writeAuditSQL); err != nil {
		t.Fatalf("install the write audit: %v", err)
	}

	// The lease traffic's own cost: an instance with nothing to do still
	// heartbeats and renews its 64 leases every second.
	cpu0 := s.cpuTime(t, svcTimeoutd)
	time.Sleep(costWindow)
	idleCPU := s.cpuTime(t, svcTimeoutd) - cpu0
	idle := fmt.Sprintf("1 instance, no load: %.2f%% of one core (%.1f CPU-ms/s: heartbeat, 64 lease renewals, samplers)",
		100*idleCPU.Seconds()/costWindow.Seconds(), float64(idleCPU.Milliseconds())/costWindow.Seconds())

	faults := []fault{
		{2 * time.Second, "cost", c.cost},
		{13 * time.Second, "scale up", c.scaleUp("timeoutd-2")},
		{18 * time.Second, "cost", c.cost},
		{29 * time.Second, "scale up", c.scaleUp("timeoutd-3")},
		{34 * time.Second, "cost", c.cost},
		{46 * time.Second, "SIGKILL owner", c.killOwner},
		{66 * time.Second, "docker pause", c.pause},
		{86 * time.Second, "rolling restart", c.rollingRestart},
		{116 * time.Second, "restart NATS node", func(t *testing.T) string {
			began := time.Now()
			s.Kill(t, s.NATSNodes[1])
			time.Sleep(5 * time.Second)
			s.Start(t, s.NATSNodes[1])
			back := time.Now()
			ready := s.waitServices(t)
			return fmt.Sprintf("%s SIGKILLed, started again %s later; every service ready %s after it was back",
				s.NATSNodes[1], back.Sub(began).Round(time.Millisecond), max(0, ready.Sub(back)).Round(time.Millisecond))
		}},
		{136 * time.Second, "scale down", c.scaleDown},
	}
	res := runSoak(t, s, cfg, faults)
	rep, ev := res.Report, res.Events
	rep = append(rep, "timeoutd CPU cost (CPU model: "+machine.CPUModel()+"): idle "+idle)
	for _, l := range c.costs {
		rep = append(rep, "timeoutd CPU cost: "+l)
	}

	stuck, err := stuckRows(t.Context(), c.db)
	if err != nil {
		t.Errorf("timeouts pending past their deadline: %v", err)
	}
	for _, l := range stuck {
		rep = append(rep, "pending past its deadline: "+l)
	}
	line, worst := c.failover(t, ev)
	rep = append(rep, line)
	wa, err := readWriteAudit(t.Context(), c.db)
	if err != nil {
		t.Fatalf("write audit: %v", err)
	}
	rep = append(rep, fmt.Sprintf("write audit: %d writes of timeout rows (%d fires), %d by an instance without the live lease",
		wa.Writes, wa.Fires, len(wa.Unfenced)))
	// The report first, the checks last: a failure's cause ends the output.
	t.Log("\n" + strings.Join(rep, "\n"))
	if worst > failoverBound {
		t.Errorf("failover took %s, more than %s", worst.Round(time.Millisecond), failoverBound)
	}
	for _, u := range wa.Unfenced {
		t.Errorf("unfenced write: %s", u)
	}
	if wa.Fires == 0 {
		t.Error("the write audit saw no fire: is the trigger installed?")
	}
}
