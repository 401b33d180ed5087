package harness

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestArrivals(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	a := NewArrivals([]string{"a", "b", "c"}, []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)})
	for _, e := range []struct {
		key  string
		due  time.Time
		at   time.Time
		want bool
	}{
		{"a", t0, t0.Add(5 * time.Millisecond), true},
		{"a", t0, t0.Add(6 * time.Millisecond), false},                   // a duplicate
		{"x", t0, t0, false},                                             // another storm's key
		{"b", t0.Add(time.Second), t0.Add(999 * time.Millisecond), true}, // early
	} {
		if got := a.Add(e.key, e.due, e.at); got != e.want {
			t.Errorf("Add(%s) = %v, want %v", e.key, got, e.want)
		}
	}
	a.Undecodable([]byte(`{"key":"d"}`), errors.New("fired_at: is before the deadline"))
	select {
	case <-a.Done():
		t.Fatal("done before c arrived")
	default:
	}
	a.Add("c", t0.Add(2*time.Second), t0.Add(2*time.Second+time.Millisecond))
	select {
	case <-a.Done():
	default:
		t.Fatal("not done once every key arrived")
	}
	if ok, err := a.Wait(t.Context(), t0); !ok || err != nil {
		t.Errorf("Wait = %v, %v, want true, nil", ok, err)
	}
	want := []any{"received", 3, "early", 1, "duplicates", 2, "undecodable", 1, "undecodable_first", `fired_at: is before the deadline: {"key":"d"}`}
	if kv := a.KV(); !slices.Equal(kv, want) {
		t.Errorf("KV = %v, want %v", kv, want)
	}
	if n, s := a.Summary(); n != 3 || s.Max != 5*time.Millisecond || s.Min != -time.Millisecond {
		t.Errorf("Summary = %d, %+v, want 3 with max 5ms and min -1ms", n, s)
	}
}
