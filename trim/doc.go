// Package trim counts prompt tokens and fits chat histories into the context
// windows of the endpoints a call may go to (DESIGN.md §5).
//
// # Counting
//
// A chat prompt is counted the way OpenAI bills it (the rule of the OpenAI
// cookbook's num_tokens_from_messages, extended to parts and tool calls):
//
//	prompt  = Σ message + 3 (every reply is primed with <|start|>assistant<|message|>)
//	          + tokens of the "tools" array and of the legacy "functions" array
//	message = 3
//	          + tokens(role)
//	          + tokens(content) when a string; for an array, the sum of its parts:
//	              text / refusal  tokens(text)
//	              image_url       the image formula below
//	              file            a text file (data URL of a text media type):
//	                              tokens of its decoded text; any other file:
//	                              max(1105, ceil(decoded bytes / 32)); a file_id
//	                              (size unknown): 1105
//	              input_audio     ceil(decoded bytes / 1000)
//	              any other part  tokens of the part's JSON
//	          + tokens(name) + 1 when the message has a name
//	          + tokens(function.name) + tokens(function.arguments) of each tool
//	            call (custom tool calls: name and input), and of a legacy
//	            function_call
//	          + tokens(refusal) when the message has a refusal
//
// tool_call_id and other fields count nothing. A tools array counts as the
// tokens of its compact JSON: more than OpenAI's internal rendering of the
// function signatures, so a fit decided here holds upstream.
//
// Images follow OpenAI's tile formula: detail "low" is 85 tokens; otherwise
// the image is scaled to fit in 2048×2048, then so that its shorter side is
// at most 768 pixels, and costs 85 + 170 per 512-pixel tile. The size is read
// from the first bytes of a base64 data URL (PNG, JPEG, GIF); when it is not
// known (an http URL, another format) an image at "high" or "auto" detail
// counts 1445 tokens, the most the formula can give (768×2048: 8 tiles).
//
// The tokenizer "estimate" counts a message as 4 + ceil(bytes/4), bytes of
// the message's JSON as sent apart from the image, binary-file and audio data
// (which count as above in every mode), and the tools array as ceil(bytes/4).
//
// # Cheap bound
//
// With o200k_base and cl100k_base every token is at least one byte of its
// text, and a JSON string is never shorter than the text it encodes, so a
// message never has more tokens than the bytes of its JSON apart from media
// data (its structure, at least the 11 bytes of {"role":""}, pays for the 3 +
// 1 of overhead), plus its media tokens. When that bound already fits every
// budget, nothing is tokenized and Result.PromptTokens is the estimate.
//
// # Trimming
//
// The history must fit every budget. If the prompt plus the output reserve
// passes a window, Chat drops the oldest messages until it fits, keeping every
// system and developer message, the newest turn (the newest user message and
// all that follows it), and keeping an assistant message with tool calls
// together with the tool results that follow it; the first kept non-system
// message is never a tool result. Kept messages are forwarded byte for byte:
// whole messages are spliced out of the raw array and every other field of the
// body is left as it was.
//
// Every text part of a message after its first, and every text file, is an
// attachment. A message's attachments share AttachmentsShare × window of each
// budget; when together they pass it, the share is divided max-min fairly
// (small parts whole, the larger ones equal shares of what is left), and a
// part over its allotment is cut to the longest prefix, on a character
// boundary, whose tokens fit, followed by "\n[cut: the first N of M
// characters are shown]". Images and binary files are never cut.
//
// With Options.DropEarlierToolResults, tool results and assistant tool calls
// before the newest user message are left out (an assistant message that
// also held text keeps it, without its tool_calls); these are not counted in
// Result.Dropped. That applies whether or not trimming is enabled; with
// Options.Enabled false nothing is dropped to fit and no attachment is cut.
//
// # Cost
//
// Each message is tokenized at most once per call, and its count is kept in
// a bounded cache keyed by tokenizer and a hash of its bytes, so a
// conversation that grows by one turn costs about that turn. Messages are
// read from the raw bytes by a small scanner that neither decodes nor
// unescapes them; trimming is linear in the history.
//
// Every exported function is safe for concurrent use. The package imports
// the standard library, gjson/sjson and trim/tokenizer only; it must not
// import fiber, redis or prometheus.
package trim
