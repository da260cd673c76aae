package fakeupstream

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"taskgate/internal/jsonstr"
	"time"

	"github.com/tidwall/gjson"
)

// defaultDimensions is the length of an embedding when the request names none.
const defaultDimensions = 8

// maxDimensions bounds the dimensions a request may ask for.
const maxDimensions = 4096

// Embedding is the deterministic vector the fake answers for input text (or
// for the raw JSON of a token array): dims values in [-1, 1).
func Embedding(input string, dims int) []float32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(input))
	x := h.Sum64() | 1
	v := make([]float32, dims)
	for i := range v {
		// xorshift64*: cheap, deterministic, well spread.
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		r := x * 2685821657736338717
		v[i] = float32(int64(r>>40)-(1<<23)) / (1 << 23)
	}
	return v
}

// embeddings answers POST /v1/embeddings: one vector per input.
func (c *call) embeddings() {
	in := gjson.GetBytes(c.body, "input")
	var inputs []string
	switch {
	case in.IsArray():
		arr := in.Array()
		if len(arr) > 0 && arr[0].Type == gjson.Number {
			inputs = []string{in.Raw} // one input given as tokens
		} else {
			inputs = make([]string, len(arr))
			for i, e := range arr {
				if e.Type == gjson.String {
					inputs[i] = e.Str
				} else {
					inputs[i] = e.Raw
				}
			}
		}
	case in.Type == gjson.String:
		inputs = []string{in.Str}
	default:
		writeError(c.w, http.StatusBadRequest, "invalid_request_error", "", "'input' is a required property", "input")
		return
	}
	if len(inputs) == 0 {
		writeError(c.w, http.StatusBadRequest, "invalid_request_error", "", "'input' must not be empty", "input")
		return
	}
	dims := defaultDimensions
	if d := gjson.GetBytes(c.body, "dimensions").Int(); d > 0 && d <= maxDimensions {
		dims = int(d)
	}
	asBase64 := gjson.GetBytes(c.body, "encoding_format").String() == "base64"
	model := c.reqModel
	if c.b.Model != "" {
		model = c.b.Model
	}
	u := Usage{PromptTokens: PromptTokens(c.body)}
	if c.b.Usage != nil {
		u = Usage{PromptTokens: c.b.Usage.PromptTokens}
	}
	u.TotalTokens = u.PromptTokens

	b := make([]byte, 0, 128+len(inputs)*(48+dims*12))
	b = append(b, `{"object":"list","data":[`...)
	var raw []byte
	for i, text := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		vec := Embedding(text, dims)
		if asBase64 {
			raw = raw[:0]
			for _, f := range vec {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, raw)
			b = append(b, '"')
		} else {
			b = append(b, '[')
			for j, f := range vec {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(f), 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	b = jsonstr.Append(b, model)
	if !c.b.NoUsage {
		b = append(b, `,"usage":{`...)
		b = appendKInt(b, "prompt_tokens", u.PromptTokens)
		b = appendKInt(append(b, ','), "total_tokens", u.TotalTokens)
		b = append(b, '}')
	}
	b = append(b, '}')
	if !c.b.NoUsage {
		c.s.addUsage(u)
	}
	writeJSON(c.w, b)
}

// appendModel appends one model object.
func appendModel(b []byte, id string) []byte {
	b = append(b, '{')
	b = appendKV(b, "id", id)
	b = append(b, `,"object":"model","created":1700000000,"owned_by":"fakeupstream"}`...)
	return b
}

// models answers GET /v1/models: the configured ids, then every model seen.
func (c *call) models() {
	c.s.mu.Lock()
	ids := append([]string(nil), c.s.models...)
	c.s.mu.Unlock()
	b := make([]byte, 0, 64+len(ids)*96)
	b = append(b, `{"object":"list","data":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModel(b, id)
	}
	b = append(b, "]}"...)
	writeJSON(c.w, b)
}

// model answers GET /v1/models/{id}: any id exists.
func (c *call) model() {
	writeJSON(c.w, appendModel(make([]byte, 0, 128), c.id))
}

// pngPixel is a 1×1 transparent PNG, the image every generation returns.
const pngPixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

// maxImages bounds n in an image request.
const maxImages = 10

// images answers POST /v1/images/generations with n images (b64_json unless
// response_format is "url").
func (c *call) images() {
	n := 1
	if v := gjson.GetBytes(c.body, "n").Int(); v > 0 {
		n = int(min(v, maxImages))
	}
	asURL := gjson.GetBytes(c.body, "response_format").String() == "url"
	b := make([]byte, 0, 64+n*(len(pngPixel)+80))
	b = append(b, `{"created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"data":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		if asURL {
			b = append(b, `{"url":"https://fakeupstream.invalid/images/img-fake`...)
			b = strconv.AppendUint(b, c.seq, 10)
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `.png","revised_prompt":null}`...)
		} else {
			b = append(b, `{"b64_json":"`+pngPixel+`","revised_prompt":null}`...)
		}
	}
	b = append(b, "]}"...)
	c.s.addUsage(Usage{Images: int64(n)})
	writeJSON(c.w, b)
}

var markBytes = []byte(OffPurposeMark)

// selfFlag reports whether the fake model flags this request by itself: the
// body carries the self-flag instruction ([OffPurposeMark]) and the newest
// user text contains [OffPurposeTrigger].
func selfFlag(body []byte, kind route) bool {
	if !bytes.Contains(body, markBytes) {
		return false
	}
	var text string
	switch kind {
	case routeChat:
		text = lastUserText(gjson.GetBytes(body, "messages"))
	case routeResponses:
		in := gjson.GetBytes(body, "input")
		if in.Type == gjson.String {
			text = in.Str
		} else {
			text = lastUserText(in)
		}
	case routeCompletions:
		text = gjson.GetBytes(body, "prompt").Raw
	}
	return strings.Contains(strings.ToLower(text), OffPurposeTrigger)
}

// lastUserText is the text of the newest message with role "user" in a
// messages/input array: its string content, or its text parts joined.
func lastUserText(msgs gjson.Result) string {
	arr := msgs.Array()
	for i := len(arr) - 1; i >= 0; i-- {
		if arr[i].Get("role").String() != "user" {
			continue
		}
		content := arr[i].Get("content")
		if content.Type == gjson.String {
			return content.Str
		}
		var sb strings.Builder
		for _, p := range content.Array() {
			sb.WriteString(p.Get("text").String())
			sb.WriteByte('\n')
		}
		return sb.String()
	}
	return ""
}
