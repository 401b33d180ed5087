// Package jetstream is timeoutd's NATS JetStream adapter: [Consumer], the
// durable pull consumer that delivers command batches (a timeoutd.Source),
// and [DeadLetters], which publishes rejected commands to the dead-letter
// stream (a timeoutd.DeadLetterer).
package jetstream
