package wheel_test

import (
	"fmt"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/wheel"
)

func Example() {
	fired := make(chan string, 1)
	w, err := wheel.New(wheel.Config{Tick: time.Millisecond}, func(batch []wheel.Expired[string]) {
		for _, e := range batch {
			fired <- e.Value // batch is only valid during the call: copy out
		}
	})
	if err != nil {
		panic(err)
	}
	paid, _ := w.ScheduleAfter(10*time.Millisecond, "order-1")
	w.ScheduleAfter(20*time.Millisecond, "order-2")
	fmt.Println("pending:", w.Len())
	fmt.Println("order-1 paid in time:", w.Cancel(paid))
	fmt.Println("expired:", <-fired)
	fmt.Println("left at stop:", len(w.Stop()))
	// Output:
	// pending: 2
	// order-1 paid in time: true
	// expired: order-2
	// left at stop: 0
}
