package main

import (
	"io"
	"sync"
	"time"
)

// logWriter takes log lines without blocking the call path: lines are
// appended to a buffer, and a background goroutine writes whatever has
// gathered in one write(2), flushDelay after the first line of a batch (or
// at once past flushSize bytes). Lines share writes, and the writer wakes at
// most once per flushDelay rather than once per line. Past maxPending bytes
// a writer waits for the buffer to drain (back-pressure, never loss).
type logWriter struct {
	out    io.Writer
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool
	timer  *time.Timer // kicks the writer flushDelay after a batch's first line
	kick   chan struct{}
	done   chan struct{}
}

const (
	flushDelay = 10 * time.Millisecond
	flushSize  = 64 << 10
	maxPending = 4 << 20
)

func newLogWriter(out io.Writer) *logWriter {
	w := &logWriter{out: out, kick: make(chan struct{}, 1), done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	w.timer = time.AfterFunc(time.Hour, func() {
		w.mu.Lock()
		w.wake()
		w.mu.Unlock()
	})
	w.timer.Stop()
	go w.loop()
	return w
}

// wake kicks the writer goroutine; w.mu is held.
func (w *logWriter) wake() {
	if w.closed {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Write buffers p (one log record). After Close it writes p at once.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return w.out.Write(p)
	}
	for len(w.buf) > maxPending {
		w.cond.Wait()
	}
	first := len(w.buf) == 0
	w.buf = append(w.buf, p...)
	if len(w.buf) >= flushSize {
		w.wake()
	} else if first {
		w.timer.Reset(flushDelay)
	}
	w.mu.Unlock()
	return len(p), nil
}

func (w *logWriter) loop() {
	defer close(w.done)
	var spare []byte
	for range w.kick {
		w.flushWith(&spare)
	}
	w.flushWith(&spare)
}

func (w *logWriter) flushWith(spare *[]byte) {
	w.mu.Lock()
	b := w.buf
	w.buf = (*spare)[:0]
	w.cond.Broadcast()
	w.mu.Unlock()
	if len(b) > 0 {
		_, _ = w.out.Write(b)
	}
	if cap(b) <= 1<<20 {
		*spare = b
	} else {
		*spare = nil
	}
}

// Close writes what is buffered and stops the writer; later lines are
// written at once.
func (w *logWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.timer.Stop()
	close(w.kick)
	w.mu.Unlock()
	<-w.done
	return nil
}
