//go:build !js

package browsertest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// FirstDataMark is the performance mark the page sets when its first
// snapshot is on screen (web/wasm's firstDataMark).
const FirstDataMark = "dashboard:first-data"

// Size is a browser window size in CSS pixels.
type Size struct{ Width, Height int }

// Window sizes the tests use.
var (
	// Desktop is a laptop-sized window.
	Desktop = Size{1280, 900}
	// Narrow is a phone-sized window.
	Narrow = Size{390, 844}
)

// Chrome starts a headless Chromium with a fresh profile, sized to size,
// and returns a chromedp context for it, cancelled (and Chromium stopped)
// when t ends. It skips t under -short and fails it when Chromium is
// missing.
func Chrome(t *testing.T, size Size) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: needs Chromium; run without -short (make test)")
	}
	path := cmp.Or(os.Getenv("CHROMIUM_PATH"), "/usr/bin/chromium")
	if _, err := exec.LookPath(path); err != nil {
		t.Fatalf("no Chromium at %s (run scripts/ensure-chromium.sh or set CHROMIUM_PATH): %v", path, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.WindowSize(size.Width, size.Height),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser now, so its start-up is not counted in a step.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(size.Width), int64(size.Height))); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// Run runs action in ctx with a timeout and returns its value, failing t
// with what on error.
func Run[T any](t *testing.T, ctx context.Context, timeout time.Duration, what string, action chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(tctx, action)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// Do runs steps in ctx with a timeout, failing t with what on error.
func Do(t *testing.T, ctx context.Context, timeout time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	Run(t, ctx, timeout, what, chromedp.Steps(steps...))
}

// Eval evaluates the JavaScript expression expr and returns its value.
func Eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	return Run(t, ctx, 5*time.Second, "evaluate "+expr, chromedp.Evaluate[T](expr))
}

// Poll evaluates the JavaScript condition cond until it is true, failing t
// after timeout.
func Poll(t *testing.T, ctx context.Context, timeout time.Duration, what, cond string) {
	t.Helper()
	Run(t, ctx, timeout+time.Second, "wait for "+what, chromedp.Poll[chromedp.Void](cond,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
}

// FirstData returns the time from navigation start to the page's first
// snapshot on screen, read from its FirstDataMark.
func FirstData(t *testing.T, ctx context.Context) time.Duration {
	t.Helper()
	ms := Eval[float64](t, ctx, fmt.Sprintf("performance.getEntriesByName(%q)[0]?.startTime ?? -1", FirstDataMark))
	if ms < 0 {
		t.Fatalf("no %s mark", FirstDataMark)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// WasmTransfer returns the size of main.wasm as transferred (the encoded
// body, gzip when the server sent it compressed) and as decoded, from the
// page's resource timing.
func WasmTransfer(t *testing.T, ctx context.Context) (encoded, decoded int64) {
	t.Helper()
	sizes := Eval[[]int64](t, ctx, `(e => e ? [e.encodedBodySize, e.decodedBodySize] : [-1, -1])(performance.getEntriesByType("resource").find(e => new URL(e.name).pathname.endsWith("/main.wasm")))`)
	if len(sizes) != 2 || sizes[0] < 0 {
		t.Fatalf("no resource timing of main.wasm: %v", sizes)
	}
	return sizes[0], sizes[1]
}

// CountdownSeconds parses a countdown the page shows, "42s" or "1m05s",
// failing t on anything else.
func CountdownSeconds(t *testing.T, s string) int {
	t.Helper()
	m, sec, ok := strings.Cut(strings.TrimSuffix(s, "s"), "m")
	if !ok {
		m, sec = "0", m
	}
	mi, err1 := strconv.Atoi(m)
	si, err2 := strconv.Atoi(sec)
	if err1 != nil || err2 != nil || !strings.HasSuffix(s, "s") {
		t.Fatalf("countdown %q is not seconds or minutes and seconds", s)
	}
	return mi*60 + si
}

// Screenshot saves a full-page PNG of the page as name under the module's
// build/screenshots directory (gitignored) and logs its path.
func Screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png := Run(t, ctx, 10*time.Second, "screenshot", chromedp.FullScreenshot(100))
	dir := filepath.Join(moduleRoot(t), "build", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || len(out) < 2 {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(string(out[:len(out)-1]))
}
