package fakeupstream

import (
	"strconv"
	"taskgate/internal/jsonstr"
	"time"

	"github.com/tidwall/gjson"
)

// appendChatUsage appends a chat/completions usage object.
func appendChatUsage(b []byte, u Usage) []byte {
	b = appendKInt(append(b, '{'), "prompt_tokens", u.PromptTokens)
	b = appendKInt(append(b, ','), "completion_tokens", u.CompletionTokens)
	b = appendKInt(append(b, ','), "total_tokens", u.TotalTokens)
	return append(b, `,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`...)
}

// appendHead appends `{"id":"<prefix><seq>","object":"<object>","created":T,"model":"<model>"`.
func appendHead(b []byte, idPrefix string, seq uint64, object, model string) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, idPrefix...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `","object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"model":`...)
	return jsonstr.Append(b, model)
}

// appendToolCall appends the tool_calls entry of a plain answer.
func appendToolCall(b []byte, a *answer) []byte {
	b = append(b, `[{"id":`...)
	b = jsonstr.Append(b, a.toolID)
	b = append(b, `,"type":"function","function":{"name":`...)
	b = jsonstr.Append(b, a.tool.Name)
	b = append(b, `,"arguments":`...)
	b = jsonstr.Append(b, a.tool.Arguments)
	return append(b, "}}]"...)
}

