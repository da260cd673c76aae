package trim

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"taskgate/internal/jsonscan"
)

// InvalidError is a malformed request (messages missing or not an array, a
// message without a role, content of a wrong type…). Param names the field,
// e.g. "messages[3].content".
type InvalidError struct {
	Param   string
	Message string
}

// Error returns the message.
func (e *InvalidError) Error() string { return e.Message }

func invalid(param, format string, args ...any) *InvalidError {
	return &InvalidError{Param: param, Message: param + " " + fmt.Sprintf(format, args...)}
}

// message is one chat message as read from the body.
type message struct {
	raw   string // the message's JSON as it will be forwarded
	role  string
	calls bool // an assistant message with tool_calls or a function_call
	text  bool // content besides the calls
	info  msgInfo
	// omitted: left out by DropEarlierToolResults; dropped: to fit.
	omitted, dropped, changed bool
}

// msgInfo is what counting needs without a tokenizer.
type msgInfo struct {
	textBytes int // bytes of the JSON apart from image, binary file and audio data
	media     int // tokens of images, binary files and audio (every mode)
	attBytes  int // bytes of attached text: text parts after the first, text files
}

// bound is an upper bound of the message's tokens in every mode.
func (i msgInfo) bound() int { return i.textBytes + i.media }

// estimate is the message's count in estimate mode.
func (i msgInfo) estimate() int { return estPerMsg + ceilDiv(i.textBytes, 4) + i.media }

// parseMessage reads and checks message i, the raw JSON m.
func parseMessage(m string, i int) (message, error) {
	msg := message{raw: m}
	msg.info.textBytes = len(m)
	hasRole := false
	var err error
	ok := jsonscan.Kind(m) == '{' && jsonscan.EachField(m, func(key, v string) bool {
		switch jsonscan.Str(key) {
		case "role":
			if jsonscan.Kind(v) != '"' {
				err = invalid(fmt.Sprintf("messages[%d].role", i), "must be a string")
				return false
			}
			msg.role, hasRole = jsonscan.Str(v), true
		case "content":
			switch jsonscan.Kind(v) {
			case '"':
				msg.text = len(v) > 2
			case 'n':
			case '[':
				err = parseParts(v, i, &msg)
			default:
				err = invalid(fmt.Sprintf("messages[%d].content", i), "must be a string, an array of content parts or null")
			}
		case "name":
			if jsonscan.Kind(v) != '"' {
				err = invalid(fmt.Sprintf("messages[%d].name", i), "must be a string")
			}
		case "tool_calls":
			switch jsonscan.Kind(v) {
			case '[':
				msg.calls = msg.calls || len(strings.TrimSpace(v[1:len(v)-1])) > 0
			case 'n':
			default:
				err = invalid(fmt.Sprintf("messages[%d].tool_calls", i), "must be an array")
			}
		case "function_call":
			switch jsonscan.Kind(v) {
			case '{':
				msg.calls = true
			case 'n':
			default:
				err = invalid(fmt.Sprintf("messages[%d].function_call", i), "must be an object")
			}
		}
		return err == nil
	})
	if err != nil {
		return message{}, err
	}
	if !ok {
		return message{}, invalid(fmt.Sprintf("messages[%d]", i), "must be an object")
	}
	if !hasRole {
		return message{}, invalid(fmt.Sprintf("messages[%d].role", i), "is required")
	}
	return msg, nil
}

