package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"taskgate/internal/fakeupstream"
	"taskgate/proxy"
)

// heldConfig is relConfig with room for streams that pause between events.
var heldConfig = strings.NewReplacer("timeout: 3s", "timeout: 20s", "idle_timeout: 300ms", "idle_timeout: 10s").Replace(relConfig)

// goroutinesIn counts the goroutines whose stack has a frame containing fn.
func goroutinesIn(fn string) int {
	n, _ := goroutineStacks(fn)
	return n
}

// goroutineStacks is how many goroutines have fn on their stack, and the
// first one's stack.
func goroutineStacks(fn string) (int, string) {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	n, first := 0, ""
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, fn) {
			if n == 0 {
				first = g
			}
			n++
		}
	}
	return n, first
}

// relayGoroutinesSettle is how many goroutines are inside the relay once
// the last streams to park have left it (and the first one's stack): a
// stream counts as parked just before its goroutine returns, and under
// load (CI runs the packages' race tests side by side on two cores) a
// goroutine may wait long to run again, so the count is taken again for up
// to 900 ms (a stream's next event comes a second after its first, its
// end two seconds after).
func relayGoroutinesSettle() (int, string) {
	g, stack := goroutineStacks("proxy.(*streamRelay)")
	for deadline := time.Now().Add(900 * time.Millisecond); g != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		g, stack = goroutineStacks("proxy.(*streamRelay)")
	}
	return g, stack
}

// TestHeldStreamsWaitWithoutAGoroutine opens streams whose upstream pauses
// between events and checks that while they wait no goroutine of the
// gateway holds them (each waits in the poller), and that each then runs to
// its end and is settled.
func TestHeldStreamsWaitWithoutAGoroutine(t *testing.T) {
	const n = 40
	e := newEnv(t, heldConfig, envOptions{})
	e.up.SetDefault(fakeupstream.Behavior{Chunks: []string{" one", " two", " three"}, EventDelay: time.Second})
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: n, MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()

	var started, done sync.WaitGroup
	var ok atomic.Int64
	started.Add(n)
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			first := true
			defer func() {
				if first {
					started.Done()
				}
			}()
			req, _ := http.NewRequest("POST", e.clientURL+"/v1/chat/completions", strings.NewReader(chatBody("rel.single", true)))
			req.Header.Set("Authorization", "Bearer "+testKey)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			text, sawDone := "", false
			for sc.Scan() {
				line := sc.Text()
				if first && strings.HasPrefix(line, "data:") {
					first = false
					started.Done()
				}
				if line == "data: [DONE]" {
					sawDone = true
				}
				text += gjson.Get(strings.TrimPrefix(line, "data: "), "choices.0.delta.content").Str
			}
			if text == " one two three" && sawDone {
				ok.Add(1)
			} else {
				t.Errorf("stream text %q, [DONE] %v", text, sawDone)
			}
		}()
	}
	started.Wait()
	waitFor(t, "every stream to wait in the poller", func() bool { return proxy.ParkedStreams() >= n })
	if g, stack := relayGoroutinesSettle(); g != 0 {
		t.Errorf("%d goroutines inside the relay while every stream waits; the first:\n%s", g, stack)
	}
	if g := goroutinesIn("fasthttp.(*Server).serveConn"); g > n/4 {
		t.Errorf("%d connection goroutines for %d waiting streams", g, n)
	}
	done.Wait()
	if ok.Load() != n {
		t.Fatalf("%d of %d streams whole", ok.Load(), n)
	}
	waitFor(t, "the streams to leave the poller", func() bool { return proxy.ParkedStreams() == 0 })
	checkSettled(t, e, "rel.single")
	if got := e.relMetric("taskgate_tokens_total", "task", "rel.single", "direction", "output"); got != 3*n {
		t.Errorf("output tokens %v, want %d", got, 3*n)
	}
}

