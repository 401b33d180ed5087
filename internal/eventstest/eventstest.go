// Package eventstest holds what tests of several packages need of the event
// contract (pkg/events) and that the contract itself does not offer.
package eventstest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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

// MsgID returns cmd's Nats-Msg-Id with a nonce derived from cmd, where a
// producer's is random (events.NewNonce) and kept with the command: the
// same command gets the same id, so that a test's republish is one
// message to JetStream, and a simulation's seed replays the same ids.
func MsgID(cmd events.Command) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s:%s:%d", cmd.Kind, cmd.Key, cmd.Version))
	return cmd.MsgID(hex.EncodeToString(h[:events.NonceLen/2]))
}
