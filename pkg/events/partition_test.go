package events

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPartitionOfIsPinned pins PartitionOf to FNV-1a values computed
// outside Go (partitions are stored with each row, computed by NATS's
// partition() transform on the command stream and decide ownership, so they
// must never change between processes or releases: a per-process hash seed
// would fail this).
func TestPartitionOfIsPinned(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want int
	}{
		{"a", 44},
		{"b", 37},
		{"o-1", 40},
		{"o-2", 33},
		{"o-3", 14},
		{"ord_42", 11},
		{"x", 7},
		{"019a4b2c-7d1e-7f00-8a3b-123456789abc", 44},
	}
	for _, tt := range tests {
		if got := PartitionOf(tt.key); got != tt.want {
			t.Errorf("PartitionOf(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

func TestKeyOfStoredCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject string
		key     string
		ok      bool
	}{
		{"timeouts.cmd.44.a", "a", true},
		{PartitionedCommandSubject("o-1"), "o-1", true},
		{"timeouts.cmd.43.a", "", false},        // the wrong partition
		{"timeouts.cmd.a", "", false},           // not transformed
		{"timeouts.cmd.44.r.a", "r.a", true},    // a tenant's: the local key's partition
		{"timeouts.cmd.44.orders.a", "", false}, // the orders tenant's keys are unqualified
		{"timeouts.cmd.44.a.b.c", "", false},
		{"orders.cancel.44.a", "", false},
		{"timeouts.cmd.44.", "", false},
	}
	for _, tt := range tests {
		if key, ok := KeyOfStoredCommand(tt.subject); key != tt.key || ok != tt.ok {
			t.Errorf("KeyOfStoredCommand(%q) = %q, %v; want %q, %v", tt.subject, key, ok, tt.key, tt.ok)
		}
	}
	if got := PartitionCommandSubjects(7); !slices.Equal(got, []string{"timeouts.cmd.7.*", "timeouts.cmd.7.*.*"}) {
		t.Errorf("PartitionCommandSubjects(7) = %q", got)
	}
}

// TestCommandMappingMatchesPartitions checks the server's subject mapping
// against the partition count, and the stream names against the subjects
// each stream captures.
func TestCommandMappingMatchesPartitions(t *testing.T) {
	t.Parallel()
	if want := "{{partition(" + strconv.Itoa(Partitions) + ",1)}}"; !strings.Contains(CommandMappingDestination, want) {
		t.Errorf("CommandMappingDestination = %q, want it to hold %s", CommandMappingDestination, want)
	}
	if want := "{{partition(" + strconv.Itoa(Partitions) + ",2)}}"; !strings.Contains(TenantCommandMappingDestination, want) {
		t.Errorf("TenantCommandMappingDestination = %q, want it to hold %s", TenantCommandMappingDestination, want)
	}
	if PartitionOf("reservations.a") != PartitionOf("a") {
		t.Errorf("PartitionOf(reservations.a) = %d, PartitionOf(a) = %d: a tenant's key is in its local key's partition", PartitionOf("reservations.a"), PartitionOf("a"))
	}
	names := CommandStreams()
	if len(names) != Partitions || names[0] != "TIMEOUT_COMMANDS_00" || names[63] != "TIMEOUT_COMMANDS_63" {
		t.Errorf("CommandStreams() = %v", names)
	}
	if slices.Contains(names, StreamCommandsLegacy) {
		t.Errorf("CommandStreams() holds the legacy stream %s", StreamCommandsLegacy)
	}
}
