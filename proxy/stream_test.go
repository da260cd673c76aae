package proxy

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"taskgate/config"
	"taskgate/internal/fakeupstream"
	"taskgate/tasks"
)

func event(text string) string {
	return `data: {"choices":[{"delta":{"content":"` + text + `"}}]}` + "\n\n"
}

// testRelay is a relay over an identity-framed upstream body, for the
// framing tests.
func testRelay() *streamRelay {
	c := &call{rt: routeChat, task: &tasks.Task{Task: config.Task{Key: "a.b"}}, haveUsage: true}
	return &streamRelay{c: c, up: &upConn{left: -1}}
}

// TestRelayWritesEachEventWithoutWaiting checks the relay's framing: each
// whole event is output as soon as its bytes are in, events that arrived
// together are output together, and a partial event waits for its end.
func TestRelayWritesEachEventWithoutWaiting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []string
		want  []string // the output after each part
	}{
		{"next event partly arrived", []string{event("a") + `data: {"choi`}, []string{event("a")}},
		{"two whole events arrived together", []string{event("a") + event("b") + `data: {"choi`}, []string{event("a") + event("b")}},
		{"one event per read", []string{event("a"), event("b")}, []string{event("a"), event("b")}},
		{"an event split across reads", []string{event("a")[:7], event("a")[7:]}, []string{"", event("a")}},
		{"the blank line split from its event", []string{strings.TrimSuffix(event("a"), "\n"), "\n"}, []string{"", event("a")}},
		{"an event longer than a read", []string{event(strings.Repeat("x", 5000))[:4096], event(strings.Repeat("x", 5000))[4096:]}, []string{"", event(strings.Repeat("x", 5000))}},
		// The relay ends each event with "\n" whatever the upstream used.
		{"CRLF lines", []string{strings.ReplaceAll(event("a"), "\n", "\r\n") + "data: x"}, []string{strings.TrimSuffix(strings.ReplaceAll(event("a"), "\n", "\r\n"), "\r\n") + "\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRelay()
			for i, p := range tc.parts {
				r.out = r.out[:0]
				r.take([]byte(p))
				if string(r.out) != tc.want[i] {
					t.Errorf("after part %d: output %q, want %q", i, r.out, tc.want[i])
				}
			}
		})
	}
}

// referenceFraming is the relay's framing written the plain way (a line
// reader over the whole body), to compare with.
func referenceFraming(c *call, body string) string {
	br := bufio.NewReader(strings.NewReader(body))
	var out, ev []byte
	st := &streamState{}
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && len(bytes.TrimRight(line, "\r\n")) == 0 {
			if len(ev) > 0 {
				out = c.emit(out, st, ev)
				ev = ev[:0]
			}
			continue
		}
		ev = append(ev, line...)
		if err != nil {
			break
		}
	}
	if len(ev) > 0 {
		out = c.emit(out, st, ev)
	}
	return string(out)
}

// relayOutput runs body through a relay in reads of the given sizes.
func relayOutput(body string, sizes []int) string {
	r := testRelay()
	for i := 0; len(body) > 0; i++ {
		n := len(body)
		if len(sizes) > 0 {
			n = min(n, max(1, sizes[i%len(sizes)]))
		}
		r.take([]byte(body[:n]))
		body = body[n:]
	}
	r.emitPartial()
	return string(r.out)
}

// TestRelayFramingMatchesReference compares the relay's incremental
// framing with the reference on streams cut at every byte.
func TestRelayFramingMatchesReference(t *testing.T) {
	bodies := []string{
		event("a") + event("b") + "data: [DONE]\n\n",
		"event: response.created\ndata: {\"type\":\"response.created\"}\n\n: comment\n\ndata: x",
		"\n\n\r\n" + event("a") + "data: partial line",
		strings.ReplaceAll(event("a")+event("b"), "\n", "\r\n"),
		"data: x\n\r",
		"data: one\ndata: two\n\n\n\ndata: three\n",
	}
	for _, body := range bodies {
		want := referenceFraming(testRelay().c, body)
		for cut := 1; cut <= len(body); cut++ {
			if got := relayOutput(body, []int{cut}); got != want {
				t.Fatalf("body %q in reads of %d:\n got %q\nwant %q", body, cut, got, want)
			}
		}
	}
}

