package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestIndexAgainstMap drives the index with random adds and removes of keys
// of mixed lengths (so freed slots and key bytes are reused, the table
// grows, and deletions shift probe runs) and checks it against a map after
// every step.
func TestIndexAgainstMap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		keys, ops int
	}{
		{"few keys, heavy reuse", 50, 20_000},
		{"table growth and long runs", 5_000, 60_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(tt.keys)))
			pool := make([]string, tt.keys)
			for i := range pool {
				pool[i] = fmt.Sprintf("%s%d", strings.Repeat("k", rng.IntN(40)), i)
			}
			x := newIndex()
			model := map[string]uint32{}
			for op := range tt.ops {
				k := pool[rng.IntN(len(pool))]
				pos, i, ok := x.find(k)
				mi, mok := model[k]
				if ok != mok || (ok && i != mi) {
					t.Fatalf("op %d: find(%q) = %d, %v; model %d, %v", op, k, i, ok, mi, mok)
				}
				if ok {
					if p := x.pos(i); p != pos {
						t.Fatalf("op %d: pos(%d) = %d, find said %d", op, i, p, pos)
					}
					x.remove(pos, i)
					delete(model, k)
				} else {
					i, err := x.add(k)
					if err != nil {
						t.Fatal(err)
					}
					model[k] = i
				}
				if x.len() != len(model) {
					t.Fatalf("op %d: len = %d, model %d", op, x.len(), len(model))
				}
			}
			for k, i := range model {
				if _, got, ok := x.find(k); !ok || got != i || x.key(i) != k {
					t.Fatalf("final: find(%q) = %d, %v, key %q; want %d", k, got, ok, x.key(got), i)
				}
			}
		})
	}
}

func TestStaleReferences(t *testing.T) {
	t.Parallel()
	x := newIndex()
	i, err := x.add("a")
	if err != nil {
		t.Fatal(err)
	}
	r := ref(i, x.slots.at(i))
	if _, s := x.valid(r); s == nil {
		t.Fatal("a fresh reference is stale")
	}
	x.slots.at(i).bumpGen() // the timer was replaced
	if _, s := x.valid(r); s != nil {
		t.Fatal("a replaced slot's old reference is valid")
	}
	r = ref(i, x.slots.at(i))
	x.remove(x.pos(i), i)
	j, _ := x.add("b") // reuses the slot
	if j != i {
		t.Fatalf("slot %d not reused (got %d)", i, j)
	}
	if _, s := x.valid(r); s != nil {
		t.Fatal("a freed slot's old reference is valid for its next key")
	}
}
