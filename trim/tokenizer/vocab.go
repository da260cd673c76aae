package tokenizer

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// noRank marks "no token" in rank arrays and pair tables.
const noRank = ^uint32(0)

// vocab maps token byte strings to ranks (= token ids). All token bytes live
// in one arena ordered by rank; an open-addressing hash table (linear
// probing, load under 0.4) finds them. A slot holds a token's first 8 bytes,
// so a lookup of a token of up to 8 bytes (most of them) touches one cache
// line, and a miss is told from a hit by the key and a hash tag.
type vocab struct {
	arena    []byte   // token bytes, concatenated in rank order
	offs     []uint32 // token r is arena[offs[r]:offs[r+1]]
	slots    []slot
	mask     uint32
	byteRank [256]uint32 // rank of each single byte (0 if absent, as tiktoken-go's map gives)
	pairRank []uint32    // rank of each two-byte string b0 | b1<<8, or noRank
	maxLen   int         // length of the longest token
	// filter has one bit per hash value (bits 18 and up), set for every
	// token's: most strings that are no token are told in a table small
	// enough to stay in cache (about 20 bits a token, ~5% false positives).
	filter []uint64
	fmask  uint64
}

// slot is one entry of the hash table; meta == 0 marks it empty.
type slot struct {
	key  uint64 // the token's first 8 bytes, little-endian, zero-padded
	meta uint64 // hash tag << 40 | min(len, 255) << 32 | rank+1
}

// probe returns the hash of s, the slot index to start at, the meta value
// (without the rank) that the token s matches, and s's first 8 bytes.
func (v *vocab) probe(s string) (h uint64, i uint32, m, k uint64) {
	k = prefix8(s)
	h = hashString(s, k)
	return h, uint32(h) & v.mask, h>>40<<40 | uint64(min(len(s), 255))<<32, k
}

// filterBit returns the word and bit of hash h in the filter.
func (v *vocab) filterBit(h uint64) (uint64, uint64) {
	b := (h >> 18) & v.fmask
	return b >> 6, 1 << (b & 63)
}

// loadVocab reads the named rank file embedded by tiktoken-go-loader.
func loadVocab(name string) (*vocab, error) {
	data, err := assets.Assets.ReadFile(name + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("read rank file: %w", err)
	}
	return parseVocab(data)
}

// parseVocab parses a .tiktoken rank file: one "base64-token rank" per line,
// ranks strictly increasing.
func parseVocab(data []byte) (*vocab, error) {
	// First pass: count lines and decoded bytes so that every array is
	// allocated once, at its final size.
	lines, total, maxRank := 0, 0, -1
	for rest := data; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(line) == 0 {
			continue
		}
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("rank file line %d: no space", lines+1)
		}
		r, err := strconv.Atoi(string(line[sp+1:]))
		if err != nil {
			return nil, fmt.Errorf("rank file line %d: rank: %w", lines+1, err)
		}
		if r <= maxRank || r >= 1<<31-1 {
			return nil, fmt.Errorf("rank file line %d: rank %d not increasing", lines+1, r)
		}
		maxRank = r
		total += base64.StdEncoding.DecodedLen(sp)
		lines++
	}
	if lines == 0 {
		return nil, errors.New("rank file is empty")
	}

	v := &vocab{
		arena: make([]byte, 0, total),
		offs:  make([]uint32, maxRank+2),
	}
	size := 1
	for size < 2*lines {
		size <<= 1
	}
	v.slots = make([]slot, size)
	v.mask = uint32(size - 1)
	v.filter = make([]uint64, size*8/64) // 8 bits per slot: ~20 bits a token
	v.fmask = uint64(len(v.filter)*64 - 1)

	next := 0 // next rank whose offset is unset
	for rest := data; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(line) == 0 {
			continue
		}
		sp := bytes.IndexByte(line, ' ')
		r, _ := strconv.Atoi(string(line[sp+1:])) // checked in the first pass
		for ; next <= r; next++ {
			v.offs[next] = uint32(len(v.arena)) // missing ranks are empty
		}
		start := len(v.arena)
		n, err := base64.StdEncoding.Decode(v.arena[start:cap(v.arena)], line[:sp])
		if err != nil {
			return nil, fmt.Errorf("rank file rank %d: token: %w", r, err)
		}
		v.arena = v.arena[:start+n]
		v.offs[r+1] = uint32(len(v.arena))
		v.insert(string(v.arena[start:]), uint32(r))
	}
	for r := 0; r+1 < len(v.offs); r++ {
		v.maxLen = max(v.maxLen, int(v.offs[r+1]-v.offs[r]))
	}
	v.pairRank = make([]uint32, 1<<16)
	for b := 0; b < 1<<16; b++ {
		if b < 256 {
			v.byteRank[b] = 0
			if r, ok := v.lookup(string([]byte{byte(b)})); ok {
				v.byteRank[b] = r
			}
		}
		v.pairRank[b] = v.rankOf(string([]byte{byte(b), byte(b >> 8)}))
	}
	return v, nil
}

