package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"taskgate/config"
	"taskgate/guard"
)

// Relay states, for the poller and the idle timer to agree on who resumes
// a waiting stream.
const (
	relayRunning int32 = iota
	relayArming
	relayParked
)

// noStreamPolling lets tests make every stream wait on a goroutine, as it
// does where no epoll is available.
var noStreamPolling atomic.Bool

// maxPendingEvent bounds an SSE event the relay holds while it arrives.
const maxPendingEvent = 8 << 20

// streamRelay answers one streamed call on the client connection taken over
// from fasthttp: the headers, then the upstream's SSE events, each written
// as soon as it is whole (events that arrived together share a write), then
// the gateway's error event if the upstream broke off. Between reads it
// holds no goroutine and no buffer: the upstream socket waits in the
// poller (on the relay's goroutine where there is no epoll).
type streamRelay struct {
	c      *call
	up     *upConn
	sc     *streamClient
	client net.Conn
	poll   *poller // nil: reads block on the relay's goroutine
	state  atomic.Int32
	pollID uint32
	timer  *time.Timer

	clientFD    int             // the client socket, watched for a hang-up while waiting; -1: not
	clientRaw   syscall.RawConn // its raw connection, to look at it without reading
	clientArmed bool            // the client socket is in the poller's set
	hup         atomic.Bool     // the poller saw the client hang up

	hard      time.Time     // the call's deadline (the endpoint's timeout)
	waitUntil time.Time     // when the current wait in the poller ends
	idle      time.Duration // the endpoint's idle_timeout: the longest gap between reads

	head      []byte // the response's headers, written with the first bytes
	in        []byte // body bytes that came with the upstream's headers
	chunk     chunkDecoder
	pend      []byte // body bytes not yet a whole event
	w         []byte // bytes being written to the client
	scanned   int    // bytes of pend already searched for a line end
	out       []byte // events for the client not yet written
	st        streamState
	chunked   bool // the client gets chunked transfer coding (HTTP/1.1)
	keepAlive bool // the client connection serves more requests afterwards
	bodyDone  bool // the upstream's answer was read to its end
	reusable  bool // and nothing came after it: the connection can serve another call
	ended     bool
}

// relay answers a streamed call from the upstream connection uc (rest: the
// body bytes that came with its headers). The handler returns at once;
// fasthttp hands the client connection to the relay.
func (c *call) relay(fc *fiber.Ctx, resp *fasthttp.Response, uc *upConn, rest []byte, deadline time.Time) error {
	c.setHeaders(fc)
	h := &fc.Response().Header
	var nb [32]byte // SetCanonical copies
	h.SetCanonical([]byte("X-Taskgate-Cost-Estimate"), config.AppendMicros(nb[:0], c.estMoney))
	h.SetContentType("text/event-stream")
	h.Set(fiber.HeaderCacheControl, "no-cache")
	h.SetStatusCode(c.status)
	fasthttp.ReleaseResponse(resp)

	r := &streamRelay{c: c, up: uc, sc: c.served.streams, hard: deadline, idle: c.served.ep.IdleTimeout, in: rest, clientFD: -1}
	rh := &fc.Request().Header
	r.chunked = rh.IsHTTP11()
	r.keepAlive = r.chunked && !rh.ConnectionClose() && !c.s.draining.Load()
	if r.chunked {
		h.SetContentLength(-1)
	} else {
		h.SetContentLength(-2) // until the connection closes
	}
	if !r.keepAlive {
		h.SetConnectionClose()
	}
	r.head = h.AppendBytes(make([]byte, 0, 512))
	if uc.raw != nil && !noStreamPolling.Load() {
		r.poll = thePoller()
	}
	if c.task.SelfFlag {
		switch c.rt {
		case routeChat:
			r.st.chatStrip = &guard.ChatStreamStripper{}
		case routeResponses:
			r.st.respStrip = &guard.ResponsesStreamStripper{}
		}
	}
	c.s.pending.Add(1)
	c.s.m.ActiveStreams.Inc()
	// fasthttp reuses the request's memory once the handler returns: drop
	// what views it (nothing after this point reads it).
	c.body, c.raw, c.top, c.hdr = nil, nil, topFields{}, clientHeaders{}
	// fasthttp starts r.start once the handler returns. Between the two it
	// only flushes what it wrote before (an error there would have ended
	// the connection at that write) and clears the connection's deadlines
	// (which fails only on a closed connection, and shutdown closes only
	// idle ones), so the relay always gets the connection and settles.
	fc.Context().HijackSetNoResponse(true)
	fc.Context().Hijack(r.start)
	return nil
}

