package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"taskgate/tasks"
)

// TestTopFieldsMatchGjson checks that the one-pass read gives what
// gjson.GetBytes gives for each field: present, absent, null, escaped keys,
// duplicates (the first counts) and fields only nested deeper.
func TestTopFieldsMatchGjson(t *testing.T) {
	bodies := []string{
		`{}`,
		`{"model":"a.b","messages":[{"role":"user","content":"hi","model":"inner"}],"max_tokens":5}`,
		`{"model":"first","model":"second","user":null,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"mo\u0064el":"escaped","safety_identifier":"alice","user":"bob","n":3}`,
		`{"input":[{"role":"user","content":"x"}],"previous_response_id":"resp_1","max_output_tokens":0}`,
		`{"metadata":{"model":"nested only","user":"nested"},"prompt":"p","max_completion_tokens":7,"max_tokens":9}`,
		` { "stream" : false , "messages" : [ ] } `,
		`{"messages":[{"role":"user","content":"a"}, {"role":"user","messages":[{"x":1}],"content":[{"type":"text","text":"]"}]} ,3,"s",[1,[2]]]}`,
		`{"m\u0065ssages":[{"a":1}],"messages":[{"b":2},{"c":3}]}`,
		`{"messages":[{"b":2}],"messages":[{"c":3},{"d":4}]}`,
		`{"messages":"not an array","x":[{"y":1}]}`,
		`{"tools":[{"messages":[1]}],"messages":[{"role":"user","content":"hi"}]}`,
	}
	for _, body := range bodies {
		checkTopFields(t, body)
	}
}

// topFieldNames are the fields topFields keeps.
var topFieldNames = []string{"model", "stream", "stream_options", "messages", "input", "prompt", "previous_response_id", "n",
	"safety_identifier", "user", "max_completion_tokens", "max_tokens", "max_output_tokens", "tools", "functions"}

// checkTopFields reads body's top level and compares each kept field with
// gjson.Get: raw text, type, string, number and offset (for a body the
// gateway accepts: one that gjson takes but checkBody refuses, for its
// UTF-8 or depth, is only checked to be refused by the read too).
func checkTopFields(t *testing.T, body string) {
	t.Helper()
	var f topFields
	if e := f.readChecked([]byte(body), nil); e != nil {
		if checkBody([]byte(body)) == nil {
			t.Fatalf("readChecked refused %s (%s), checkBody accepts it", body, e.Message)
		}
		return
	}
	for _, name := range topFieldNames {
		got, want := f.get(name), gjson.Get(body, name)
		if got.Raw != want.Raw || got.Type != want.Type || got.Exists() != want.Exists() || got.Str != want.Str ||
			got.Num != want.Num && !(got.Num != got.Num && want.Num != want.Num) ||
			got.Exists() && body[got.Index:got.Index+len(got.Raw)] != got.Raw {
			t.Errorf("%s: field %s = %q (%v, %q, %v, at %d), gjson.Get %q (%v, %q, %v)", body, name,
				got.Raw, got.Type, got.Str, got.Num, got.Index, want.Raw, want.Type, want.Str, want.Num)
		}
	}
	// The messages' elements the validator took on its way: those of the
	// messages field kept (the first), as gjson gives them.
	if f.listed {
		var want []string
		gjson.Get(body, "messages").ForEach(func(_, v gjson.Result) bool {
			want = append(want, v.Raw)
			return len(want) <= maxMessages
		})
		if strings.Join(f.list, "\x00") != strings.Join(want, "\x00") || len(f.list) != len(want) {
			t.Errorf("%s: messages listed %q, gjson %q", body, f.list, want)
		}
	}
}

