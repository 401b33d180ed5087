package sim

import (
	"sync"
	"time"
)

// World is the simulated world of one seed: the models of Postgres and
// JetStream, the instances' links, and the history the checker reads.
// Every field is guarded by mu (see the package doc).
type World struct {
	mu   sync.Mutex
	pg   postgres
	js   jetStream
	net  network
	hist history
	cfg  Config
	// nodes are the instances, by id, for the checks made as the history
	// unfolds.
	nodes map[string]*node
}

// Config is what the models need of a run.
type Config struct {
	AckWait     time.Duration // of the command consumers
	Dedupe      time.Duration // the expiry stream's duplicate window
	CrashGrace  time.Duration // sessions gone this long: dead
	TTL         time.Duration // the instances' lease TTL, for the grace after a restart or a resume
	Batch       int           // the most commands one Next returns
	PubAckLossP float64       // per publish, a PubAck lost after the store
	// Latency is the most a statement or a publish takes on a healthy
	// link (each draws up to it), but for the slow tail (see draw).
	Latency time.Duration
	// Rand draws the world's chances, in [0, 1).
	Rand func() float64
	// Fits, when positive, is the MaxPending of an instance that holds
	// every partition (the full-schedule seeds): the pending rows must
	// never exceed it (the check "committed fits").
	Fits int
}

// New returns an empty world: no rows, every lease free, no instance.
func New(cfg Config) *World {
	if cfg.Rand == nil {
		cfg.Rand = func() float64 { return 1 }
	}
	w := &World{cfg: cfg}
	w.pg.init()
	w.js.init()
	w.net.links, w.net.calm = map[string]*link{}, map[string]time.Time{}
	return w
}
