package harness

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Poll calls cond every interval until it reports true, returns an error, or
// timeout passes.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("poll: gave up after %s: %w", timeout, ctx.Err())
		case <-t.C:
		}
	}
}

// client is the HTTP client of the pollers: short timeouts, loopback only.
var client = &http.Client{Timeout: 2 * time.Second}

// Status returns the HTTP status of GET url, or 0 when the request failed.
func Status(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
