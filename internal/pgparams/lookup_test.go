package pgparams

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// resolver is a lookup whose nth call (from 1) answers as answer says;
// calls without an answer hang until their context ends.
type resolver struct {
	calls  atomic.Int32
	answer map[int32]error // nil error: an address
}

func (r *resolver) lookup(ctx context.Context, host string) ([]string, error) {
	n := r.calls.Add(1)
	if err, ok := r.answer[n]; ok {
		if err != nil {
			return nil, err
		}
		return []string{"10.0.0." + string(rune('0'+n))}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestALookupOfAMultiHostURLIsBoundedAndAskedAgain(t *testing.T) {
	t.Parallel()
	const bound = 400 * time.Millisecond
	noSuchHost := errors.New("no such host")
	for _, tt := range []struct {
		name      string
		answer    map[int32]error
		want      string // the address, or "" for an error
		wantErr   error
		wantCalls int32
		within    time.Duration // the answer comes before this
	}{
		{"answered at once", map[int32]error{1: nil}, "10.0.0.1", nil, 1, bound / 4},
		{"no such host at once is final", map[int32]error{1: noSuchHost}, "", noSuchHost, 1, bound / 4},
		{"the first unanswered, the second answers", map[int32]error{2: nil}, "10.0.0.2", nil, 2, bound / 2},
		{"the first unanswered, the second says no such host", map[int32]error{2: noSuchHost}, "", noSuchHost, 2, bound / 2},
		{"neither answers: an error at the bound", nil, "", context.DeadlineExceeded, 2, 2 * bound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &resolver{answer: tt.answer}
			began := time.Now()
			addrs, err := boundedLookup(r.lookup, bound)(context.Background(), "pg-2")
			took := time.Since(began)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v; want %v", err, tt.wantErr)
				}
			} else if err != nil || len(addrs) != 1 || addrs[0] != tt.want {
				t.Fatalf("= %v, %v; want [%s]", addrs, err, tt.want)
			}
			if took > tt.within+time.Second { // generous: a loaded machine
				t.Errorf("answered after %s; want within %s", took, tt.within)
			}
			if tt.wantErr == context.DeadlineExceeded && took < bound-50*time.Millisecond {
				t.Errorf("gave up after %s, before the bound %s", took, bound)
			}
			if got := r.calls.Load(); got != tt.wantCalls {
				t.Errorf("%d lookups; want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestTheLookupBoundComesFromTheURLOrTheHosts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, url string
		want      time.Duration
		wantErr   bool
	}{
		{"one host: no bound", "postgres://u:p@pg-1:5432/db?sslmode=prefer", 0, false},
		{"several hosts: the default", "postgres://u:p@pg-1:5432,pg-2:5432,pg-3:5432/db?target_session_attrs=read-write", LookupTimeoutDefault, false},
		{"the URL's", "postgres://u:p@pg-1:5432,pg-2:5432/db?lookup_timeout=300", 300 * time.Millisecond, false},
		{"the URL's, one host", "postgres://u:p@pg-1:5432/db?lookup_timeout=300", 300 * time.Millisecond, false},
		{"none, by the URL", "postgres://u:p@pg-1:5432,pg-2:5432/db?lookup_timeout=0", 0, false},
		{"not milliseconds", "postgres://u:p@pg-1:5432,pg-2:5432/db?lookup_timeout=1s", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pc, err := Pool{URL: tt.url}.Config()
			if tt.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, sent := pc.ConnConfig.RuntimeParams["lookup_timeout"]; sent {
				t.Error("lookup_timeout would be sent to the server as a setting")
			}
			cc, err := pgconn.ParseConfig(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := lookupBound(cc); err != nil || got != tt.want {
				t.Errorf("bound %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}
