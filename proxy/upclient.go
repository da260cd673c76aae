package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// streamClient is an endpoint's client for streamed calls: a small HTTP/1.1
// client of taskgate's own, so that once the answer's headers are in, the
// connection and the bytes after them belong to the relay (relay.go), which
// holds no goroutine and no read buffer while it waits. Plain calls use the
// endpoint's fasthttp client.
type streamClient struct {
	addr      string
	tls       *tls.Config // nil for http://
	connect   time.Duration
	firstByte time.Duration

	mu      sync.Mutex
	idle    []*upConn   // the most recently used last
	sweeper *time.Timer // closes stale idle connections; nil while none is idle
}

// Bounds of the streamed calls' connections.
const (
	maxIdleStreamConns = 512
	streamConnIdle     = 30 * time.Second // an idle connection older is closed, not reused
	maxErrorBody       = 1 << 20          // an error answer's body is read up to this
)

// upConn is one upstream connection of streamed calls and how the answer's
// body on it is framed.
type upConn struct {
	net.Conn
	raw    syscall.RawConn // the TCP socket: read without blocking, waited for in the poller
	fd     int
	nb     *nbConn // TLS: the socket under the TLS connection
	idleAt time.Time

	chunked bool
	left    int64 // identity: body bytes still to come; -1 until the upstream closes
	last    bool  // the upstream closes the connection after this answer
}

func newStreamClient(addr, host string, isTLS bool, connect, firstByte time.Duration) *streamClient {
	sc := &streamClient{addr: addr, connect: connect, firstByte: firstByte}
	if isTLS {
		name := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			name = h
		}
		sc.tls = &tls.Config{ServerName: name, NextProtos: []string{"http/1.1"}, ClientSessionCache: tls.NewLRUClientSessionCache(64), RootCAs: streamRootCAs}
	}
	return sc
}

// do sends req and reads the answer's headers into resp. A 2xx answer
// returns its connection and the body bytes that came with the headers; any
// other answer is read whole into resp (up to maxErrorBody) and returns no
// connection. A reused connection found closed while the request was
// written is replaced once; once the request is out it is never sent
// again (the upstream may have begun, and charge for, the first).
func (sc *streamClient) do(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) (*upConn, []byte, error) {
	for attempt := 0; ; attempt++ {
		uc, reused := sc.get(), true
		if uc == nil {
			var err error
			if uc, err = sc.dial(deadline); err != nil {
				return nil, nil, err
			}
			reused = false
		}
		keep, rest, err := sc.exchange(uc, req, resp, deadline)
		if err == nil {
			if !keep {
				uc.Close()
				return nil, nil, nil
			}
			return uc, rest, nil
		}
		uc.Close()
		var we *writeError
		if reused && attempt == 0 && errors.As(err, &we) {
			resp.Reset()
			continue // the upstream had closed the idle connection: a fresh one
		}
		return nil, nil, err
	}
}

// writeError is a request that could not be written.
type writeError struct{ err error }

func (e *writeError) Error() string { return "write: " + e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// exchange writes req on uc and reads the answer's headers. keep is false
// when the answer is not a stream (its whole body is in resp).
func (sc *streamClient) exchange(uc *upConn, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) (keep bool, rest []byte, err error) {
	_ = uc.SetWriteDeadline(deadline)
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(uc.Conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writerPool.Put(bw)
	if err != nil {
		return false, nil, &writeError{err: err}
	}
	rd := deadline
	if sc.firstByte > 0 {
		if fb := time.Now().Add(sc.firstByte); fb.Before(rd) {
			rd = fb
		}
	}
	_ = uc.SetReadDeadline(rd)
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(uc.Conn)
	defer func() {
		br.Reset(nil)
		readerPool.Put(br)
	}()
	for {
		if err = resp.Header.Read(br); err != nil {
			return false, nil, err
		}
		if st := resp.Header.StatusCode(); st >= 200 || st < 100 {
			break
		}
	}
	if st := resp.Header.StatusCode(); st < 200 || st >= 300 {
		_ = uc.SetReadDeadline(deadline)
		if err = resp.ReadBody(br, maxErrorBody); err != nil {
			return false, nil, err
		}
		return false, nil, nil
	}
	uc.last = resp.Header.ConnectionClose()
	switch cl := resp.Header.ContentLength(); {
	case cl == -1:
		uc.chunked = true
	case cl >= 0:
		uc.chunked, uc.left = false, int64(cl)
	default:
		uc.chunked, uc.left = false, -1
	}
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		rest = append([]byte(nil), b...)
	}
	_ = uc.SetDeadline(time.Time{}) // the relay keeps the stream's limits
	return true, rest, nil
}

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

func (sc *streamClient) dial(deadline time.Time) (*upConn, error) {
	d := net.Dialer{Timeout: sc.connect, Deadline: deadline}
	c, err := d.Dial("tcp", sc.addr)
	if err != nil {
		return nil, &connectError{err: err}
	}
	uc := &upConn{Conn: c, fd: -1}
	if tc, ok := c.(*net.TCPConn); ok && pollable {
		if raw, err := tc.SyscallConn(); err == nil {
			uc.raw = raw
			_ = raw.Control(func(fd uintptr) { uc.fd = int(fd) })
		}
	}
	if sc.tls != nil {
		under := c
		if uc.raw != nil {
			uc.nb = &nbConn{TCPConn: c.(*net.TCPConn), raw: uc.raw}
			under = uc.nb
		}
		tc := tls.Client(under, sc.tls)
		hd := deadline
		if sc.connect > 0 {
			if t := time.Now().Add(sc.connect); t.Before(hd) {
				hd = t
			}
		}
		_ = c.SetDeadline(hd)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, &connectError{err: err}
		}
		uc.Conn = tc
	}
	return uc, nil
}

