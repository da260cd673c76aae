package tokenizer

import "sync"

// smallPiece is the longest piece merged by the direct method (a scan for the
// lowest-ranked pair per merge, as tiktoken does); longer pieces use a heap.
const smallPiece = 48

// merge appends to dst the tokens of piece (len(piece) >= 2), which is not a
// single token, with the same merges tiktoken's bytePairMerge makes: always
// the adjacent pair whose concatenation has the lowest rank, the leftmost of
// equals first. With countOnly it appends nothing. It returns the number of
// tokens.
func (v *vocab) merge(piece string, dst []int, countOnly bool) ([]int, int) {
	if len(piece) > smallPiece {
		return v.mergeHeap(piece, dst, countOnly)
	}
	var tok [smallPiece]uint32
	m := v.mergeSmall(piece, &tok)
	if !countOnly {
		for _, r := range tok[:m] {
			dst = append(dst, int(r))
		}
	}
	return dst, m
}

// mergeSmall is tiktoken's algorithm on fixed arrays: O(n²), no allocation.
// It leaves the tokens of p in tok and returns their number.
func (v *vocab) mergeSmall(p string, tok *[smallPiece]uint32) int {
	var (
		start [smallPiece + 1]uint8 // start[k]: first byte of part k; start[m] = len(p)
		pair  [smallPiece]uint32    // pair[k]: rank of parts k and k+1 together
	)
	n := len(p)
	m := n // parts
	for k := 0; k < n; k++ {
		start[k] = uint8(k)
		tok[k] = v.byteRank[p[k]]
		pair[k] = noRank
	}
	start[n] = uint8(n)
	for k := 0; k+1 < n; k++ {
		pair[k] = v.pairRank[uint16(p[k])|uint16(p[k+1])<<8]
	}
	for m > 1 {
		best, at := noRank, -1
		for k := 0; k+1 < m; k++ {
			if pair[k] < best {
				best, at = pair[k], k
			}
		}
		if at < 0 {
			break
		}
		tok[at] = best
		// Part at+1 joins part at.
		copy(start[at+1:m], start[at+2:m+1])
		copy(tok[at+1:m-1], tok[at+2:m])
		copy(pair[at+1:m-1], pair[at+2:m])
		m--
		pair[at] = noRank
		if at+1 < m {
			pair[at] = v.rankOf(p[start[at]:start[at+2]])
		}
		if at > 0 {
			pair[at-1] = v.rankOf(p[start[at-1]:start[at+1]])
		}
	}
	return m
}

// heapScratch holds the reusable arrays of mergeHeap.
type heapScratch struct {
	next []int32  // by a part's first byte: the next part's; len(p) at the end
	prev []int32  // the previous part's first byte; -1 at the start
	pair []uint32 // rank of the part with its next, or noRank
	tok  []uint32 // rank of the part
	heap []uint64 // pair rank << 32 | part's first byte, a min-heap
}

var heapPool = sync.Pool{New: func() any { return new(heapScratch) }}

// mergeHeap merges with a min-heap of (rank, position) and a linked list of
// parts: O(n log n). Parts are keyed by their first byte, which never changes
// while the part lives. A heap entry is current when its part is alive and
// the part's pair rank still equals the entry's: a part's pair only grows,
// so its rank never takes an earlier value again.
func (v *vocab) mergeHeap(p string, dst []int, countOnly bool) ([]int, int) {
	sc := heapPool.Get().(*heapScratch)
	defer heapPool.Put(sc)
	n := len(p)
	sc.next = grow(sc.next, n)
	sc.prev = grow(sc.prev, n)
	sc.pair = growU(sc.pair, n)
	sc.tok = growU(sc.tok, n)
	sc.heap = sc.heap[:0]
	next, prev, pair, tok := sc.next, sc.prev, sc.pair, sc.tok
	for k := 0; k < n; k++ {
		next[k] = int32(k + 1)
		prev[k] = int32(k - 1)
		tok[k] = v.byteRank[p[k]]
		pair[k] = noRank
		if k+1 < n {
			if r := v.pairRank[uint16(p[k])|uint16(p[k+1])<<8]; r != noRank {
				pair[k] = r
				sc.heap = append(sc.heap, uint64(r)<<32|uint64(k))
			}
		}
	}
	h := sc.heap
	for k := len(h)/2 - 1; k >= 0; k-- {
		down(h, k)
	}
	// end returns the end of the pair that starts at part k.
	end := func(k int32) int32 {
		nk := next[k]
		if nk >= int32(n) {
			return -1
		}
		return next[nk]
	}
	for len(h) > 0 {
		e := h[0]
		h[0] = h[len(h)-1]
		h = h[:len(h)-1]
		if len(h) > 0 {
			down(h, 0)
		}
		k, r := int32(uint32(e)), uint32(e>>32)
		if pair[k] != r { // stale (a dead part's pair is noRank)
			continue
		}
		// Part next[k] joins part k.
		j := next[k]
		tok[k] = r
		pair[j] = noRank
		next[k] = next[j]
		if next[k] < int32(n) {
			prev[next[k]] = k
		}
		pair[k] = noRank
		if e := end(k); e >= 0 {
			if r, ok := v.lookup(p[k:e]); ok {
				pair[k] = r
				h = push(h, uint64(r)<<32|uint64(k))
			}
		}
		if pk := prev[k]; pk >= 0 {
			pair[pk] = noRank
			if r, ok := v.lookup(p[pk:end(pk)]); ok {
				pair[pk] = r
				h = push(h, uint64(r)<<32|uint64(pk))
			}
		}
	}
	sc.heap = h
	count := 0
	for k := int32(0); k < int32(n); k = next[k] {
		if !countOnly {
			dst = append(dst, int(tok[k]))
		}
		count++
	}
	return dst, count
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func growU(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, n)
	}
	return s[:n]
}

func push(h []uint64, e uint64) []uint64 {
	h = append(h, e)
	for k := len(h) - 1; k > 0; {
		parent := (k - 1) / 2
		if h[parent] <= e {
			break
		}
		h[k] = h[parent]
		k = parent
		h[k] = e
	}
	return h
}

func down(h []uint64, k int) {
	e := h[k]
	for {
		c := 2*k + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if h[c] >= e {
			break
		}
		h[k] = h[c]
		k = c
	}
	h[k] = e
}
