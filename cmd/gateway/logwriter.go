package main

import (
	"io"
	"sync"
)

// logWriter takes log lines without blocking the call path: lines are
// appended to a buffer, and a background goroutine writes whatever has
// gathered in one write(2). Under load many lines share one write; a line is
// out within microseconds when idle. Past maxPending bytes a writer waits
// for the buffer to drain (back-pressure, never loss).
type logWriter struct {
	out  io.Writer
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	kick chan struct{}
	done chan struct{}
}

const maxPending = 4 << 20

func newLogWriter(out io.Writer) *logWriter {
	w := &logWriter{out: out, kick: make(chan struct{}, 1), done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.loop()
	return w
}

// Write buffers p (one log record) and wakes the writer.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	for len(w.buf) > maxPending {
		w.cond.Wait()
	}
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
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

// Close writes what is buffered and stops the writer.
func (w *logWriter) Close() error {
	close(w.kick)
	<-w.done
	return nil
}
