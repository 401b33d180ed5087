package machine_test

import (
	"os"
	"testing"

	"github.com/ordertimeout/ordertimeout/internal/machine"
)

func TestCPUModel(t *testing.T) {
	t.Parallel()
	got := machine.CPUModel()
	if _, err := os.Stat("/proc/cpuinfo"); err != nil {
		if got != "unknown" {
			t.Fatalf("CPUModel() = %q without /proc/cpuinfo, want unknown", got)
		}
		return
	}
	if got == "" || got == "unknown" {
		t.Fatalf("CPUModel() = %q, want the model name of /proc/cpuinfo", got)
	}
}
