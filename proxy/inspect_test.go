package proxy

import (
	"testing"
)

// TestInspectChatChunk: a chat or completions stream chunk's usage and
// first choice's text are read (text unescaped; the last of duplicate
// top-level names counts); a chunk of usage alone, asked for by the
// gateway, is hidden, and a usage the client did not ask for is removed
// from a chunk that also has choices.
func TestInspectChatChunk(t *testing.T) {
	for _, c := range []struct {
		name      string
		rt        *route
		wantsUse  bool
		data      string
		text      string
		in, out   int64
		haveUsage bool
		hidden    bool
		changed   string // "" : unchanged
	}{
		{name: "delta text", rt: routeChat, data: `{"id":"x","choices":[{"index":0,"delta":{"content":"Hel\"lo\u00e9"}}]}`, text: "Hel\"loé"},
		{name: "second choice ignored", rt: routeChat, data: `{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}`, text: "a"},
		{name: "no content", rt: routeChat, data: `{"choices":[{"delta":{"role":"assistant","content":null}}]}`},
		{name: "completions text", rt: routeCompletions, data: `{"choices":[{"text":"tx","index":0}]}`, text: "tx"},
		{name: "usage alone hidden", rt: routeChat, data: `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}`, in: 7, out: 3, haveUsage: true, hidden: true},
		{name: "usage alone, no choices", rt: routeChat, data: `{"usage":{"completion_tokens":3,"prompt_tokens":7}}`, in: 7, out: 3, haveUsage: true, hidden: true},
		{name: "usage wanted shown", rt: routeChat, wantsUse: true, data: `{"choices":[ ],"usage":{"prompt_tokens":7,"completion_tokens":3}}`, in: 7, out: 3, haveUsage: true},
		{name: "usage removed beside choices", rt: routeChat, data: `{"choices":[{"delta":{"content":"z"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
			text: "z", in: 1, out: 2, haveUsage: true, changed: `{"choices":[{"delta":{"content":"z"}}]}`},
		{name: "null usage", rt: routeChat, data: `{"choices":[{"delta":{"content":"q"}}],"usage":null}`, text: "q"},
		{name: "last duplicate counts", rt: routeChat, data: `{"choices":[{"delta":{"content":"old"}}],"choices":[{"delta":{"content":"new"}}]}`, text: "new"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := &call{rt: c.rt, clientWantsUsage: c.wantsUse}
			var st streamState
			changed, hidden := cl.inspect(&st, nil, []byte(c.data))
			if got := st.text.String(); got != c.text {
				t.Errorf("text %q, want %q", got, c.text)
			}
			if cl.in != c.in || cl.out != c.out || cl.haveUsage != c.haveUsage {
				t.Errorf("usage %d/%d (%v), want %d/%d (%v)", cl.in, cl.out, cl.haveUsage, c.in, c.out, c.haveUsage)
			}
			if hidden != c.hidden || string(changed) != c.changed {
				t.Errorf("hidden %v, changed %q; want %v, %q", hidden, changed, c.hidden, c.changed)
			}
		})
	}
}
