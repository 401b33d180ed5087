package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// TestConfIsGenerated keeps deploy/compose/nats.conf in step with its
// template and with pkg/events: run go generate ./deploy/natsconf when it
// fails.
func TestConfIsGenerated(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../compose/nats.conf.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := render(&want, string(text)); err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../compose/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want.Bytes()) {
		t.Fatal("deploy/compose/nats.conf differs from its template: run go generate ./deploy/natsconf")
	}
	for _, s := range []string{events.CommandStream(0), events.CommandStream(events.Partitions - 1)} {
		if !strings.Contains(want.String(), `"$JS.ACK.`+s+`.*.>"`) {
			t.Errorf("nats.conf gives timeoutd no ack right on %s", s)
		}
	}
}

// TestImageConfDeclaresTheMapping checks that the NATS image's default
// configuration, which the integration tests run, files commands under
// their partition as the compose stack's does.
func TestImageConfDeclaresTheMapping(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile("../images/nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if want := `"` + events.CommandMappingSource + `": "` + events.CommandMappingDestination + `"`; !strings.Contains(string(conf), want) {
		t.Fatalf("deploy/images/nats/nats.conf lacks the mapping %s", want)
	}
}
