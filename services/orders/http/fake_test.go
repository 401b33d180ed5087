package http_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

// fakeStore is an in-memory orders.Store for handler tests; the real store
// is exercised by the postgres and integration tests.
type fakeStore struct {
	mu      sync.Mutex
	orders  map[string]orders.Order
	idem    map[string]idemEntry
	changes []orders.Change
	// failGet, when set, is what Get does instead of reading.
	failGet func() error
}

type idemEntry struct {
	hash  []byte
	order orders.Order
}

func newFakeStore() *fakeStore {
	return &fakeStore{orders: map[string]orders.Order{}, idem: map[string]idemEntry{}}
}

func (f *fakeStore) Create(_ context.Context, ch orders.Change, key *orders.IdempotencyKey) (orders.Order, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if key != nil {
		if e, ok := f.idem[key.Key]; ok {
			if !bytes.Equal(e.hash, key.Hash) {
				return orders.Order{}, false, orders.ErrIdempotencyMismatch
			}
			return e.order, true, nil
		}
		f.idem[key.Key] = idemEntry{key.Hash, ch.Order}
	}
	f.orders[ch.Order.ID] = ch.Order
	f.changes = append(f.changes, ch)
	return ch.Order, false, nil
}

func (f *fakeStore) Get(_ context.Context, id string) (orders.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failGet != nil {
		return orders.Order{}, f.failGet()
	}
	o, ok := f.orders[id]
	if !ok {
		return orders.Order{}, orders.ErrNotFound
	}
	return o, nil
}

func (f *fakeStore) List(_ context.Context, lf orders.ListFilter) (orders.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []orders.Order
	for _, o := range f.orders {
		if (lf.Status == "" || o.Status == lf.Status) && (lf.CustomerID == "" || o.CustomerID == lf.CustomerID) &&
			(lf.After == "" || o.ID < lf.After) {
			all = append(all, o)
		}
	}
	slices.SortFunc(all, func(a, b orders.Order) int { return strings.Compare(b.ID, a.ID) })
	p := orders.Page{Items: all}
	if len(all) > lf.Limit {
		p.Items = all[:lf.Limit]
		p.Next = p.Items[lf.Limit-1].ID
	}
	return p, nil
}

func (f *fakeStore) Update(_ context.Context, id string, fn func(orders.Order) (orders.Change, error)) (orders.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.orders[id]
	if !ok {
		return orders.Order{}, orders.ErrNotFound
	}
	ch, err := fn(o)
	if err != nil {
		return orders.Order{}, err
	}
	f.orders[id] = ch.Order
	f.changes = append(f.changes, ch)
	return ch.Order, nil
}

func (f *fakeStore) ExpireAll(_ context.Context, exps []orders.Expiry, now time.Time) ([]orders.ExpireResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	results := make([]orders.ExpireResult, len(exps))
	for i, e := range exps {
		o, ok := f.orders[e.ID]
		if !ok {
			results[i].Err = orders.ErrNotFound
			continue
		}
		ch, applied, err := o.Expire(e.Version, e.Deadline, now)
		results[i] = orders.ExpireResult{Order: o, Applied: applied, Err: err}
		if applied {
			f.orders[e.ID], results[i].Order = ch.Order, ch.Order
			f.changes = append(f.changes, ch)
		}
	}
	return results, nil
}

func (f *fakeStore) CountByStatus(context.Context) (map[orders.Status]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[orders.Status]int64{}
	for _, o := range f.orders {
		m[o.Status]++
	}
	return m, nil
}
