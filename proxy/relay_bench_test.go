package proxy

import (
	"strconv"
	"testing"

	"taskgate/config"
	"taskgate/tasks"
)

var benchChunk = []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}` + "\n")

// BenchmarkRelayEvent measures the SSE relay's work per event: parse the
// event, read usage and text, and append it for the client.
func BenchmarkRelayEvent(b *testing.B) {
	for _, selfFlag := range []bool{false, true} {
		name := "plain"
		if selfFlag {
			name = "self_flag"
		}
		b.Run(name, func(b *testing.B) {
			task := &tasks.Task{Task: config.Task{Key: "a.b", SelfFlag: selfFlag}}
			c := &call{rt: routeChat, task: task}
			var out []byte
			st := &streamState{}
			b.ReportAllocs()
			b.SetBytes(int64(len(benchChunk)))
			for i := 0; i < b.N; i++ {
				if st.text.Len() > 1<<20 {
					st.text.Reset()
				}
				out = c.emit(out[:0], st, benchChunk)
			}
		})
	}
}

// BenchmarkRelayRead measures the relay's work per upstream read of one
// event: chunk decoding, SSE framing and the event's inspection.
func BenchmarkRelayRead(b *testing.B) {
	ev := append(append([]byte(nil), benchChunk...), '\n')
	read := []byte(strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + string(ev) + "\r\n")
	task := &tasks.Task{Task: config.Task{Key: "a.b"}}
	r := &streamRelay{c: &call{rt: routeChat, task: task}, up: &upConn{chunked: true}}
	b.ReportAllocs()
	b.SetBytes(int64(len(read)))
	for i := 0; i < b.N; i++ {
		if r.st.text.Len() > 1<<20 {
			r.st.text.Reset()
		}
		r.out = r.out[:0]
		r.take(read)
		if len(r.out) == 0 {
			b.Fatal("no event out")
		}
	}
}

// chatBody10KB is a chat request of 50 ordinary user messages (about 10 KB).
func chatBody10KB() []byte {
	body := []byte(`{"model":"a.b","messages":[`)
	for i := 0; i < 50; i++ {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"role":"user","content":"a fairly ordinary message of about two hundred bytes, with some words, numbers like 12345, and punctuation; enough to look like a real chat turn in a history."}`...)
	}
	return append(body, "]}"...)
}

// BenchmarkCheckBody measures the request checks every call pays (UTF-8,
// depth, JSON validity) on a 10 KB chat body.
func BenchmarkCheckBody(b *testing.B) {
	body := chatBody10KB()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		if e := checkBody(body); e != nil {
			b.Fatal(e)
		}
	}
}
