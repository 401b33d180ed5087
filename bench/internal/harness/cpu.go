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
	"time"
)

// CPUTime returns the CPU time, user and system, a process or a container
// has used since it started.
type CPUTime func() (time.Duration, error)

// userHZ is the unit of the times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture Go supports.
const userHZ = 100

// ProcessCPU reads the CPU time of process pid, all its threads included,
// from utime and stime in /proc/<pid>/stat, to the 10 ms of a clock tick.
// (/proc/<pid>/schedstat counts nanoseconds, but of the first thread only.)
func ProcessCPU(pid int) CPUTime {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	return func() (time.Duration, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("read cpu time: %w", err)
		}
		// The fields after the command name, which is in parentheses and
		// may hold spaces: state (field 3), …, utime (14), stime (15).
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 13 {
			return 0, fmt.Errorf("read cpu time: %s: unexpected format", path)
		}
		var ticks int64
		for _, s := range f[11:13] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read cpu time: %s: %w", path, err)
			}
			ticks += n
		}
		return time.Duration(ticks) * (time.Second / userHZ), nil
	}
}

// cgroupFiles are where docker keeps a container's CPU time under
// /sys/fs/cgroup, %s being its full id: cgroup v2's cpu.stat (usage_usec)
// and cgroup v1's cpuacct.usage (nanoseconds), each under the systemd and
// the cgroupfs cgroup driver.
var cgroupFiles = []string{
	"system.slice/docker-%s.scope/cpu.stat",
	"docker/%s/cpu.stat",
	"cpuacct/system.slice/docker-%s.scope/cpuacct.usage",
	"cpuacct/docker/%s/cpuacct.usage",
	"cpu,cpuacct/system.slice/docker-%s.scope/cpuacct.usage",
	"cpu,cpuacct/docker/%s/cpuacct.usage",
}

// CPU returns the CPU time of every process of the container, read from
// its cgroup (see cgroupFiles) to the microsecond.
func (c *Container) CPU(ctx context.Context) (CPUTime, error) {
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{.Id}}", c.Name).Output()
	if err != nil {
		return nil, fmt.Errorf("docker inspect %s: %w", c.Name, err)
	}
	cpu, err := cgroupCPU("/sys/fs/cgroup", strings.TrimSpace(string(out)))
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	return cpu, nil
}

// cgroupCPU returns the CPU time of the cgroup of container id under root.
func cgroupCPU(root, id string) (CPUTime, error) {
	for _, f := range cgroupFiles {
		path := filepath.Join(root, fmt.Sprintf(f, id))
		if _, err := os.Stat(path); err != nil {
			continue
		}
		return func() (time.Duration, error) {
			b, err := os.ReadFile(path)
			if err != nil {
				return 0, fmt.Errorf("read cpu time: %w", err)
			}
			s, unit := strings.TrimSpace(string(b)), time.Nanosecond
			if filepath.Base(path) == "cpu.stat" {
				s, unit = "", time.Microsecond
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
						s = v
					}
				}
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read cpu time: %s: %w", path, err)
			}
			return time.Duration(n) * unit, nil
		}, nil
	}
	return nil, fmt.Errorf("no cpu accounting of container %s under %s (looked for %s)", id, root, strings.Join(cgroupFiles, ", "))
}

// CPUSource is one process or container whose CPU time is measured.
type CPUSource struct {
	// Name is the source's key in a report line, e.g. "postgres".
	Name string
	// Platform counts the source in the total: a process of the system
	// measured, not of the harness observing it.
	Platform bool
	// Time reads its CPU time.
	Time CPUTime
}

// CPUs are sources sampled together.
type CPUs []CPUSource

// CPUSample is the CPU time of each source of a CPUs, in order, at one
// moment.
type CPUSample []time.Duration

// Sample reads every source's CPU time.
func (c CPUs) Sample() (CPUSample, error) {
	s := make(CPUSample, len(c))
	var errs []error
	for i, src := range c {
		t, err := src.Time()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src.Name, err))
		}
		s[i] = t
	}
	return s, errors.Join(errs...)
}

// PerUnit returns the CPU time each source used from s0 to s1 divided by n,
// in microseconds, as key=value pairs: prefix+Name for each source, then
// prefix+"total" for the sum over the Platform sources.
func (c CPUs) PerUnit(prefix string, s0, s1 CPUSample, n int) []any {
	kv := make([]any, 0, 2*len(c)+2)
	var total time.Duration
	for i, src := range c {
		d := s1[i] - s0[i]
		if src.Platform {
			total += d
		}
		kv = append(kv, prefix+src.Name, usPer(d, n))
	}
	return append(kv, prefix+"total", usPer(total, n))
}

func usPer(d time.Duration, n int) float64 {
	return float64(d) / float64(time.Microsecond) / float64(max(n, 1))
}

// SleepUntil waits until t, or returns ctx's error when ctx ends first.
func SleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
