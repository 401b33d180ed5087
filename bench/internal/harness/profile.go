package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Get asks client for url and hands the body of a 200 answer to read; any
// other status is an error.
func Get(ctx context.Context, client *http.Client, url string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: status %d", url, resp.StatusCode)
	}
	return read(resp.Body)
}

// FetchCPUProfile asks the net/http/pprof root base (e.g. NATS.ProfileURL)
// for a CPU profile of the next d, rounded up to whole seconds, and writes
// it to path, for go tool pprof. It returns after d.
func FetchCPUProfile(ctx context.Context, base string, d time.Duration, path string) error {
	secs := int((d + time.Second - 1) / time.Second)
	return Get(ctx, http.DefaultClient, fmt.Sprintf("%sprofile?seconds=%d", base, secs), func(r io.Reader) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		return f.Close()
	})
}
