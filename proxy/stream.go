package proxy

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"taskgate/guard"
	"taskgate/internal/jsonscan"
)

// streamState is what the relay keeps between events.
type streamState struct {
	text      bytes.Buffer // streamed output text as generated, for counting without usage
	chatStrip *guard.ChatStreamStripper
	respStrip *guard.ResponsesStreamStripper
	done      bool // [DONE] or a terminal Responses event was seen
}

// settleStreamed fills usage from the stream when no usage object came.
func (c *call) settleStreamed(st *streamState) {
	if (st.chatStrip != nil && st.chatStrip.Flagged()) || (st.respStrip != nil && st.respStrip.Flagged()) {
		c.flagged = true
	}
	if !c.haveUsage {
		c.in = c.promptTokens
		c.out = c.countStreamed(st.text.Bytes())
	}
}

// emit processes one SSE event (its lines, without the blank line) and
// appends it, with the blank line that ends it, to dst unless it is hidden.
func (c *call) emit(dst []byte, st *streamState, event []byte) []byte {
	var name, data []byte
	for rest := event; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		var line []byte
		if i < 0 {
			line, rest = rest, nil
		} else {
			line, rest = rest[:i], rest[i+1:]
		}
		line = bytes.TrimRight(line, "\r")
		switch {
		case bytes.HasPrefix(line, []byte("data:")):
			data = bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
		case bytes.HasPrefix(line, []byte("event:")):
			name = bytes.TrimSpace(line[6:])
		}
	}
	out := event
	if data != nil {
		newData, hide := c.inspect(st, name, data)
		if hide {
			return dst
		}
		if newData != nil {
			out = rebuildEvent(name, newData)
		}
	}
	dst = append(dst, out...)
	// A blank line ends the event. An event cut off at the stream's end
	// lacks its last line's newline: close that line first, so that what
	// follows (the gateway's error event) is not read as part of it.
	if out[len(out)-1] != '\n' {
		dst = append(dst, '\n')
	}
	return append(dst, '\n')
}

func rebuildEvent(name, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(name)+16)
	if name != nil {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, '\n')
}

// inspect reads usage and text from one event's data. It returns replaced
// data (nil: unchanged) and whether to hide the event from the client.
func (c *call) inspect(st *streamState, name, data []byte) ([]byte, bool) {
	if bytes.Equal(data, []byte("[DONE]")) {
		st.done = true
		return nil, false
	}
	if c.rt == routeResponses {
		return c.inspectResponses(st, data)
	}
	// One pass over the chunk's top level, read in place: the strings
	// found alias data and are copied (WriteString) before data is reused.
	var usage, choices string // raw values; the last of duplicate names counts
	jsonscan.EachField(unsafe.String(unsafe.SliceData(data), len(data)), func(k, v string) bool {
		switch {
		case jsonscan.KeyIs(k, "usage"):
			usage = v
		case jsonscan.KeyIs(k, "choices"):
			choices = v
		}
		return true
	})
	// The first choice, where the text is.
	var first string
	if jsonscan.Kind(choices) == '[' {
		jsonscan.EachElem(choices, func(v string) bool {
			first = v
			return false
		})
	}
	var changed []byte
	if jsonscan.Kind(usage) == '{' {
		in, _, _ := jsonscan.Field(usage, "prompt_tokens")
		out, _, _ := jsonscan.Field(usage, "completion_tokens")
		c.in, c.out = jsonscan.Int(in), jsonscan.Int(out)
		c.haveUsage = true
		if !c.clientWantsUsage {
			if first == "" {
				return nil, true // the usage chunk the gateway asked for
			}
			if b, err := sjson.DeleteBytes(data, "usage"); err == nil {
				changed = b
			}
		}
	}
	// The text: the first choice's delta.content (completions: its text).
	holder, key := first, "text"
	if c.rt != routeCompletions {
		holder, _, _ = jsonscan.Field(first, "delta")
		key = "content"
	}
	if t, _, _ := jsonscan.Field(holder, key); jsonscan.Kind(t) == '"' {
		st.text.WriteString(jsonscan.Str(t))
	}
	if st.chatStrip != nil {
		src := data
		if changed != nil {
			src = changed
		}
		if b, err := st.chatStrip.Chunk(src); err == nil && !bytes.Equal(b, src) {
			changed = b
		}
	}
	return changed, false
}

// inspectResponses handles a Responses API stream event.
func (c *call) inspectResponses(st *streamState, data []byte) ([]byte, bool) {
	switch gjson.GetBytes(data, "type").Str {
	case "response.created":
		if id := gjson.GetBytes(data, "response.id").Str; id != "" && c.served != nil {
			c.s.rememberResponse(id, c.served.ep.Name)
		}
	case "response.output_text.delta":
		st.text.WriteString(gjson.GetBytes(data, "delta").Str)
	case "response.completed", "response.failed", "response.incomplete":
		st.done = true
		if u := gjson.GetBytes(data, "response.usage"); u.IsObject() {
			c.in = u.Get("input_tokens").Int()
			c.out = u.Get("output_tokens").Int()
			c.haveUsage = true
		}
	}
	if st.respStrip != nil {
		if b, err := st.respStrip.Event(data); err == nil && !bytes.Equal(b, data) {
			return b, false
		}
	}
	return nil, false
}

// rememberResponse keeps which endpoint created a Responses API id, so a
// later GET goes to the same endpoint (bounded: the oldest are forgotten).
func (s *Server) rememberResponse(id, endpoint string) {
	s.respMu.Lock()
	defer s.respMu.Unlock()
	if _, ok := s.responses[id]; !ok {
		s.respOrder = append(s.respOrder, id)
		if len(s.respOrder) > 10000 {
			delete(s.responses, s.respOrder[0])
			s.respOrder = s.respOrder[1:]
		}
	}
	s.responses[id] = endpoint
}

func (s *Server) responseEndpoint(id string) string {
	s.respMu.Lock()
	defer s.respMu.Unlock()
	return s.responses[id]
}
