package leasetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// Case is one behaviour of a lease table.
type Case struct {
	Name     string
	Restarts bool // it restarts the database (Options.Restarts)
	Run      func(t *testing.T, b Backend)
}

// Cases are the suite, in the order Run runs them.
var Cases = []Case{
	{Name: "AcquireGrantsFreePartitionsAtTheNextEpoch", Run: acquireGrantsFree},
	{Name: "RenewExtendsOnlyTheLeasesHeldAtTheirEpoch", Run: renewExtendsHeld},
	{Name: "AnExpiredLeaseNobodyTookIsRenewed", Run: renewExpiredUntaken},
	{Name: "ReleaseFreesAtOnce", Run: releaseFrees},
	{Name: "BeatsCountTheServingLiveInstances", Run: beatsCountLive},
	{Name: "ACrashedInstancesPartitionsAreTakeableAtOnce", Run: crashOrphans},
	{Name: "AResetWithinTheCrashGraceIsNotACrash", Run: resetIsNotACrash},
	{Name: "ARestartKeepsEveryLiveLeaseForATTL", Restarts: true, Run: restartKeepsLive},
	{Name: "ARestartBringsBackNoInstanceDeadBeforeIt", Restarts: true, Run: restartResurrectsNoOne},
	{Name: "ASilenceOfTheWholeClusterMovesNothing", Run: clusterSilence},
	{Name: "AfterASilenceAnInstanceNotBackYetIsNotACrash", Run: silenceIsNotACrash},
	{Name: "ForATTLAfterASilenceNoSessionsGoneAreACrash", Run: silenceThenReconnect},
	{Name: "ALoneSurvivorsSilenceBringsBackNoOne", Run: loneSurvivorSilence},
	{Name: "ALoneSurvivorsRestartBringsBackNoOne", Run: loneSurvivorRestart},
	{Name: "TheFenceRefusesEveryWriteOfAFormerOwner", Run: fenceRefusesFormerOwner},
	{Name: "ExpiriesAreByTheDatabasesClock", Run: databaseClock},
	{Name: "InstancesListsTheLiveAndTheirPartitions", Run: instancesList},
	{Name: "OwnershipReadsEveryLeaseByTheRules", Run: ownershipByTheRules},
}

func beat(t *testing.T, l lease.Table, id string, serving bool) lease.Beat {
	t.Helper()
	b, err := l.Heartbeat(ctx, id, TTL, []byte(`{}`), serving)
	if err != nil {
		t.Fatalf("%s's heartbeat: %v", id, err)
	}
	return b
}

func probe(t *testing.T, l lease.Table, id string) (live, takeable int) {
	t.Helper()
	live, takeable, err := l.Probe(ctx, id, TTL)
	if err != nil {
		t.Fatalf("%s's probe: %v", id, err)
	}
	return live, takeable
}

func acquire(t *testing.T, l lease.Table, id string, n int, held []lease.Lease) []lease.Lease {
	t.Helper()
	got, err := l.Acquire(ctx, id, n, lease.PartitionsOf(held), TTL)
	if err != nil {
		t.Fatalf("%s acquires: %v", id, err)
	}
	return got
}

func renew(t *testing.T, l lease.Table, id string, held []lease.Lease) []lease.Lease {
	t.Helper()
	got, err := l.Renew(ctx, id, held, TTL)
	if err != nil {
		t.Fatalf("%s renews: %v", id, err)
	}
	return got
}

// keepSeen has id beat every TTL/3 and probe every TTL/10 between, for
// d, as a live instance does (it renews nothing): the cluster is not
// silent meanwhile.
func keepSeen(t *testing.T, l lease.Table, id string, d time.Duration) {
	t.Helper()
	var beaten time.Time
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(TTL / 10) {
		if time.Since(beaten) >= TTL/3 {
			beat(t, l, id, true)
			beaten = time.Now()
			continue
		}
		probe(t, l, id)
	}
}

