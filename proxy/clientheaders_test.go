package proxy

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestClientHeadersMatchPeek checks the one-pass header read against a
// lookup by name for each header a call reads: any case, duplicates (the
// first counts), empty values, absent headers, and headers fasthttp keeps
// apart (Host, Content-Type, User-Agent, Cookie).
func TestClientHeadersMatchPeek(t *testing.T) {
	requests := []string{
		"Authorization: Bearer sk-1\r\nX-Taskgate-Task: a.b\r\nX-Taskgate-User: u\r\nX-Taskgate-Source: s\r\n",
		"authorization: bearer sk-2\r\nx-taskgate-task: lower.case\r\nX-TASKGATE-USER: UPPER\r\nx-TaskGate-source: mixed\r\n",
		"X-Taskgate-User: first\r\nX-Taskgate-User: second\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n",
		"X-Taskgate-Task:\r\nX-Taskgate-Task: later\r\nX-Taskgate-Source: \r\n",
		"Content-Type: application/json\r\nUser-Agent: OpenAI/Python\r\nCookie: a=b\r\nX-Stainless-Lang: python\r\n",
		"",
	}
	names := []string{"Authorization", "X-Taskgate-Task", "X-Taskgate-User", "X-Taskgate-Source"}
	for _, r := range requests {
		var h fasthttp.RequestHeader
		raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + r + "\r\n"
		if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatalf("%q: %v", r, err)
		}
		var ch clientHeaders
		ch.read(&h)
		for i, got := range [][]byte{ch.auth, ch.task, ch.user, ch.source} {
			if want := h.Peek(names[i]); !bytes.Equal(got, want) {
				t.Errorf("%q: %s = %q, Peek %q", r, names[i], got, want)
			}
		}
	}
}