// chat answers POST /v1/chat/completions.
func (c *call) chat() {
	a := c.answer(routeChat)
	if gjson.GetBytes(c.body, "stream").Bool() {
		c.chatStream(a)
		return
	}
	b := make([]byte, 0, 640+len(a.content))
	b = appendHead(b, "chatcmpl-fake", c.seq, "chat.completion", a.model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if a.tool != nil {
		b = append(b, `null,"tool_calls":`...)
		b = appendToolCall(b, a)
	} else {
		b = jsonstr.Append(b, a.content)
	}
	b = append(b, `,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":`...)
	b = jsonstr.Append(b, a.finish)
	b = append(b, "}]"...)
	if !c.b.NoUsage {
		b = appendChatUsage(append(b, `,"usage":`...), a.usage)
	}
	b = append(b, `,"service_tier":"default","system_fingerprint":"fp_fake"}`...)
	if !c.b.NoUsage {
		c.s.addUsage(a.usage)
	}
	writeJSON(c.w, b)
}

// chatStream streams chat.completion.chunk events.
func (c *call) chatStream(a *answer) {
	includeUsage := gjson.GetBytes(c.body, "stream_options.include_usage").Bool()
	noUsage, repeat := c.b.NoUsage, c.b.RepeatUsage && !c.b.NoUsage
	st := c.startStream()

	head := appendHead(make([]byte, 0, 160), "chatcmpl-fake", c.seq, "chat.completion.chunk", a.model)
	head = append(head, `,"service_tier":"default","system_fingerprint":"fp_fake","choices":[`...)
	ev := make([]byte, 0, 512)
	// emit sends one chunk whose choices are choice; u is its usage (nil: none).
	emit := func(choice []byte, u *Usage) bool {
		ev = append(ev[:0], head...)
		ev = append(ev, choice...)
		ev = append(ev, ']')
		switch {
		case u != nil:
			ev = appendChatUsage(append(ev, `,"usage":`...), *u)
			ev = append(ev, '}')
			return st.sendUsage("", ev, *u)
		case includeUsage && !noUsage:
			ev = append(ev, `,"usage":null}`...)
		default:
			ev = append(ev, '}')
		}
		return st.send("", ev)
	}
	running := func(i int) *Usage {
		if !repeat {
			return nil
		}
		u := a.runningUsage(i)
		return &u
	}

	ch := make([]byte, 0, 256)
	if a.tool != nil {
		ch = append(ch, `{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":`...)
		ch = jsonstr.Append(ch, a.toolID)
		ch = append(ch, `,"type":"function","function":{"name":`...)
		ch = jsonstr.Append(ch, a.tool.Name)
		ch = append(ch, `,"arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}`...)
	} else {
		ch = append(ch, `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}`...)
	}
	if !emit(ch, running(0)) {
		return
	}
	for i, p := range a.pieces {
		if a.tool != nil {
			ch = append(ch[:0], `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`...)
			ch = jsonstr.Append(ch, p)
			ch = append(ch, `}}]},"logprobs":null,"finish_reason":null}`...)
		} else {
			ch = append(ch[:0], `{"index":0,"delta":{"content":`...)
			ch = jsonstr.Append(ch, p)
			ch = append(ch, `},"logprobs":null,"finish_reason":null}`...)
		}
		if !emit(ch, running(i+1)) {
			return
		}
	}
	ch = append(ch[:0], `{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	ch = jsonstr.Append(ch, a.finish)
	ch = append(ch, '}')
	var final *Usage
	if repeat {
		final = &a.usage
	}
	if !emit(ch, final) {
		return
	}
	if includeUsage && !noUsage && !emit(nil, &a.usage) {
		return
	}
	st.doneEvent()
}

// appendCompletionUsage appends a legacy completions usage object.
func appendCompletionUsage(b []byte, u Usage) []byte {
	b = appendKInt(append(b, '{'), "prompt_tokens", u.PromptTokens)
	b = appendKInt(append(b, ','), "completion_tokens", u.CompletionTokens)
	b = appendKInt(append(b, ','), "total_tokens", u.TotalTokens)
	return append(b, '}')
}

// completions answers POST /v1/completions (legacy text completions). A
// ToolCall behaviour answers its arguments as text.
func (c *call) completions() {
	a := c.answer(routeCompletions)
	text := a.content
	if a.tool != nil {
		text = a.tool.Arguments
	}
	if gjson.GetBytes(c.body, "stream").Bool() {
		c.completionsStream(a)
		return
	}
	b := make([]byte, 0, 320+len(text))
	b = appendHead(b, "cmpl-fake", c.seq, "text_completion", a.model)
	b = append(b, `,"choices":[{"text":`...)
	b = jsonstr.Append(b, text)
	b = append(b, `,"index":0,"logprobs":null,"finish_reason":`...)
	b = jsonstr.Append(b, a.finish)
	b = append(b, "}]"...)
	if !c.b.NoUsage {
		b = appendCompletionUsage(append(b, `,"usage":`...), a.usage)
	}
	b = append(b, '}')
	if !c.b.NoUsage {
		c.s.addUsage(a.usage)
	}
	writeJSON(c.w, b)
}

// completionsStream streams text_completion events.
func (c *call) completionsStream(a *answer) {
	includeUsage := gjson.GetBytes(c.body, "stream_options.include_usage").Bool()
	noUsage, repeat := c.b.NoUsage, c.b.RepeatUsage && !c.b.NoUsage
	st := c.startStream()

	head := appendHead(make([]byte, 0, 160), "cmpl-fake", c.seq, "text_completion", a.model)
	head = append(head, `,"choices":[`...)
	ev := make([]byte, 0, 384)
	emit := func(choice []byte, u *Usage) bool {
		ev = append(ev[:0], head...)
		ev = append(ev, choice...)
		ev = append(ev, ']')
		if u != nil {
			ev = appendCompletionUsage(append(ev, `,"usage":`...), *u)
			ev = append(ev, '}')
			return st.sendUsage("", ev, *u)
		}
		if includeUsage && !noUsage {
			ev = append(ev, `,"usage":null`...)
		}
		ev = append(ev, '}')
		return st.send("", ev)
	}
	ch := make([]byte, 0, 128)
	for i, p := range a.pieces {
		ch = append(ch[:0], `{"text":`...)
		ch = jsonstr.Append(ch, p)
		ch = append(ch, `,"index":0,"logprobs":null,"finish_reason":null}`...)
		var u *Usage
		if repeat {
			r := a.runningUsage(i + 1)
			u = &r
		}
		if !emit(ch, u) {
			return
		}
	}
	ch = append(ch[:0], `{"text":"","index":0,"logprobs":null,"finish_reason":`...)
	ch = jsonstr.Append(ch, a.finish)
	ch = append(ch, '}')
	var final *Usage
	if repeat {
		final = &a.usage
	}
	if !emit(ch, final) {
		return
	}
	if includeUsage && !noUsage && !emit(nil, &a.usage) {
		return
	}
	st.doneEvent()
}