// halves has a and b beat and acquire half the partitions each.
func halves(t *testing.T, b Backend) (a, c lease.Table, held map[string][]lease.Lease) {
	t.Helper()
	a, c = b.Instance(t, "a"), b.Instance(t, "b")
	held = map[string][]lease.Lease{}
	for id, l := range map[string]lease.Table{"a": a, "b": c} {
		beat(t, l, id, true)
	}
	for _, id := range []string{"a", "b"} {
		l := map[string]lease.Table{"a": a, "b": c}[id]
		held[id] = acquire(t, l, id, events.Partitions/2, nil)
		if len(held[id]) != events.Partitions/2 {
			t.Fatalf("%s acquires %d, want %d", id, len(held[id]), events.Partitions/2)
		}
	}
	return a, c, held
}

func want(t *testing.T, what string, got, wanted any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(wanted) {
		t.Fatalf("%s = %v, want %v", what, got, wanted)
	}
}

func leases(from, to int, epoch int64) []lease.Lease {
	var out []lease.Lease
	for p := from; p < to; p++ {
		out = append(out, lease.Lease{Partition: p, Epoch: epoch})
	}
	return out
}

// acquireGrantsFree: Acquire grants up to n free partitions, lowest
// first, each at the next epoch; skips those in held; grants none that
// another holds; grants again, at the next epoch, a partition recorded as
// the caller's own but not in held (a restart under the same id).
func acquireGrantsFree(t *testing.T, b Backend) {
	a, c := b.Instance(t, "a"), b.Instance(t, "c")
	beat(t, a, "a", true)
	first := acquire(t, a, "a", 10, nil)
	want(t, "a's first acquisition", first, leases(0, 10, 1))
	rest := acquire(t, a, "a", events.Partitions, first)
	want(t, "a's acquisition of the rest", rest, leases(10, events.Partitions, 1))
	beat(t, c, "c", true)
	want(t, "c's acquisition while a holds every lease", acquire(t, c, "c", events.Partitions, nil), []lease.Lease(nil))
	again := acquire(t, a, "a", 5, rest)
	want(t, "a's acquisition of its own not held", again, leases(0, 5, 2))
}

// renewExtendsHeld: Renew extends to a TTL from now only the leases the
// caller holds at their epoch; an extended lease is not taken before it
// expires, and is once it has.
func renewExtendsHeld(t *testing.T, b Backend) {
	a, c := b.Instance(t, "a"), b.Instance(t, "b")
	beat(t, a, "a", true)
	beat(t, c, "b", true)
	held := acquire(t, a, "a", events.Partitions, nil)
	stale := []lease.Lease{held[0], {Partition: held[1].Partition, Epoch: held[1].Epoch + 5}}
	want(t, "a's renewal with one wrong epoch", renew(t, a, "a", stale), held[:1])
	want(t, "b's renewal of a's leases", renew(t, c, "b", held), []lease.Lease(nil))
	keepSeen(t, c, "b", TTL*3/4)
	want(t, "a's renewal", renew(t, a, "a", held), held)
	keepSeen(t, c, "b", TTL/2) // past the first expiry, within the renewed one
	want(t, "b's acquisition of renewed leases", acquire(t, c, "b", events.Partitions, nil), []lease.Lease(nil))
	keepSeen(t, c, "b", TTL*3/4) // past the renewed expiry
	want(t, "b's acquisition once they expired", acquire(t, c, "b", events.Partitions, nil), leases(0, events.Partitions, 2))
}

// renewExpiredUntaken: a lease that expired and that nobody took is
// renewed at its epoch; one that another took is not.
func renewExpiredUntaken(t *testing.T, b Backend) {
	a, c := b.Instance(t, "a"), b.Instance(t, "b")
	beat(t, a, "a", true)
	beat(t, c, "b", true)
	held := acquire(t, a, "a", 2, nil)
	keepSeen(t, c, "b", TTL*5/4)
	want(t, "b's acquisition of one expired lease", acquire(t, c, "b", 1, nil), []lease.Lease{{Partition: held[0].Partition, Epoch: 2}})
	want(t, "a's renewal", renew(t, a, "a", held), held[1:])
}

