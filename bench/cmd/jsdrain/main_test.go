package main

import (
	"strings"
	"testing"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

func TestRunRefusesBadArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  config
		want string
	}{
		{"no server", config{layouts: []string{"filtered"}}, "-server is required"},
		{"unknown layout", config{server: "/bin/false", layouts: []string{"filtered", "sharded"}}, `unknown layout "sharded"`},
		{"negative rate", config{server: "/bin/false", layouts: []string{"streams"}, steadyRate: -1}, "-steady-rate -1"},
		{"steady without a span", config{server: "/bin/false", layouts: []string{"streams"}, steadyRate: 1000}, "at least 1 s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run: got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestStreamNames(t *testing.T) {
	t.Parallel()
	if got := streamNames("filtered"); len(got) != 1 || got[0] != "CMD" {
		t.Errorf("filtered: got %v, want [CMD]", got)
	}
	got := streamNames("streams")
	if len(got) != events.Partitions || got[0] != "CMD00" || got[events.Partitions-1] != "CMD63" {
		t.Errorf("streams: got %d names from %v to %v, want CMD00 … CMD63", len(got), got[0], got[len(got)-1])
	}
}
