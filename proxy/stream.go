package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"taskgate/config"
	"taskgate/guard"
)

// relay answers a streamed call: headers first (before the first byte), then
// the upstream's SSE events one by one, each flushed. It settles at the end
// of the stream, from the last usage object or, without one, from the text
// streamed so far.
func (c *call) relay(fc *fiber.Ctx, resp *fasthttp.Response) error {
	c.setHeaders(fc)
	fc.Set("X-Taskgate-Cost-Estimate", config.FormatMicros(c.estMoney))
	fc.Set(fiber.HeaderContentType, "text/event-stream")
	fc.Set(fiber.HeaderCacheControl, "no-cache")
	fc.Status(c.status)
	s := c.s
	s.pending.Add(1)
	s.m.ActiveStreams.Inc()
	fc.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer s.pending.Done()
		defer s.m.ActiveStreams.Dec()
		c.pump(w, resp)
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		c.finish()
	})
	return nil
}

// streamState is what the relay keeps between events.
type streamState struct {
	text      bytes.Buffer // streamed output text as generated, for counting without usage
	chatStrip *guard.ChatStreamStripper
	respStrip *guard.ResponsesStreamStripper
	done      bool // [DONE] or a terminal Responses event was seen
}

// pump copies events until the upstream ends, the client goes away or the
// upstream breaks (then a last error event is sent).
func (c *call) pump(w *bufio.Writer, resp *fasthttp.Response) {
	st := &streamState{}
	if c.task.SelfFlag {
		switch c.rt {
		case routeChat:
			st.chatStrip = &guard.ChatStreamStripper{}
		case routeResponses:
			st.respStrip = &guard.ResponsesStreamStripper{}
		}
	}
	r := bufio.NewReaderSize(resp.BodyStream(), 4<<10) // readLine joins longer lines
	var event []byte
	var readErr error
	for {
		line, err := readLine(r)
		if err != nil {
			if len(event) > 0 {
				if !c.emit(w, st, event) {
					c.settleStreamed(st)
					return
				}
			}
			readErr = err
			break
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			if len(event) > 0 {
				if !c.emit(w, st, event) {
					c.settleStreamed(st) // the client went away
					return
				}
				event = event[:0]
			}
			continue
		}
		event = append(event, line...)
	}
	if readErr != io.EOF || !st.done {
		code, msg := "upstream_error", "the upstream stream broke off"
		var te *timeoutError
		if errors.As(readErr, &te) {
			code, msg = "upstream_timeout", "the upstream stream stalled"
		}
		if readErr == io.EOF && !st.done {
			msg = "the upstream stream ended early"
		}
		c.status, c.code = 200, code
		c.s.m.UpstreamErrors.WithLabelValues(c.served.ep.Name, "stream_"+code).Inc()
		e := &apiError{Status: 502, Code: code, Message: msg}
		if code == "upstream_timeout" {
			e.Status = 504
		}
		_, _ = w.Write(e.event())
		_ = w.Flush()
	}
	c.settleStreamed(st)
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

// readLine reads one line of any length (including its newline).
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		buf := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			line, err = r.ReadSlice('\n')
			buf = append(buf, line...)
		}
		if err != nil && len(buf) > 0 && err == io.EOF {
			return buf, nil
		}
		return buf, err
	}
	if err == io.EOF && len(line) > 0 {
		return line, nil
	}
	return line, err
}

// emit processes one SSE event (its lines, without the blank line) and
// writes it to the client unless it is hidden. It returns false when the
// client is gone.
func (c *call) emit(w *bufio.Writer, st *streamState, event []byte) bool {
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
			return true
		}
		if newData != nil {
			out = rebuildEvent(name, newData)
		}
	}
	if _, err := w.Write(out); err != nil {
		return false
	}
	// A blank line ends the event. An event cut off at the stream's end
	// lacks its last line's newline: close that line first, so that what
	// follows (the gateway's error event) is not read as part of it.
	end := "\n"
	if out[len(out)-1] != '\n' {
		end = "\n\n"
	}
	if _, err := w.WriteString(end); err != nil {
		return false
	}
	return w.Flush() == nil
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
	var changed []byte
	if u := gjson.GetBytes(data, "usage"); u.IsObject() {
		c.in = u.Get("prompt_tokens").Int()
		c.out = u.Get("completion_tokens").Int()
		c.haveUsage = true
		if !c.clientWantsUsage {
			if ch := gjson.GetBytes(data, "choices"); !ch.IsArray() || ch.Raw == "[]" {
				return nil, true // the usage chunk the gateway asked for
			}
			if b, err := sjson.DeleteBytes(data, "usage"); err == nil {
				changed = b
			}
		}
	}
	path := "choices.0.delta.content"
	if c.rt == routeCompletions {
		path = "choices.0.text"
	}
	if t := gjson.GetBytes(data, path); t.Type == gjson.String {
		st.text.WriteString(t.Str)
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