// TestHeldTLSStreamsWaitWithoutAGoroutine does the same with an https
// upstream: TLS streams wait in the poller too.
func TestHeldTLSStreamsWaitWithoutAGoroutine(t *testing.T) {
	const n = 20
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	fake.SetDefault(fakeupstream.Behavior{Chunks: []string{" one", " two"}, EventDelay: time.Second})
	ts := httptest.NewTLSServer(fake.Handler())
	defer ts.Close()
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	defer proxy.SetStreamRootCAs(pool)()
	e := newEnv(t, strings.Replace(heldConfig, "{{UP}}", ts.URL+"/v1", 1), envOptions{})
	sdk := e.sdk(testKey)
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			s := sdk.Chat.Completions.NewStreaming(context.Background(), chatParams("rel.single", "hi"))
			text, first := "", true
			for s.Next() {
				if c := s.Current(); len(c.Choices) > 0 {
					text += c.Choices[0].Delta.Content
				}
				if first {
					first = false
					started.Done()
				}
			}
			if first {
				started.Done()
			}
			if s.Err() != nil || text != " one two" {
				t.Errorf("text %q, err %v", text, s.Err())
			}
		}()
	}
	started.Wait()
	waitFor(t, "every TLS stream to wait in the poller", func() bool { return proxy.ParkedStreams() >= n })
	if g, stack := relayGoroutinesSettle(); g != 0 {
		t.Errorf("%d goroutines inside the relay while every stream waits; the first:\n%s", g, stack)
	}
	done.Wait()
	checkSettled(t, e, "rel.single")
}

// TestClientGoneWhileWaitingEndsTheStream checks that a client that goes
// away while its stream waits for the upstream's next event ends the
// stream at once: the upstream call is dropped and the call settled from
// what streamed, without waiting for the next event.
func TestClientGoneWhileWaitingEndsTheStream(t *testing.T) {
	fake, tr, url := trackedUpstream(t)
	e := newEnv(t, strings.Replace(heldConfig, "{{UP}}", url, 1), envOptions{})
	fake.SetDefault(fakeupstream.Behavior{Chunks: []string{" one", " two"}, EventDelay: 4 * time.Second})

	c := dialClient(t, e)
	_, _ = io.WriteString(c, rawChat("HTTP/1.1", chatBody("rel.single", true)))
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data:") {
			break
		}
	}
	waitFor(t, "the stream to wait in the poller", func() bool { return proxy.ParkedStreams() >= 1 })
	t0 := time.Now()
	c.Close()
	waitFor(t, "the upstream call to be dropped", func() bool { return tr.cancelled.Load() == 1 })
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("the upstream call was dropped %v after the client left; the next event was 4s away", d)
	}
	checkSettled(t, e, "rel.single")
}

// TestStreamPassesTheCallTimeout checks that a stream whose events keep
// coming is still cut at the endpoint's timeout (the whole call), with an
// upstream_timeout event, and settled.
func TestStreamPassesTheCallTimeout(t *testing.T) {
	for _, polling := range []bool{true, false} {
		t.Run("polling="+strconv.FormatBool(polling), func(t *testing.T) {
			defer proxy.SetStreamPolling(polling)()
			cfg := strings.NewReplacer("timeout: 3s", "timeout: 1s", "idle_timeout: 300ms", "idle_timeout: 10s").Replace(relConfig)
			e := newEnv(t, cfg, envOptions{})
			chunks := make([]string, 30)
			for i := range chunks {
				chunks[i] = " word"
			}
			e.up.Push(fakeupstream.Behavior{Chunks: chunks, EventDelay: 100 * time.Millisecond})
			t0 := time.Now()
			resp := e.post("/v1/chat/completions", testKey, chatBody("rel.single", true))
			data := sseData(t, resp.Body)
			resp.Body.Close()
			if d := time.Since(t0); d < 900*time.Millisecond || d > 2*time.Second {
				t.Errorf("a 3 s stream under a 1 s timeout ended after %v", d)
			}
			if len(data) < 3 || gjson.Get(data[len(data)-1], "error.code").Str != "upstream_timeout" {
				t.Fatalf("events %q: not cut with upstream_timeout", data)
			}
			checkSettled(t, e, "rel.single")
		})
	}
}

// TestEmptyStreamEndsAtOnce checks that a 2xx stream answer with an empty
// body (Content-Length: 0) on a connection the upstream keeps open ends the
// client's stream at once, as ended early, not after idle_timeout.
func TestEmptyStreamEndsAtOnce(t *testing.T) {
	url := rawAnswerUpstream(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 0\r\n\r\n")
		time.Sleep(3 * time.Second) // the connection stays open
	})
	cfg := strings.Replace(strings.Replace(relConfig, "idle_timeout: 300ms", "idle_timeout: 2s", 2), "{{UP}}", url, 1)
	e := newEnv(t, cfg, envOptions{})
	t0 := time.Now()
	resp := e.post("/v1/chat/completions", testKey, chatBody("rel.single", true))
	data := sseData(t, resp.Body)
	resp.Body.Close()
	if d := time.Since(t0); d > time.Second {
		t.Errorf("an empty stream ended after %v", d)
	}
	if len(data) != 1 || gjson.Get(data[0], "error.code").Str != "upstream_error" {
		t.Fatalf("events %q, want one upstream_error", data)
	}
	checkSettled(t, e, "rel.single")
}

