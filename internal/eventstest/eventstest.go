// Package eventstest holds what tests of several packages need of the event
// contract (pkg/events) and that the contract itself does not offer.
package eventstest

import (
	"strconv"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// KeysOfPartition returns n distinct keys <prefix><i> of partition p
// (events.PartitionOf), for tests whose commands must share a partition: a
// batch, one partition's stream.
func KeysOfPartition(prefix string, p, n int) []string {
	keys := make([]string, 0, n)
	for i := 0; len(keys) < n; i++ {
		if k := prefix + strconv.Itoa(i); events.PartitionOf(k) == p {
			keys = append(keys, k)
		}
	}
	return keys
}