// get takes the most recently used idle connection that is still open.
func (sc *streamClient) get() *upConn {
	now := time.Now()
	for {
		sc.mu.Lock()
		n := len(sc.idle)
		if n == 0 {
			sc.mu.Unlock()
			return nil
		}
		uc := sc.idle[n-1]
		sc.idle[n-1] = nil
		sc.idle = sc.idle[:n-1]
		sc.mu.Unlock()
		if now.Sub(uc.idleAt) < streamConnIdle && uc.open() {
			return uc
		}
		uc.Close()
	}
}

// put keeps a connection whose answer was read to its end for the next
// streamed call. Connections idle too long are closed here and by a sweep
// that runs while any connection is idle.
func (sc *streamClient) put(uc *upConn) {
	uc.idleAt = time.Now()
	sc.mu.Lock()
	old := sc.dropStaleLocked(uc.idleAt)
	full := len(sc.idle) >= maxIdleStreamConns
	if !full {
		sc.idle = append(sc.idle, uc)
		if sc.sweeper == nil {
			sc.sweeper = time.AfterFunc(streamConnIdle, sc.sweep)
		}
	}
	sc.mu.Unlock()
	closeConns(old)
	if full {
		uc.Close()
	}
}

// sweep closes the connections idle too long, and comes back while any
// connection is idle.
func (sc *streamClient) sweep() {
	sc.mu.Lock()
	old := sc.dropStaleLocked(time.Now())
	if len(sc.idle) > 0 {
		sc.sweeper.Reset(streamConnIdle)
	} else {
		sc.sweeper = nil
	}
	sc.mu.Unlock()
	closeConns(old)
}

// dropStaleLocked takes the connections idle for streamConnIdle or longer
// at now out of the pool (sc.mu held) and returns them.
func (sc *streamClient) dropStaleLocked(now time.Time) []*upConn {
	stale := 0
	for stale < len(sc.idle) && now.Sub(sc.idle[stale].idleAt) >= streamConnIdle {
		stale++
	}
	if stale == 0 {
		return nil
	}
	old := append([]*upConn(nil), sc.idle[:stale]...)
	n := copy(sc.idle, sc.idle[stale:])
	clear(sc.idle[n:])
	sc.idle = sc.idle[:n]
	return old
}

func closeConns(conns []*upConn) {
	for _, c := range conns {
		c.Close()
	}
}

// closeIdle closes every idle connection (the endpoint left the config).
func (sc *streamClient) closeIdle() {
	sc.mu.Lock()
	idle := sc.idle
	sc.idle = nil
	sc.mu.Unlock()
	closeConns(idle)
}

// readNow reads what the connection holds without waiting for the
// upstream: errWouldBlock when it holds nothing yet, io.EOF at its end. A
// TLS connection reads its socket without blocking through nbConn:
// crypto/tls keeps a partial record and takes the read again later.
func (uc *upConn) readNow(p []byte) (int, error) {
	if uc.nb == nil {
		return readRaw(uc.raw, p)
	}
	uc.nb.nonblocking = true
	n, err := uc.Conn.Read(p)
	if n > 0 {
		return n, nil
	}
	return 0, err
}

// blocking makes a connection's reads wait again (before it serves
// another call).
func (uc *upConn) blocking() {
	if uc.nb != nil {
		uc.nb.nonblocking = false
	}
}

// nbConn is the TCP socket under a TLS connection of a streamed call. Its
// reads wait as usual until the relay makes them non-blocking: then a read
// that finds nothing returns errWouldBlock, a temporary net.Error that
// crypto/tls hands back without failing the connection.
type nbConn struct {
	*net.TCPConn
	raw         syscall.RawConn
	nonblocking bool // set and read by the goroutine reading the connection
}

func (c *nbConn) Read(p []byte) (int, error) {
	if !c.nonblocking {
		return c.TCPConn.Read(p)
	}
	return readRaw(c.raw, p)
}

// wouldBlock is a read that found nothing to read yet.
type wouldBlock struct{}

func (wouldBlock) Error() string   { return "would block" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

var errWouldBlock error = wouldBlock{}

// streamRootCAs, when set (tests), replaces the system's roots for the
// streamed calls' TLS connections.
var streamRootCAs *x509.CertPool
