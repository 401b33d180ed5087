package view

import (
	"slices"
	"testing"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

func page(next string, keys ...string) api.Page {
	p := api.Page{NextCursor: next}
	for _, k := range keys {
		p.Items = append(p.Items, api.Timeout{Key: k})
	}
	return p
}

func TestBrowse(t *testing.T) {
	t.Parallel()
	type step struct {
		do      func(s *State) (Request, bool)
		answer  *api.Page // answer to the request, when one is made
		wantURL string    // "" when no request is expected
	}
	search := func(q string) func(*State) (Request, bool) {
		return func(s *State) (Request, bool) { return s.Browse.Search(q) }
	}
	next := func(s *State) (Request, bool) { return s.Browse.Next() }
	prev := func(s *State) (Request, bool) { return s.Browse.Prev() }
	p := func(pg api.Page) *api.Page { return &pg }
	tests := []struct {
		name      string
		steps     []step
		wantKeys  []string
		wantPager string
		canPrev   bool
		canNext   bool
	}{
		{"live mode shows the stream", nil, []string{"s1", "s2"}, "soonest 2 of 50 pending, live", false, true},
		{"search loads the first page", []step{
			{search(" o-1 "), p(page("c2", "o-1a", "o-1b")), "/api/v1/timeouts?key=o-1&limit=20"},
		}, []string{"o-1a", "o-1b"}, "page 1 of ids starting with “o-1”", false, true},
		{"search then next follows the cursor", []step{
			{search("o"), p(page("c2", "o1")), "/api/v1/timeouts?key=o&limit=20"},
			{next, p(page("", "o2")), "/api/v1/timeouts?cursor=c2&key=o&limit=20"},
		}, []string{"o2"}, "page 2 of ids starting with “o”", true, false},
		{"next from live loads two pages", []step{
			{next, nil, "/api/v1/timeouts?limit=20"},
		}, nil, "loading…", true, false},
		{"prev from the first unfiltered page is live", []step{
			{search("x"), p(page("")), "/api/v1/timeouts?key=x&limit=20"},
			{search(""), nil, ""},
		}, []string{"s1", "s2"}, "soonest 2 of 50 pending, live", false, true},
		{"invalid search asks nothing", []step{
			{search("o.1"), nil, ""},
		}, []string{"s1", "s2"}, "an order id has only letters, digits, '-' and '_'", false, true},
		{"no match", []step{
			{search("zz"), p(page("")), "/api/v1/timeouts?key=zz&limit=20"},
		}, nil, "no pending order id starts with “zz”", false, false},
		{"prev goes back a page", []step{
			{search("o"), p(page("c2", "o1")), "/api/v1/timeouts?key=o&limit=20"},
			{next, p(page("c3", "o2")), "/api/v1/timeouts?cursor=c2&key=o&limit=20"},
			{prev, p(page("c2", "o1")), "/api/v1/timeouts?key=o&limit=20"},
		}, []string{"o1"}, "page 1 of ids starting with “o”", false, true},
		{"prev on the first search page stays", []step{
			{search("o"), p(page("", "o1")), "/api/v1/timeouts?key=o&limit=20"},
			{prev, nil, ""},
		}, []string{"o1"}, "page 1 of ids starting with “o”", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s State
			s.ApplySnapshot(snapshot(50, "s1", "s2"), t0)
			for i, st := range tt.steps {
				req, ok := st.do(&s)
				if got := map[bool]string{true: req.URL}[ok]; got != st.wantURL {
					t.Fatalf("step %d: request %q, want %q", i, got, st.wantURL)
				}
				if ok && st.answer != nil {
					if _, more := s.Browse.Loaded(req.Seq, *st.answer); more {
						t.Fatalf("step %d: unexpected follow-up request", i)
					}
				}
			}
			var keys []string
			for _, r := range s.Rows(t0) {
				keys = append(keys, r.Key)
			}
			if !slices.Equal(keys, tt.wantKeys) {
				t.Errorf("rows %v, want %v", keys, tt.wantKeys)
			}
			if got := s.PagerText(); got != tt.wantPager {
				t.Errorf("pager %q, want %q", got, tt.wantPager)
			}
			if s.Browse.CanPrev() != tt.canPrev || s.CanNext() != tt.canNext {
				t.Errorf("canPrev %v canNext %v, want %v %v", s.Browse.CanPrev(), s.CanNext(), tt.canPrev, tt.canNext)
			}
		})
	}
}

func TestBrowseNextFromLiveSkipsTheStreamedPage(t *testing.T) {
	t.Parallel()
	var s State
	s.ApplySnapshot(snapshot(50, "s1", "s2"), t0)
	first, _ := s.Browse.Next()
	second, ok := s.Browse.Loaded(first.Seq, page("c2", "s1", "s2"))
	if !ok || second.URL != "/api/v1/timeouts?cursor=c2&limit=20" {
		t.Fatalf("follow-up = %+v %v, want the second page", second, ok)
	}
	if _, more := s.Browse.Loaded(second.Seq, page("c3", "p3")); more {
		t.Fatal("second page asked for more")
	}
	if got := s.PagerText(); got != "page 2" || !s.Browse.CanPrev() {
		t.Errorf("pager %q canPrev %v, want page 2 with prev", got, s.Browse.CanPrev())
	}
}

func TestBrowseDropsOutdatedAnswers(t *testing.T) {
	t.Parallel()
	var s State
	old, _ := s.Browse.Search("a")
	cur, _ := s.Browse.Search("ab")
	s.Browse.Loaded(old.Seq, page("", "a1"))
	s.Browse.Failed(old.Seq, "boom")
	if s.Browse.Err != "" || !s.Browse.Loading || len(s.Browse.Page.Items) != 0 {
		t.Fatalf("an outdated answer changed the state: %+v", s.Browse)
	}
	s.Browse.Loaded(cur.Seq, page("", "ab1"))
	if rows := s.Rows(t0); len(rows) != 1 || rows[0].Key != "ab1" {
		t.Errorf("rows %+v, want ab1", rows)
	}
	s.Browse.Live()
	s.Browse.Loaded(cur.Seq, page("", "late"))
	if s.Browse.Active() {
		t.Error("an answer after Live left live mode")
	}
}

func TestBrowseRefreshAndFailure(t *testing.T) {
	t.Parallel()
	var s State
	if _, ok := s.Browse.Refresh(); ok {
		t.Fatal("refresh in live mode made a request")
	}
	req, _ := s.Browse.Search("o")
	if _, ok := s.Browse.Refresh(); ok {
		t.Fatal("refresh while loading made a request")
	}
	s.Browse.Failed(req.Seq, "timeoutd answered 503")
	if s.PagerText() != "timeoutd answered 503" || s.Browse.Loading {
		t.Fatalf("after failure: %+v", s.Browse)
	}
	again, ok := s.Browse.Refresh()
	if !ok || again.URL != "/api/v1/timeouts?key=o&limit=20" || again.Seq == req.Seq {
		t.Errorf("refresh = %+v %v", again, ok)
	}
}

func TestStreamPath(t *testing.T) {
	t.Parallel()
	if want := "/api/v1/stream?recent=20&soonest=20"; StreamPath != want {
		t.Errorf("StreamPath = %q, want %q", StreamPath, want)
	}
}
