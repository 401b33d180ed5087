package main

import (
	"strings"
	"testing"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

func TestRunRefusesBadArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		server  string
		layouts []string
		want    string
	}{
		{"no server", "", []string{"filtered"}, "-server is required"},
		{"unknown layout", "/bin/false", []string{"filtered", "sharded"}, `unknown layout "sharded"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(tt.server, 10, 10, tt.layouts, "", 0)
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
