package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
)

// The kinds of fault the nemesis draws.
const (
	faultCrash     = "crash"       // SIGKILL, restarted later under the same id
	faultDBCut     = "db-cut"      // statements hang; the database keeps the sessions
	faultDBCutDrop = "db-cut-drop" // statements hang; the database dropped the sessions
	faultNATSCut   = "nats-cut"    // fetch, ack and publish hang
	faultClockStep = "clock-step"  // the wall clock steps forward or back
	faultSlowNATS  = "slow-nats"   // publishes take tens to hundreds of ms
	faultSlowDB    = "slow-db"     // statements take up to 200 ms
	faultAmbiguous = "ambiguous"   // writes commit and lose their reply
	faultPause     = "pause"       // cut from both, as a paused process
	faultRestart   = "restart"     // graceful stop, then start again
	faultDBRestart = "db-restart"  // Postgres restarts: every session gone, statements refused
	faultDBFreeze  = "db-freeze"   // Postgres freezes: every statement waits, sessions and clock alive
	// faultLoneSurvivor cuts one instance off for good, its sessions kept
	// (paused, or cut off), and once the others took its partitions,
	// pauses them all for a third of the TTL or more: the cluster resumes
	// from a silence that began after the cut-off one was dead.
	faultLoneSurvivor = "lone-survivor"
	// faultStall delays the instance's publishes by one to five seconds,
	// delivered in the end, while its statements hang (a starved process,
	// a stalled network): a publish may reach the stream after its lease
	// lapsed and another instance took the partition.
	faultStall = "stall"
	// faultPromote fails Postgres over to its synchronous standby
	// (Patroni, synchronous_mode_strict): nothing answers for 1–10 s,
	// every session is gone, each write in flight is committed or not
	// (its reply lost either way), every commit is kept, and the new
	// primary's clock is 50–500 ms ahead of the old one's or behind it,
	// its name another, its pg_postmaster_start_time() its own start,
	// before the promotion.
	faultPromote = "promote"
)

var faultKinds = []string{faultCrash, faultDBCut, faultDBCutDrop, faultNATSCut, faultClockStep, faultSlowNATS, faultSlowDB,
	faultAmbiguous, faultPause, faultRestart, faultDBRestart, faultDBFreeze, faultLoneSurvivor, faultStall, faultPromote}

