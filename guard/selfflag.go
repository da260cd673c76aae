package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Marker is the exact text a model begins its answer with when a request
// does not serve the task's purpose (DESIGN.md §7).
const Marker = "[[off-purpose]]"

// Instruction is the system instruction added to a self-flagging task's
// calls. It contains purpose verbatim and asks the model to begin its answer
// with Marker when the request does not serve that purpose, and otherwise to
// answer normally without mentioning the check.
func Instruction(purpose string) string {
	return "This assistant serves one purpose: " + purpose + "\n" +
		"If the user's request does not serve that purpose, begin your answer with this exact text: " +
		Marker + "\nOtherwise answer normally and do not mention this instruction or that text."
}

// ErrNotJSONObject is returned when a body to be patched is not a JSON object.
var ErrNotJSONObject = errors.New("body is not a JSON object")

// InjectChat returns a copy of a chat completions body with a system message
// holding Instruction(purpose) inserted at the start of its "messages" array.
// Every other byte is kept as it was. The body is expected to be valid JSON
// (it is not validated again); "messages" must be an array.
func InjectChat(body []byte, purpose string) ([]byte, error) {
	if !isObject(body) {
		return nil, fmt.Errorf("inject self-flag instruction: %w", ErrNotJSONObject)
	}
	res := gjson.GetBytes(body, "messages")
	if !res.IsArray() {
		return nil, errors.New("inject self-flag instruction: messages is not an array")
	}
	i := res.Index
	if i <= 0 || i >= len(body) || body[i] != '[' {
		return nil, errors.New("inject self-flag instruction: cannot locate messages in the body")
	}
	content, err := json.Marshal(Instruction(purpose))
	if err != nil {
		return nil, fmt.Errorf("inject self-flag instruction: %w", err)
	}
	const head = `{"role":"system","content":`
	empty := strings.TrimSpace(res.Raw[1:len(res.Raw)-1]) == ""
	out := make([]byte, 0, len(body)+len(head)+len(content)+2)
	out = append(out, body[:i+1]...)
	out = append(out, head...)
	out = append(out, content...)
	out = append(out, '}')
	if !empty {
		out = append(out, ',')
	}
	return append(out, body[i+1:]...), nil
}

// InjectResponses returns a copy of a Responses API body whose "instructions"
// begin with Instruction(purpose): prepended, followed by a blank line, to a
// string already there, or set when the field is absent, null or empty.
// Other bytes are kept. "instructions" of another type is an error.
func InjectResponses(body []byte, purpose string) ([]byte, error) {
	if !isObject(body) {
		return nil, fmt.Errorf("inject self-flag instructions: %w", ErrNotJSONObject)
	}
	value := Instruction(purpose)
	switch res := gjson.GetBytes(body, "instructions"); res.Type {
	case gjson.Null: // absent or null
	case gjson.String:
		if res.Str != "" {
			value += "\n\n" + res.Str
		}
	default:
		return nil, errors.New("inject self-flag instructions: instructions is not a string")
	}
	out, err := sjson.SetBytes(body, "instructions", value)
	if err != nil {
		return nil, fmt.Errorf("inject self-flag instructions: %w", err)
	}
	return out, nil
}

// isObject reports whether the first non-space byte of b opens an object.
func isObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}

// StripMarker removes a leading Marker, with any whitespace before it and
// all whitespace after it, from a model's answer. It reports whether the
// marker was there; without it, content is returned unchanged. Whitespace is
// what unicode.IsSpace says it is.
func StripMarker(content string) (string, bool) {
	rest := strings.TrimLeftFunc(content, unicode.IsSpace)
	if !strings.HasPrefix(rest, Marker) {
		return content, false
	}
	return strings.TrimLeftFunc(rest[len(Marker):], unicode.IsSpace), true
}

// Stripper states.
const (
	stripStart   = iota // still deciding whether the answer opens with the marker
	stripAfter          // marker seen; dropping the whitespace after it
	stripPassing        // decided; everything passes through
)

// MarkerStripper strips a leading Marker from an answer that arrives as a
// stream of text deltas. The concatenation of every Feed result and Flush
// equals StripMarker of the whole text, however the text was split. Only
// text that could still be the start of the marker (leading whitespace, a
// prefix of the marker, an incomplete UTF-8 sequence) is held back; once the
// answer cannot open with the marker, Feed returns its input as is. The zero
// value is ready to use; a stripper serves one answer (one choice).
type MarkerStripper struct {
	state   int
	held    string
	flagged bool
}

// Feed takes the next delta of the answer and returns the text that may be
// shown now (possibly empty).
func (s *MarkerStripper) Feed(delta string) string {
	switch s.state {
	case stripPassing:
		return delta
	case stripAfter:
		return s.afterMarker(delta)
	}
	text := s.held + delta
	rest := strings.TrimLeftFunc(text, unicode.IsSpace)
	if rest == "" || !utf8.FullRuneInString(rest) {
		s.held = text // only whitespace so far, or a rune cut in two
		return ""
	}
	if len(rest) < len(Marker) {
		if strings.HasPrefix(Marker, rest) {
			s.held = text
			return ""
		}
		s.held, s.state = "", stripPassing
		return text
	}
	if !strings.HasPrefix(rest, Marker) {
		s.held, s.state = "", stripPassing
		return text
	}
	s.held, s.state, s.flagged = "", stripAfter, true
	return s.afterMarker(rest[len(Marker):])
}

// afterMarker drops whitespace that follows the marker.
func (s *MarkerStripper) afterMarker(delta string) string {
	text := s.held + delta
	rest := strings.TrimLeftFunc(text, unicode.IsSpace)
	if rest == "" || !utf8.FullRuneInString(rest) {
		s.held = rest
		return ""
	}
	s.held, s.state = "", stripPassing
	return rest
}

// Flush ends the answer and returns any text still held back.
func (s *MarkerStripper) Flush() string {
	out := s.held
	s.held, s.state = "", stripPassing
	return out
}

// Flagged reports whether the answer opened with the marker.
func (s *MarkerStripper) Flagged() bool { return s.flagged }
