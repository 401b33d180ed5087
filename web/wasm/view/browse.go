package view

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

// PageSize is the number of pending timeouts per browsed page, and the
// number of soonest ones the stream is asked for.
const PageSize = 20

// TimeoutsPath is the API path of the pending timeouts' pages.
const TimeoutsPath = "/api/v1/timeouts"

// Browse is the search and paging state of the pending list. Its zero value
// is live mode: the table shows the stream's soonest timeouts. Searching by
// order id or paging switches to browse mode, where the table shows pages
// fetched from TimeoutsPath; Live returns to live mode.
//
// Each method that needs data returns a Request; its answer goes back
// through Loaded or Failed with the request's Seq, so that an answer to an
// outdated request is dropped.
type Browse struct {
	// Query is the order id prefix searched; empty lists every key.
	Query string
	// Cursors holds the cursor of each page visited, from the first page
	// (cursor ""); the last one is the current page. Empty in live mode.
	Cursors []string
	// Page is the current page as last loaded.
	Page api.Page
	// Loading is true while a request is outstanding.
	Loading bool
	// Err is the message of the last failure, shown to the operator.
	Err string

	seq  int
	skip bool // follow the loaded page's cursor once (Next from live mode)
}

// Request is a page fetch the renderer must issue.
type Request struct {
	// Seq identifies the request in Loaded and Failed.
	Seq int
	// URL is the path and query to GET.
	URL string
}

// Active reports whether the table shows browsed pages (not live mode).
func (b *Browse) Active() bool { return len(b.Cursors) > 0 }

// PageNumber is the current page's number, from 1.
func (b *Browse) PageNumber() int { return max(1, len(b.Cursors)) }

// Live returns to live mode.
func (b *Browse) Live() {
	*b = Browse{seq: b.seq + 1}
}

// Search starts browsing the keys with prefix q from the first page. An
// empty q returns to live mode and needs no request (ok is false). A q
// that cannot begin an order id needs no request either and sets Err.
func (b *Browse) Search(q string) (req Request, ok bool) {
	q = strings.TrimSpace(q)
	if q == "" {
		b.Live()
		return Request{}, false
	}
	if !events.ValidKey(q) {
		b.Live()
		b.Query = q
		b.Err = "an order id has only letters, digits, '-' and '_'"
		return Request{}, false
	}
	*b = Browse{Query: q, Cursors: []string{""}, seq: b.seq}
	return b.request(), true
}

// Next moves to the following page. From live mode it loads the first page
// and then the second, since the stream's list carries no cursor.
func (b *Browse) Next() (req Request, ok bool) {
	if !b.Active() {
		*b = Browse{Cursors: []string{""}, skip: true, seq: b.seq}
		return b.request(), true
	}
	if b.Loading || b.Page.NextCursor == "" {
		return Request{}, false
	}
	b.Cursors = append(b.Cursors, b.Page.NextCursor)
	return b.request(), true
}

// Prev moves to the previous page; from the first unfiltered page it
// returns to live mode (ok is false: nothing to load).
func (b *Browse) Prev() (req Request, ok bool) {
	switch {
	case len(b.Cursors) > 1:
		b.Cursors = b.Cursors[:len(b.Cursors)-1]
		return b.request(), true
	case len(b.Cursors) == 1 && b.Query == "":
		b.Live()
	}
	return Request{}, false
}

// CanPrev reports whether Prev does anything.
func (b *Browse) CanPrev() bool {
	return len(b.Cursors) > 1 || (len(b.Cursors) == 1 && b.Query == "")
}

// Refresh reloads the current page, so browsed rows follow the live state;
// ok is false in live mode or while a request is outstanding.
func (b *Browse) Refresh() (req Request, ok bool) {
	if !b.Active() || b.Loading {
		return Request{}, false
	}
	return b.request(), true
}

// Loaded applies the answer to request seq. It may need one more request
// (Next from live mode); answers to outdated requests are ignored.
func (b *Browse) Loaded(seq int, page api.Page) (req Request, ok bool) {
	if seq != b.seq || !b.Active() {
		return Request{}, false
	}
	b.Loading = false
	b.Err = ""
	if b.skip {
		b.skip = false
		if page.NextCursor != "" {
			b.Cursors = append(b.Cursors, page.NextCursor)
			return b.request(), true
		}
	}
	b.Page = page
	return Request{}, false
}

// Failed records that request seq failed with msg.
func (b *Browse) Failed(seq int, msg string) {
	if seq != b.seq {
		return
	}
	b.Loading = false
	b.skip = false
	b.Err = msg
}

func (b *Browse) request() Request {
	b.seq++
	b.Loading = true
	q := url.Values{"limit": {strconv.Itoa(PageSize)}}
	if b.Query != "" {
		q.Set("key", b.Query)
	}
	if c := b.Cursors[len(b.Cursors)-1]; c != "" {
		q.Set("cursor", c)
	}
	return Request{Seq: b.seq, URL: TimeoutsPath + "?" + q.Encode()}
}

// CanNext reports whether the pending table has a next page: in live mode
// when more timeouts are pending than the stream lists.
func (s *State) CanNext() bool {
	if s.Browse.Active() {
		return !s.Browse.Loading && s.Browse.Page.NextCursor != ""
	}
	return s.Stats.Pending > int64(len(s.Soonest))
}

// PagerText describes what the pending table shows, for the pager.
func (s *State) PagerText() string {
	b := &s.Browse
	switch {
	case b.Err != "":
		return b.Err
	case !b.Active():
		return "soonest " + strconv.Itoa(len(s.Soonest)) + " of " + FormatCount(s.Stats.Pending) + " pending, live"
	case b.Loading && len(b.Page.Items) == 0:
		return "loading…"
	case b.Query != "" && len(b.Page.Items) == 0:
		return "no pending order id starts with “" + b.Query + "”"
	case b.Query != "":
		return "page " + strconv.Itoa(b.PageNumber()) + " of ids starting with “" + b.Query + "”"
	default:
		return "page " + strconv.Itoa(b.PageNumber())
	}
}

// StreamPath is the API path of the event stream, asking for PageSize
// soonest timeouts and as many recent expiries.
var StreamPath = "/api/v1/stream?" + url.Values{
	"soonest": {strconv.Itoa(PageSize)},
	"recent":  {strconv.Itoa(PageSize)},
}.Encode()
