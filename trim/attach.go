package trim

import (
	"encoding/base64"
	"slices"
	"strconv"
	"taskgate/internal/jsonstr"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// shareReq is one budget's attachment share: its counter and tokens.
type shareReq struct {
	c     counter
	share int
}

// attachment is one attached text of a message.
type attachment struct {
	start, end int    // the raw JSON string to replace, in the message's raw
	text       string // the decoded text
	prefix     string // a text file's data URL prefix ("data:text/plain;base64,"); "" for a text part
	keep       int    // bytes of text kept
}

// pieceSize is the size of the pieces long texts are counted in.
const pieceSize = 1024

// textTokens counts an attached text: exactly for short ones; long ones are
// counted in pieces of about pieceSize bytes, cut after line breaks where
// possible, which can differ from the whole text's count by about a token a
// piece. Counts are cached.
func textTokens(c counter, text string) int {
	if !c.exact() {
		return c.text(text)
	}
	if len(text) <= 4*pieceSize {
		return cachedCount(c, hashString(text), text, func() int { return c.text(text) })
	}
	return cachedCount(c, hashString(text), text, func() int {
		n := 0
		for _, k := range pieceCounts(c, text, splitPieces(text)) {
			n += k
		}
		return n
	})
}

// splitPieces returns the ends of text's pieces: about pieceSize bytes each,
// ending after a newline that is followed by a non-space where there is one
// in the next pieceSize bytes, always on a character boundary.
func splitPieces(text string) []int {
	ends := make([]int, 0, len(text)/pieceSize+1)
	start := 0
	for start < len(text) {
		if len(text)-start <= 2*pieceSize {
			ends = append(ends, len(text))
			break
		}
		end := -1
		window := text[start+pieceSize : start+2*pieceSize]
		for i := 0; i < len(window)-1; i++ {
			if window[i] == '\n' && window[i+1] > ' ' {
				end = start + pieceSize + i + 1
				break
			}
		}
		if end < 0 {
			end = runeFloor(text, start+pieceSize)
			if end <= start {
				end = start + pieceSize
			}
		}
		ends = append(ends, end)
		start = end
	}
	return ends
}

// pieceCounts counts each piece of text (ends from splitPieces), cached.
func pieceCounts(c counter, text string, ends []int) []int {
	counts := make([]int, len(ends))
	start := 0
	for i, end := range ends {
		p := text[start:end]
		counts[i] = cachedCount(c, hashString(p), p, func() int { return c.text(p) })
		start = end
	}
	return counts
}

// runeFloor returns the largest character boundary of s at or before n.
func runeFloor(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	if n <= 0 {
		return 0
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// prefixKey caches fitPrefix results.
type prefixKey struct {
	hash  uint64
	n     uint32
	limit int32
	tok   uint8
}

var prefixes = newLRU[prefixKey, int32](1 << 12)

// fitPrefix returns the length in bytes of the longest prefix of text, on a
// character boundary, whose tokens do not pass limit.
func fitPrefix(c counter, text string, limit int) int {
	if limit <= 0 {
		return 0
	}
	if !c.exact() {
		return runeFloor(text, limit*4)
	}
	h := hashString(text)
	k := prefixKey{hash: h, n: uint32(len(text)), limit: int32(min(limit, 1<<30)), tok: c.id}
	if v, ok := prefixes.get(h, k); ok {
		return int(v)
	}
	p := fitPrefixSlow(c, text, limit)
	prefixes.put(h, k, int32(p))
	return p
}

func fitPrefixSlow(c counter, text string, limit int) int {
	if c.text(text) <= limit {
		return len(text)
	}
	ends := splitPieces(text)
	counts := pieceCounts(c, text, ends)
	target := limit
	for try := 0; try < 4 && target > 0; try++ {
		p := piecePrefix(c, text, ends, counts, target)
		got := c.text(text[:p])
		if got <= limit {
			return p
		}
		target -= got - limit
	}
	// Every token is at least a byte: this prefix always fits.
	return runeFloor(text, limit)
}

// piecePrefix finds the end of the prefix whose piece-wise count is the
// largest not over target: whole pieces, then a bisection inside the piece
// where the count passes target.
func piecePrefix(c counter, text string, ends, counts []int, target int) int {
	cum, k, start := 0, 0, 0
	for k < len(ends) && cum+counts[k] <= target {
		cum += counts[k]
		start = ends[k]
		k++
	}
	if k == len(ends) {
		return len(text)
	}
	piece := text[start:ends[k]]
	lo, hi := 0, len(piece) // piece[:lo] fits, piece[:hi] does not
	for {
		mid := runeFloor(piece, lo+(hi-lo)/2)
		if mid <= lo {
			// Try the next boundary after lo.
			mid = lo + 1
			for mid < hi && !utf8.RuneStart(piece[mid]) {
				mid++
			}
			if mid >= hi {
				break
			}
		}
		if cum+c.text(piece[:mid]) <= target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return start + lo
}

// waterFill divides share among parts of the given sizes max-min fairly:
// parts under an equal share keep their size, the rest split what is left.
func waterFill(sizes []int, share int) []int {
	alloc := make([]int, len(sizes))
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return sizes[a] - sizes[b] })
	left := share
	for k, i := range order {
		fair := left / (len(order) - k)
		alloc[i] = min(sizes[i], fair)
		left -= alloc[i]
	}
	return alloc
}

// cutMarker is the line that follows a cut part.
func cutMarker(shown, total int) string {
	return "\n[cut: the first " + strconv.Itoa(shown) + " of " + strconv.Itoa(total) + " characters are shown]"
}

// cutMessage cuts the attachments of a message's raw JSON to the shares;
// it returns the new raw JSON and how many parts were cut (0: raw as is).
func cutMessage(raw string, reqs []shareReq) (string, int) {
	content := gjson.Get(raw, "content")
	if !content.IsArray() {
		return raw, 0
	}
	var atts []attachment
	texts := 0
	content.ForEach(func(_, p gjson.Result) bool {
		switch p.Get("type").Str {
		case "text":
			texts++
			v := p.Get("text")
			if texts > 1 && v.Type == gjson.String {
				if off := offsetIn(v.Raw, raw); off >= 0 {
					atts = append(atts, attachment{start: off, end: off + len(v.Raw), text: v.Str, keep: len(v.Str)})
				}
			}
		case "file":
			v := p.Get("file.file_data")
			if v.Type != gjson.String {
				break
			}
			if prefix, text, ok := textFile(v.Raw); ok {
				if off := offsetIn(v.Raw, raw); off >= 0 {
					atts = append(atts, attachment{start: off, end: off + len(v.Raw), text: text, prefix: prefix, keep: len(text)})
				}
			}
		}
		return true
	})
	if len(atts) == 0 {
		return raw, 0
	}
	sizes := make([]int, len(atts))
	for _, r := range reqs {
		total := 0
		for i := range atts {
			sizes[i] = textTokens(r.c, atts[i].text)
			total += sizes[i]
		}
		if total <= r.share {
			continue
		}
		alloc := waterFill(sizes, r.share)
		for i := range atts {
			if sizes[i] > alloc[i] {
				atts[i].keep = min(atts[i].keep, fitPrefix(r.c, atts[i].text, alloc[i]))
			}
		}
	}
	cut := 0
	var b []byte
	last := 0
	for _, a := range atts {
		if a.keep >= len(a.text) {
			continue
		}
		if b == nil {
			b = make([]byte, 0, len(raw))
		}
		cut++
		s := a.text[:a.keep] + cutMarker(utf8.RuneCountInString(a.text[:a.keep]), utf8.RuneCountInString(a.text))
		b = append(b, raw[last:a.start]...)
		if a.prefix != "" {
			b = append(b, '"')
			b = append(b, a.prefix...)
			b = base64.StdEncoding.AppendEncode(b, []byte(s))
			b = append(b, '"')
		} else {
			b = jsonstr.Append(b, s)
		}
		last = a.end
	}
	if cut == 0 {
		return raw, 0
	}
	b = append(b, raw[last:]...)
	return string(b), cut
}