// TestValidatorListsMessages checks when the validator takes the messages'
// elements itself (checkTopFields checks what it takes).
func TestValidatorListsMessages(t *testing.T) {
	for _, tc := range []struct {
		body   string
		listed int // -1: not listed
	}{
		{`{"model":"m","messages":[{"a":1},{"b":[2]}]}`, 2},
		{`{"messages":[]}`, 0},
		{`{"m\u0065ssages":[{"a":1}],"messages":[{"b":2}]}`, -1}, // the first, escaped, is kept
		{`{"messages":{"a":1}}`, -1},
		{`{"x":[{"messages":[1]}]}`, -1},
	} {
		var f topFields
		if e := f.readChecked([]byte(tc.body), nil); e != nil {
			t.Fatalf("%s: %s", tc.body, e.Message)
		}
		if got := len(f.list); f.listed != (tc.listed >= 0) || f.listed && got != tc.listed {
			t.Errorf("%s: listed %v with %d elements, want %d", tc.body, f.listed, got, tc.listed)
		}
	}
}

// TestReadCheckedRefusesCutBodies checks that bodies cut off where the
// validator looks ahead (after a key, inside the messages) are refused,
// not read past their end.
func TestReadCheckedRefusesCutBodies(t *testing.T) {
	for _, body := range []string{`{"messages":`, `{"messages": `, `{"}odel":`, `{"messages":[`, `{"messages":[{"a":1},`, `{"messages":[{"a":1}]`} {
		var f topFields
		if e := f.readChecked([]byte(body), nil); e == nil {
			t.Errorf("%s: accepted", body)
		}
	}
}

// FuzzTopFieldsMatchGjson compares the one-pass read with gjson.Get on
// valid JSON objects.
func FuzzTopFieldsMatchGjson(f *testing.F) {
	f.Add(`{"model":"a\"b","stream":true,"n":1.5e2,"user":null,"messages":[{"x":"]"}],"max_tokens":-0}`)
	f.Add(`{"mo\u0064el":"x","model":"y","tools":{},"prompt":"\u00e9"}`)
	f.Fuzz(func(t *testing.T, body string) {
		if !gjson.Valid(body) || !gjson.Parse(body).IsObject() {
			return
		}
		checkTopFields(t, body)
	})
}

// TestSetModelSplicesWhereTopFieldsFoundIt checks that replacing the model
// at the place the one-pass read found it gives what sjson gives (the model
// replaced, every other byte kept), and that a stale place falls back to
// sjson.
func TestSetModelSplicesWhereTopFieldsFoundIt(t *testing.T) {
	for _, tc := range []struct{ body, model string }{
		{`{"model":"app.task","messages":[]}`, "gpt-4o-mini"},
		{` { "messages" : [ {"model":"inner"} ] , "model" : "app.task" } `, "m"},
		{`{"model":"first","model":"second"}`, "real"},
		{`{"model":"a\"b\u00e9","stream":true}`, "quote\"and\u2028 and é"},
		{`{"messages":[]}`, "added"},
	} {
		var f topFields
		_ = f.readChecked([]byte(tc.body), nil)
		if f.model.Exists() && f.model.at == 0 {
			t.Errorf("%s: the one-pass read gave no place for the model", tc.body)
		}
		got := setModel([]byte(tc.body), tc.model, f.model)
		want, _ := sjson.SetBytes([]byte(tc.body), "model", tc.model)
		if string(got) != string(want) {
			t.Errorf("%s: spliced %s, sjson %s", tc.body, got, want)
		}
		if m := gjson.GetBytes(got, "model").Str; m != tc.model {
			t.Errorf("%s: model now %q, want %q", tc.body, m, tc.model)
		}
		// A place read from another body: found again, not spliced.
		stale := setModel([]byte(`{"x":1,`+tc.body[1:]), tc.model, f.model)
		if m := gjson.GetBytes(stale, "model").Str; m != tc.model {
			t.Errorf("%s with a stale place: model %q, want %q (%s)", tc.body, m, tc.model, stale)
		}
	}
}

// TestTopFieldsKeepEveryRouteField checks that every field a route looks up
// by name is read in the one pass.
func TestTopFieldsKeepEveryRouteField(t *testing.T) {
	var f topFields
	for _, r := range routes {
		for _, name := range r.rt.maxOutput {
			if f.field(name) == nil {
				t.Errorf("route %s: output field %q is not in topFields", r.rt.name, name)
			}
		}
	}
	for _, name := range []string{"safety_identifier", "user"} {
		if f.field(name) == nil {
			t.Errorf("%q is not in topFields", name)
		}
	}
}

