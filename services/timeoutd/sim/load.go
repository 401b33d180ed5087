package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/retry"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// load runs the producers until r.loadEnd: new keys, moves and clears,
// many racing their key's deadline, and now and then a stale command
// replayed or a bad one. The pending timeouts stay within what one
// instance holds (every other may be down: were they more, no instance
// could take the others' partitions over, a limit of capacity, not a
// bug): three quarters of the least MaxPending, all but a few slots of it
// in a burst in the first half of some seeds, where the schedules fill
// and sets are deferred.
func (r *run) load(ctx context.Context) {
	w, nodes, keys, full, loadEnd, seed := r.w, r.nodes, r.keys, r.full, r.loadEnd, r.seed
	var live []*keyState
	prodRng := rand.New(rand.NewPCG(seed, 0x9d0d))
	least := slices.MinFunc(nodes, func(a, b *node) int { return a.cfg.MaxPending - b.cfg.MaxPending }).cfg.MaxPending
	capacity, burst := least*3/4, least*3/4
	if prodRng.Float64() < 0.3 {
		burst = least - 2
	}
	if full {
		capacity, burst = 2*least, 2*least
	}
	r.settings = append(r.settings, fmt.Sprintf("pending at most %d, %d in the burst (full: %v)", capacity, burst, full))
	// Bad input is dead-lettered by an ingest lane while the others go
	// on: at a full schedule, more of it makes lanes admit at other times
	// than the batch's start.
	// nearest bounds the share of actions that move the key whose deadline
	// is nearest: in full seeds, more of them, to race the fires.
	badP, nearest, pace := 0.02, 0.70, 25
	if full {
		badP, nearest, pace = 0.10, 0.85, 12
	}
	// waiting counts the new keys whose first set is not committed yet:
	// lingering in a batch, in the stream, or deferred for room; they count
	// against the cap as much as the pending rows do.
	waiting := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, k := range live {
			if _, ok := w.pg.rows[k.key]; !ok {
				n++
			}
		}
		return n
	}
	// Some seeds publish as pkg/timeouts' writer does under load: the
	// commands of a linger packed into batches of one partition's, their
	// keys drawn from 8 partitions so that batches form.
	batchRng := rand.New(rand.NewPCG(seed, 0xba7c))
	batching := batchRng.Float64() < 0.3
	linger := time.Duration(20+batchRng.IntN(180)) * time.Millisecond
	var hot [events.Partitions]bool
	for range 8 {
		hot[batchRng.IntN(events.Partitions)] = true
	}
	var lingering []events.Command
	var lingerEnd time.Time
	send := func(cmd events.Command) {
		if !batching {
			w.produce(cmd)
			return
		}
		if len(lingering) == 0 {
			lingerEnd = time.Now().Add(linger)
		}
		lingering = append(lingering, cmd)
	}
	flush := func(now time.Time) {
		if len(lingering) > 0 && !now.Before(lingerEnd) {
			w.produceBatch(lingering)
			lingering = nil
		}
	}
	if batching {
		r.settings = append(r.settings, fmt.Sprintf("batches: linger %v", linger))
	}

	defer func() { flush(time.Now().Add(linger)) }()
	burstEnd := time.Now().Add(simLoad / 2)
	for n := 0; time.Now().Before(loadEnd); n++ {
		if !retry.Sleep(ctx, time.Duration(1+prodRng.IntN(pace))*time.Millisecond) {
			return
		}
		now := time.Now()
		flush(now)
		pending := w.pending() + waiting()
		room := pending < capacity || (pending < burst && now.Before(burstEnd))
		var k *keyState
		switch r := prodRng.Float64(); {
		case (r < 0.35 || len(live) == 0) && room:
			k = &keyState{key: fmt.Sprintf("k%05d", n)}
			for j := 0; batching && !hot[events.PartitionOf(k.key)]; j++ {
				k.key = fmt.Sprintf("k%05d-%d", n, j)
			}
			keys[k.key] = k
			live = append(live, k)
		case len(live) == 0:
			continue
		case r < 0.35+badP:
			bad := live[prodRng.IntN(len(live))].last // bad input: dead-lettered, never applied
			bad.Kind, bad.Version, bad.FireSubject = events.KindSet, bad.Version+1000, "elsewhere."+bad.Key
			bad.Deadline = now.Add(time.Second).UTC()
			send(bad)
			continue
		case r < 0.38+badP:
			old := live[prodRng.IntN(len(live))]
			if old.version > 1 {
				stale := old.last
				stale.Version = 1 + prodRng.Int64N(old.version-1)
				send(stale) // a stale version, replayed late
			}
			continue
		case r < nearest && full && prodRng.Float64() < 0.5:
			// The key that fired last, its mark about to commit: a set
			// of it is admitted while it is in flight, and its room
			// freed by the fire's Done must stay kept for it.
			if k = latestDue(live, now.Add(-nodes[0].cfg.MarkDelay*3/4)); k == nil {
				continue
			}
		case r < nearest:
			k = slices.MinFunc(live, func(a, b *keyState) int { // the key whose deadline is nearest
				return cmpAbs(now.Sub(a.deadline), now.Sub(b.deadline))
			})
		default:
			k = live[prodRng.IntN(len(live))]
		}
		k.version++
		cmd := events.Command{Schema: events.SchemaVersion, Kind: events.KindSet, Key: k.key, Version: k.version,
			FireSubject: events.OrderCancelSubject(k.key)}
		if k.version > 1 && prodRng.Float64() < 0.4 {
			cmd.Kind, k.cleared = events.KindClear, true
			cmd.FireSubject = ""
			live = slices.DeleteFunc(live, func(x *keyState) bool { return x == k })
		} else {
			k.deadline = now.Add(time.Duration(prodRng.IntN(3000)-300) * time.Millisecond).UTC()
			cmd.Deadline = k.deadline
			if prodRng.Float64() < 0.15 {
				cmd.Payload = []byte(`{"n":1}`) // not plain: the fire path reads its row
			}
		}
		k.last = cmd
		send(cmd)
		if len(live) > 400 {
			live = live[1:] // forgotten by the producer: its set stands
		}
	}
}