// TestStreamsWaitingOnAGoroutine runs the stream tests with the poller
// off: the way every stream waits where epoll is missing, and every stream
// to a TLS upstream.
func TestStreamsWaitingOnAGoroutine(t *testing.T) {
	defer proxy.SetStreamPolling(false)()
	t.Run("event by event", TestChatStreamEventByEvent)
	t.Run("usage", TestStreamIncludeUsageWhenAsked)
	t.Run("cut", TestStreamCutMidway)
	t.Run("stall", TestStreamStallMidway)
	t.Run("client abort", TestClientAbortCancelsUpstream)
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestStreamsReuseUpstreamConnections checks that streamed calls in a row
// share one upstream connection, and that a connection the upstream closed
// while idle is not used again.
func TestStreamsReuseUpstreamConnections(t *testing.T) {
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	hs := &http.Server{Handler: fake.Handler()}
	go hs.Serve(cl)
	defer hs.Close()
	e := newEnv(t, strings.Replace(relConfig, "{{UP}}", "http://"+ln.Addr().String()+"/v1", 1), envOptions{})
	sdk := e.sdk(testKey)
	stream := func() {
		t.Helper()
		s := sdk.Chat.Completions.NewStreaming(context.Background(), chatParams("rel.single", "hi"))
		text := ""
		for s.Next() {
			if c := s.Current(); len(c.Choices) > 0 {
				text += c.Choices[0].Delta.Content
			}
		}
		if s.Err() != nil || text == "" {
			t.Fatalf("text %q, err %v", text, s.Err())
		}
	}
	for i := 0; i < 10; i++ {
		stream()
	}
	if got := cl.accepted.Load(); got != 1 {
		t.Errorf("10 streams in a row opened %d upstream connections, want 1", got)
	}
	hs.SetKeepAlivesEnabled(false) // closes the idle connection
	time.Sleep(50 * time.Millisecond)
	hs.SetKeepAlivesEnabled(true)
	stream()
	if got := cl.accepted.Load(); got != 2 {
		t.Errorf("after the upstream closed the idle connection: %d connections, want 2", got)
	}
	if errs := e.relMetric("taskgate_upstream_errors_total", "endpoint", "primary", "kind", "connect"); errs != 0 {
		t.Errorf("%v connect errors", errs)
	}
	checkSettled(t, e, "rel.single")
}

// TestStreamToOldAndPipeliningClients checks a stream to an HTTP/1.0
// client (no chunked coding; the connection closes at the end) and a
// request pipelined behind a stream on the same connection.
func TestStreamToOldAndPipeliningClients(t *testing.T) {
	e := newEnv(t, relConfig, envOptions{})
	t.Run("HTTP/1.0", func(t *testing.T) {
		c := dialClient(t, e)
		if _, err := io.WriteString(c, rawChat("HTTP/1.0", chatBody("rel.single", true))); err != nil {
			t.Fatal(err)
		}
		all, err := io.ReadAll(c) // until the gateway closes
		if err != nil {
			t.Fatal(err)
		}
		head, body, _ := strings.Cut(string(all), "\r\n\r\n")
		if !strings.HasPrefix(head, "HTTP/1.1 200") || strings.Contains(strings.ToLower(head), "chunked") {
			t.Errorf("head %q", head)
		}
		if !strings.HasPrefix(body, "data: {") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
			t.Errorf("body %q", body)
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		c := dialClient(t, e)
		both := rawChat("HTTP/1.1", chatBody("rel.single", true)) + rawChat("HTTP/1.1", chatBody("rel.single", false))
		if _, err := io.WriteString(c, both); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for i, want := range []string{"data: [DONE]", `"object":"chat.completion"`} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), want) {
				t.Fatalf("answer %d: status %d, err %v, body %q", i, resp.StatusCode, err, b)
			}
		}
	})
	checkSettled(t, e, "rel.single")
}

// rawChat is a chat completions request as a client writes it on the wire.
func rawChat(proto, body string) string {
	return "POST /v1/chat/completions " + proto + "\r\nHost: gw\r\nAuthorization: Bearer " + testKey +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// dialClient opens a bare connection to the gateway's client API, closed
// when the test ends, with a deadline so that no read hangs.
func dialClient(t *testing.T, e *env) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.clientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}