// BenchmarkTopFields compares the one-pass read of a 10 KB chat body's
// top-level fields (which also checks the whole body, as checkBody) with
// one gjson.GetBytes per field, as a chat call reads them (model, stream,
// safety_identifier, user, messages, the two output maxima).
func BenchmarkTopFields(b *testing.B) {
	body := chatBody10KB()
	fields := []string{"model", "stream", "safety_identifier", "user", "messages", "max_completion_tokens", "max_tokens"}
	b.Run("one_pass", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for range b.N {
			var f topFields
			_ = f.readChecked(body, nil)
			for _, name := range fields {
				_ = f.get(name)
			}
		}
	})
	b.Run("get_per_field", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for range b.N {
			for _, name := range fields {
				_ = gjson.GetBytes(body, name)
			}
		}
	})
}

// TestAskUsage: the upstream is asked for usage whether the body had no
// stream_options (spliced) or had one (set), and nothing else changes.
func TestAskUsage(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"{}"}]}`,
		`{}`,
		` { } `,
		"{\n  \"model\": \"m\"\n}",
		`{"stream_options":{"include_usage":false},"model":"m"}`,
		`{"model":"m","stream_options":{}}`,
		`{"stream\u005foptions":{"include_usage":false}}`,
	} {
		var top topFields
		_ = top.readChecked([]byte(body), nil)
		got := askUsage([]byte(body), !top.streamOptions.Exists())
		if !gjson.ValidBytes(got) {
			t.Errorf("%s: not JSON: %s", body, got)
			continue
		}
		if !gjson.GetBytes(got, "stream_options.include_usage").Bool() {
			t.Errorf("%s: usage not asked for: %s", body, got)
		}
		gjson.Parse(body).ForEach(func(k, v gjson.Result) bool {
			if k.Str != "stream_options" && gjson.GetBytes(got, gjson.Escape(k.Str)).Raw != v.Raw {
				t.Errorf("%s: field %s changed: %s", body, k.Str, got)
			}
			return true
		})
	}
}

// detectCorpus is the needs-detection corpus of the tasks package, with a
// few bodies whose duplicate fields the one-pass read must handle.
func detectCorpus(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("..", "tasks", "testdata", "detect", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("detect corpus: %v (%d files)", err, len(files))
	}
	var bodies [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"file","file":{}}]}],"messages":"not an array"}`,
		`{"tools":[],"tools":[{"type":"function"}],"messages":[{"role":"user","content":"a"}]}`,
		`{"response_format":{"type":"json_object"},"response_format":{"type":"json_schema"},"messages":[{"role":"user","content":"a"}]}`,
		`{"modalities":["text","image"],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]}`,
		`{"input":[{"type":"input_image"}],"input":"text","tools":[{"type":"image_generation"}],"text":{"format":{"type":"json_object"}}}`,
	} {
		bodies = append(bodies, []byte(s))
	}
	return bodies
}

// oneCallNeeds is what prepare finds body asks for on route rt, and
// whether the body passes the route's checks (only then do needs count).
func oneCallNeeds(rt *route, body []byte) (tasks.Needs, bool) {
	c := &call{rt: rt}
	if c.top.readChecked(body, rt.fieldNeeds) != nil {
		return 0, false
	}
	if c.routeChecks() != nil {
		return 0, false
	}
	return c.bodyNeeds(body), true
}

