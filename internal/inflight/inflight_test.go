package inflight

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fakeMsg counts its progress acks; the embedded nil Msg panics on any
// other call, which the Keeper must not make.
type fakeMsg struct {
	jetstream.Msg
	progress int
}

func (m *fakeMsg) InProgress() error { m.progress++; return nil }

// TestKeeperMarksWhatItHoldsUntilReleased: each tick marks every held
// message in progress once; a released message gets no mark after its
// release; the interval is a third of AckWait.
func TestKeeperMarksWhatItHoldsUntilReleased(t *testing.T) {
	t.Parallel()
	k := New(3 * time.Second)
	if k.Every() != time.Second {
		t.Fatalf("Every = %v, want a third of AckWait", k.Every())
	}
	a, b := &fakeMsg{}, &fakeMsg{}
	k.Hold(a)
	k.Hold(b)
	k.tick()
	k.Release(a)
	k.tick()
	if a.progress != 1 || b.progress != 2 || k.Held() != 1 {
		t.Fatalf("progress acks a %d, b %d, held %d; want 1 (then released), 2, 1", a.progress, b.progress, k.Held())
	}
	k.Release(b)
	k.tick()
	if b.progress != 2 || k.Held() != 0 {
		t.Fatalf("after its release b got %d progress acks, held %d; want 2, 0", b.progress, k.Held())
	}
}