// start runs on the goroutine fasthttp gives the hijacked connection.
func (r *streamRelay) start(hc net.Conn) {
	r.client = hc
	if u, ok := hc.(interface{ UnsafeConn() net.Conn }); ok {
		raw := u.UnsafeConn()
		// hc reads through the server's read buffer first. The relay uses
		// the bare connection unless the client already sent more (a
		// pipelined request): a read with a deadline in the past takes
		// only what is buffered.
		var one [1]byte
		_ = raw.SetReadDeadline(time.Unix(1, 0))
		n, _ := hc.Read(one[:])
		_ = raw.SetReadDeadline(time.Time{})
		if n == 0 {
			r.client = raw
		} else {
			r.client = &prefixConn{Conn: raw, r: io.MultiReader(bytes.NewReader(append([]byte(nil), one[:n]...)), hc)}
		}
		if tc, ok := raw.(*net.TCPConn); ok && r.poll != nil {
			if rc, err := tc.SyscallConn(); err == nil {
				r.clientRaw = rc
				_ = rc.Control(func(fd uintptr) { r.clientFD = int(fd) })
			}
		}
	}
	r.run(false)
}

// resume continues a stream that waited: woken by the poller, or by its
// timer (timedOut).
func (r *streamRelay) resume(timedOut bool) {
	if !timedOut && r.timer != nil {
		r.timer.Stop()
	}
	r.run(timedOut)
}

// onTimer ends a stream that waited past its idle or whole-call limit. A
// late firing of an earlier wait's timer finds the current wait's limit
// not yet passed: the stream then reads and waits again.
func (r *streamRelay) onTimer() {
	if r.claim() {
		r.resume(!time.Now().Before(r.waitUntil))
	}
}

// relayBufs are the buffers a relay borrows while it runs and gives back
// before it waits.
type relayBufs struct {
	read [4 << 10]byte
	out  []byte
	w    []byte
	pend []byte
}

var relayBufPool = sync.Pool{New: func() any { return new(relayBufs) }}

// borrow takes buffers for a run.
func (r *streamRelay) borrow() *relayBufs {
	b := relayBufPool.Get().(*relayBufs)
	r.out, r.w = b.out[:0], b.w[:0]
	if r.pend == nil {
		r.pend, r.scanned = b.pend[:0], 0
	}
	b.out, b.w, b.pend = nil, nil, nil
	return b
}

// giveBack returns the buffers; pend stays with the relay while it holds
// part of an event.
func (r *streamRelay) giveBack(b *relayBufs) {
	const keep = 64 << 10 // larger buffers are left to the GC
	if cap(r.out) <= keep {
		b.out = r.out[:0]
	}
	if cap(r.w) <= keep {
		b.w = r.w[:0]
	}
	if len(r.pend) == 0 {
		if cap(r.pend) <= keep {
			b.pend = r.pend[:0]
		}
		r.pend, r.scanned = nil, 0
	}
	r.out, r.w = nil, nil
	relayBufPool.Put(b)
}

// run relays until the stream ends, or until nothing is left to read and
// the stream waits in the poller (then another goroutine resumes it).
func (r *streamRelay) run(timedOut bool) {
	b := r.borrow()
	if r.in != nil || (!r.up.chunked && r.up.left == 0 && !r.bodyDone) {
		r.take(r.in) // what came with the headers; an empty body ends here
		r.in = nil
	}
	for !r.ended {
		if !r.flush(false) || (r.hup.Load() && r.clientClosed()) {
			r.giveBack(b)
			r.clientGone()
			return
		}
		if timedOut {
			r.end(&timeoutError{err: os.ErrDeadlineExceeded})
			break
		}
		n, err := r.read(b.read[:])
		if n > 0 {
			r.take(b.read[:n])
		}
		if err == errWouldBlock && !r.ended {
			r.giveBack(b)
			if r.park() {
				return // r may already run on another goroutine
			}
			b = r.borrow()
			timedOut = r.expired()
			continue
		}
		if err != nil && err != errWouldBlock && !r.ended {
			r.end(err)
		}
	}
	// The connection goes back to the pool before the client has the
	// stream's end, so that the client's next call finds it there.
	r.releaseUpstream()
	ok := r.flush(true)
	r.giveBack(b)
	r.close(ok)
}