// releaseFrees: Release frees the leases given at their epoch at once
// (takeable, granted at the next epoch); one at another epoch stays.
func releaseFrees(t *testing.T, b Backend) {
	a, c := b.Instance(t, "a"), b.Instance(t, "b")
	beat(t, a, "a", true)
	beat(t, c, "b", true)
	held := acquire(t, a, "a", 3, nil)
	if _, takeable := probe(t, c, "b"); takeable != events.Partitions-3 {
		t.Fatalf("takeable = %d, want the %d free", takeable, events.Partitions-3)
	}
	if err := a.Release(ctx, "a", []lease.Lease{held[0], held[1], {Partition: held[2].Partition, Epoch: 9}}); err != nil {
		t.Fatal(err)
	}
	if _, takeable := probe(t, c, "b"); takeable != events.Partitions-1 {
		t.Fatalf("takeable after a released 2 = %d, want %d", takeable, events.Partitions-1)
	}
	got := acquire(t, c, "b", 2, nil)
	want(t, "b's acquisition", got, leases(0, 2, 2))
}

// beatsCountLive: Beat.Live and Probe's live count the serving instances
// whose registration is live, the caller included; Leave removes one;
// Takeable counts the free partitions; NextExpiry is the time until the
// first lease of another instance expires.
func beatsCountLive(t *testing.T, b Backend) {
	a, c, d := b.Instance(t, "a"), b.Instance(t, "b"), b.Instance(t, "c")
	want(t, "a alone", beat(t, a, "a", true).Live, 1)
	beat(t, c, "b", true)
	beat(t, d, "c", false)
	got := beat(t, a, "a", true)
	want(t, "a's beat: live, takeable, next expiry", []any{got.Live, got.Takeable, got.NextExpiry}, []any{2, events.Partitions, time.Duration(0)})
	beat(t, d, "c", true)
	if live, takeable := probe(t, a, "a"); live != 3 || takeable != events.Partitions {
		t.Fatalf("a's probe = %d live, %d takeable; want 3, %d", live, takeable, events.Partitions)
	}
	acquire(t, c, "b", 1, nil)
	if next := beat(t, a, "a", true).NextExpiry; next <= 0 || next > TTL {
		t.Fatalf("a's beat: NextExpiry %v, want b's lease's, within (0, %v]", next, TTL)
	}
	if err := d.Leave(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	want(t, "a's beat after c left", beat(t, a, "a", true).Live, 2)
}

// crashOrphans: once every session of an instance is gone (it crashed),
// it is dead after the crash grace and its partitions are takeable at
// once, long before their leases expire; while its sessions live, they
// are not.
func crashOrphans(t *testing.T, b Backend) {
	dead, c := b.Instance(t, "dead"), b.Instance(t, "b")
	beat(t, dead, "dead", true)
	held := acquire(t, dead, "dead", 10, nil)
	if got := beat(t, c, "b", true); got.Live != 2 || got.Takeable != events.Partitions-10 {
		t.Fatalf("while dead lives: %+v; want 2 live, only the free partitions takeable", got)
	}
	mine := acquire(t, c, "b", events.Partitions, nil)
	b.Crash(t, "dead")
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		live, takeable := probe(t, c, "b")
		if live == 1 && takeable == 10 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after the crash: %d live, %d takeable; want 1 and 10", live, takeable)
		}
	}
	var next []lease.Lease
	for _, l := range held {
		next = append(next, lease.Lease{Partition: l.Partition, Epoch: l.Epoch + 1})
	}
	want(t, "b takes the orphaned partitions", acquire(t, c, "b", events.Partitions, mine), next)
}

// resetIsNotACrash: an instance whose sessions all vanish and come back
// within the crash grace (its connections were reset; it reconnected)
// keeps its partitions.
func resetIsNotACrash(t *testing.T, b Backend) {
	a, c := b.Instance(t, "a"), b.Instance(t, "b")
	beat(t, a, "a", true)
	acquire(t, a, "a", events.Partitions, nil)
	b.Crash(t, "a")
	if _, takeable := probe(t, c, "b"); takeable != 0 {
		t.Fatalf("right after a's reset: %d takeable, want none within the crash grace", takeable)
	}
	probe(t, b.Instance(t, "a"), "a") // it reconnects
	time.Sleep(2 * b.CrashGrace())
	if live, takeable := probe(t, c, "b"); live != 2 || takeable != 0 {
		t.Fatalf("after a's reset: %d live, %d takeable; want 2 and none", live, takeable)
	}
	want(t, "b's acquisition", acquire(t, c, "b", events.Partitions, nil), []lease.Lease(nil))
}

