package http

import (
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// csp allows only the dashboard's own origin, plus compiling WebAssembly.
const csp = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; connect-src 'self'; img-src 'self'; style-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'"

// dashboard serves the static files of a directory: a precompressed
// <file>.gz when the client accepts gzip, application/wasm for .wasm, and
// the CSP header on every response. Paths cannot leave the directory.
type dashboard struct{ root *os.Root }

func newDashboard(dir string) (*dashboard, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open dashboard dir: %w", err)
	}
	return &dashboard{root: root}, nil
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

func (d *dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", csp)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if name == "" || strings.HasSuffix(r.URL.Path, "/") {
		name = path.Join(name, "index.html")
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if path.Ext(name) == ".wasm" {
		ctype = "application/wasm"
	}
	w.Header().Add("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		if f, err := d.root.Open(filepath.FromSlash(name + ".gz")); err == nil {
			defer f.Close()
			if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
				w.Header().Set("Content-Encoding", "gzip")
				if ctype != "" {
					w.Header().Set("Content-Type", ctype)
				}
				http.ServeContent(w, r, name, st.ModTime(), f)
				return
			}
		}
	}
	f, err := d.root.Open(filepath.FromSlash(name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			http.NotFound(w, r)
			return
		}
		http.Error(w, "cannot open file", http.StatusForbidden)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	if ctype != "" {
		w.Header().Set("Content-Type", ctype)
	}
	http.ServeContent(w, r, name, st.ModTime(), f)
}