// read reads the upstream: without waiting when the poller waits instead,
// else under the stream's idle and whole-call limits.
func (r *streamRelay) read(p []byte) (int, error) {
	if r.poll != nil {
		return r.up.readNow(p)
	}
	d := r.deadline(time.Now())
	_ = r.up.SetReadDeadline(d)
	n, err := r.up.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, &timeoutError{err: err}
	}
	return n, err
}

// deadline is when the stream's wait for its next bytes ends.
func (r *streamRelay) deadline(now time.Time) time.Time {
	d := r.hard
	if r.idle > 0 {
		if t := now.Add(r.idle); d.IsZero() || t.Before(d) {
			d = t
		}
	}
	return d
}

// expired reports whether the stream's wait would already be over.
func (r *streamRelay) expired() bool {
	return !r.hard.IsZero() && !time.Now().Before(r.hard)
}

// park makes the stream wait in the poller; false when it cannot (no
// poller, or the whole-call limit passed): the caller reads on.
func (r *streamRelay) park() bool {
	if r.poll == nil {
		return false
	}
	now := time.Now()
	d := r.deadline(now)
	if !d.IsZero() && !now.Before(d) {
		return false
	}
	// While arming, the poller and the timer wait for the state to settle.
	r.state.Store(relayArming)
	if r.hup.Load() {
		// The client hung up: the caller looks at it before waiting.
		r.state.Store(relayRunning)
		return false
	}
	r.waitUntil = d
	if !d.IsZero() {
		if r.timer == nil {
			r.timer = time.AfterFunc(d.Sub(now), r.onTimer)
		} else {
			r.timer.Reset(d.Sub(now))
		}
	}
	if err := r.poll.wait(r); err != nil {
		// Not waited for: carry on with blocking reads on this goroutine.
		if r.timer != nil {
			r.timer.Stop()
		}
		r.poll = nil
		r.up.blocking()
		r.state.Store(relayRunning)
		return false
	}
	r.state.Store(relayParked)
	return true
}

// clientClosed reports whether the client connection has ended (its
// next byte, peeked, is its end or an error); false clears the hang-up
// seen, which was then only a half-close with data still to read.
func (r *streamRelay) clientClosed() bool {
	if r.clientRaw == nil {
		return false
	}
	closed := peekClosed(r.clientRaw)
	if !closed {
		r.hup.Store(false)
	}
	return closed
}

// claim takes a parked stream to resume it; false when another waker (the
// poller or the timer) did, or the stream is running.
func (r *streamRelay) claim() bool {
	for {
		switch r.state.Load() {
		case relayArming:
			runtime.Gosched()
		case relayParked:
			if r.state.CompareAndSwap(relayParked, relayRunning) {
				return true
			}
		default:
			return false
		}
	}
}

// take decodes upstream bytes and turns every whole event into output.
func (r *streamRelay) take(p []byte) {
	if r.bodyDone {
		r.reusable = false
		return
	}
	var err error
	switch {
	case r.up.chunked:
		var used int
		r.pend, used, err = r.chunk.decode(r.pend, p)
		if r.chunk.done() {
			r.bodyDone, r.reusable = true, used == len(p)
		}
	case r.up.left >= 0:
		k := int64(len(p))
		if k > r.up.left {
			k = r.up.left
		}
		r.pend = append(r.pend, p[:k]...)
		r.up.left -= k
		if r.up.left == 0 {
			r.bodyDone, r.reusable = true, k == int64(len(p))
		}
	default:
		r.pend = append(r.pend, p...)
	}
	r.frame()
	switch {
	case err != nil:
		r.end(err)
	case len(r.pend) > maxPendingEvent:
		r.end(errors.New("an event longer than " + strconv.Itoa(maxPendingEvent) + " bytes"))
	case r.bodyDone:
		r.end(io.EOF)
	}
}

