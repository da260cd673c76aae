package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
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