// restartKeepsLive: a restart of the database loses every session, and
// every lease and instance live when it went down counts as live for a
// TTL after it is back, even past its own expiry, without being judged
// crashed: the instances renew their own at their epochs, and nothing
// moves.
func restartKeepsLive(t *testing.T, b Backend) {
	_, _, held := halves(t, b)
	expired := b.Now(t).Add(TTL + TTL/10)
	b.Restart(t)
	c := b.Instance(t, "b")
	if wait := expired.Sub(b.Now(t)); wait > 0 {
		time.Sleep(wait) // the leases past their own expiry
	}
	got := beat(t, c, "b", true)
	if got.Live != 2 || got.Takeable != 0 || got.NextExpiry <= 0 {
		t.Fatalf("b's first heartbeat after the restart = %+v; want a live, nothing takeable, a's leases expiring later", got)
	}
	want(t, "b's acquisition after the restart", acquire(t, c, "b", events.Partitions/2, held["b"]), []lease.Lease(nil))
	time.Sleep(2 * b.CrashGrace())
	if _, takeable := probe(t, c, "b"); takeable != 0 {
		t.Fatalf("a, not back yet: %d takeable, want none (its sessions went with the restart)", takeable)
	}
	a := b.Instance(t, "a")
	for id, l := range map[string]lease.Table{"a": a, "b": c} {
		want(t, id+"'s renewal after the restart", renew(t, l, id, held[id]), held[id])
	}
}

// restartResurrectsNoOne: an instance that was dead before the restart
// (silent, its leases expired while another was seen) stays dead after
// it: its partitions are takeable at once.
func restartResurrectsNoOne(t *testing.T, b Backend) {
	_, c, held := halves(t, b)
	keepSeen(t, c, "b", TTL*5/4)
	renew(t, c, "b", held["b"])
	keepSeen(t, c, "b", TTL/4)
	b.Restart(t)
	c = b.Instance(t, "b")
	want(t, "live at b's heartbeat after the restart", beat(t, c, "b", true).Live, 1)
	var next []lease.Lease
	for _, l := range held["a"] {
		next = append(next, lease.Lease{Partition: l.Partition, Epoch: l.Epoch + 1})
	}
	want(t, "b takes dead a's partitions", acquire(t, c, "b", events.Partitions, held["b"]), next)
}

// clusterSilence: when no instance reached the database for longer than
// the TTL (it froze, or every instance was cut off), every lease expired
// meanwhile by its clock; the first back takes none of the others': they
// count as live for a TTL after the silence and renew theirs at their
// epochs. One instance silent while another keeps probing is not a
// silence of the cluster: its leases are taken once they expire.
func clusterSilence(t *testing.T, b Backend) {
	a, c, held := halves(t, b)
	time.Sleep(TTL * 3 / 2)
	got := beat(t, c, "b", true)
	if got.Live != 2 || got.Takeable != 0 || got.NextExpiry <= 0 {
		t.Fatalf("b's first heartbeat after the silence = %+v; want a live, nothing takeable, a's leases expiring later", got)
	}
	want(t, "b's acquisition after the silence", acquire(t, c, "b", events.Partitions/2, held["b"]), []lease.Lease(nil))
	for id, l := range map[string]lease.Table{"a": a, "b": c} {
		want(t, id+"'s renewal after the silence", renew(t, l, id, held[id]), held[id])
	}
	beat(t, a, "a", true)
	var taken []lease.Lease
	for end := time.Now().Add(3 * TTL); len(taken) == 0; time.Sleep(TTL / 10) {
		if time.Now().After(end) {
			t.Fatalf("b took none of silent a's partitions within %v", 3*TTL)
		}
		beat(t, c, "b", true)
		renew(t, c, "b", held["b"])
		taken = acquire(t, c, "b", events.Partitions/2, held["b"])
	}
	want(t, "b's acquisition of silent a's", len(taken), events.Partitions/2)
}

