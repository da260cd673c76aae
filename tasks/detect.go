package tasks

import (
	"unsafe"

	"github.com/tidwall/gjson"
)

// DetectChat returns the needs a /v1/chat/completions body asks for
// (DESIGN.md §4): an "image_url" content part is Vision, a "file" part
// FileInput, a non-empty "tools" or "functions" array Tools,
// response_format.type "json_schema" JSONSchema and "json_object" JSON, and
// "modalities" holding "image" ImageOutput.
//
// It reads only those fields, walking the raw bytes; a body of the wrong
// shape (or not JSON at all) never panics and yields what could be read.
func DetectChat(body []byte) Needs {
	var n Needs
	eachTop(body, func(key string, v gjson.Result) { n |= ChatFieldNeeds(key, v) })
	return n
}

// ChatFieldNeeds returns the needs one top-level field of a chat body asks
// for; DetectChat is their union over the body's fields. A caller that
// reads the top level itself uses it to detect in the same pass.
func ChatFieldNeeds(key string, v gjson.Result) Needs {
	switch key {
	case "messages":
		if !v.IsArray() {
			return 0
		}
		var n Needs
		v.ForEach(func(_, m gjson.Result) bool {
			if m.IsObject() {
				n |= ContentNeeds(m.Get("content"))
			}
			return true
		})
		return n
	case "tools", "functions":
		if nonEmptyArray(v) {
			return Tools
		}
	case "response_format":
		if v.IsObject() {
			return formatNeeds(v.Get("type"))
		}
	case "modalities":
		if !v.IsArray() {
			return 0
		}
		var n Needs
		v.ForEach(func(_, m gjson.Result) bool {
			if m.Type == gjson.String && m.Str == "image" {
				n |= ImageOutput
				return false
			}
			return true
		})
		return n
	}
	return 0
}

// ContentNeeds returns the needs of a chat message's content: those of its
// parts when it is an array, none otherwise.
func ContentNeeds(content gjson.Result) Needs {
	if !content.IsArray() {
		return 0
	}
	return partNeeds(content)
}

// PartNeeds returns the needs of one content part (an object with a type).
func PartNeeds(part gjson.Result) Needs {
	if !part.IsObject() {
		return 0
	}
	return partType(part.Get("type"))
}

// DetectResponses returns the needs a /v1/responses body asks for
// (DESIGN.md §4): an "input_image" item or content part is Vision, an
// "input_file" one FileInput (also inside a function_call_output's output
// list), a non-empty "tools" array Tools (an "image_generation" tool is also
// ImageOutput), and text.format.type "json_schema" JSONSchema and
// "json_object" JSON.
//
// Like DetectChat it never panics on a body of the wrong shape.
func DetectResponses(body []byte) Needs {
	var n Needs
	eachTop(body, func(key string, v gjson.Result) { n |= ResponsesFieldNeeds(key, v) })
	return n
}

// ResponsesFieldNeeds returns the needs one top-level field of a Responses
// body asks for; DetectResponses is their union over the body's fields.
func ResponsesFieldNeeds(key string, v gjson.Result) Needs {
	var n Needs
	switch key {
	case "input":
		if !v.IsArray() {
			return 0
		}
		v.ForEach(func(_, item gjson.Result) bool {
			if !item.IsObject() {
				return true
			}
			item.ForEach(func(k, f gjson.Result) bool {
				switch k.Str {
				case "type":
					n |= partType(f)
				case "content", "output":
					if f.IsArray() {
						n |= partNeeds(f)
					}
				}
				return true
			})
			return true
		})
	case "tools":
		if !nonEmptyArray(v) {
			return 0
		}
		n |= Tools
		v.ForEach(func(_, t gjson.Result) bool {
			if t.IsObject() {
				if ty := t.Get("type"); ty.Type == gjson.String && ty.Str == "image_generation" {
					n |= ImageOutput
					return false
				}
			}
			return true
		})
	case "text":
		if v.IsObject() {
			if f := v.Get("format"); f.IsObject() {
				n |= formatNeeds(f.Get("type"))
			}
		}
	}
	return n
}

// partNeeds returns the needs of the content parts in the array parts.
func partNeeds(parts gjson.Result) Needs {
	var n Needs
	parts.ForEach(func(_, p gjson.Result) bool {
		n |= PartNeeds(p)
		return true
	})
	return n
}

// partType maps a content part's (or input item's) type to its need.
func partType(t gjson.Result) Needs {
	if t.Type != gjson.String {
		return 0
	}
	switch t.Str {
	case "image_url", "input_image":
		return Vision
	case "file", "input_file":
		return FileInput
	}
	return 0
}

// formatNeeds maps a response format type to its need.
func formatNeeds(t gjson.Result) Needs {
	if t.Type != gjson.String {
		return 0
	}
	switch t.Str {
	case "json_schema":
		return JSONSchema
	case "json_object":
		return JSON
	}
	return 0
}

// nonEmptyArray reports whether r is an array with at least one element.
func nonEmptyArray(r gjson.Result) bool {
	if !r.IsArray() {
		return false
	}
	found := false
	r.ForEach(func(_, _ gjson.Result) bool {
		found = true
		return false
	})
	return found
}

// eachTop calls fn with each key and value of the top-level object of body,
// in one pass; a body that is not an object yields nothing.
func eachTop(body []byte, fn func(key string, v gjson.Result)) {
	root := gjson.Parse(bytesString(body))
	if !root.IsObject() {
		return
	}
	root.ForEach(func(k, v gjson.Result) bool {
		fn(k.Str, v)
		return true
	})
}

// bytesString views b as a string without copying; the string must not
// outlive b's contents.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
