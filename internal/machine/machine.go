// Package machine describes the machine a benchmark or a measuring test
// runs on, so that every figure can be printed with it.
package machine

import (
	"os"
	"strings"
)

// CPUModel returns the model name of the first CPU in /proc/cpuinfo, or
// "unknown".
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
