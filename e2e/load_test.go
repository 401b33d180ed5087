package e2e

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/ordersclient"
)

// Scenario 3: 5,000 orders with deadlines spread over about 20 s, half paid
// at random moments: exactly the unpaid ones end cancelled, each once, none
// early.
func TestManyOrdersHalfPaid(t *testing.T) {
	s := sharedStack(t)
	c := watch(t, s.NATSURL)
	cl := s.orders()
	res := load{
		N: 5000, Over: 18 * time.Second, Workers: 16,
		Deadline: func(time.Time) ordersclient.Deadline { return within(2*time.Second + rand.N(4*time.Second)) },
		PayShare: 0.5,
		PayAt:    payBetween(1500*time.Millisecond, 600*time.Millisecond),
	}.run(t, cl)
	late, fired := summarise(verifyOutcomes(t, cl, c, res, time.Minute, 2*time.Second), nil)
	t.Logf("lateness of the cancel events: arrival at the outside consumer %s; timeoutd's fired_at %s", late, fired)
	if late.P99 > lateBound {
		t.Errorf("p99 lateness %s, want at most %s", late.P99, lateBound)
	}
}
