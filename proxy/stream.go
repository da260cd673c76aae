package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"taskgate/config"
	"taskgate/guard"
)

// relay answers a streamed call: headers first, then the upstream's SSE
// events one by one, each written as one chunk and flushed. The relay runs
// on the client connection's own goroutine: fasthttp writes the body by
// calling sseBody.WriteTo, with no pipe and no goroutine of its own. It
// settles when the body is closed, from the last usage object or, without
// one, from the text streamed so far.
func (c *call) relay(fc *fiber.Ctx, resp *fasthttp.Response) error {
	c.setHeaders(fc)
	var nb [32]byte // SetCanonical copies
	fc.Response().Header.SetCanonical([]byte("X-Taskgate-Cost-Estimate"), config.AppendMicros(nb[:0], c.estMoney))
	fc.Set(fiber.HeaderContentType, "text/event-stream")
	fc.Set(fiber.HeaderCacheControl, "no-cache")
	fc.Status(c.status)
	c.s.pending.Add(1)
	c.s.m.ActiveStreams.Inc()
	// Most events fit the reader whole; readLine joins longer lines. The
	// reader lives as long as the stream, so it is kept small.
	body := &sseBody{c: c, resp: resp, r: bufio.NewReaderSize(resp.BodyStream(), 1<<10)}
	if c.task.SelfFlag {
		switch c.rt {
		case routeChat:
			body.st.chatStrip = &guard.ChatStreamStripper{}
		case routeResponses:
			body.st.respStrip = &guard.ResponsesStreamStripper{}
		}
	}
	fc.Context().SetBodyStream(body, -1)
	return nil
}

// streamState is what the relay keeps between events.
type streamState struct {
	text      bytes.Buffer // streamed output text as generated, for counting without usage
	chatStrip *guard.ChatStreamStripper
	respStrip *guard.ResponsesStreamStripper
	done      bool // [DONE] or a terminal Responses event was seen
}

// sseBody is a streamed answer's body as the client gets it: the upstream's
// events, inspected and rewritten, then the gateway's error event if the
// upstream broke off. fasthttp writes it with WriteTo (one chunk, flushed,
// per Write) and closes it when the answer is written or the client is
// gone; Close settles the call. Each event is written as soon as it is
// read; events that arrived together share a write.
type sseBody struct {
	c      *call
	resp   *fasthttp.Response
	r      *bufio.Reader
	st     streamState
	event  []byte // the lines of the event being read
	out    []byte // bytes for the client not yet returned by Read
	off    int
	ended  bool // the upstream stream ended (out may still hold its last bytes)
	closed bool
}

// SupportsBodyWriteTo tells fasthttp that WriteTo may replace Read.
func (b *sseBody) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the events to w, one Write per event, until the upstream
// ends or a Write fails (the client is gone).
func (b *sseBody) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for b.next() {
		m, err := w.Write(b.out)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Read is WriteTo for a reader: the same bytes.
func (b *sseBody) Read(p []byte) (int, error) {
	if b.off >= len(b.out) && !b.next() {
		return 0, io.EOF
	}
	n := copy(p, b.out[b.off:])
	b.off += n
	return n, nil
}

// next reads the upstream until out holds the next bytes for the client
// (whole events: one, or as many as arrived together; or the last bytes of
// the stream); false when nothing more will come.
func (b *sseBody) next() bool {
	b.out, b.off = b.out[:0], 0
	for !b.ended {
		line, err := readLine(b.r)
		if err != nil {
			if len(b.event) > 0 {
				b.out = b.c.emit(b.out, &b.st, b.event)
				b.event = b.event[:0]
			}
			b.end(err)
			break
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			if len(b.event) > 0 {
				b.out = b.c.emit(b.out, &b.st, b.event)
				b.event = b.event[:0]
				// Flush now unless the next event is already here whole:
				// then it goes in the same write, and no event waits.
				if len(b.out) > 0 && (len(b.out) >= maxCoalesce || !b.eventBuffered()) {
					return true
				}
			}
			continue
		}
		b.event = append(b.event, line...)
	}
	return len(b.out) > 0
}

// maxCoalesce bounds the events written together in one chunk.
const maxCoalesce = 16 << 10

// eventBuffered reports whether the reader holds a whole event (its blank
// line included), so that reading it cannot wait on the upstream.
func (b *sseBody) eventBuffered() bool {
	buf, _ := b.r.Peek(b.r.Buffered())
	return bytes.Contains(buf, []byte("\n\n")) || bytes.Contains(buf, []byte("\n\r\n"))
}

// end marks the upstream stream ended with readErr: an end without [DONE]
// (or the Responses API's terminal event), a break or a stall gets a last
// error event.
func (b *sseBody) end(readErr error) {
	b.ended = true
	c := b.c
	if readErr != io.EOF || !b.st.done {
		code, msg := "upstream_error", "the upstream stream broke off"
		var te *timeoutError
		if errors.As(readErr, &te) {
			code, msg = "upstream_timeout", "the upstream stream stalled"
		}
		if readErr == io.EOF && !b.st.done {
			msg = "the upstream stream ended early"
		}
		c.status, c.code = 200, code
		c.s.m.UpstreamErrors.WithLabelValues(c.served.ep.Name, "stream_"+code).Inc()
		e := &apiError{Status: 502, Code: code, Message: msg}
		if code == "upstream_timeout" {
			e.Status = 504
		}
		b.out = append(b.out, e.event()...)
	}
	c.settleStreamed(&b.st)
}

// Close ends the call once the answer is written or the client is gone:
// the upstream stream is closed and the call settled. Safe to call twice.
func (b *sseBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	c := b.c
	if !b.ended {
		c.settleStreamed(&b.st) // the client went away
	}
	_ = b.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(b.resp)
	c.finish()
	c.s.m.ActiveStreams.Dec()
	c.s.pending.Done()
	return nil
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
	var usage, choices gjson.Result
	gjson.Parse(unsafe.String(unsafe.SliceData(data), len(data))).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "usage":
			usage = v
		case "choices":
			choices = v
		}
		return true
	})
	var changed []byte
	if usage.IsObject() {
		c.in = usage.Get("prompt_tokens").Int()
		c.out = usage.Get("completion_tokens").Int()
		c.haveUsage = true
		if !c.clientWantsUsage {
			if !choices.IsArray() || choices.Raw == "[]" {
				return nil, true // the usage chunk the gateway asked for
			}
			if b, err := sjson.DeleteBytes(data, "usage"); err == nil {
				changed = b
			}
		}
	}
	path := "0.delta.content"
	if c.rt == routeCompletions {
		path = "0.text"
	}
	if t := choices.Get(path); t.Type == gjson.String {
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
