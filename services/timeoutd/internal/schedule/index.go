package schedule

import (
	"encoding/binary"
	"errors"
	"hash/maphash"
)

// The in-memory index of pending timeouts holds no Go pointer per timeout,
// so that the garbage collector neither scans nor counts millions of
// objects: slots live in fixed-size chunks of a slab addressed by a uint32
// index, keys in a byte arena, and the key → index map is an
// open-addressing table of uint64 words. Memory per pending timeout: a
// 32-byte slot, the key's bytes (at least 4), and 8 bytes of table at a
// load factor between 3/8 and 3/4 (11–21 B); pkg/wheel adds its 32-byte
// entry. None of these types is synchronized: schedule's mutex guards them.

// errIndexFull is returned when the slab or the key arena reached the
// bounds of their 32-bit addresses (4 Gi slots, 4 GiB of keys).
var errIndexFull = errors.New("timeoutd: in-memory index full")

const (
	slotChunkBits = 16
	slotChunk     = 1 << slotChunkBits
	maxSlots      = 1<<32 - 1

	arenaChunkBits = 20
	arenaChunk     = 1 << arenaChunkBits // 1 MiB
	maxArenaChunks = 1 << (32 - arenaChunkBits)
	// minKeyAlloc is the smallest key allocation: a freed block stores the
	// next free block's offset in its first 4 bytes.
	minKeyAlloc = 4
	// maxKeyAlloc bounds a key's length (events.MaxKeyLen is 128) so that
	// it fits the 8 bits of slot.meta.
	maxKeyAlloc = 255

	tableMinSize = 1024
)

// slot is one pending timeout: 32 bytes, no pointer.
type slot struct {
	deadline int64  // Unix nanoseconds, wall clock
	version  int64  // the command's version
	h        uint64 // wheel.Handle of its timer; 0 when none (held)
	// meta packs the key's arena offset (bits 0–31), the key's length
	// (bits 32–39, 0 when the slot is free: then the offset field holds
	// the next free index + 1), the slot's generation (bits 40–62),
	// bumped whenever the slot's timer is replaced or the slot is freed, so
	// that a stale reference held by the wheel is recognised, and
	// Entry.Plain (bit 63).
	meta uint64
}

const (
	genShift = 40
	genMask  = (1<<23 - 1) << genShift
	plainBit = 1 << 63
)

func (s *slot) keyOff() uint32 { return uint32(s.meta) }
func (s *slot) keyLen() int    { return int(uint8(s.meta >> 32)) }
func (s *slot) gen() uint32    { return uint32(s.meta & genMask >> genShift) }
func (s *slot) plain() bool    { return s.meta&plainBit != 0 }

// bumpGen invalidates every reference to the slot.
func (s *slot) bumpGen() { s.meta = s.meta&^genMask | (s.meta+1<<genShift)&genMask }

// setPlain records Entry.Plain.
func (s *slot) setPlain(plain bool) {
	s.meta &^= plainBit
	if plain {
		s.meta |= plainBit
	}
}

// ref is what the wheel holds for a slot: its generation (high 32 bits)
// and its index (low 32 bits).
func ref(i uint32, s *slot) uint64 { return uint64(s.gen())<<32 | uint64(i) }

// slab is the chunked array of slots with a free list; growth never copies.
type slab struct {
	chunks []*[slotChunk]slot
	used   uint32 // slots ever allocated
	free   uint32 // first free index + 1; 0: none
}

func (b *slab) at(i uint32) *slot { return &b.chunks[i>>slotChunkBits][i&(slotChunk-1)] }

// alloc returns a free slot's index.
func (b *slab) alloc() (uint32, error) {
	if b.free != 0 {
		i := b.free - 1
		b.free = b.at(i).keyOff()
		return i, nil
	}
	if b.used == maxSlots {
		return 0, errIndexFull
	}
	i := b.used
	if int(i>>slotChunkBits) == len(b.chunks) {
		b.chunks = append(b.chunks, new([slotChunk]slot))
	}
	b.used++
	return i, nil
}

// release frees slot i: its generation is bumped and the rest cleared.
func (b *slab) release(i uint32) {
	s := b.at(i)
	s.bumpGen()
	s.meta = s.meta&genMask | uint64(b.free)
	s.deadline, s.version, s.h = 0, 0, 0
	b.free = i + 1
}

// arena stores keys in 1 MiB chunks, with one free list per allocation
// size: order ids mostly share one length, so a freed key's bytes are
// reused by the next key of that length and the arena needs no compaction.
type arena struct {
	chunks [][]byte
	tail   int                     // bytes used in the last chunk
	free   [maxKeyAlloc + 1]uint32 // per size: first free block's offset + 1
}

func allocSize(n int) int { return max(n, minKeyAlloc) }

func (a *arena) bytes(off uint32, n int) []byte {
	c := a.chunks[off>>arenaChunkBits]
	p := int(off & (arenaChunk - 1))
	return c[p : p+n : p+n]
}

