package eventstest_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ordertimeout/ordertimeout/internal/eventstest"
	"github.com/ordertimeout/ordertimeout/pkg/events"
)

func TestKeysOfPartition(t *testing.T) {
	t.Parallel()
	for _, p := range []int{0, 5, events.Partitions - 1} {
		keys := eventstest.KeysOfPartition("k-", p, 10)
		if len(keys) != 10 || len(slices.Compact(slices.Sorted(slices.Values(keys)))) != 10 {
			t.Fatalf("partition %d: %v, want 10 distinct keys", p, keys)
		}
		for _, k := range keys {
			if events.PartitionOf(k) != p || !events.ValidKey(k) {
				t.Fatalf("key %q is of partition %d, want %d", k, events.PartitionOf(k), p)
			}
		}
	}
}

func ExampleKeysOfPartition() {
	fmt.Println(eventstest.KeysOfPartition("ord-", 50, 2))
	// Output: [ord-1 ord-14]
}