// frame emits every whole event of pend (its lines up to a blank line) and
// keeps the rest.
func (r *streamRelay) frame() {
	p := r.pend
	start, i := 0, r.scanned
	for {
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			break
		}
		lineEnd := i + j + 1
		if len(bytes.TrimRight(p[i:lineEnd], "\r\n")) == 0 {
			if i > start {
				r.out = r.c.emit(r.out, &r.st, p[start:i])
			}
			start = lineEnd
		}
		i = lineEnd
	}
	if start > 0 {
		n := copy(p, p[start:])
		r.pend = p[:n]
	}
	r.scanned = i - start
}

// end marks the upstream stream ended with readErr (io.EOF: it ended): a
// last partial event is emitted; an end without [DONE] (or the Responses
// API's terminal event), a break or a stall gets a last error event. The
// call's usage is then final.
func (r *streamRelay) end(readErr error) {
	if r.ended {
		return
	}
	r.ended = true
	r.emitPartial()
	c := r.c
	if readErr != io.EOF || !r.st.done {
		code, msg := "upstream_error", "the upstream stream broke off"
		var te *timeoutError
		if errors.As(readErr, &te) {
			code, msg = "upstream_timeout", "the upstream stream stalled"
		}
		if readErr == io.EOF && !r.st.done {
			msg = "the upstream stream ended early"
		}
		c.status, c.code = 200, code
		c.s.m.UpstreamErrors.WithLabelValues(c.served.ep.Name, "stream_"+code).Inc()
		e := &apiError{Status: 502, Code: code, Message: msg}
		if code == "upstream_timeout" {
			e.Status = 504
		}
		r.out = append(r.out, e.event()...)
	}
	c.settleStreamed(&r.st)
}

// emitPartial emits what pend holds at the stream's end: an event whose
// blank line (or last line's end) never came.
func (r *streamRelay) emitPartial() {
	if len(r.pend) == 0 {
		return
	}
	r.pend = append(r.pend, '\n')
	r.frame()
	if len(bytes.TrimRight(r.pend, "\r\n")) > 0 {
		r.out = r.c.emit(r.out, &r.st, r.pend[:len(r.pend)-1])
	}
	r.pend, r.scanned = r.pend[:0], 0
}

// flush writes the headers not yet written and the pending events (last:
// and the end of the body); false when the client is gone.
func (r *streamRelay) flush(last bool) bool {
	if len(r.head) == 0 && len(r.out) == 0 && !last {
		return true
	}
	w := append(r.w[:0], r.head...)
	if len(r.out) > 0 {
		if r.chunked {
			w = strconv.AppendInt(w, int64(len(r.out)), 16)
			w = append(w, "\r\n"...)
			w = append(w, r.out...)
			w = append(w, "\r\n"...)
		} else {
			w = append(w, r.out...)
		}
	}
	if last && r.chunked {
		w = append(w, "0\r\n\r\n"...)
	}
	r.head, r.out, r.w = nil, r.out[:0], w
	if len(w) == 0 {
		return true
	}
	_, err := r.client.Write(w)
	return err == nil
}

// clientGone ends a stream whose client went away: the upstream call is
// dropped and settled from what streamed so far.
func (r *streamRelay) clientGone() {
	if !r.ended {
		r.ended = true
		r.c.settleStreamed(&r.st) // the client went away
	}
	r.bodyDone = false
	r.close(false)
}

// close releases the stream: the upstream connection goes back to the
// pool when its answer was read whole, the call is finished, and the client
// connection serves its next request (keep-alive) or is closed.
func (r *streamRelay) close(clientOK bool) {
	r.releaseUpstream()
	c := r.c
	c.finish()
	c.s.m.ActiveStreams.Dec()
	c.s.pending.Done()
	if clientOK && r.keepAlive && c.s.clientSrv != nil {
		c.s.serveAgain(r.client)
		return
	}
	r.client.Close()
}

