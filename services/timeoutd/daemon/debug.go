package daemon

import (
	"net/http"
	"net/http/pprof"
)

// debugHandler serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/: CPU (profile), heap, goroutines, mutex and block
// contention, and the execution trace, for
// `go tool pprof http://<TIMEOUTD_DEBUG_ADDR>/debug/pprof/profile?seconds=10`.
// It is served only on DebugAddr, never beside the API and the dashboard.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
