package trim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"taskgate/internal/jsonstr"
)

// genOpts shapes a generated chat history.
type genOpts struct {
	tools       bool // a tools array and tool-call rounds
	attachments bool // user messages with attached text parts
	images      bool // image parts
	trailing    bool // a tool round after the newest user message
	size        int  // about the runes of a text; 0: 40
}

// genHistory makes a valid chat body of about n messages: a system prompt,
// then turns of user, assistant and tool messages, ending with a user
// message (or a tool round after it).
func genHistory(r *rand.Rand, n int, o genOpts) []byte {
	if o.size == 0 {
		o.size = 40
	}
	text := func() string { return randomText(r, 1+r.IntN(2*o.size)) }
	var msgs []string
	add := func(format string, args ...any) { msgs = append(msgs, fmt.Sprintf(format, args...)) }
	str := func(s string) string { return string(jsonstr.Append(nil, s)) }
	add(`{"role":"system","content":%s}`, str(text()))
	call := 0
	toolRound := func() {
		k := 1 + r.IntN(3)
		var calls []string
		for range k {
			call++
			calls = append(calls, fmt.Sprintf(`{"id":"call_%d","type":"function","function":{"name":"lookup","arguments":%s}}`,
				call, str(`{"q":`+str(text())+`}`)))
		}
		content := "null"
		if r.IntN(3) == 0 {
			content = str(text())
		}
		add(`{"role":"assistant","content":%s,"tool_calls":[%s]}`, content, strings.Join(calls, ","))
		for j := range k {
			add(`{"role":"tool","tool_call_id":"call_%d","content":%s}`, call-k+j+1, str(text()))
		}
	}
	user := func() {
		switch {
		case o.attachments && r.IntN(4) == 0:
			parts := []string{fmt.Sprintf(`{"type":"text","text":%s}`, str(text()))}
			for range 1 + r.IntN(2) {
				parts = append(parts, fmt.Sprintf(`{"type":"text","text":%s}`, str(randomText(r, 5*o.size+r.IntN(20*o.size)))))
			}
			add(`{"role":"user","content":[%s]}`, strings.Join(parts, ","))
		case o.images && r.IntN(5) == 0:
			add(`{"role":"user","content":[{"type":"text","text":%s},{"type":"image_url","image_url":{"url":"https://example.com/%d.png","detail":%q}}]}`,
				str(text()), r.IntN(1000), []string{"low", "high", "auto"}[r.IntN(3)])
		case r.IntN(6) == 0:
			add(`{"role":"user","name":"ann","content":%s}`, str(text()))
		default:
			add(`{"role":"user","content":%s}`, str(text()))
		}
	}
	for len(msgs) < n-1 {
		user()
		if o.tools && r.IntN(2) == 0 {
			toolRound()
		}
		switch r.IntN(8) {
		case 0:
			add(`{"role":"developer","content":%s}`, str(text()))
		case 1:
			add(`{"role":"assistant","content":[{"type":"text","text":%s}]}`, str(text()))
		default:
			add(`{"role":"assistant","content":%s}`, str(text()))
		}
	}
	user()
	if o.trailing && o.tools {
		toolRound()
	}
	tools := ""
	if o.tools {
		tools = `,"tools":[{"type":"function","function":{"name":"lookup","description":"Look a thing up.","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]`
	}
	return []byte(`{"model":"gpt-4o","temperature":0.2,"messages":[` + strings.Join(msgs, ",") + `]` + tools + `,"stream":true}`)
}