// parseParts reads and checks the content parts of message i.
func parseParts(parts string, i int, msg *message) error {
	var err error
	j, texts := 0, 0
	jsonscan.EachElem(parts, func(p string) bool {
		param := partParam{i, j}
		j++
		var typ, text, image, file, audio string
		if jsonscan.Kind(p) != '{' || !jsonscan.EachField(p, func(k, v string) bool {
			switch jsonscan.Str(k) {
			case "type":
				typ = v
			case "text":
				text = v
			case "image_url":
				image = v
			case "file":
				file = v
			case "input_audio":
				audio = v
			}
			return true
		}) {
			err = invalid(param.String(), "must be an object")
			return false
		}
		if jsonscan.Kind(typ) != '"' {
			err = invalid(param.String()+".type", "must be a string")
			return false
		}
		switch jsonscan.Str(typ) {
		case "text":
			if jsonscan.Kind(text) != '"' {
				err = invalid(param.String()+".text", "must be a string")
				return false
			}
			msg.text = true
			texts++
			if texts > 1 {
				msg.info.attBytes += len(text)
			}
		case "refusal":
			msg.text = true
		case "image_url":
			url, detail := image, ""
			switch jsonscan.Kind(image) {
			case '"':
			case '{':
				url = ""
				jsonscan.EachField(image, func(k, v string) bool {
					switch jsonscan.Str(k) {
					case "url":
						url = v
					case "detail":
						if jsonscan.Kind(v) == '"' {
							detail = jsonscan.Str(v)
						}
					}
					return true
				})
				if jsonscan.Kind(url) != '"' {
					err = invalid(param.String()+".image_url.url", "must be a string")
					return false
				}
			default:
				err = invalid(param.String()+".image_url", "must be an object")
				return false
			}
			msg.info.textBytes -= len(url)
			if detail == "low" {
				msg.info.media += LowDetailImageTokens
			} else {
				w, h, _ := imageSize(url)
				msg.info.media += ImageTokens(w, h, detail)
			}
		case "file":
			if jsonscan.Kind(file) != '{' {
				err = invalid(param.String()+".file", "must be an object")
				return false
			}
			var data string
			jsonscan.EachField(file, func(k, v string) bool {
				if jsonscan.Str(k) == "file_data" {
					data = v
				}
				return true
			})
			switch jsonscan.Kind(data) {
			case '"':
				if mt, _, ok := dataURL(data); ok && textMediaType(mt) {
					msg.info.attBytes += len(data)
					break
				}
				msg.info.textBytes -= len(data)
				msg.info.media += BinaryFileTokens(decodedLen(data))
			case 0, 'n':
				msg.info.media += UnknownFileTokens
			default:
				err = invalid(param.String()+".file.file_data", "must be a string")
				return false
			}
		case "input_audio":
			if jsonscan.Kind(audio) == '{' {
				jsonscan.EachField(audio, func(k, v string) bool {
					if jsonscan.Str(k) == "data" && jsonscan.Kind(v) == '"' {
						msg.info.textBytes -= len(v)
						msg.info.media += AudioTokens(decodedLen(v))
					}
					return true
				})
			}
		}
		return true
	})
	return err
}

// partParam names content part j of message i, built only for an error.
type partParam struct{ i, j int }

func (p partParam) String() string { return fmt.Sprintf("messages[%d].content[%d]", p.i, p.j) }

// exactCount counts a parsed message with a tokenizer (c.exact()).
func exactCount(c counter, msg *message) int {
	n := perMessage + msg.info.media
	gjson.Parse(msg.raw).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "role":
			n += c.text(v.Str)
		case "content":
			if v.Type == gjson.String {
				n += c.text(v.Str)
			} else if v.IsArray() {
				v.ForEach(func(_, p gjson.Result) bool {
					n += exactPart(c, p)
					return true
				})
			}
		case "name":
			n += c.text(v.String()) + perName
		case "refusal":
			if v.Type == gjson.String {
				n += c.text(v.Str)
			}
		case "tool_calls":
			v.ForEach(func(_, call gjson.Result) bool {
				if f := call.Get("function"); f.IsObject() {
					n += c.text(f.Get("name").String()) + c.text(f.Get("arguments").String())
				} else if f := call.Get("custom"); f.IsObject() {
					n += c.text(f.Get("name").String()) + c.text(f.Get("input").String())
				}
				return true
			})
		case "function_call":
			n += c.text(v.Get("name").String()) + c.text(v.Get("arguments").String())
		}
		return true
	})
	return n
}

// exactPart counts one content part apart from media (already in info.media).
func exactPart(c counter, p gjson.Result) int {
	switch p.Get("type").Str {
	case "text":
		return c.text(p.Get("text").Str)
	case "refusal":
		return c.text(p.Get("refusal").String())
	case "image_url", "input_audio":
		return 0
	case "file":
		if data := p.Get("file.file_data"); data.Type == gjson.String {
			if _, text, ok := textFile(data.Raw); ok {
				return c.text(text)
			}
			if mt, _, ok := dataURL(data.Raw); ok && textMediaType(mt) {
				// Said to be text but not decodable: count its bytes as text.
				return c.text(data.Str)
			}
		}
		return 0
	}
	return c.text(p.Raw)
}