// insert adds tok with rank r; a later duplicate wins, as in a Go map.
func (v *vocab) insert(tok string, r uint32) {
	h, i, m, k := v.probe(tok)
	w, bit := v.filterBit(h)
	v.filter[w] |= bit
	for ; ; i = (i + 1) & v.mask {
		e := &v.slots[i]
		if e.meta == 0 || (e.meta&^0xffffffff == m && e.key == k && v.token(uint32(e.meta)-1) == tok) {
			*e = slot{key: k, meta: m | uint64(r+1)}
			return
		}
	}
}

// token returns the bytes of rank r.
func (v *vocab) token(r uint32) string {
	return string(v.arena[v.offs[r]:v.offs[r+1]])
}

// lookup returns the rank of s, if s is a token.
func (v *vocab) lookup(s string) (uint32, bool) {
	if len(s) > v.maxLen {
		return noRank, false
	}
	h, i, m, k := v.probe(s)
	if w, bit := v.filterBit(h); v.filter[w]&bit == 0 {
		return noRank, false
	}
	for ; ; i = (i + 1) & v.mask {
		e := &v.slots[i]
		if e.meta == 0 {
			return noRank, false
		}
		if e.meta&^0xffffffff == m && e.key == k {
			r := uint32(e.meta) - 1
			if len(s) <= 8 || string(v.arena[v.offs[r]+8:v.offs[r+1]]) == s[8:] {
				return r, true
			}
		}
	}
}

// rankOf returns the rank of s, or noRank.
func (v *vocab) rankOf(s string) uint32 {
	r, _ := v.lookup(s)
	return r
}

// prefix8 returns the first 8 bytes of s (fewer: zero-padded), little-endian.
func prefix8(s string) uint64 {
	n := len(s)
	if n >= 8 {
		return load64(s)
	}
	if n >= 4 {
		return uint64(load32(s)) | uint64(load32(s[n-4:]))<<(8*(n-4))
	}
	if n > 0 {
		return uint64(s[0]) | uint64(s[n/2])<<(8*(n/2)) | uint64(s[n-1])<<(8*(n-1))
	}
	return 0
}

// hashString is a fast non-cryptographic hash of s, whose first 8 bytes are k.
func hashString(s string, k uint64) uint64 {
	const m1 = 0x9E3779B97F4A7C15
	const m2 = 0xBF58476D1CE4E5B9
	h := (uint64(len(s))*m1 ^ k) * m2
	if len(s) > 8 {
		for s = s[8:]; len(s) >= 8; s = s[8:] {
			h ^= h >> 31
			h = (h ^ load64(s)) * m1
		}
		h ^= h >> 31
		h = (h ^ prefix8(s)) * m1
	}
	h ^= h >> 32
	h *= m2
	h ^= h >> 29
	return h
}

func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func load32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}