// releaseUpstream lets go of the upstream connection: out of the poller,
// then back to the pool when its answer was read whole, else closed. Safe
// to call twice.
func (r *streamRelay) releaseUpstream() {
	if r.up == nil {
		return
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.poll != nil {
		r.poll.forget(r)
	}
	if r.bodyDone && r.reusable && !r.up.last && r.sc != nil {
		r.up.blocking()
		r.sc.put(r.up)
	} else {
		r.up.Close()
	}
	r.up = nil
}

// serveAgain serves the next requests of a connection a stream gave back.
// Until one comes, fasthttp counts it as new (not idle) and a shutdown
// would wait seconds for it: Drain closes such connections itself.
func (s *Server) serveAgain(conn net.Conn) {
	s.handedBack.Store(conn, struct{}{})
	if s.draining.Load() {
		s.handedBack.Delete(conn)
		conn.Close()
		return
	}
	_ = s.clientSrv.ServeConn(conn)
	s.handedBack.Delete(conn)
}

// closeHandedBack closes the connections streams gave back that have not
// begun another request (Drain, after draining is set).
func (s *Server) closeHandedBack() {
	s.handedBack.Range(func(k, _ any) bool {
		s.handedBack.Delete(k)
		k.(net.Conn).Close()
		return true
	})
}

// prefixConn is a client connection whose first bytes were already read.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// chunkDecoder decodes HTTP/1.1 chunked transfer coding incrementally.
type chunkDecoder struct {
	state  uint8
	size   int64 // the chunk's data bytes still to come (or its size being read)
	digits int   // hex digits of the size read
	line   int   // bytes of the trailer line being read
}

const (
	chunkSize = iota
	chunkExt
	chunkSizeLF
	chunkData
	chunkDataCR
	chunkDataLF
	chunkTrailer
	chunkDone
)

var errBadChunk = errors.New("malformed chunked body from the upstream")

// done reports whether the last chunk and the trailer were read.
func (d *chunkDecoder) done() bool { return d.state == chunkDone }

// decode appends the data carried by p to dst; used is how much of p it
// read (less than len(p) only once done).
func (d *chunkDecoder) decode(dst, p []byte) (out []byte, used int, err error) {
	i := 0
	for i < len(p) && d.state != chunkDone {
		b := p[i]
		switch d.state {
		case chunkSize:
			switch v := unhex(b); {
			case v >= 0:
				if d.size > 1<<40 {
					return dst, i, errBadChunk
				}
				d.size = d.size<<4 | int64(v)
				d.digits++
			case d.digits == 0:
				return dst, i, errBadChunk
			case b == ';' || b == ' ' || b == '\t':
				d.state = chunkExt
			case b == '\r':
				d.state = chunkSizeLF
			case b == '\n':
				d.sizeRead()
			default:
				return dst, i, errBadChunk
			}
		case chunkExt:
			switch b {
			case '\r':
				d.state = chunkSizeLF
			case '\n':
				d.sizeRead()
			}
		case chunkSizeLF:
			if b != '\n' {
				return dst, i, errBadChunk
			}
			d.sizeRead()
		case chunkData:
			k := int64(len(p) - i)
			if k > d.size {
				k = d.size
			}
			dst = append(dst, p[i:i+int(k)]...)
			d.size -= k
			i += int(k)
			if d.size == 0 {
				d.state = chunkDataCR
			}
			continue
		case chunkDataCR:
			switch b {
			case '\r':
				d.state = chunkDataLF
			case '\n':
				d.state, d.size, d.digits = chunkSize, 0, 0
			default:
				return dst, i, errBadChunk
			}
		case chunkDataLF:
			if b != '\n' {
				return dst, i, errBadChunk
			}
			d.state, d.size, d.digits = chunkSize, 0, 0
		case chunkTrailer:
			switch b {
			case '\n':
				if d.line == 0 {
					d.state = chunkDone
				}
				d.line = 0
			case '\r':
			default:
				d.line++
			}
		}
		i++
	}
	return dst, i, nil
}

// sizeRead moves past a chunk's size line.
func (d *chunkDecoder) sizeRead() {
	if d.size == 0 {
		d.state, d.line = chunkTrailer, 0
		return
	}
	d.state = chunkData
}

func unhex(b byte) int {
	switch {
	case '0' <= b && b <= '9':
		return int(b - '0')
	case 'a' <= b && b <= 'f':
		return int(b-'a') + 10
	case 'A' <= b && b <= 'F':
		return int(b-'A') + 10
	}
	return -1
}
