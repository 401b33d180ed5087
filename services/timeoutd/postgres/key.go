package postgres

import (
	"bytes"
	"encoding/hex"
	"slices"
	"strings"
)

// The key column is bytea: a key that is a canonical UUID (36 characters of
// lower-case hex with dashes after the 8th, 12th, 16th and 20th digit, as
// the orders service's ids) is stored as uuidTag and its 16 bytes, 17 bytes
// in all instead of 36; any other key as its own bytes. A valid key
// (events.ValidKey) is ASCII letters, digits, '-' and '_', so it never
// starts with uuidTag and the two forms cannot collide. Within each form
// the order of the stored bytes is the order of the keys (hex digits sort
// like the bytes they encode); UUIDs sort before every other key.
const uuidTag = 0x00

// uuidLen is the length of a canonical UUID.
const uuidLen = 36

// isDash reports whether position i of a canonical UUID holds a dash.
func isDash(i int) bool { return i == 8 || i == 13 || i == 18 || i == 23 }

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// encodeKey returns the stored form of key.
func encodeKey(key string) []byte {
	if len(key) == uuidLen && uuidPrefix(key) {
		b, _ := hex.AppendDecode([]byte{uuidTag}, []byte(strings.ReplaceAll(key, "-", ""))) // cannot fail: checked
		return b
	}
	return []byte(key)
}

// decodeKey returns the key whose stored form is b.
func decodeKey(b []byte) string {
	if len(b) != 17 || b[0] != uuidTag {
		return string(b)
	}
	h := hex.EncodeToString(b[1:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// uuidPrefix reports whether p can begin a canonical UUID.
func uuidPrefix(p string) bool {
	if len(p) > uuidLen {
		return false
	}
	for i := 0; i < len(p); i++ {
		if isDash(i) != (p[i] == '-') || !isDash(i) && !isLowerHex(p[i]) {
			return false
		}
	}
	return true
}

// prefixRanges returns the ranges [lo, hi) of stored keys that hold the keys
// starting with prefix: the keys stored as their own bytes, and, if prefix
// can begin a canonical UUID, the UUIDs. A nil hi is unbounded.
func prefixRanges(prefix string) (plain [2][]byte, uuids [2][]byte, ok bool) {
	// Keys are ASCII below 0x7f: every key starting with prefix sorts in
	// [prefix, prefix+0x7f).
	plain = [2][]byte{[]byte(prefix), append([]byte(prefix), 0x7f)}
	if !uuidPrefix(prefix) {
		return plain, uuids, false
	}
	digits := strings.ReplaceAll(prefix, "-", "")
	lo, _ := hex.AppendDecode([]byte{uuidTag}, []byte(digits[:len(digits)&^1])) // cannot fail: checked
	hi := slices.Clone(lo)
	if len(digits)%2 == 1 { // a half byte: its high nibble is fixed
		n, _ := hex.DecodeString(digits[len(digits)-1:] + "0")
		lo, hi = append(lo, n[0]), append(hi, n[0]|0x0f)
	}
	// hi is the last UUID with this prefix; the range ends just after it.
	hi = append(hi, bytes.Repeat([]byte{0xff}, 17-len(hi))...)
	return plain, [2][]byte{lo, append(hi, 0x00)}, true
}

// keyDest scans a stored key into the key it encodes: pass (*keyDest)(&s)
// to Scan for a string s.
type keyDest string

// ScanBytes implements pgtype.BytesScanner.
func (k *keyDest) ScanBytes(b []byte) error {
	*k = keyDest(decodeKey(b))
	return nil
}
