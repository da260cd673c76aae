package fakeupstream

import (
	"net/http"
	"strconv"
)

// stream writes SSE events, one flush each, and applies the behaviour's
// event delay, cut and mid-stream error.
type stream struct {
	c        *call
	rc       *http.ResponseController
	events   int
	done     bool  // the stream ended (client gone, cut or error sent)
	reported Usage // the last usage object sent
	buf      []byte
	// responses marks a Responses API stream: events are named, carry
	// sequence numbers (seq is the next) and errors are `event: error`.
	responses bool
	seq       int64
}

// startStream writes the SSE headers.
func (c *call) startStream() *stream {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	c.w.WriteHeader(http.StatusOK)
	st := &stream{c: c, rc: http.NewResponseController(c.w), buf: make([]byte, 0, 512)}
	if st.rc.Flush() != nil {
		st.done = true
	}
	return st
}

// send writes one event (name may be "") with data as its payload. It
// returns false once the stream has ended.
func (st *stream) send(name string, data []byte) bool {
	if st.done {
		return false
	}
	b := st.c.b
	if st.events > 0 && b.EventDelay > 0 && !sleep(st.c.r.Context(), b.EventDelay) {
		st.done = true
		return false
	}
	out := st.buf[:0]
	if name != "" {
		out = append(out, "event: "...)
		out = append(out, name...)
		out = append(out, '\n')
	}
	out = append(out, "data: "...)
	out = append(out, data...)
	out = append(out, '\n', '\n')
	st.buf = out
	if !st.write(out) {
		return false
	}
	st.events++
	if b.StreamErrorAfterEvents > 0 && st.events == b.StreamErrorAfterEvents {
		typ, code, msg := behaviorError(b, http.StatusInternalServerError)
		if st.responses {
			if code == "" {
				code = typ
			}
			out = append(st.buf[:0], "event: error\ndata: {\"type\":\"error\",\"sequence_number\":"...)
			out = strconv.AppendInt(out, st.seq, 10)
			out = append(out, ',')
			out = appendKV(out, "code", code)
			out = append(out, ',')
			out = appendKV(out, "message", msg)
			out = append(out, `,"param":null}`...)
		} else {
			out = append(st.buf[:0], "data: "...)
			out = appendErrorBody(out, typ, code, msg, "")
		}
		out = append(out, '\n', '\n')
		st.write(out)
		st.done = true
		return false
	}
	if b.CutAfterEvents > 0 && st.events == b.CutAfterEvents {
		st.done = true
		cut(st.c.w)
		return false
	}
	return true
}

// sendUsage is send for an event that carries usage u. The server's total
// moves to u (from the previous usage this stream sent) before the event is
// written, so a client never sees usage that UsageTotal does not hold yet.
func (st *stream) sendUsage(name string, data []byte, u Usage) bool {
	if st.done {
		return false
	}
	st.c.s.addUsage(u.Add(st.reported.neg()))
	st.reported = u
	return st.send(name, data)
}

// doneEvent writes `data: [DONE]`.
func (st *stream) doneEvent() {
	if st.done {
		return
	}
	if b := st.c.b; b.EventDelay > 0 && !sleep(st.c.r.Context(), b.EventDelay) {
		st.done = true
		return
	}
	st.write([]byte("data: [DONE]\n\n"))
}

func (st *stream) write(p []byte) bool {
	if _, err := st.c.w.Write(p); err != nil {
		st.done = true
		return false
	}
	if st.rc.Flush() != nil {
		st.done = true
		return false
	}
	return true
}
