package trim

import (
	"encoding/base64"
	"fmt"
	"image"
	_ "image/gif"  // GIF sizes for the image formula
	_ "image/jpeg" // JPEG sizes for the image formula
	_ "image/png"  // PNG sizes for the image formula
	"strings"
	"unicode/utf8"
	"unsafe"

	"taskgate/trim/tokenizer"
)

// Estimate is the tokenizer name of the byte-based estimate.
const Estimate = "estimate"

// Fixed figures of the counting rule (see the package doc).
const (
	// LowDetailImageTokens is an image at detail "low".
	LowDetailImageTokens = 85
	// UnknownImageTokens is an image of unknown size at detail "high" or
	// "auto": the most the tile formula can give.
	UnknownImageTokens = 85 + 170*8
	// UnknownFileTokens is a file of unknown size (a file_id), and the least
	// a binary file counts.
	UnknownFileTokens = 1105
	// FileBytesPerToken is the decoded bytes of a binary file per token.
	FileBytesPerToken = 32
	// AudioBytesPerToken is the decoded bytes of input audio per token.
	AudioBytesPerToken = 1000

	perMessage = 3 // tokens every message costs
	perName    = 1 // tokens a name costs besides its text
	priming    = 3 // tokens priming the reply
	estPerMsg  = 4 // the estimate's tokens per message
)

// counter counts with one tokenizer (id 0: the estimate). Its encoding is
// loaded on the first text it must count, so a call settled by the cheap
// bound never loads a table.
type counter struct {
	id   uint8
	name string
}

// counterIDs numbers the tokenizers for cache keys and per-message counts.
var counterIDs = map[string]uint8{Estimate: 0, tokenizer.O200kBase: 1, tokenizer.CL100kBase: 2}

const numCounters = 3

// getCounter returns the counter of a tokenizer name.
func getCounter(name string) (counter, error) {
	id, ok := counterIDs[name]
	if !ok {
		return counter{}, fmt.Errorf("trim: unknown tokenizer %q (want o200k_base, cl100k_base or estimate)", name)
	}
	if id == 0 {
		return counter{}, nil
	}
	return counter{id: id, name: name}, nil
}

// exact reports whether the counter is a real tokenizer.
func (c counter) exact() bool { return c.id != 0 }

// text counts a text: tokens, or ceil(bytes/4) for the estimate.
func (c counter) text(s string) int {
	if c.id == 0 {
		return ceilDiv(len(s), 4)
	}
	if s == "" {
		return 0
	}
	enc, err := tokenizer.Get(c.name) // loaded once; a map lookup after that
	if err != nil {
		return ceilDiv(len(s), 4)
	}
	return enc.Count(s)
}

// CountText counts streamed text with the named tokenizer ("o200k_base",
// "cl100k_base" or "estimate"), for settling a stream that reported no
// usage. An unknown tokenizer, or one that fails to load, counts as the
// estimate.
func CountText(tokenizer, text string) int {
	c, err := getCounter(tokenizer)
	if err != nil {
		c = counter{}
	}
	return c.text(text)
}