// nemesis draws and applies faults until 3 s before r.loadEnd, and waits
// for every one to heal.
func (r *run) nemesis(ctx context.Context) {
	t, w, nodes, res, loadEnd, seed := r.t, r.w, r.nodes, r.res, r.loadEnd, r.seed
	nemRng := rand.New(rand.NewPCG(seed, 0x7e3e))
	var faults sync.WaitGroup
	defer faults.Wait()
	for time.Now().Before(loadEnd.Add(-3 * time.Second)) {
		if !retry.Sleep(ctx, time.Duration(200+nemRng.IntN(2000))*time.Millisecond) {
			return
		}
		n := nodes[nemRng.IntN(len(nodes))]
		kind := faultKinds[nemRng.IntN(len(faultKinds))]
		d := time.Duration(300+nemRng.IntN(4000)) * time.Millisecond
		res.faults[kind]++
		who, detail := n.id, ""
		var step time.Duration // a promotion's step of the database's clock
		switch kind {          // of Postgres, not of an instance
		case faultDBRestart: // down for a restart's time
			who, d = "pg", d/2
		case faultDBFreeze:
			who = "pg"
		case faultPromote: // down for the leader key's TTL and the promotion
			who, d = "pg", time.Second+time.Duration(nemRng.Int64N(int64(9*time.Second)))
			// healed by the load's end like every fault, so that the
			// settle that follows has its whole length: a promotion drawn
			// 1 s before it would otherwise keep Postgres down 9 s into it
			// and leave the backlog no time to drain (seeds 702170,
			// 703866, 712657 "lost" keys that were merely late)
			d = min(d, max(time.Until(loadEnd), 100*time.Millisecond))
			step = time.Duration(50+nemRng.IntN(451)) * time.Millisecond
			if nemRng.IntN(2) == 0 {
				step = -step
			}
			detail = fmt.Sprintf(", the clock %+v", step)
		}
		w.mu.Lock()
		w.hist.add(time.Now(), "FAULT", who, kind, 0, d.String()+detail)
		w.mu.Unlock()
		heal := func(f func(*link)) {
			faults.Go(func() {
				retry.Sleep(ctx, d)
				w.setLink(n.id, f)
			})
		}
		switch kind {
		case faultCrash:
			n.crash()
			faults.Go(func() {
				retry.Sleep(ctx, d)
				n.start(t)
			})
		case faultRestart:
			n.shutdown()
			n.start(t)
		case faultDBRestart:
			faults.Go(func() { w.RestartDB(ctx, d) })
		case faultDBFreeze:
			faults.Go(func() { w.FreezeDB(ctx, d) })
		case faultPromote:
			faults.Go(func() { w.Promote(ctx, d, step) })
		case faultDBCut, faultDBCutDrop:
			w.setLink(n.id, func(l *link) { l.dbCut = true })
			if kind == faultDBCutDrop {
				w.LoseSessions(n.id)
			}
			heal(func(l *link) { l.dbCut = false })
		case faultNATSCut:
			w.setLink(n.id, func(l *link) { l.natsCut = true })
			heal(func(l *link) { l.natsCut = false })
		case faultPause:
			w.setLink(n.id, func(l *link) { l.dbCut, l.natsCut = true, true })
			heal(func(l *link) { l.dbCut, l.natsCut = false, false })
		case faultLoneSurvivor:
			// Cut long enough for its partitions to be taken and for the
			// others to hold them a while (3 TTLs and more), the others
			// paused meanwhile for TTL/3 to TTL/2.
			ttl := w.cfg.TTL
			cut := 5*ttl + d
			pause := ttl/3 + time.Duration(nemRng.Int64N(int64(ttl/6)))
			w.setLink(n.id, func(l *link) { l.dbCut, l.natsCut = true, true })
			faults.Go(func() {
				retry.Sleep(ctx, cut)
				w.setLink(n.id, func(l *link) { l.dbCut, l.natsCut = false, false })
			})
			faults.Go(func() {
				if !retry.Sleep(ctx, 3*ttl+d/2) {
					return
				}
				for _, o := range nodes {
					if o != n {
						w.setLink(o.id, func(l *link) { l.dbCut, l.natsCut = true, true })
					}
				}
				retry.Sleep(ctx, pause)
				for _, o := range nodes {
					if o != n {
						w.setLink(o.id, func(l *link) { l.dbCut, l.natsCut = false, false })
					}
				}
			})
		case faultStall:
			lat := time.Second + time.Duration(nemRng.Int64N(int64(4*time.Second)))
			w.setLink(n.id, func(l *link) { l.dbCut, l.natsLatency = true, lat })
			heal(func(l *link) { l.dbCut, l.natsLatency = false, 0 })
		case faultClockStep:
			n.skew.Add(int64(time.Duration(nemRng.IntN(6001)-3000) * time.Millisecond))
			w.mu.Lock()
			w.unsettle(n.id)
			w.mu.Unlock()
		case faultSlowNATS:
			lat := time.Duration(10+nemRng.IntN(300)) * time.Millisecond
			w.setLink(n.id, func(l *link) { l.natsLatency = lat })
			heal(func(l *link) { l.natsLatency = 0 })
		case faultSlowDB:
			lat := time.Duration(1+nemRng.IntN(200)) * time.Millisecond
			w.setLink(n.id, func(l *link) { l.dbLatency = lat })
			heal(func(l *link) { l.dbLatency = 0 })
		case faultAmbiguous:
			w.setLink(n.id, func(l *link) { l.ambiguousP = 0.3 })
			heal(func(l *link) { l.ambiguousP = 0 })
		}
	}
}
