package inflight

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Keeper marks the messages it holds in progress every Every. Its zero
// value is not usable: create it with New.
type Keeper struct {
	every time.Duration

	mu   sync.Mutex
	held map[jetstream.Msg]struct{}
}

// New returns a Keeper for a consumer whose AckWait is ackWait: it marks
// its messages in progress every ackWait/3.
func New(ackWait time.Duration) *Keeper {
	return &Keeper{every: ackWait / 3, held: map[jetstream.Msg]struct{}{}}
}

// Every is the interval between two progress acks of a held message.
func (k *Keeper) Every() time.Duration { return k.every }

// Hold keeps m in progress until Release.
func (k *Keeper) Hold(m jetstream.Msg) {
	k.mu.Lock()
	k.held[m] = struct{}{}
	k.mu.Unlock()
}

// Release stops keeping m in progress; the caller settles m after it.
func (k *Keeper) Release(m jetstream.Msg) {
	k.mu.Lock()
	delete(k.held, m)
	k.mu.Unlock()
}

// Held returns how many messages are held.
func (k *Keeper) Held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// Run marks every held message in progress every Every until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.tick()
		}
	}
}

// tick sends one progress ack per held message. The lock is held
// throughout, so that a message released meanwhile gets none after its
// release (each send is a buffered publish, without a round trip).
func (k *Keeper) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for m := range k.held {
		_ = m.InProgress() // a failed one is retried next tick, within AckWait
	}
}