// silenceIsNotACrash: after a silence of the whole cluster (a failover,
// whose promoted standby has none of the instances' sessions and its own
// pg_postmaster_start_time(), from before), an instance that has not
// beaten since the cluster resumed is not judged by its sessions: it may
// still be reconnecting, its connections to the old primary hanging until
// their deadlines. Its leases count for a TTL after the resume, as after a
// restart, and it renews them at their epochs.
func silenceIsNotACrash(t *testing.T, b Backend) {
	_, c, held := halves(t, b)
	time.Sleep(TTL * 3 / 2)
	b.Crash(t, "a") // on the promoted standby, none of a's sessions
	beat(t, c, "b", true)
	time.Sleep(2 * b.CrashGrace())
	if live, takeable := probe(t, c, "b"); live != 2 || takeable != 0 {
		t.Fatalf("a, not back yet after the silence: %d live, %d takeable; want 2 and none", live, takeable)
	}
	want(t, "b's acquisition after the silence", acquire(t, c, "b", events.Partitions, held["b"]), []lease.Lease(nil))
	a := b.Instance(t, "a")
	want(t, "a's renewal, back", renew(t, a, "a", held["a"]), held["a"])
}

// silenceThenReconnect: for a TTL after a silence of the whole cluster no
// instance is judged by its sessions, even one that beat since the
// resume: its first heartbeat on a promoted standby may commit while its
// client gives up on it (a deadline closes the session), and it then
// takes longer than the crash grace to reconnect through the failover. Its
// leases are not taken; it renews them. Past that TTL, a crash is told by
// the sessions again.
func silenceThenReconnect(t *testing.T, b Backend) {
	a, c, held := halves(t, b)
	time.Sleep(TTL * 3 / 2)
	beat(t, c, "b", true) // the cluster resumes
	time.Sleep(TTL / 20)
	beat(t, a, "a", true) // then a's heartbeat, its session lost
	b.Crash(t, "a")
	keepSeen(t, c, "b", 4*b.CrashGrace()) // long enough to tell a crash
	if live, takeable := probe(t, c, "b"); live != 2 || takeable != 0 {
		t.Fatalf("a, reconnecting after the resume: %d live, %d takeable; want 2 and none", live, takeable)
	}
	want(t, "b's acquisition after the resume", acquire(t, c, "b", events.Partitions, held["b"]), []lease.Lease(nil))
	a = b.Instance(t, "a")
	want(t, "a's renewal, back", renew(t, a, "a", held["a"]), held["a"])
	// A TTL after the resume, the sessions tell a crash again.
	for end := time.Now().Add(TTL); time.Now().Before(end); time.Sleep(TTL / 10) {
		beat(t, a, "a", true)
		renew(t, a, "a", held["a"])
		beat(t, c, "b", true)
		renew(t, c, "b", held["b"])
	}
	b.Crash(t, "a")
	var taken []lease.Lease
	for end := time.Now().Add(TTL / 2); len(taken) == 0; time.Sleep(b.CrashGrace() / 5) {
		if time.Now().After(end) {
			t.Fatalf("b took none of crashed a's partitions within %v of the crash (its leases live by their expiry)", TTL/2)
		}
		beat(t, c, "b", true)
		taken = acquire(t, c, "b", events.Partitions, held["b"])
	}
	want(t, "b's acquisition of crashed a's", len(taken), events.Partitions/2)
}

// loneSurvivor has a and b hold half the partitions each, then a fall
// silent for good with its sessions kept (a pause, a cut), while b beats,
// renews and takes a's partitions once they expire, until it holds all
// and counts itself alone; it returns b's table and leases.
func loneSurvivor(t *testing.T, b Backend) (lease.Table, []lease.Lease) {
	t.Helper()
	_, c, held := halves(t, b)
	mine := held["b"]
	for end := time.Now().Add(4 * TTL); ; time.Sleep(TTL / 10) {
		if time.Now().After(end) {
			t.Fatalf("b holds %d partitions within %v; want silent a's too", len(mine), 4*TTL)
		}
		live := beat(t, c, "b", true).Live
		mine = renew(t, c, "b", mine)
		mine = append(mine, acquire(t, c, "b", events.Partitions-len(mine), mine)...)
		if len(mine) == events.Partitions && live == 1 {
			return c, mine
		}
	}
}

