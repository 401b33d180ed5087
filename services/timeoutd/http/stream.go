package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// streamRetryAfter is the Retry-After, in seconds, of a stream refused
// because MaxStreams are open.
const streamRetryAfter = "10"

// streams bounds the concurrent SSE streams and counts them.
type streams struct {
	slots   chan struct{} // one element per open stream
	open    prometheus.GaugeFunc
	refused prometheus.Counter
	dropped prometheus.Counter
}

func newStreams(maxStreams int) *streams {
	st := &streams{
		slots: make(chan struct{}, maxStreams),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "timeoutd_http_streams_refused_total",
			Help: "SSE streams refused with 503 because TIMEOUTD_MAX_STREAMS were open."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "timeoutd_http_streams_dropped_total",
			Help: "SSE streams dropped because the client did not read within TIMEOUTD_STREAM_WRITE_TIMEOUT."}),
	}
	st.open = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "timeoutd_http_streams",
		Help: "SSE streams open."}, func() float64 { return float64(len(st.slots)) })
	return st
}

func (st *streams) register(reg *prometheus.Registry) error {
	for _, c := range []prometheus.Collector{st.open, st.refused, st.dropped} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("http: register stream metrics: %w", err)
		}
	}
	return nil
}

// acquire takes a stream slot without waiting; it reports false when all
// are taken.
func (st *streams) acquire() bool {
	select {
	case st.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (st *streams) release() { <-st.slots }

// snapshot builds the state the dashboard shows.
func (s *server) snapshot(ctx context.Context, soonest, recent int, payloads bool) (api.Snapshot, error) {
	p, err := s.page(ctx, timeoutd.Query{Limit: soonest}, payloads)
	if err != nil {
		return api.Snapshot{}, err
	}
	return api.Snapshot{Stats: s.statsNow(), Soonest: p.Items, Recent: s.recent(recent), Cluster: s.clusterToAPI()}, nil
}

// snapshotCacheMax bounds the distinct (soonest, recent, payloads) views
// the snapshot cache keeps; beyond it the cache starts afresh.
const snapshotCacheMax = 64

// snapshotView is what a stream's snapshot depends on besides time.
type snapshotView struct {
	soonest, recent int
	payloads        bool
}

// snapshotEvents shares the encoded snapshot events between streams: every
// stream of the same view gets the same bytes, built at most once per
// SnapshotInterval however often the generation changes, so the streams'
// cost to the read pool and to the CPU does not grow with their number,
// idle or busy.
type snapshotEvents struct {
	mu      sync.Mutex // held while building: one build at a time
	entries map[snapshotView]snapshotEvent
}

type snapshotEvent struct {
	gen  uint64
	at   time.Time
	data []byte // "event: snapshot\ndata: …\n\n"
}

// snapshotEvent returns the encoded snapshot event of v and the generation
// it was built at, building it when the cached one is older than
// SnapshotInterval. A stream that gets an event of an older generation
// than the current one sends again at its next tick, when a newer one is
// due.
func (s *server) snapshotEvent(ctx context.Context, v snapshotView) ([]byte, uint64, error) {
	c := &s.snapshots
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if e, ok := c.entries[v]; ok && now.Sub(e.at) < s.cfg.SnapshotInterval {
		return e.data, e.gen, nil
	}
	gen := s.svc.Generation() // before reading, so a change meanwhile is sent again
	snap, err := s.snapshot(ctx, v.soonest, v.recent, v.payloads)
	if err != nil {
		return nil, 0, err
	}
	data, err := json.Marshal(snap)
	if err != nil {
		return nil, 0, fmt.Errorf("encode snapshot: %w", err)
	}
	data = append(append([]byte("event: snapshot\ndata: "), data...), '\n', '\n')
	if c.entries == nil || len(c.entries) >= snapshotCacheMax {
		c.entries = make(map[snapshotView]snapshotEvent)
	}
	c.entries[v] = snapshotEvent{gen: gen, at: now, data: data}
	return data, gen, nil
}

// stream serves /api/v1/stream: a full "snapshot" event at once (so a
// reconnecting client resyncs), then one whenever the counters changed, at
// most one per SnapshotInterval and at least one per ResyncDefault, and a
// comment line after Heartbeat of silence.
//
// At most MaxStreams are open at once; beyond, 503 with Retry-After. Every
// write has a deadline of StreamWriteTimeout: a client that does not read
// is dropped once the socket buffers are full and a write has waited that
// long. A stream holds at most one encoded snapshot (its soonest and recent
// lists are bounded by api.LimitMax), built only after the previous write
// completed: nothing queues per stream.
func (s *server) stream(w http.ResponseWriter, r *http.Request) {
	payloads, ok := s.payloadAccess(w, r)
	if !ok {
		return
	}
	soonest, err := intParam(r, "soonest", 20, api.LimitMax)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	recent, err := intParam(r, "recent", 20, api.LimitMax)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.streams.acquire() {
		s.streams.refused.Inc()
		w.Header().Set("Retry-After", streamRetryAfter)
		s.problem(w, r, codeTooManyStreams,
			fmt.Sprintf("timeoutd serves at most %d streams at once (TIMEOUTD_MAX_STREAMS)", s.cfg.MaxStreams))
		return
	}
	defer s.streams.release()
	rc := http.NewResponseController(w)
	write := func(b []byte) error {
		// A stream outlives the server's WriteTimeout, but no single
		// write may block longer than StreamWriteTimeout.
		if err := rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout)); err != nil {
			return fmt.Errorf("set write deadline: %w", err)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	ended := func(err error) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.streams.dropped.Inc()
			s.log.Debug("stream dropped: the client did not read", "remote", r.RemoteAddr, "write_timeout", s.cfg.StreamWriteTimeout)
		} else if errors.Is(err, http.ErrNotSupported) {
			s.log.Error("stream: the connection takes no write deadline", "err", err)
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	ctx := r.Context()
	view := snapshotView{soonest: soonest, recent: recent, payloads: payloads}
	// sent is the generation of the last snapshot sent.
	var sent uint64
	send := func() error {
		data, gen, err := s.snapshotEvent(ctx, view)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("build snapshot", "err", err)
			return nil // skip this one, try at the next tick
		}
		sent = gen
		return write(data)
	}
	if err := send(); err != nil {
		ended(err)
		return
	}
	tick := time.NewTicker(s.cfg.SnapshotInterval)
	defer tick.Stop()
	lastSent, lastWrite := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			var err error
			if s.svc.Generation() != sent || now.Sub(lastSent) >= ResyncDefault {
				lastSent, lastWrite = now, now
				err = send()
			} else if now.Sub(lastWrite) >= s.cfg.Heartbeat {
				lastWrite = now
				err = write([]byte(": heartbeat\n\n"))
			}
			if err != nil {
				ended(err)
				return
			}
		}
	}
}
