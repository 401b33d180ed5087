package postgres

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEncodeKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		size int // stored bytes
	}{
		{"019a4c1e-7b2f-7c3d-8e4f-a0b1c2d3e4f5", 17},
		{"00000000-0000-0000-0000-000000000000", 17},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", 17},
		{"019A4C1E-7B2F-7C3D-8E4F-A0B1C2D3E4F5", 36}, // upper case: another key
		{"019a4c1e7b2f7c3d8e4fa0b1c2d3e4f5", 32},     // no dashes
		{"019a4c1e-7b2f-7c3d-8e4f-a0b1c2d3e4f", 35},
		{"019a4c1e-7b2f-7c3d-8e4f-a0b1c2d3e4f5-", 37},
		{"019a4c1e_7b2f-7c3d-8e4f-a0b1c2d3e4f5", 36},
		{"o-1", 3},
		{"k1763900000-42", 14},
	}
	for _, tc := range tests {
		b := encodeKey(tc.key)
		if len(b) != tc.size {
			t.Errorf("encodeKey(%q) is %d bytes, want %d", tc.key, len(b), tc.size)
		}
		if got := decodeKey(b); got != tc.key {
			t.Errorf("decodeKey(encodeKey(%q)) = %q", tc.key, got)
		}
	}
}

// randomKey returns a canonical UUID or, half the time, another valid key,
// from an alphabet small enough that prefixes are shared.
func randomKey(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		var b strings.Builder
		for i := range uuidLen {
			if isDash(i) {
				b.WriteByte('-')
				continue
			}
			b.WriteByte("0f8a"[r.IntN(4)])
		}
		return b.String()
	}
	var b strings.Builder
	for range 1 + r.IntN(8) {
		b.WriteByte("0fa-_Zz"[r.IntN(7)])
	}
	return b.String()
}

// TestKeyOrderAndPrefixes: within each stored form the byte order is the
// keys' order, and a key starts with a prefix exactly when its stored form
// lies in one of prefixRanges' ranges.
func TestKeyOrderAndPrefixes(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, 400)
	for i := range keys {
		keys[i] = randomKey(r)
	}
	in := func(b []byte, rg [2][]byte) bool { return bytes.Compare(b, rg[0]) >= 0 && bytes.Compare(b, rg[1]) < 0 }
	for _, a := range keys {
		ea := encodeKey(a)
		for _, b := range keys[:50] {
			eb := encodeKey(b)
			if (ea[0] == uuidTag) == (eb[0] == uuidTag) && bytes.Compare(ea, eb) != strings.Compare(a, b) {
				t.Fatalf("order of %q, %q not kept: %x, %x", a, b, ea, eb)
			}
		}
		for n := 1; n <= len(a); n++ {
			for _, p := range []string{a[:n], a[:n-1] + "f", a[:n-1] + "_"} {
				plain, uuids, hasUUIDs := prefixRanges(p)
				got := in(ea, plain) || hasUUIDs && in(ea, uuids)
				if want := strings.HasPrefix(a, p); got != want {
					t.Fatalf("key %q prefix %q: in ranges %v, has prefix %v (ranges %x %x)", a, p, got, want, plain, uuids)
				}
			}
		}
	}
	for _, p := range []string{"0", "01", "0123456", "01234567-", "01234567-89ab-cdef-0123-456789abcdef"} {
		if _, _, ok := prefixRanges(p); !ok {
			t.Errorf("prefixRanges(%q): no UUID range", p)
		}
	}
	for _, p := range []string{"0123456-", "A", "01234567-89ab-cdef-0123-456789abcdef0", "g"} {
		if _, _, ok := prefixRanges(p); ok {
			t.Errorf("prefixRanges(%q): a UUID range", p)
		}
	}
}

// TestSQLKeyFunctionsMatch: migration 00003's timeout_key and
// timeout_key_text encode and decode as encodeKey and decodeKey do.
func TestSQLKeyFunctionsMatch(t *testing.T) {
	t.Parallel()
	_, pool := newStore(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	keys := []string{"o-1", "019a4c1e-7b2f-7c3d-8e4f-a0b1c2d3e4f5", "019A4C1E-7B2F-7C3D-8E4F-A0B1C2D3E4F5", "a_b-C9"}
	for range 100 {
		keys = append(keys, randomKey(r))
	}
	for _, k := range keys {
		var stored []byte
		var back string
		if err := pool.QueryRow(ctx, `SELECT timeout_key($1), timeout_key_text($2)`, k, encodeKey(k)).Scan(&stored, &back); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(stored, encodeKey(k)) || back != k {
			t.Errorf("key %q: SQL stores %x (Go %x), reads back %q", k, stored, encodeKey(k), back)
		}
	}
}