// loneSurvivorSilence: a falls silent for good with its sessions kept (a
// pause, a cut), and b takes all its partitions once they expire. Then
// b, alone, is silent for half the TTL (a pause, a loaded machine): its
// next heartbeat records a resume whose grace is for the instances live
// when the silence began; a was dead before it, and stays dead.
func loneSurvivorSilence(t *testing.T, b Backend) {
	c, mine := loneSurvivor(t, b)
	time.Sleep(TTL / 2)
	want(t, "live at b's heartbeat after its own silence", beat(t, c, "b", true).Live, 1)
	want(t, "b's renewal", len(renew(t, c, "b", mine)), events.Partitions)
}

// loneSurvivorRestart: as loneSurvivorSilence, but b restarts
// gracefully (it releases its leases, leaves, and beats again under the
// same id a third of the TTL later): its leaving must not make the
// cluster's quiet begin when dead a was last seen, which would count a as
// live again at b's first heartbeat.
func loneSurvivorRestart(t *testing.T, b Backend) {
	c, mine := loneSurvivor(t, b)
	if err := c.Release(ctx, "b", mine); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(TTL / 2)
	want(t, "live at b's first heartbeat after its restart", beat(t, c, "b", true).Live, 1)
	want(t, "b's acquisition after its restart", len(acquire(t, c, "b", events.Partitions, nil)), events.Partitions)
}

// fenceRefusesFormerOwner: every fenced write goes through for the
// partitions whose lease the fence holds (owner, epoch, not expired by
// the database's clock) and is refused for the others: taken by another
// instance, expired, or not in the fence.
func fenceRefusesFormerOwner(t *testing.T, b Backend) {
	a, c := b.Instance(t, "a"), b.Instance(t, "b")
	beat(t, a, "a", true)
	beat(t, c, "b", true)
	held := acquire(t, a, "a", 2, nil)
	p0, p1, p2 := held[0].Partition, held[1].Partition, 2
	fenceA := lease.Fence{Owner: "a", Leases: held}
	for _, kind := range WriteKinds {
		want(t, kind+" by the owner", b.Write(t, kind, fenceA, []int{p0, p1, p2}), []int{p2})
	}
	keepSeen(t, c, "b", TTL*5/4)
	for _, kind := range WriteKinds {
		want(t, kind+" by the owner of expired leases", b.Write(t, kind, fenceA, []int{p0, p1}), []int{p0, p1})
	}
	took := acquire(t, c, "b", 1, nil)
	want(t, "b's acquisition", took, []lease.Lease{{Partition: p0, Epoch: 2}})
	renewed := renew(t, a, "a", held)
	for _, kind := range WriteKinds {
		want(t, kind+" by the former owner", b.Write(t, kind, lease.Fence{Owner: "a", Leases: held}, []int{p0, p1}), []int{p0})
		want(t, kind+" by the former owner, renewed", b.Write(t, kind, lease.Fence{Owner: "a", Leases: renewed}, []int{p0, p1}), []int{p0})
		want(t, kind+" by the new owner", b.Write(t, kind, lease.Fence{Owner: "b", Leases: took}, []int{p0}), []int(nil))
		want(t, kind+" by another with the new epoch", b.Write(t, kind, lease.Fence{Owner: "a", Leases: took}, []int{p0}), []int{p0})
	}
}

// databaseClock: a heartbeat reports the database's clock, and expiries
// are counted from it.
func databaseClock(t *testing.T, b Backend) {
	a, c := b.Instance(t, "a"), b.Instance(t, "b")
	beat(t, c, "b", true)
	acquire(t, c, "b", 1, nil)
	before := b.Now(t)
	got := beat(t, a, "a", true)
	after := b.Now(t)
	if got.DBTime.Before(before) || got.DBTime.After(after) {
		t.Fatalf("DBTime %v, want the database's clock, within [%v, %v]", got.DBTime, before, after)
	}
	if got.NextExpiry <= 0 || got.NextExpiry > TTL {
		t.Fatalf("NextExpiry %v, want within (0, %v]", got.NextExpiry, TTL)
	}
}

