// Command natsconf writes the NATS server configuration of the compose
// stack, deploy/compose/nats.conf, from its template nats.conf.tmpl: the
// template's rights on the command streams are repeated for each
// partition's stream (events.CommandStreams), and the subject mapping that
// files each command under its partition comes from pkg/events. Its test
// fails when the committed nats.conf differs from what it writes.
//
//	go generate ./deploy/natsconf
package main

//go:generate go run . -in ../compose/nats.conf.tmpl -out ../compose/nats.conf

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"text/template"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// data is what the template reads.
type data struct {
	// CommandStreams names every partition's command stream.
	CommandStreams []string
	// Legacy names the single command stream they replace.
	Legacy string
	// MappingSource and MappingDestination are the command mapping.
	MappingSource, MappingDestination string
}

// render executes the template text, whose actions are delimited by [[ ]]
// ({{ }} belongs to NATS's subject mapping).
func render(w io.Writer, text string) error {
	t, err := template.New("nats.conf").Delims("[[", "]]").Option("missingkey=error").Parse(text)
	if err != nil {
		return fmt.Errorf("parse template: %w", err)
	}
	return t.Execute(w, data{
		CommandStreams:     events.CommandStreams(),
		Legacy:             events.StreamCommandsLegacy,
		MappingSource:      events.CommandMappingSource,
		MappingDestination: events.CommandMappingDestination,
	})
}

func main() {
	in := flag.String("in", "deploy/compose/nats.conf.tmpl", "the template")
	out := flag.String("out", "deploy/compose/nats.conf", "the configuration to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "natsconf:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	text, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := render(&buf, string(text)); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}
