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
	view, ok := s.streamView(w, r)
	if !ok {
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
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &sseStream{s: s, w: w, rc: http.NewResponseController(w), remote: r.RemoteAddr, view: view}
	if err := st.run(r.Context()); err != nil {
		st.ended(err)
	}
}

// streamView reads a stream's view from r: its list sizes and whether it
// may see payloads. When it reports false, it has answered the request.
func (s *server) streamView(w http.ResponseWriter, r *http.Request) (snapshotView, bool) {
	payloads, ok := s.payloadAccess(w, r)
	if !ok {
		return snapshotView{}, false
	}
	soonest, err := intParam(r, "soonest", 20, api.LimitMax)
	if err != nil {
		s.fail(w, r, err)
		return snapshotView{}, false
	}
	recent, err := intParam(r, "recent", 20, api.LimitMax)
	if err != nil {
		s.fail(w, r, err)
		return snapshotView{}, false
	}
	return snapshotView{soonest: soonest, recent: recent, payloads: payloads}, true
}

// sseStream is one open live stream.
type sseStream struct {
	s      *server
	w      http.ResponseWriter
	rc     *http.ResponseController
	remote string // the client's address, for the log
	view   snapshotView
	// sent is the generation of the last snapshot sent.
	sent uint64
}

// run sends a snapshot at once, then at each SnapshotInterval tick a
// snapshot when the counters changed or ResyncDefault passed, else a
// heartbeat after Heartbeat of silence, until ctx ends (nil) or a write
// fails (its error).
func (st *sseStream) run(ctx context.Context) error {
	if err := st.send(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(st.s.cfg.SnapshotInterval)
	defer tick.Stop()
	lastSent, lastWrite := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			var err error
			if st.s.svc.Generation() != st.sent || now.Sub(lastSent) >= ResyncDefault {
				lastSent, lastWrite = now, now
				err = st.send(ctx)
			} else if now.Sub(lastWrite) >= st.s.cfg.Heartbeat {
				lastWrite = now
				err = st.write([]byte(": heartbeat\n\n"))
			}
			if err != nil {
				return err
			}
		}
	}
}

// send writes the view's current snapshot event. A snapshot that cannot be
// built is logged and skipped (the next tick tries again); only ctx's end
// or a failed write is an error.
func (st *sseStream) send(ctx context.Context) error {
	data, gen, err := st.s.snapshotEvent(ctx, st.view)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		st.s.log.Warn("build snapshot", "err", err)
		return nil // skip this one, try at the next tick
	}
	st.sent = gen
	return st.write(data)
}

// write writes b and flushes it. A stream outlives the server's
// WriteTimeout, but no single write may block longer than
// StreamWriteTimeout.
func (st *sseStream) write(b []byte) error {
	if err := st.rc.SetWriteDeadline(time.Now().Add(st.s.cfg.StreamWriteTimeout)); err != nil {
		return fmt.Errorf("set write deadline: %w", err)
	}
	if _, err := st.w.Write(b); err != nil {
		return err
	}
	return st.rc.Flush()
}

// ended records why the stream ended on err: a client that did not read,
// or a connection that takes no write deadline.
func (st *sseStream) ended(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		st.s.streams.dropped.Inc()
		st.s.log.Debug("stream dropped: the client did not read", "remote", st.remote, "write_timeout", st.s.cfg.StreamWriteTimeout)
	} else if errors.Is(err, http.ErrNotSupported) {
		st.s.log.Error("stream: the connection takes no write deadline", "err", err)
	}
}