// instancesList: Instances lists the live instances by id with the
// partitions each holds under a live lease; one that left is gone.
func instancesList(t *testing.T, b Backend) {
	a, c := b.Instance(t, "a"), b.Instance(t, "b")
	beat(t, a, "a", true)
	beat(t, c, "b", true)
	acquire(t, a, "a", 3, nil)
	list := func() string {
		t.Helper()
		in, err := a.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, i := range in {
			out = append(out, fmt.Sprintf("%s%v", i.ID, i.Partitions))
		}
		return fmt.Sprint(out)
	}
	want(t, "instances", list(), "[a[0 1 2] b[]]")
	if err := c.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	want(t, "instances after b left", list(), "[a[0 1 2]]")
}

// ownershipByTheRules: Ownership tells each lease's state as Acquire
// reads it: held, free, expired, orphaned by a crash, and in the grace of
// a silence of the cluster (expired by its own expiry, not takeable by
// another).
func ownershipByTheRules(t *testing.T, b Backend) {
	a, c, d := b.Instance(t, "a"), b.Instance(t, "c"), b.Instance(t, "d")
	for id, l := range map[string]lease.Table{"a": a, "c": c, "d": d} {
		beat(t, l, id, true)
	}
	mine := acquire(t, a, "a", 2, nil) // 0 and 1
	acquire(t, c, "c", 1, nil)         // 2
	acquire(t, d, "d", 1, nil)         // 3
	if err := a.Release(ctx, "a", mine[1:]); err != nil {
		t.Fatal(err)
	}
	states := func(what string, want map[int]lease.LeaseState) {
		t.Helper()
		got, err := a.Ownership(ctx, TTL)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != events.Partitions {
			t.Fatalf("%s: %d partitions, want %d", what, len(got), events.Partitions)
		}
		for p, st := range want {
			if got[p].Partition != p || got[p].State != st {
				t.Errorf("%s: partition %d = %+v, want %s", what, p, got[p], st)
			}
			if live := st == lease.LeaseHeld || st == lease.LeaseGrace; live != (got[p].Left > 0) || got[p].Left > TTL {
				t.Errorf("%s: partition %d (%s) has %v left, want more than none and at most a TTL only while live", what, p, st, got[p].Left)
			}
		}
	}
	states("at once", map[int]lease.LeaseState{0: lease.LeaseHeld, 1: lease.LeaseFree, 2: lease.LeaseHeld, 3: lease.LeaseHeld, 4: lease.LeaseFree})
	b.Crash(t, "d")
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if live, _ := probe(t, a, "a"); live == 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("d's crash not seen within 10s")
		}
	}
	keepSeen(t, a, "a", TTL*5/4)
	want(t, "a's renewal", renew(t, a, "a", mine[:1]), mine[:1])
	states("after d's crash and the TTL", map[int]lease.LeaseState{0: lease.LeaseHeld, 1: lease.LeaseFree, 2: lease.LeaseExpired, 3: lease.LeaseOrphaned})
	// c comes back and renews its lease (nobody took it); then nobody
	// reaches the database for longer than the TTL, and a is the first
	// back: c's lease is in the grace until c renews it (a's own are
	// a's to renew at once: no grace for the instance that resumed). d is
	// judged by its lease again, not by its sessions, until it beats
	// (AfterASilenceAnInstanceNotBackYetIsNotACrash): expired before the
	// silence, it is takeable as expired.
	beat(t, c, "c", true)
	if got := renew(t, c, "c", []lease.Lease{{Partition: 2, Epoch: 1}}); len(got) != 1 {
		t.Fatalf("c renews %v, want partition 2", got)
	}
	time.Sleep(TTL * 3 / 2)
	beat(t, a, "a", true)
	states("after a silence", map[int]lease.LeaseState{1: lease.LeaseFree, 2: lease.LeaseGrace, 3: lease.LeaseExpired})
}

// KeyIn returns a key of partition p, for the writes of Backend.Write.
func KeyIn(p int) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("lease-%d-%d", p, i); events.PartitionOf(k) == p {
			return k
		}
	}
}