func ceilDiv(a, b int) int {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// bytesString views b as a string without copying; the string must not
// outlive b's contents or be kept after the call.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// offsetIn returns where sub, a substring of base, starts in base, or -1.
func offsetIn(sub, base string) int {
	if len(sub) == 0 || len(base) == 0 {
		return -1
	}
	d := int(uintptr(unsafe.Pointer(unsafe.StringData(sub))) - uintptr(unsafe.Pointer(unsafe.StringData(base))))
	if d < 0 || d+len(sub) > len(base) {
		return -1
	}
	return d
}

// ImageTokens is OpenAI's tile formula for an image of w×h pixels at the
// given detail ("low", "high", "auto" or ""). A size of 0 means unknown.
func ImageTokens(w, h int, detail string) int {
	if detail == "low" {
		return LowDetailImageTokens
	}
	if w <= 0 || h <= 0 {
		return UnknownImageTokens
	}
	if w > 2048 || h > 2048 {
		m := max(w, h)
		w, h = w*2048/m, h*2048/m
	}
	if s := min(w, h); s > 768 {
		w, h = w*768/s, h*768/s
	}
	w, h = max(w, 1), max(h, 1)
	tiles := ceilDiv(w, 512) * ceilDiv(h, 512)
	return 85 + 170*tiles
}

// maxImageHeader is how much of a data URL's base64 is read for the size.
const maxImageHeader = 96 << 10

// imageSize reads the size of a PNG, JPEG or GIF image from the start of a
// base64 data URL given as its raw JSON string (with quotes); ok is false
// for anything else.
func imageSize(rawURL string) (w, h int, ok bool) {
	if len(rawURL) < 2 || rawURL[0] != '"' {
		return 0, 0, false
	}
	s := rawURL[1 : len(rawURL)-1]
	if !strings.HasPrefix(s, "data:") {
		return 0, 0, false
	}
	comma := strings.IndexByte(s, ',')
	if comma < 0 || comma > 200 || !strings.HasSuffix(s[:comma], ";base64") {
		return 0, 0, false
	}
	data := s[comma+1:]
	if len(data) > maxImageHeader {
		data = data[:maxImageHeader]
	}
	if strings.IndexByte(data, '\\') >= 0 {
		// JSON may escape "/" as "\/"; any other escape is not base64.
		data = strings.ReplaceAll(data, `\/`, "/")
		if strings.IndexByte(data, '\\') >= 0 {
			return 0, 0, false
		}
	}
	cfg, _, err := image.DecodeConfig(base64.NewDecoder(base64.StdEncoding, strings.NewReader(data)))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0, false
	}
	return cfg.Width, cfg.Height, true
}

// decodedLen is the decoded size of a base64 payload given as a raw JSON
// string, bare or as a data URL.
func decodedLen(raw string) int {
	data := raw
	if _, d, ok := dataURL(raw); ok {
		data = d
	} else if len(raw) >= 2 {
		data = raw[1 : len(raw)-1]
	}
	data = strings.TrimRight(data, "=")
	return len(data) * 3 / 4
}

// BinaryFileTokens is the count of a binary file of n decoded bytes.
func BinaryFileTokens(n int) int { return max(UnknownFileTokens, ceilDiv(n, FileBytesPerToken)) }

// AudioTokens is the count of input audio of n decoded bytes.
func AudioTokens(n int) int { return ceilDiv(n, AudioBytesPerToken) }

// dataURL splits a raw JSON string holding "data:<type>;base64,<data>" into
// its media type and the raw base64 data; ok is false for anything else.
func dataURL(raw string) (mediaType, data string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", "", false
	}
	s := raw[1 : len(raw)-1]
	if !strings.HasPrefix(s, "data:") {
		return "", "", false
	}
	comma := strings.IndexByte(s, ',')
	if comma < 0 || comma > 300 || !strings.HasSuffix(s[:comma], ";base64") {
		return "", "", false
	}
	mt := s[len("data:") : comma-len(";base64")]
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	return strings.ToLower(strings.TrimSpace(mt)), s[comma+1:], true
}

// textMediaType reports whether a file of this media type is text.
func textMediaType(mt string) bool {
	if strings.HasPrefix(mt, "text/") {
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/x-yaml", "application/yaml",
		"application/x-ndjson", "application/csv", "application/javascript", "application/x-sh",
		"application/sql", "application/toml":
		return true
	}
	return strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml")
}

// textFile decodes a text file's data URL (raw JSON string); ok is false when
// it is not a text file or does not decode to valid UTF-8.
func textFile(raw string) (prefix, text string, ok bool) {
	mt, data, isURL := dataURL(raw)
	if !isURL || !textMediaType(mt) {
		return "", "", false
	}
	if strings.IndexByte(data, '\\') >= 0 {
		data = strings.ReplaceAll(data, `\/`, "/")
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(data, "="))
		if err != nil {
			return "", "", false
		}
	}
	if !utf8.Valid(b) {
		return "", "", false
	}
	s := raw[1 : len(raw)-1]
	return s[:strings.IndexByte(s, ',')+1], string(b), true
}
