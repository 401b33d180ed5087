package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

// BenchmarkLeaseProbe is the cost of one probe of a cluster of three
// instances (the statement every instance runs every probe interval), on
// a database of its own: its wall time on the Postgres container, one
// probe after the other.
func BenchmarkLeaseProbe(b *testing.B) {
	url := testinfra.Postgres(b)
	ctx := context.Background()
	if err := Migrate(ctx, appPool(b, url, "migrate")); err != nil {
		b.Fatal(err)
	}
	var tables []Leases
	for i := range 3 {
		l := NewLeases(appPool(b, url, fmt.Sprintf("timeoutd/i%d", i)))
		if _, err := l.Heartbeat(ctx, fmt.Sprintf("i%d", i), time.Hour, []byte(`{}`), true); err != nil {
			b.Fatal(err)
		}
		tables = append(tables, l)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := tables[i%3].Probe(ctx, fmt.Sprintf("i%d", i%3), time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}