// alloc copies key into the arena and returns its offset.
func (a *arena) alloc(key string) (uint32, error) {
	size := allocSize(len(key))
	if size > maxKeyAlloc {
		return 0, errors.New("timeoutd: key longer than 255 bytes")
	}
	var off uint32
	if head := a.free[size]; head != 0 {
		off = head - 1
		a.free[size] = binary.LittleEndian.Uint32(a.bytes(off, minKeyAlloc))
	} else {
		if len(a.chunks) == 0 || a.tail+size > arenaChunk {
			if len(a.chunks) == maxArenaChunks {
				return 0, errIndexFull
			}
			a.chunks = append(a.chunks, make([]byte, arenaChunk))
			a.tail = 0
		}
		off = uint32(len(a.chunks)-1)<<arenaChunkBits | uint32(a.tail)
		a.tail += size
	}
	copy(a.bytes(off, len(key)), key)
	return off, nil
}

// release puts the n-byte key at off on its size's free list.
func (a *arena) release(off uint32, n int) {
	size := allocSize(n)
	binary.LittleEndian.PutUint32(a.bytes(off, minKeyAlloc), a.free[size])
	a.free[size] = off + 1
}

// table maps a key's hash to its slot index by linear probing, without
// tombstones (deletion shifts the following entries back). An entry is
// the key's 32-bit hash (high half; its low bits are the home position)
// and the slot index + 1 (low half); 0 is empty. It grows ×2 past a load
// of 3/4, rehashing from the stored hashes without reading the keys.
type table struct {
	e    []uint64
	mask uint64
	n    int
}

func tableEntry(hash uint32, i uint32) uint64 { return uint64(hash)<<32 | uint64(i+1) }

func (t *table) home(e uint64) uint64 { return (e >> 32) & t.mask }

// insert adds an entry known to be absent.
func (t *table) insert(e uint64) {
	if (t.n+1)*4 > len(t.e)*3 {
		t.grow()
	}
	p := t.home(e)
	for t.e[p] != 0 {
		p = (p + 1) & t.mask
	}
	t.e[p] = e
	t.n++
}

func (t *table) grow() {
	old := t.e
	size := max(tableMinSize, 2*len(old))
	t.e, t.mask, t.n = make([]uint64, size), uint64(size-1), 0
	for _, e := range old {
		if e != 0 {
			t.insert(e)
		}
	}
}

// deleteAt empties position p and shifts back the entries of its probe
// run that would otherwise become unreachable.
func (t *table) deleteAt(p uint64) {
	t.n--
	for {
		t.e[p] = 0
		j := p
		for {
			j = (j + 1) & t.mask
			e := t.e[j]
			if e == 0 {
				return
			}
			// e stays unless its home is outside the cyclic range (p, j].
			h := t.home(e)
			if (j > p && (h <= p || h > j)) || (j < p && h <= p && h > j) {
				t.e[p] = e
				p = j
				break
			}
		}
	}
}

// index is the key → slot map of the schedule.
type index struct {
	seed  maphash.Seed
	slots slab
	keys  arena
	t     table
}

func newIndex() index { return index{seed: maphash.MakeSeed()} }

func (x *index) len() int { return x.t.n }

func (x *index) hash(key string) uint32 { return uint32(maphash.String(x.seed, key)) }

// key returns slot i's key as a new string.
func (x *index) key(i uint32) string {
	s := x.slots.at(i)
	return string(x.keys.bytes(s.keyOff(), s.keyLen()))
}

// find returns the table position and slot index of key.
func (x *index) find(key string) (pos uint64, i uint32, ok bool) {
	if x.t.n == 0 {
		return 0, 0, false
	}
	hash := x.hash(key)
	for p := uint64(hash) & x.t.mask; ; p = (p + 1) & x.t.mask {
		e := x.t.e[p]
		if e == 0 {
			return 0, 0, false
		}
		if uint32(e>>32) != hash {
			continue
		}
		i := uint32(e) - 1
		s := x.slots.at(i)
		if s.keyLen() == len(key) && string(x.keys.bytes(s.keyOff(), len(key))) == key {
			return p, i, true
		}
	}
}

// add creates the slot of key, which must be absent, and returns its index.
func (x *index) add(key string) (uint32, error) {
	off, err := x.keys.alloc(key)
	if err != nil {
		return 0, err
	}
	i, err := x.slots.alloc()
	if err != nil {
		x.keys.release(off, len(key))
		return 0, err
	}
	s := x.slots.at(i)
	s.meta = s.meta&genMask | uint64(len(key))<<32 | uint64(off)
	x.t.insert(tableEntry(x.hash(key), i))
	return i, nil
}

// pos returns the table position of slot i, which is in use.
func (x *index) pos(i uint32) uint64 {
	s := x.slots.at(i)
	p := uint64(uint32(maphash.Bytes(x.seed, x.keys.bytes(s.keyOff(), s.keyLen())))) & x.t.mask
	for uint32(x.t.e[p]) != i+1 {
		p = (p + 1) & x.t.mask
	}
	return p
}

// remove deletes slot i (at table position pos) and frees its key.
func (x *index) remove(pos uint64, i uint32) {
	s := x.slots.at(i)
	x.keys.release(s.keyOff(), s.keyLen())
	x.slots.release(i)
	x.t.deleteAt(pos)
}

// valid returns the slot r refers to, or nil when r is stale.
func (x *index) valid(r uint64) (uint32, *slot) {
	i := uint32(r)
	if i >= x.slots.used {
		return 0, nil
	}
	s := x.slots.at(i)
	if s.keyLen() == 0 || s.gen() != uint32(r>>32) {
		return 0, nil
	}
	return i, s
}
