package timeouts

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// TestConsumerSettingsInContract keeps the settings of the shared durable
// consumer that docs/contract/asyncapi.yaml gives producers in other
// languages (channel fired, x-jetstream.consumer, in the JetStream API's
// names) equal to those NewConsumer creates: instances of one service that
// created it differently would keep updating it under each other.
func TestConsumerSettingsInContract(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../docs/contract/asyncapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Channels map[string]struct {
			JetStream struct {
				Stream   string         `yaml:"stream"`
				Consumer map[string]any `yaml:"consumer"`
			} `yaml:"x-jetstream"`
		} `yaml:"channels"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	fired := doc.Channels["fired"].JetStream
	cfg := ConsumerConfig[events.Expiry]{Durable: "reservations", FilterSubject: "reservations.expire.>", Decode: DecodeExpiry,
		Handle: func(context.Context, events.Expiry) error { return nil }}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if fired.Stream != cfg.Stream {
		t.Errorf("the contract's stream %q, NewConsumer's %q", fired.Stream, cfg.Stream)
	}
	raw, err := json.Marshal(cfg.jetStream())
	if err != nil {
		t.Fatal(err)
	}
	// Both through JSON, so that numbers compare alike.
	var created map[string]any
	if err := json.Unmarshal(raw, &created); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(must(json.Marshal(fired.Consumer)), &fired.Consumer); err != nil {
		t.Fatal(err)
	}
	// The service's own: present in both, their values the service's.
	for _, own := range []string{"durable_name", "filter_subject"} {
		if _, ok := fired.Consumer[own]; !ok {
			t.Errorf("the contract does not name %s", own)
		}
		delete(fired.Consumer, own)
		delete(created, own)
	}
	if got, want := slices.Sorted(maps.Keys(fired.Consumer)), slices.Sorted(maps.Keys(created)); !slices.Equal(got, want) {
		t.Fatalf("the contract's consumer settings %v; NewConsumer sets %v", got, want)
	}
	for k, want := range created {
		if got := fired.Consumer[k]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: the contract says %v, NewConsumer sets %v", k, got, want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
