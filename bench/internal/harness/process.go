package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Build compiles the main package pkg (e.g. "./services/timeoutd/cmd/timeoutd")
// of the module in root into dir and returns the binary's path.
func Build(ctx context.Context, root, pkg, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return out, nil
}

// Process is a service binary run as a child process.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process exited
	err  error         // the exit error, set before done is closed
}

// Start runs bin with env added to the environment; its stdout and stderr
// (the service's JSON logs) go to logPath, appended.
func Start(bin string, env []string, logPath string) (*Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited returns a channel closed when the process has exited; Err then
// returns the exit error.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Err returns the exit error once Exited is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM and waits up to timeout for the exit, then SIGKILLs.
// Stopping an exited process returns nil.
func (p *Process) Stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("sigterm: %w", err)
	}
	select {
	case <-p.done:
		var ee *exec.ExitError
		if p.err != nil && !errors.As(p.err, &ee) {
			return p.err
		}
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("no exit %s after SIGTERM: killed", timeout)
	}
}

// Memory is a process's resident memory, from /proc/<pid>/status.
type Memory struct {
	// RSSBytes is VmRSS: resident now.
	RSSBytes int64
	// HWMBytes is VmHWM: the peak resident size so far.
	HWMBytes int64
}

// ReadMemory reads VmRSS and VmHWM of pid.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("read status: %w", err)
	}
	var m Memory
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			m.RSSBytes = n * 1024
		case "VmHWM":
			m.HWMBytes = n * 1024
		}
	}
	return m, nil
}
