package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Service is a service binary running as a child process with its HTTP
// address on 127.0.0.1.
type Service struct {
	*Process
	// Base is http://127.0.0.1:port.
	Base string
	// Ready is how long the last start took from exec to /readyz 200.
	Ready time.Duration
}

// FreeAddr returns a 127.0.0.1 address with a port nobody listens on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartService runs bin with the environment env(addr), where addr is a free
// loopback address the service must listen on, and polls /readyz every 5 ms
// until it answers 200, the process exits, or timeout passes.
func StartService(ctx context.Context, bin string, env func(addr string) []string, logPath string, timeout time.Duration) (*Service, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	p, err := Start(bin, env(addr), logPath)
	if err != nil {
		return nil, err
	}
	s := &Service{Process: p, Base: "http://" + addr}
	err = Poll(ctx, timeout, 5*time.Millisecond, func() (bool, error) {
		select {
		case <-p.Exited():
			return false, fmt.Errorf("%s exited before ready (%v); see %s", bin, p.Err(), logPath)
		default:
		}
		return Status(ctx, s.Base+"/readyz") == http.StatusOK, nil
	})
	if err != nil {
		_ = p.Stop(10 * time.Second)
		return nil, fmt.Errorf("wait for ready: %w", err)
	}
	s.Ready = time.Since(start)
	return s, nil
}
