package jetstream_test

import (
	"testing"

	"github.com/ordertimeout/ordertimeout/internal/streams"
	"github.com/ordertimeout/ordertimeout/internal/testinfra"
	"github.com/ordertimeout/ordertimeout/services/timeoutd"
	tjs "github.com/ordertimeout/ordertimeout/services/timeoutd/jetstream"
)

// TestStoredFindsAnEventAnywhereOnItsSubject: Stored finds an event by its
// Nats-Msg-Id among every event of its subject, not only the last: on a
// fire subject shared by several keys, or after a deposed owner's late
// event, the fired event is still found, so no missed event follows it.
func TestStoredFindsAnEventAnywhereOnItsSubject(t *testing.T) {
	t.Parallel()
	js := testinfra.NATS(t).JetStream(t)
	if err := streams.Ensure(t.Context(), js, streams.Config{FireSubjectPrefixes: []string{"orders.cancel.", "shop.expired."}}); err != nil {
		t.Fatal(err)
	}
	p := tjs.NewPublisher(js, 0)
	const shared = "shop.expired.all"
	if _, err := p.Publish(t.Context(), []timeoutd.Event{
		{Subject: shared, MsgID: "fired:a:1", Data: []byte(`{}`)},
		{Subject: shared, MsgID: "fired:b:1", Data: []byte(`{}`)},
		{Subject: shared, MsgID: "fired:c:1", Data: []byte(`{}`)},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		subject, id string
		want        bool
	}{
		{shared, "fired:a:1", true},
		{shared, "fired:b:1", true},
		{shared, "fired:c:1", true},
		{shared, "fired:a:2", false},
		{"shop.expired.none", "fired:a:1", false},
	} {
		got, err := p.Stored(t.Context(), tc.subject, tc.id)
		if err != nil || got != tc.want {
			t.Errorf("Stored(%s, %s) = %v, %v; want %v", tc.subject, tc.id, got, err, tc.want)
		}
	}
}
