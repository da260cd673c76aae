package proxy

import (
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// TestTopFieldsMatchGjson checks that the one-pass read gives what
// gjson.GetBytes gives for each field: present, absent, null, escaped keys,
// duplicates (the first counts) and fields only nested deeper.
func TestTopFieldsMatchGjson(t *testing.T) {
	names := []string{"model", "stream", "stream_options", "messages", "input", "prompt", "previous_response_id", "n",
		"safety_identifier", "user", "max_completion_tokens", "max_tokens", "max_output_tokens"}
	bodies := []string{
		`{}`,
		`{"model":"a.b","messages":[{"role":"user","content":"hi","model":"inner"}],"max_tokens":5}`,
		`{"model":"first","model":"second","user":null,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"mo\u0064el":"escaped","safety_identifier":"alice","user":"bob","n":3}`,
		`{"input":[{"role":"user","content":"x"}],"previous_response_id":"resp_1","max_output_tokens":0}`,
		`{"metadata":{"model":"nested only","user":"nested"},"prompt":"p","max_completion_tokens":7,"max_tokens":9}`,
		` { "stream" : false , "messages" : [ ] } `,
	}
	for _, body := range bodies {
		var f topFields
		f.read([]byte(body))
		for _, name := range names {
			got, want := f.get(name), gjson.Get(body, name)
			if got.Raw != want.Raw || got.Type != want.Type || got.Exists() != want.Exists() {
				t.Errorf("%s: field %s = %q (%v), gjson.Get %q (%v)", body, name, got.Raw, got.Type, want.Raw, want.Type)
			}
		}
	}
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
		f.read([]byte(tc.body))
		if f.model.Exists() && f.model.Index == 0 {
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
// top-level fields with one gjson.GetBytes per field, as a chat call reads
// them (model, stream, safety_identifier, user, messages, the two output
// maxima).
func BenchmarkTopFields(b *testing.B) {
	body := chatBody10KB()
	fields := []string{"model", "stream", "safety_identifier", "user", "messages", "max_completion_tokens", "max_tokens"}
	b.Run("one_pass", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for range b.N {
			var f topFields
			f.read(body)
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
		top.read([]byte(body))
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
