package fakeupstream

import (
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultContent is the assistant text of an answer whose Behavior names none.
const DefaultContent = "Hello from the fake model."

// DefaultModel is the model reported when a request names none.
const DefaultModel = "fake-mini"

// OffPurposeMark is the mark a self-flagging model puts at the start of its
// answer when a request does not serve the task's purpose (DESIGN.md §7).
const OffPurposeMark = "[[off-purpose]]"

// OffPurposeTrigger makes the fake model flag a request by itself: when the
// request's text contains [OffPurposeMark] (the gateway's self_flag
// instruction) and its newest user message contains this word (any case), the
// answer begins with the mark, split across two stream events as a real
// tokenizer would split it.
const OffPurposeTrigger = "off-topic"

// Behavior programs one answer. Every request on a known route that passes
// the key check uses one: the hook's (see [Server.SetHandlerHook]), else the
// oldest queued ([Server.Push]), else the default ([Server.SetDefault]). Its
// zero value is a successful answer with [DefaultContent] and default usage.
// The faults apply in this order: Hold, FirstByteDelay, DropConnection,
// Status; a request whose JSON is invalid then gets 400.
type Behavior struct {
	// Status, when neither 0 nor 200, is answered with an OpenAI error body
	// whose type and code fit the status (429 rate_limit_exceeded, 500
	// server_error, 400 invalid_request_error, 401 invalid_api_key, …).
	Status int
	// RetryAfter is sent as the Retry-After header of an error answer.
	RetryAfter string
	// ErrorType, ErrorCode and ErrorMessage override the error body's fields.
	ErrorType, ErrorCode, ErrorMessage string
	// Header holds extra response headers (for any answer).
	Header map[string]string

	// Content is the assistant text; "" means [DefaultContent].
	Content string
	// Chunks are the streamed pieces; when set, the content is their
	// concatenation and Content is ignored. Default: [Pieces] of the content.
	// With ToolCall, they are the pieces of the arguments.
	Chunks []string
	// ToolCall answers with one tool call instead of text: content null,
	// finish_reason "tool_calls" (a function_call item in the Responses API;
	// its arguments as text in legacy completions). Content is then ignored.
	ToolCall *ToolCall
	// FinishReason overrides "stop" / "tool_calls" (e.g. "length").
	FinishReason string
	// Model overrides the model reported in answers (default: the request's).
	Model string
	// OffPurpose makes the answer begin with [OffPurposeMark] and a space.
	OffPurpose bool

	// Usage overrides the reported usage (TotalTokens 0 = the sum). Default:
	// prompt = [PromptTokens] of the body, completion = number of pieces.
	Usage *Usage
	// NoUsage never reports usage, even when stream_options.include_usage is set.
	NoUsage bool
	// RepeatUsage makes chat and completion streams carry a running-total usage
	// object in every chunk, as some upstreams do.
	RepeatUsage bool

	// FirstByteDelay stalls before the headers (after Options.Latency and Hold).
	FirstByteDelay time.Duration
	// EventDelay is slept between stream events.
	EventDelay time.Duration
	// CutAfterEvents, in streams, closes the TCP connection after that many
	// events (no [DONE], no chunk terminator); 0 = off. [DONE] is not counted,
	// so the number of all other events cuts just before [DONE].
	CutAfterEvents int
	// StreamErrorAfterEvents, in streams, sends an error event after that
	// many events and ends the stream cleanly without [DONE]; 0 = off. Chat and
	// completions send `data: {"error":{…}}`, the Responses API `event: error`
	// with {"type":"error","code","message","param","sequence_number"}. The
	// error is status 500's, with ErrorType, ErrorCode and ErrorMessage applied.
	StreamErrorAfterEvents int
	// DropConnection closes the connection without answering at all.
	DropConnection bool
	// Hold, when non-nil, is waited on (until closed, or the request is
	// cancelled) before answering, to keep calls in flight.
	Hold chan struct{}
}

// ToolCall is one function call the fake model answers with.
type ToolCall struct {
	// ID is the call id ("call_…"); "" = a deterministic one.
	ID string
	// Name is the function's name.
	Name string
	// Arguments is the JSON text of the arguments.
	Arguments string
}

// Usage is reported token usage, and the count of generated images.
type Usage struct {
	PromptTokens     int64 // prompt_tokens / input_tokens
	CompletionTokens int64 // completion_tokens / output_tokens
	TotalTokens      int64 // total_tokens
	Images           int64 // images generated (UsageTotal only)
}

// Add returns the field-wise sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens,
		TotalTokens:      u.TotalTokens + v.TotalTokens,
		Images:           u.Images + v.Images,
	}
}