// TestBodyNeedsMatchDetect checks that the needs prepare finds on its way
// through the body (the top-level read, routeChecks) are what
// tasks.DetectChat and DetectResponses find in a pass of their own.
func TestBodyNeedsMatchDetect(t *testing.T) {
	checked := 0
	for _, body := range detectCorpus(t) {
		for _, tc := range []struct {
			rt     *route
			detect func([]byte) tasks.Needs
		}{{routeChat, tasks.DetectChat}, {routeResponses, tasks.DetectResponses}} {
			got, ok := oneCallNeeds(tc.rt, body)
			if !ok {
				continue
			}
			checked++
			if want := tc.detect(body); got != want {
				t.Errorf("%s route, %s: needs {%v}, detect finds {%v}", tc.rt.name, body, got, want)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d bodies passed the route checks", checked)
	}
}

// FuzzBodyNeedsMatchDetect is TestBodyNeedsMatchDetect on any body.
func FuzzBodyNeedsMatchDetect(f *testing.F) {
	for _, b := range detectCorpus(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tc := range []struct {
			rt     *route
			detect func([]byte) tasks.Needs
		}{{routeChat, tasks.DetectChat}, {routeResponses, tasks.DetectResponses}} {
			if got, ok := oneCallNeeds(tc.rt, body); ok {
				if want := tc.detect(body); got != want {
					t.Errorf("%s route, %q: needs {%v}, detect finds {%v}", tc.rt.name, body, got, want)
				}
			}
		}
	})
}

// TestValidObjectAgreesWithTheChecks checks the one-pass validator against
// the separate checks that name a bad body's problem, on bodies at every
// edge of JSON's grammar, UTF-8 and the depth limit.
func TestValidObjectAgreesWithTheChecks(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	bodies := []string{
		``, ` `, `{}`, ` {} `, "\t{\n}\r\n", `[]`, `"s"`, `1`, `null`, `{`, `}`, `{}}`, `{} {}`, `{},`,
		`{"a":1}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{'a':1}`, `{"a":1 "b":2}`,
		`{"a":[]}`, `{"a":[1,2,3]}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`, `{"a":[[[]]]}`, `{"a":[}`,
		`{"n":0}`, `{"n":-0}`, `{"n":01}`, `{"n":-}`, `{"n":1.}`, `{"n":.5}`, `{"n":1.5e10}`, `{"n":1E+2}`,
		`{"n":1e}`, `{"n":1e-}`, `{"n":+1}`, `{"n":-1.25E-7}`, `{"n":1x}`, `{"n":Infinity}`, `{"n":NaN}`,
		`{"t":true}`, `{"t":tru}`, `{"t":truee}`, `{"f":false}`, `{"z":null}`, `{"z":nul}`, `{"z":NULL}`,
		`{"s":"\"\\\/\b\f\n\r\t"}`, `{"s":"\u00e9\uD83D\uDE00"}`, `{"s":"\u12"}`, `{"s":"\u12g4"}`, `{"s":"\x"}`,
		`{"s":"\'"}`, "{\"s\":\"a\tb\"}", "{\"s\":\"a\x01b\"}", "{\"s\":\"a\x7fb\"}", `{"s":"abc}`, `{"s":"\`,
		"{\"s\":\"é日本🎉\"}", "{\"s\":\"\xff\"}", "{\"s\":\"\xc3\"}", "{\"s\":\"\xed\xa0\x80\"}", "{\"s\":\"\xf4\x90\x80\x80\"}",
		"{\"a\":1}\xff", "\xef\xbb\xbf{}", "{\"\xe9\":1}", `{"a":{"b":{"c":[{"d":null}]}}}`,
		deep(63), deep(64), deep(65), `{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`,
		`{"a":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`,
		`{"s":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}`,
	}
	for _, b := range bodies {
		got, want := validObject([]byte(b), maxJSONDepth), bodyProblem([]byte(b)) == nil
		if got != want {
			t.Errorf("%q: validObject %v, the checks accept: %v", b, got, want)
		}
	}
}

// FuzzValidObject is TestValidObjectAgreesWithTheChecks on any body.
func FuzzValidObject(f *testing.F) {
	for _, b := range detectCorpus(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"a":[1,-2.5e+3,true,false,null,"\u00e9\n"],"b":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validObject(b, maxJSONDepth), bodyProblem(b) == nil; got != want {
			t.Errorf("%q: validObject %v, the checks accept: %v", b, got, want)
		}
	})
}
