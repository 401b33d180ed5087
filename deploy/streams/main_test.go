package main

import (
	"strings"
	"testing"
	"time"
)

// TestConfigFromEnv checks the bootstrap's settings: defaults, a cluster's
// replicas, and an error naming the variable for each bad value.
func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   map[string]string
		want  string // substring of the error; empty: valid
		check func(t *testing.T, c config)
	}{
		{name: "defaults", env: map[string]string{"NATS_URL": "nats://n:4222"}, check: func(t *testing.T, c config) {
			if c.Timeout != timeoutDefault || c.Streams.Replicas != 0 || len(c.Streams.FireSubjectPrefixes) != 0 {
				t.Errorf("config = %+v, want the defaults (replicas and prefixes from streams.Config)", c)
			}
		}},
		{name: "cluster", env: map[string]string{"NATS_URL": "nats://n:4222", "STREAMS_REPLICAS": "3", "STREAMS_DUPLICATE_WINDOW": "5m",
			"STREAMS_FIRE_SUBJECT_PREFIXES": "orders.cancel., carts.expire."}, check: func(t *testing.T, c config) {
			if c.Streams.Replicas != 3 || c.Streams.DuplicateWindow != 5*time.Minute ||
				strings.Join(c.Streams.FireSubjectPrefixes, ",") != "orders.cancel.,carts.expire." {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "no url", env: map[string]string{}, want: "NATS_URL"},
		{name: "replicas zero", env: map[string]string{"NATS_URL": "nats://n:4222", "STREAMS_REPLICAS": "0"}, want: "STREAMS_REPLICAS"},
		{name: "replicas text", env: map[string]string{"NATS_URL": "nats://n:4222", "STREAMS_REPLICAS": "three"}, want: "STREAMS_REPLICAS"},
		{name: "window", env: map[string]string{"NATS_URL": "nats://n:4222", "STREAMS_DUPLICATE_WINDOW": "-1s"}, want: "STREAMS_DUPLICATE_WINDOW"},
		{name: "timeout", env: map[string]string{"NATS_URL": "nats://n:4222", "STREAMS_TIMEOUT": "soon"}, want: "STREAMS_TIMEOUT"},
		{name: "prefix without dot", env: map[string]string{"NATS_URL": "nats://n:4222", "STREAMS_FIRE_SUBJECT_PREFIXES": "orders.cancel"}, want: "STREAMS_FIRE_SUBJECT_PREFIXES"},
		{name: "tls CA missing", env: map[string]string{"NATS_URL": "nats://n:4222", "NATS_CA_FILE": "/nonexistent/ca.crt"}, want: "NATS_CA_FILE"},
		{name: "tls key without certificate", env: map[string]string{"NATS_URL": "nats://n:4222", "NATS_KEY_FILE": "/etc/tls/client.key"}, want: "NATS_CERT_FILE"},
		{name: "prefix wildcard", env: map[string]string{"NATS_URL": "nats://n:4222", "STREAMS_FIRE_SUBJECT_PREFIXES": "orders.*."}, want: "STREAMS_FIRE_SUBJECT_PREFIXES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := configFromEnv(tt.env)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("configFromEnv: %v", err)
				}
				tt.check(t, c)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("configFromEnv: %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
