package tenants

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// ReloadIntervalDefault is how often a Registry looks at its file.
const ReloadIntervalDefault = time.Second

// Registry is a registry file as a service sees it: loaded at Open, read
// again by Run whenever its content changes, so that a tenant added on a
// running platform is known within ReloadIntervalDefault without a
// restart. A change that does not parse or check is logged and ignored:
// the registry keeps the tenants it had. Its methods are safe for
// concurrent use; FirePrefixes costs an atomic load and a map lookup.
type Registry struct {
	path     string
	interval time.Duration
	log      *slog.Logger
	cur      atomic.Pointer[snapshot]
	// bad is the last content that did not check, logged once (Run's own).
	bad []byte
}

type snapshot struct {
	data     []byte
	prefixes map[string][]string
	all      []string // every tenant's prefixes, in the file's order
}

// Open loads the registry at path, or fails with the file's first problem.
// interval 0 means ReloadIntervalDefault; log nil means slog.Default().
func Open(path string, interval time.Duration, log *slog.Logger) (*Registry, error) {
	r := &Registry{path: path, interval: interval, log: log}
	if r.interval <= 0 {
		r.interval = ReloadIntervalDefault
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ts, err := Parse(data)
	if err != nil {
		return nil, err
	}
	r.cur.Store(newSnapshot(data, ts))
	return r, nil
}

func newSnapshot(data []byte, ts []Tenant) *snapshot {
	s := &snapshot{data: data, prefixes: make(map[string][]string, len(ts)), all: FirePrefixes(ts)}
	for _, t := range ts {
		s.prefixes[t.Name] = slices.Clone(t.FirePrefixes)
	}
	return s
}

// FirePrefixes returns the fire subject prefixes of tenant, and false for
// a tenant the registry does not hold. The slice must not be modified.
func (r *Registry) FirePrefixes(tenant string) ([]string, bool) {
	p, ok := r.cur.Load().prefixes[tenant]
	return p, ok
}

// All returns every tenant's fire subject prefixes, in the file's order.
func (r *Registry) All() []string { return slices.Clone(r.cur.Load().all) }

// Run reads the file every interval until ctx ends, and takes its
// content when it changed and checks.
func (r *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.reload()
		}
	}
}

// reload reads the file once and takes it if it changed and checks.
func (r *Registry) reload() {
	data, err := os.ReadFile(r.path)
	if err != nil {
		r.log.Warn("tenant registry unreadable; keeping the tenants loaded", "path", r.path, "err", err)
		return
	}
	if bytes.Equal(data, r.cur.Load().data) || bytes.Equal(data, r.bad) {
		return
	}
	ts, err := Parse(data)
	if err != nil {
		r.bad = data
		r.log.Error("tenant registry changed but is invalid; keeping the tenants loaded", "path", r.path, "err", err)
		return
	}
	r.cur.Store(newSnapshot(data, ts))
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	r.log.Info("tenant registry reloaded", "path", r.path, "tenants", names)
}
