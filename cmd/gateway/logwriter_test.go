package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func TestLogWriterKeepsEveryLineInOrderPerWriter(t *testing.T) {
	var out lockedBuffer
	w := newLogWriter(&out)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				fmt.Fprintf(w, "g%d line %d\n", g, i)
			}
		}(g)
	}
	wg.Wait()
	w.Close()
	lines := strings.Split(strings.TrimSpace(out.b.String()), "\n")
	if len(lines) != 2000 {
		t.Fatalf("%d lines, want 2000", len(lines))
	}
	next := map[string]int{}
	for _, l := range lines {
		var g string
		var i int
		if _, err := fmt.Sscanf(l, "%s line %d", &g, &i); err != nil {
			t.Fatalf("garbled line %q", l)
		}
		if i != next[g] {
			t.Fatalf("%s: line %d after %d", g, i, next[g]-1)
		}
		next[g]++
	}
}

func TestLogWriterFlushesSoonWithoutClose(t *testing.T) {
	var out lockedBuffer
	w := newLogWriter(&out)
	defer w.Close()
	fmt.Fprintf(w, "one line\n")
	deadline := time.Now().Add(2 * time.Second)
	for {
		out.mu.Lock()
		got := out.b.String()
		out.mu.Unlock()
		if got == "one line\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a lone line was not written within 2 s (flush delay %v): %q", flushDelay, got)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLogWriterAfterClose(t *testing.T) {
	var out lockedBuffer
	w := newLogWriter(&out)
	fmt.Fprintf(w, "before\n")
	w.Close()
	w.Close() // twice: no panic
	fmt.Fprintf(w, "after\n")
	if got := out.b.String(); got != "before\nafter\n" {
		t.Fatalf("got %q", got)
	}
}
