package guard

import (
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The helpers below apply StripMarker and MarkerStripper to upstream
// answers as bytes, editing only the text fields they strip.

// StripChatResponse strips the marker from every choice's message.content
// of a chat completion body and reports whether any choice was flagged.
// A body without a marker is returned as it is.
func StripChatResponse(body []byte) ([]byte, bool, error) {
	choices := gjson.GetBytes(body, "choices")
	if !choices.IsArray() {
		return body, false, nil
	}
	out, flagged := body, false
	var err error
	i := 0
	choices.ForEach(func(_, ch gjson.Result) bool {
		content := ch.Get("message.content")
		if content.Type == gjson.String {
			if text, ok := StripMarker(content.Str); ok {
				flagged = true
				out, err = sjson.SetBytes(out, "choices."+strconv.Itoa(i)+".message.content", text)
			}
		}
		i++
		return err == nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("strip off-purpose marker: %w", err)
	}
	return out, flagged, nil
}

// ChatStreamStripper strips the marker from a streamed chat completion, one
// chunk (an SSE event's data) at a time, keeping one MarkerStripper per
// choice index. Text held back is released into the chunk that carries the
// choice's finish_reason. The zero value is ready to use.
type ChatStreamStripper struct {
	choices map[int64]*MarkerStripper
	flagged bool
}

// Chunk rewrites choices[].delta.content of one chat.completion.chunk and
// returns the chunk to send (the input itself when nothing changed). Chunks
// without choices (such as the usage chunk) pass as they are.
func (c *ChatStreamStripper) Chunk(data []byte) ([]byte, error) {
	choices := gjson.GetBytes(data, "choices")
	if !choices.IsArray() {
		return data, nil
	}
	out := data
	var err error
	i := 0
	choices.ForEach(func(_, ch gjson.Result) bool {
		s := c.stripper(ch.Get("index").Int())
		content := ch.Get("delta.content")
		shown := s.Feed(content.Str)
		if ch.Get("finish_reason").Type != gjson.Null {
			shown += s.Flush()
		}
		if s.Flagged() {
			c.flagged = true
		}
		if shown != content.Str || (content.Type != gjson.String && shown != "") {
			out, err = sjson.SetBytes(out, "choices."+strconv.Itoa(i)+".delta.content", shown)
		}
		i++
		return err == nil
	})
	if err != nil {
		return nil, fmt.Errorf("strip off-purpose marker from chunk: %w", err)
	}
	return out, nil
}

func (c *ChatStreamStripper) stripper(index int64) *MarkerStripper {
	if c.choices == nil {
		c.choices = make(map[int64]*MarkerStripper, 1)
	}
	s, ok := c.choices[index]
	if !ok {
		s = &MarkerStripper{}
		c.choices[index] = s
	}
	return s
}

// Flagged reports whether any choice opened with the marker.
func (c *ChatStreamStripper) Flagged() bool { return c.flagged }

// stripOutputText strips the marker from the text of every output_text part
// of a Responses API output array found at path in body.
func stripOutputText(body []byte, path string) ([]byte, bool, error) {
	output := gjson.GetBytes(body, path)
	if !output.IsArray() {
		return body, false, nil
	}
	out, flagged := body, false
	n := len(output.Array())
	for i := range n {
		var f bool
		var err error
		if out, f, err = stripParts(out, path+"."+strconv.Itoa(i)+".content"); err != nil {
			return nil, false, err
		}
		flagged = flagged || f
	}
	return out, flagged, nil
}

// StripResponsesResponse strips the marker from every output_text part of
// a Responses API response body (output[].content[].text) and reports
// whether any was flagged.
func StripResponsesResponse(body []byte) ([]byte, bool, error) {
	out, flagged, err := stripOutputText(body, "output")
	if err != nil {
		return nil, false, fmt.Errorf("strip off-purpose marker: %w", err)
	}
	return out, flagged, nil
}

// ResponsesStreamStripper strips the marker from a streamed Responses API
// answer, one event's data at a time: response.output_text.delta through a
// MarkerStripper per (output_index, content_index), and the full texts
// repeated by response.output_text.done, response.content_part.done,
// response.output_item.done and response.completed / response.incomplete /
// response.failed through StripMarker. Text held back by a delta stripper
// (only possible when a part's whole text is whitespace or a strict prefix
// of the marker) is not re-sent as a delta; the done events carry it. The
// zero value is ready to use.
type ResponsesStreamStripper struct {
	parts   map[[2]int64]*MarkerStripper
	flagged bool
}

// Event rewrites one event's data and returns the data to send (the input
// itself when nothing changed). Other event types pass as they are.
func (r *ResponsesStreamStripper) Event(data []byte) ([]byte, error) {
	var (
		out     []byte
		flagged bool
		err     error
	)
	switch gjson.GetBytes(data, "type").Str {
	case "response.output_text.delta":
		key := [2]int64{gjson.GetBytes(data, "output_index").Int(), gjson.GetBytes(data, "content_index").Int()}
		s := r.part(key)
		delta := gjson.GetBytes(data, "delta").Str
		shown := s.Feed(delta)
		flagged = s.Flagged()
		out = data
		if shown != delta {
			out, err = sjson.SetBytes(data, "delta", shown)
		}
	case "response.output_text.done":
		out, flagged, err = stripField(data, "text")
	case "response.content_part.done", "response.content_part.added":
		if gjson.GetBytes(data, "part.type").Str != "output_text" {
			return data, nil
		}
		out, flagged, err = stripField(data, "part.text")
	case "response.output_item.done":
		out, flagged, err = stripParts(data, "item.content")
	case "response.completed", "response.incomplete", "response.failed":
		out, flagged, err = stripOutputText(data, "response.output")
	default:
		return data, nil
	}
	if err != nil {
		return nil, fmt.Errorf("strip off-purpose marker from event: %w", err)
	}
	if flagged {
		r.flagged = true
	}
	return out, nil
}

func (r *ResponsesStreamStripper) part(key [2]int64) *MarkerStripper {
	if r.parts == nil {
		r.parts = make(map[[2]int64]*MarkerStripper, 1)
	}
	s, ok := r.parts[key]
	if !ok {
		s = &MarkerStripper{}
		r.parts[key] = s
	}
	return s
}

// Flagged reports whether any part opened with the marker.
func (r *ResponsesStreamStripper) Flagged() bool { return r.flagged }

// stripField strips the marker from the string at path.
func stripField(data []byte, path string) ([]byte, bool, error) {
	text, ok := StripMarker(gjson.GetBytes(data, path).Str)
	if !ok {
		return data, false, nil
	}
	out, err := sjson.SetBytes(data, path, text)
	return out, true, err
}

// stripParts strips the marker from every output_text part of the content
// parts array at path.
func stripParts(data []byte, path string) ([]byte, bool, error) {
	out, flagged := data, false
	for j, part := range gjson.GetBytes(data, path).Array() {
		if part.Get("type").Str != "output_text" {
			continue
		}
		text, ok := StripMarker(part.Get("text").Str)
		if !ok {
			continue
		}
		flagged = true
		var err error
		if out, err = sjson.SetBytes(out, path+"."+strconv.Itoa(j)+".text", text); err != nil {
			return nil, false, err
		}
	}
	return out, flagged, nil
}