// neg is -u, field-wise.
func (u Usage) neg() Usage {
	return Usage{-u.PromptTokens, -u.CompletionTokens, -u.TotalTokens, -u.Images}
}

// PromptTokens is the deterministic prompt token count of a request body:
// ceil(len(body)/4), at least 1.
func PromptTokens(body []byte) int64 {
	n := int64(len(body)+3) / 4
	if n < 1 {
		n = 1
	}
	return n
}

// Pieces splits text into the pieces a stream sends: words, each with the
// whitespace before it ("Hello from" → "Hello", " from"). The pieces
// concatenate to text; "" has none.
func Pieces(text string) []string {
	if text == "" {
		return nil
	}
	n := 1
	for i := 1; i < len(text); i++ {
		if isSpace(text[i]) && !isSpace(text[i-1]) {
			n++
		}
	}
	out := make([]string, 0, n)
	start := 0
	for i := 1; i < len(text); i++ {
		if isSpace(text[i]) && !isSpace(text[i-1]) {
			out = append(out, text[start:i])
			start = i
		}
	}
	return append(out, text[start:])
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// argPieces splits tool-call arguments into pieces of at most 8 bytes, on
// UTF-8 boundaries. "" yields one empty piece, so a call always has one.
func argPieces(args string) []string {
	if args == "" {
		return []string{""}
	}
	out := make([]string, 0, len(args)/8+1)
	for len(args) > 0 {
		n := min(8, len(args))
		for n < len(args) && !utf8.RuneStart(args[n]) {
			n++
		}
		out = append(out, args[:n])
		args = args[n:]
	}
	return out
}

// answer is a Behavior resolved against one request.
type answer struct {
	b        *Behavior
	model    string
	content  string   // text answer (when tool == nil)
	pieces   []string // streamed pieces of content, or of tool arguments
	tool     *ToolCall
	toolID   string
	finish   string
	prompt   int64
	complete int64
	usage    Usage // the full usage to report
}

// resolve fills an answer from behaviour b for a request with this body,
// model and self-flag state.
func resolve(b *Behavior, body []byte, model string, flag bool, seq uint64) *answer {
	a := &answer{b: b, model: model}
	if b.Model != "" {
		a.model = b.Model
	}
	if b.ToolCall != nil {
		a.tool = b.ToolCall
		a.toolID = b.ToolCall.ID
		if a.toolID == "" {
			a.toolID = "call_fake" + seqString(seq)
		}
		if b.Chunks != nil {
			a.pieces = b.Chunks
		} else {
			a.pieces = argPieces(b.ToolCall.Arguments)
		}
		a.finish = "tool_calls"
	} else {
		switch {
		case b.Chunks != nil:
			a.content = strings.Join(b.Chunks, "")
			a.pieces = b.Chunks
		case b.Content != "":
			a.content = b.Content
		default:
			a.content = DefaultContent
		}
		if b.OffPurpose || flag {
			a.content = OffPurposeMark + " " + a.content
			if b.Chunks != nil {
				a.pieces = append([]string{"[[off-", "purpose]]", " "}, b.Chunks...)
			} else {
				a.pieces = append([]string{"[[off-", "purpose]]"}, Pieces(a.content[len(OffPurposeMark):])...)
			}
		} else if a.pieces == nil {
			a.pieces = Pieces(a.content)
		}
		a.finish = "stop"
	}
	if b.FinishReason != "" {
		a.finish = b.FinishReason
	}
	a.prompt = PromptTokens(body)
	a.complete = int64(len(a.pieces))
	if b.Usage != nil {
		a.usage = *b.Usage
		if a.usage.TotalTokens == 0 {
			a.usage.TotalTokens = a.usage.PromptTokens + a.usage.CompletionTokens
		}
	} else {
		a.usage = Usage{PromptTokens: a.prompt, CompletionTokens: a.complete, TotalTokens: a.prompt + a.complete}
	}
	return a
}

// runningUsage is the usage reported after i of n pieces in a stream that
// repeats a running total.
func (a *answer) runningUsage(i int) Usage {
	c := int64(i)
	if c > a.usage.CompletionTokens {
		c = a.usage.CompletionTokens
	}
	return Usage{PromptTokens: a.usage.PromptTokens, CompletionTokens: c, TotalTokens: a.usage.PromptTokens + c}
}
