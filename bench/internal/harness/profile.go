package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// FetchCPUProfile asks the net/http/pprof root base (e.g. NATS.ProfileURL)
// for a CPU profile of the next d, rounded up to whole seconds, and writes
// it to path, for go tool pprof. It returns after d.
func FetchCPUProfile(ctx context.Context, base string, d time.Duration, path string) error {
	secs := int((d + time.Second - 1) / time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%sprofile?seconds=%d", base, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cpu profile: status %d", resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("cpu profile: %w", err)
	}
	return f.Close()
}