// FuzzRelayFraming compares the relay's framing with the reference on any
// body cut into reads of any sizes.
func FuzzRelayFraming(f *testing.F) {
	f.Add(event("a")+event("b")+"data: [DONE]\n\n", []byte{3, 50})
	f.Add("data: x\r\n\r\ndata: y", []byte{1})
	f.Fuzz(func(t *testing.T, body string, cuts []byte) {
		sizes := make([]int, len(cuts))
		for i, c := range cuts {
			sizes[i] = int(c)
		}
		if got, want := relayOutput(body, sizes), referenceFraming(testRelay().c, body); got != want {
			t.Fatalf("got %q\nwant %q", got, want)
		}
	})
}

// chunked encodes data as chunks of the given size, with an extension and
// a trailer, the way an upstream might.
func chunked(data string, size int) string {
	var b strings.Builder
	for i := 0; i < len(data); i += size {
		part := data[i:min(len(data), i+size)]
		b.WriteString(strconv.FormatInt(int64(len(part)), 16))
		if i == 0 {
			b.WriteString(";name=value")
		}
		b.WriteString("\r\n" + part + "\r\n")
	}
	return b.String() + "0\r\nX-Trailer: t\r\n\r\n"
}

// TestChunkDecoder decodes chunked bodies fed in pieces of every size, and
// refuses malformed ones.
func TestChunkDecoder(t *testing.T) {
	data := event("hello") + event("world") + "data: [DONE]\n\n"
	for _, size := range []int{1, 7, 64, 1000} {
		enc := chunked(data, size) + "NEXT"
		for piece := 1; piece <= len(enc); piece++ {
			var d chunkDecoder
			var out []byte
			rest := ""
			for i := 0; i < len(enc); i += piece {
				p := enc[i:min(len(enc), i+piece)]
				var used int
				var err error
				out, used, err = d.decode(out, []byte(p))
				if err != nil {
					t.Fatalf("size %d piece %d: %v", size, piece, err)
				}
				if d.done() {
					rest = p[used:] + enc[min(len(enc), i+piece):]
					break
				}
			}
			if string(out) != data || !d.done() || rest != "NEXT" {
				t.Fatalf("size %d piece %d: decoded %q done %v rest %q", size, piece, out, d.done(), rest)
			}
		}
	}
	for _, bad := range []string{"x\r\n", "\r\n", "5\r\nhelloX", "5\rX", "fffffffffffffffff\r\n"} {
		var d chunkDecoder
		if _, _, err := d.decode(nil, []byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// LF-only line ends are taken.
	var d chunkDecoder
	out, _, err := d.decode(nil, []byte("3\nabc\n0\n\n"))
	if err != nil || string(out) != "abc" || !d.done() {
		t.Errorf("LF-only: %q %v %v", out, err, d.done())
	}
}

// TestStreamClientOverTLS streams from an https upstream through the
// streamed calls' client, reading the body after the headers both ways the
// relay does: blocking, and without blocking (a TLS record may come in
// pieces), and reuses the connection.
func TestStreamClientOverTLS(t *testing.T) {
	fake, err := fakeupstream.New(fakeupstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	fake.SetDefault(fakeupstream.Behavior{Chunks: []string{"a", "b", "c"}, EventDelay: 20 * time.Millisecond})
	ts := httptest.NewTLSServer(fake.Handler())
	defer ts.Close()
	host := strings.TrimPrefix(ts.URL, "https://")
	sc := newStreamClient(host, host, true, time.Second, time.Second)
	sc.tls.RootCAs = x509.NewCertPool()
	sc.tls.RootCAs.AddCert(ts.Certificate())
	sc.tls.ServerName = "example.com" // the test certificate's name
	for _, nonblocking := range []bool{false, true, true} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod("POST")
		req.SetRequestURI(ts.URL + "/v1/chat/completions")
		req.SetBodyString(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		uc, rest, err := sc.do(req, resp, time.Now().Add(5*time.Second))
		if err != nil || uc == nil || resp.StatusCode() != 200 {
			t.Fatalf("do: %v, conn %v, status %d", err, uc, resp.StatusCode())
		}
		if uc.raw == nil || uc.nb == nil {
			t.Fatal("the TLS connection's socket is not known")
		}
		var d chunkDecoder
		body, _, err := d.decode(nil, rest)
		buf := make([]byte, 4096)
		waited := 0
		for err == nil && !d.done() {
			var n int
			if nonblocking {
				n, err = uc.readNow(buf)
				if err == errWouldBlock {
					waited++
					time.Sleep(time.Millisecond)
					err = nil
					continue
				}
			} else {
				n, err = uc.Read(buf)
			}
			if n > 0 {
				body, _, err = d.decode(body, buf[:n])
			}
		}
		if err != nil || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) || !bytes.Contains(body, []byte(`"content":"c"`)) {
			t.Fatalf("nonblocking %v: body %q, err %v", nonblocking, body, err)
		}
		if nonblocking && waited == 0 {
			t.Error("a stream with pauses never found its socket empty")
		}
		uc.blocking()
		sc.put(uc)
		if len(sc.idle) != 1 {
			t.Fatalf("%d idle connections", len(sc.idle))
		}
	}
}

// FuzzRelayChunked feeds a chunked upstream body, cut into reads of any
// sizes, through the relay and compares its output with the reference
// framing of the decoded body.
func FuzzRelayChunked(f *testing.F) {
	f.Add(event("a")+event("b"), uint8(5), []byte{3, 50})
	f.Add("data: x\r\n\r\ndata: y\n\n", uint8(1), []byte{1})
	f.Fuzz(func(t *testing.T, body string, chunk uint8, cuts []byte) {
		body += "\n\ndata: [DONE]\n\n" // a whole stream: the relay ends it without an error event
		enc := chunked(body, max(1, int(chunk)))
		r := testRelay()
		r.up.chunked = true
		for i := 0; len(enc) > 0 && !r.ended; i++ {
			n := len(enc)
			if len(cuts) > 0 {
				n = min(n, max(1, int(cuts[i%len(cuts)])))
			}
			r.take([]byte(enc[:n]))
			enc = enc[n:]
		}
		if !r.ended || !r.bodyDone || !r.reusable {
			t.Fatalf("ended %v, body done %v, reusable %v", r.ended, r.bodyDone, r.reusable)
		}
		if want := referenceFraming(testRelay().c, body); string(r.out) != want {
			t.Fatalf("got %q\nwant %q", r.out, want)
		}
	})
}

// TestStreamClientSweepsIdleConnections checks that idle connections are
// closed once stale, by the sweep, which stops when none is left.
func TestStreamClientSweepsIdleConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	sc := newStreamClient(ln.Addr().String(), ln.Addr().String(), false, time.Second, time.Second)
	var conns []*upConn
	for i := 0; i < 3; i++ {
		uc, err := sc.dial(time.Now().Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, uc)
		sc.put(uc)
	}
	if sc.sweeper == nil || len(sc.idle) != 3 {
		t.Fatalf("sweeper %v, %d idle", sc.sweeper, len(sc.idle))
	}
	sc.mu.Lock()
	sc.idle[0].idleAt = time.Now().Add(-2 * streamConnIdle) // the oldest two are stale
	sc.idle[1].idleAt = time.Now().Add(-streamConnIdle)
	sc.mu.Unlock()
	sc.sweep()
	if len(sc.idle) != 1 || sc.idle[0] != conns[2] || sc.sweeper == nil {
		t.Fatalf("after the sweep: %d idle, sweeper %v", len(sc.idle), sc.sweeper)
	}
	if _, err := conns[0].Write([]byte("x")); err == nil {
		t.Error("a stale connection was not closed")
	}
	sc.mu.Lock()
	sc.idle[0].idleAt = time.Now().Add(-streamConnIdle)
	sc.mu.Unlock()
	sc.sweep()
	if len(sc.idle) != 0 || sc.sweeper != nil {
		t.Fatalf("after the last sweep: %d idle, sweeper %v", len(sc.idle), sc.sweeper)
	}
}
