package harness

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestProcessCPU(t *testing.T) {
	t.Parallel()
	cpu := ProcessCPU(os.Getpid())
	before, err := cpu()
	if err != nil {
		t.Fatalf("ProcessCPU: %v", err)
	}
	// Burn 200 ms of this process's CPU, as getrusage counts it.
	burnt := rusage(t)
	for x := 0; rusage(t)-burnt < 200*time.Millisecond; x++ {
		_ = x * x
	}
	after, err := cpu()
	if err != nil {
		t.Fatalf("ProcessCPU: %v", err)
	}
	// Two fields of 10 ms ticks: up to 20 ms may not be counted yet.
	if got := after - before; got < 180*time.Millisecond {
		t.Errorf("ProcessCPU grew by %s after burning 200ms, want at least 180ms", got)
	}
	if _, err := ProcessCPU(-1)(); err == nil {
		t.Error("ProcessCPU(-1): want an error")
	}
}

func rusage(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestCgroupCPU(t *testing.T) {
	t.Parallel()
	const id = "0123abcd"
	tests := []struct {
		name    string
		file    string // under the cgroup root; "" creates none
		content string
		want    time.Duration
	}{
		{"v2 systemd", "system.slice/docker-" + id + ".scope/cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n", 1500 * time.Microsecond},
		{"v2 cgroupfs", "docker/" + id + "/cpu.stat", "usage_usec 7\n", 7 * time.Microsecond},
		{"v1 cpuacct", "cpuacct/docker/" + id + "/cpuacct.usage", "123456789\n", 123456789},
		{"v1 cpu,cpuacct systemd", "cpu,cpuacct/system.slice/docker-" + id + ".scope/cpuacct.usage", "42\n", 42},
		{"none", "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			if tt.file != "" {
				path := filepath.Join(root, tt.file)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cpu, err := cgroupCPU(root, id)
			if tt.file == "" {
				if err == nil {
					t.Fatal("cgroupCPU without accounting files: want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("cgroupCPU: %v", err)
			}
			if got, err := cpu(); err != nil || got != tt.want {
				t.Errorf("cpu() = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestCPUsPerUnit(t *testing.T) {
	t.Parallel()
	cpus := CPUs{{Name: "svc", Platform: true}, {Name: "db", Platform: true}, {Name: "harness"}}
	s0 := CPUSample{time.Second, 0, time.Second}
	s1 := CPUSample{3 * time.Second, time.Second, 5 * time.Second}
	got := cpus.PerUnit("x_us_", s0, s1, 1000)
	want := []any{"x_us_svc", 2000.0, "x_us_db", 1000.0, "x_us_harness", 4000.0, "x_us_total", 3000.0}
	if len(got) != len(want) {
		t.Fatalf("PerUnit = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("PerUnit[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
