package trim

import (
	"fmt"

	"github.com/tidwall/gjson"
)

// CountEmbeddingsInput counts the input tokens of a /v1/embeddings body:
// "input" is a string, an array of strings, an array of token ids or an
// array of such arrays (a token id counts one). A missing or ill-typed input
// is an *InvalidError.
func CountEmbeddingsInput(tokenizer string, body []byte) (int, error) {
	c, err := getCounter(tokenizer)
	if err != nil {
		return 0, err
	}
	in := gjson.Get(bytesString(body), "input")
	if !in.Exists() || in.Type == gjson.Null {
		return 0, invalid("input", "is required")
	}
	return countPromptValue(c, in, "input")
}

// CountCompletionsPrompt counts the prompt tokens of a legacy
// /v1/completions body: "prompt" has the shapes of an embeddings input; a
// missing or null prompt counts 0; an ill-typed one is an *InvalidError.
func CountCompletionsPrompt(tokenizer string, body []byte) (int, error) {
	c, err := getCounter(tokenizer)
	if err != nil {
		return 0, err
	}
	p := gjson.Get(bytesString(body), "prompt")
	if !p.Exists() || p.Type == gjson.Null {
		return 0, nil
	}
	n, err := countPromptValue(c, p, "prompt")
	if err != nil {
		return 0, err
	}
	if s := gjson.Get(bytesString(body), "suffix"); s.Type == gjson.String {
		n += c.text(s.Str)
	}
	return n, nil
}

// countPromptValue counts a string, strings, token ids or arrays of ids.
func countPromptValue(c counter, v gjson.Result, param string) (int, error) {
	const want = "must be a string, an array of strings, an array of token ids or an array of token id arrays"
	if v.Type == gjson.String {
		return c.text(v.Str), nil
	}
	if !v.IsArray() {
		return 0, invalid(param, want)
	}
	n, i := 0, 0
	var err error
	v.ForEach(func(_, e gjson.Result) bool {
		switch {
		case e.Type == gjson.String:
			n += c.text(e.Str)
		case e.Type == gjson.Number:
			n++
		case e.IsArray():
			e.ForEach(func(_, id gjson.Result) bool {
				if id.Type != gjson.Number {
					err = invalid(fmt.Sprintf("%s[%d]", param, i), "must be an array of token ids")
					return false
				}
				n++
				return true
			})
		default:
			err = invalid(fmt.Sprintf("%s[%d]", param, i), want)
		}
		i++
		return err == nil
	})
	return n, err
}

// CountResponsesInput counts the input tokens of a /v1/responses body:
// "instructions" as a system message, "input" (a string as one user message,
// or a list of items), the "tools" array, and 3 for priming the reply.
// Items count like chat messages: 3 + their role and texts (input_text,
// output_text, refusal, a function call's name and arguments, a call
// output, a reasoning summary), images and files as the package doc says;
// an item of another type counts the tokens of its JSON. In estimate mode an
// item counts 4 + ceil(bytes/4) apart from media. Ill-typed input is an
// *InvalidError.
func CountResponsesInput(tokenizer string, body []byte) (int, error) {
	c, err := getCounter(tokenizer)
	if err != nil {
		return 0, err
	}
	js := bytesString(body)
	root := gjson.Parse(js)
	if !root.IsObject() {
		return 0, &InvalidError{Message: "the request body must be a JSON object"}
	}
	n := priming
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "instructions":
			switch v.Type {
			case gjson.String:
				n += respMessage(c, "system", v.Str)
			case gjson.Null:
			default:
				err = invalid("instructions", "must be a string")
			}
		case "input":
			switch {
			case v.Type == gjson.String:
				n += respMessage(c, "user", v.Str)
			case v.Type == gjson.Null:
			case v.IsArray():
				i := 0
				v.ForEach(func(_, item gjson.Result) bool {
					var m int
					m, err = respItem(c, item, i)
					n += m
					i++
					return err == nil
				})
			default:
				err = invalid("input", "must be a string or an array of items")
			}
		case "tools":
			if v.IsArray() && len(v.Raw) > 2 {
				n += toolsTokens(c, v.Raw)
			}
		}
		return err == nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// respMessage counts a message of a role and a text.
func respMessage(c counter, role, text string) int {
	if !c.exact() {
		return estPerMsg + ceilDiv(len(role)+len(text)+20, 4)
	}
	return perMessage + c.text(role) + c.text(text)
}

// respItem counts input item i.
func respItem(c counter, item gjson.Result, i int) (int, error) {
	if !item.IsObject() {
		return 0, invalid(fmt.Sprintf("input[%d]", i), "must be an object")
	}
	var media, excluded, text int
	var err error
	countParts := func(parts gjson.Result, param func() string) {
		j := 0
		parts.ForEach(func(_, p gjson.Result) bool {
			if !p.IsObject() {
				err = invalid(fmt.Sprintf("%s[%d]", param(), j), "must be an object")
				return false
			}
			j++
			switch p.Get("type").Str {
			case "input_text", "output_text":
				text += c.text(p.Get("text").String())
			case "refusal":
				text += c.text(p.Get("refusal").String())
			case "input_image":
				detail := p.Get("detail").String()
				url := p.Get("image_url")
				if url.Type == gjson.String {
					excluded += len(url.Raw)
					w, h, _ := imageSize(url.Raw)
					media += ImageTokens(w, h, detail)
				} else {
					media += ImageTokens(0, 0, detail)
				}
			case "input_file":
				data := p.Get("file_data")
				if data.Type != gjson.String {
					media += UnknownFileTokens
					break
				}
				if _, t, ok := textFile(data.Raw); ok {
					text += c.text(t)
					break
				}
				if len(data.Raw) > 2 {
					excluded += len(data.Raw)
					media += BinaryFileTokens(decodedLen(data.Raw))
				}
			default:
				text += c.text(p.Raw)
			}
			return true
		})
	}
	param := func() string { return fmt.Sprintf("input[%d]", i) }
	typ := item.Get("type").Str
	switch typ {
	case "", "message":
		text += c.text(item.Get("role").String())
		switch ct := item.Get("content"); {
		case ct.Type == gjson.String:
			text += c.text(ct.Str)
		case ct.IsArray():
			countParts(ct, func() string { return param() + ".content" })
		case ct.Exists() && ct.Type != gjson.Null:
			return 0, invalid(param()+".content", "must be a string or an array of content parts")
		}
	case "function_call", "custom_tool_call":
		text += c.text(item.Get("name").String())
		text += c.text(item.Get("arguments").String()) + c.text(item.Get("input").String())
	case "function_call_output", "custom_tool_call_output":
		switch out := item.Get("output"); {
		case out.Type == gjson.String:
			text += c.text(out.Str)
		case out.IsArray():
			countParts(out, func() string { return param() + ".output" })
		}
	case "reasoning":
		item.Get("summary").ForEach(func(_, s gjson.Result) bool {
			text += c.text(s.Get("text").String())
			return true
		})
	default:
		text += c.text(item.Raw)
	}
	if err != nil {
		return 0, err
	}
	if !c.exact() {
		return estPerMsg + ceilDiv(len(item.Raw)-excluded, 4) + media, nil
	}
	return perMessage + text + media, nil
}
