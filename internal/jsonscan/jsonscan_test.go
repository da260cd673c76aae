package jsonscan

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestScan(t *testing.T) {
	tests := []struct {
		obj  string
		keys []string
		vals []string
		ok   bool
	}{
		{`{}`, nil, nil, true},
		{` { "a" : 1 , "b":"x\"y\\\\" ,"c":[1,{"d":"]}"}],"e":null}`, []string{`"a"`, `"b"`, `"c"`, `"e"`}, []string{`1`, `"x\"y\\\\"`, `[1,{"d":"]}"}]`, `null`}, true},
		{`{"a":true}`, []string{`"a"`}, []string{`true`}, true},
		{`{"a\u0062":-1.5e3}`, []string{`"a\u0062"`}, []string{`-1.5e3`}, true},
		{`[1]`, nil, nil, false},
		{`{"a":}`, nil, nil, false},
		{`{"a":"unterminated}`, nil, nil, false},
		{`{"a":[1,2}`, nil, nil, false},
		{`{"a" 1}`, nil, nil, false},
		{``, nil, nil, false},
	}
	for _, tt := range tests {
		var keys, vals []string
		ok := EachField(tt.obj, func(k, v string) bool {
			keys = append(keys, k)
			vals = append(vals, v)
			return true
		})
		if ok != tt.ok || tt.ok && (len(keys) != len(tt.keys) || len(vals) != len(tt.vals)) {
			t.Errorf("%s: ok %v keys %q vals %q", tt.obj, ok, keys, vals)
			continue
		}
		for i := range tt.keys {
			if keys[i] != tt.keys[i] || vals[i] != tt.vals[i] {
				t.Errorf("%s: field %d = %s:%s, want %s:%s", tt.obj, i, keys[i], vals[i], tt.keys[i], tt.vals[i])
			}
		}
	}
	if !KeyIs(`"a\u0062"`, "ab") || KeyIs(`"ab"`, "a") || Str(`"a\nb"`) != "a\nb" || Str(`"x"`) != "x" {
		t.Error("KeyIs/Str")
	}
}

