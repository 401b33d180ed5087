package tracing

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// The attributes of the platform's spans.
const (
	AttrOrderID   = attribute.Key("order.id")
	AttrKey       = attribute.Key("timeout.key")
	AttrVersion   = attribute.Key("timeout.version")
	AttrPartition = attribute.Key("timeout.partition")
	AttrDeadline  = attribute.Key("timeout.deadline")
	AttrLateness  = attribute.Key("timeout.lateness_ms")
	AttrSubject   = attribute.Key("messaging.destination.name")
)

// Timeout returns the attributes of a timeout: its key, version,
// partition and deadline (RFC 3339).
func Timeout(key string, version int64, partition int, deadline time.Time) []attribute.KeyValue {
	return []attribute.KeyValue{AttrKey.String(key), AttrVersion.Int64(version), AttrPartition.Int(partition),
		AttrDeadline.String(deadline.UTC().Format(time.RFC3339Nano))}
}
