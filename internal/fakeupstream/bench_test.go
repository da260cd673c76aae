package fakeupstream_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"taskgate/internal/fakeupstream"
)

var benchBody = []byte(`{"model":"fake-mini","messages":[{"role":"system","content":"You count stock."},{"role":"user","content":"How many boxes are on shelf 4?"}]}`)
var benchStreamBody = []byte(`{"model":"fake-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"How many boxes are on shelf 4?"}]}`)

// BenchmarkHandler measures the server's own cost per answer, without sockets.
func BenchmarkHandler(b *testing.B) {
	for _, bc := range []struct {
		name string
		body []byte
	}{{"plain", benchBody}, {"stream", benchStreamBody}} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := fakeupstream.New(fakeupstream.Options{NoRecord: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			h := s.Handler()
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(bc.body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// BenchmarkSocket measures a plain chat call over loopback with net/http.
func BenchmarkSocket(b *testing.B) {
	s, err := fakeupstream.New(fakeupstream.Options{NoRecord: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	url := s.URL() + "/chat/completions"
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := http.Post(url, "application/json", bytes.NewReader(benchBody))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	})
}