// FuzzScan checks the scanner against gjson on valid JSON.
func FuzzScan(f *testing.F) {
	f.Add(`{"a":1,"b":[{"c":"d\""}],"e":{"f":null}}`)
	f.Add(`[1, "two", {"three": [3]}, null, true]`)
	f.Add(`{"messages":[{"role":"user","content":"hi"}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		// Never panics, whatever the input.
		EachField(s, func(_, _ string) bool { return true })
		EachElem(s, func(string) bool { return true })
		if !gjson.Valid(s) {
			return
		}
		root := gjson.Parse(s)
		var want []string
		root.ForEach(func(k, v gjson.Result) bool {
			want = append(want, k.Str, v.Raw)
			return true
		})
		var got []string
		var ok bool
		switch {
		case root.IsObject():
			ok = EachField(s, func(k, v string) bool {
				got = append(got, Str(k), v)
				return true
			})
		case root.IsArray():
			ok = EachElem(s, func(v string) bool {
				got = append(got, "", v)
				return true
			})
		default:
			return
		}
		if !ok || len(got) != len(want) {
			t.Fatalf("%q: ok %v got %q want %q", s, ok, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: got %q want %q", s, got, want)
			}
		}
	})
}

// answer is a plain chat answer as OpenAI sends it.
const answer = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"The image shows a wooden boardwalk path running through a lush green field or meadow. The sky is bright blue with some scattered clouds.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`

func TestField(t *testing.T) {
	tests := []struct {
		obj, name, raw string
		ok             bool
	}{
		{answer, "usage", gjson.Get(answer, "usage").Raw, true},
		{answer, "id", `"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"`, true},
		{answer, "system_fingerprint", `"fp_fc9f1d7035"`, true},
		{answer, "missing", "", false},
		{answer, "prompt_tokens", "", false}, // not at the top level
		{`{"a":1,"a":2}`, "a", "1", true},
		{` { "a\u0062" : [1, "]"] } `, "ab", `[1, "]"]`, true},
		{`{"a":1 "b":2}`, "b", "", false},
		{`[{"a":1}]`, "a", "", false},
		{`{"a":"x`, "a", "", false},
		{``, "a", "", false},
	}
	for _, tt := range tests {
		raw, at, ok := Field(tt.obj, tt.name)
		if raw != tt.raw || ok != tt.ok || ok && tt.obj[at:at+len(raw)] != raw {
			t.Errorf("Field(%q, %q) = %q, %d, %v; want %q, %v", tt.obj, tt.name, raw, at, ok, tt.raw, tt.ok)
		}
	}
}

func TestFieldNearEnd(t *testing.T) {
	tests := []struct {
		obj, raw string
		ok       bool
	}{
		{answer, gjson.Get(answer, "usage").Raw, true},
		{`{"usage":{"a":1}}`, `{"a":1}`, true},
		{` { "x" : 1 , "usage" : [ 2 ] } `, `[ 2 ]`, true},
		{`{"usage":{"a":1},"x":{"usage":{"b":2}}}`, `{"a":1}`, true},   // the last match is nested
		{`{"usage":1,"x":["a","usage"]}`, `1`, true},                   // a string in an array
		{`{"usage":1,"k":"usage"}`, `1`, true},                         // a string value
		{`{"usage":1,"k\"usage":2}`, `1`, true},                        // inside a key, after an escaped quote
		{`{"usage":1,"k":"\\","usage\\":2}`, `1`, true},                // a key ending in a backslash
		{`{"a":{"b":{"c":{"d":{"e":{"usage":1}}}}},"z":1}`, ``, false}, // nested only
		{`{"x":1}`, ``, false},
		{`{"usage":1,"x":1} trailing`, `1`, true}, // Field's answer after the near-end miss
		{`[{"usage":1}]`, ``, false},
		{``, ``, false},
	}
	for _, tt := range tests {
		raw, ok := FieldNearEnd(tt.obj, `"usage"`)
		if raw != tt.raw || ok != tt.ok {
			t.Errorf("FieldNearEnd(%q) = %q, %v; want %q, %v", tt.obj, raw, ok, tt.raw, tt.ok)
		}
	}
}

func TestLastIndexQuoted(t *testing.T) {
	for _, s := range []string{"", `"`, `"usage"`, `x"usage"`, `"usage""usage"`, `"usag"usage"y`, answer, answer[:400],
		`0123456789"usage"0123456789abcdef`, `"usage"0123456789abcdefghij`, `"u"u"us"usa"usag"usage`} {
		if got, want := lastIndexQuoted(s, `"usage"`), strings.LastIndex(s, `"usage"`); got != want {
			t.Errorf("lastIndexQuoted(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestInt(t *testing.T) {
	for _, raw := range []string{"0", "46", "1117", "-3", "1.5", "1e3", "123456789012345678", "1234567890123456789", "99999999999999999999", "", "x", `"7"`, "null"} {
		if got, want := Int(raw), gjson.Parse(raw).Int(); got != want {
			t.Errorf("Int(%q) = %d, want %d (gjson)", raw, got, want)
		}
	}
}

// FuzzField checks Field against gjson.Get on valid JSON, for each
// top-level key and for a name not there.
func FuzzField(f *testing.F) {
	f.Add(answer)
	f.Add(`{"a":1,"a":2,"b\"":{"c":[true]}}`)
	f.Add(`{"usage" : {"prompt_tokens": 3}, "x": "usage"}`)
	f.Add(`{"usage":1,"x":{"usage":2},"y":["usage"],"z\\"usage":3}`)
	f.Fuzz(func(t *testing.T, s string) {
		Field(s, "usage") // never panics, whatever the input
		if got, want := lastIndexQuoted(s, `"a"`), strings.LastIndex(s, `"a"`); got != want {
			t.Fatalf("lastIndexQuoted(%q, %q) = %d, want %d", s, `"a"`, got, want)
		}
		if !gjson.Valid(s) || !gjson.Parse(s).IsObject() {
			return
		}
		names := []string{"usage", ""}
		gjson.Parse(s).ForEach(func(k, _ gjson.Result) bool {
			names = append(names, k.Str)
			return true
		})
		// FieldNearEnd gives the last of duplicate names, gjson the first.
		counts := map[string]int{}
		gjson.Parse(s).ForEach(func(k, _ gjson.Result) bool {
			counts[k.Str]++
			return true
		})
		for _, name := range names {
			if strings.ContainsAny(name, ".*?|#@\\!=<>%\"") || name == "" {
				continue // gjson's path syntax, not a plain name
			}
			if counts[name] <= 1 && strings.IndexFunc(name, func(r rune) bool { return r < 0x20 || r >= 0x80 }) < 0 {
				want := gjson.Get(s, name)
				raw, ok := FieldNearEnd(s, `"`+name+`"`)
				if ok != want.Exists() || raw != want.Raw {
					t.Fatalf("FieldNearEnd(%q, %q) = %q, %v; gjson %q, %v", s, name, raw, ok, want.Raw, want.Exists())
				}
			}
			want := gjson.Get(s, name)
			raw, at, ok := Field(s, name)
			if ok != want.Exists() || raw != want.Raw || ok && s[at:at+len(raw)] != raw {
				t.Fatalf("Field(%q, %q) = %q, %v; gjson %q, %v", s, name, raw, ok, want.Raw, want.Exists())
			}
		}
	})
}

// BenchmarkField compares reading a plain answer's usage with Field,
// FieldNearEnd and gjson.Get.
func BenchmarkField(b *testing.B) {
	for _, bc := range []struct {
		name  string
		usage func() (in, out int64)
	}{
		{"jsonscan", func() (int64, int64) {
			u, _, _ := Field(answer, "usage")
			p, _, _ := Field(u, "prompt_tokens")
			c, _, _ := Field(u, "completion_tokens")
			return Int(p), Int(c)
		}},
		{"near_end", func() (int64, int64) {
			u, _ := FieldNearEnd(answer, `"usage"`)
			p, _, _ := Field(u, "prompt_tokens")
			c, _, _ := Field(u, "completion_tokens")
			return Int(p), Int(c)
		}},
		{"gjson", func() (int64, int64) {
			u := gjson.Get(answer, "usage")
			return u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if in, out := bc.usage(); in+out != 1163 {
					b.Fatal("usage")
				}
			}
		})
	}
}
