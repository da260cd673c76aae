package proxy

import (
	"bufio"
	"io"
	"strings"
	"testing"
	"time"

	"taskgate/config"
	"taskgate/tasks"
)

// pausingReader returns its parts one Read at a time, then blocks until
// release is closed, then reports EOF.
type pausingReader struct {
	parts   []string
	release chan struct{}
}

func (r *pausingReader) Read(p []byte) (int, error) {
	if len(r.parts) == 0 {
		<-r.release
		return 0, io.EOF
	}
	n := copy(p, r.parts[0])
	r.parts[0] = r.parts[0][n:]
	if r.parts[0] == "" {
		r.parts = r.parts[1:]
	}
	return n, nil
}

func event(text string) string {
	return `data: {"choices":[{"delta":{"content":"` + text + `"}}]}` + "\n\n"
}

// TestRelayWritesEachEventWithoutWaiting checks the relay's batching: events
// that arrived together share one write, and an event is never held back
// while the next one is still arriving.
func TestRelayWritesEachEventWithoutWaiting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []string
		want  string // the first write
	}{
		{"next event partly arrived", []string{event("a") + `data: {"choi`}, event("a")},
		{"two whole events arrived together", []string{event("a") + event("b") + `data: {"choi`}, event("a") + event("b")},
		{"one event per read", []string{event("a"), event("b")}, event("a")},
		{"an event longer than the reader", []string{event(strings.Repeat("x", 5000)) + `data: {"choi`}, event(strings.Repeat("x", 5000))},
		// The relay ends each event with "\n" whatever the upstream used.
		{"CRLF lines", []string{strings.ReplaceAll(event("a"), "\n", "\r\n") + "data: x"}, strings.TrimSuffix(strings.ReplaceAll(event("a"), "\n", "\r\n"), "\r\n") + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &pausingReader{parts: tc.parts, release: make(chan struct{})}
			defer close(r.release)
			b := &sseBody{c: &call{rt: routeChat, task: &tasks.Task{Task: config.Task{Key: "a.b"}}}, r: bufio.NewReaderSize(r, 4<<10)}
			got := make(chan string, 1)
			go func() {
				if b.next() {
					got <- string(b.out)
				} else {
					got <- "<nothing>"
				}
			}()
			select {
			case s := <-got:
				if s != tc.want {
					t.Errorf("first write %q, want %q", s, tc.want)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the relay waited for the next event before writing the first")
			}
		})
	}
}

// TestRelayReadMatchesWriteTo checks that reading the body gives the bytes
// WriteTo writes (fasthttp uses either).
func TestRelayReadMatchesWriteTo(t *testing.T) {
	stream := event("a") + event("b") + "data: [DONE]\n\n"
	body := func() *sseBody {
		r := &pausingReader{parts: []string{stream[:30], stream[30:]}, release: make(chan struct{})}
		close(r.release)
		c := &call{rt: routeChat, task: &tasks.Task{Task: config.Task{Key: "a.b"}}, haveUsage: true}
		return &sseBody{c: c, r: bufio.NewReaderSize(r, 1<<10)}
	}
	var w strings.Builder
	if _, err := body().WriteTo(&w); err != nil {
		t.Fatal(err)
	}
	read, err := io.ReadAll(struct{ io.Reader }{body()})
	if err != nil {
		t.Fatal(err)
	}
	if string(read) != w.String() || w.String() != stream {
		t.Errorf("Read %q\nWriteTo %q\nwant %q", read, w.String(), stream)
	}
}
