package trim

import (
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
		ok := eachField(tt.obj, func(k, v string) bool {
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
	if !keyIs(`"a\u0062"`, "ab") || keyIs(`"ab"`, "a") || strValue(`"a\nb"`) != "a\nb" || strValue(`"x"`) != "x" {
		t.Error("keyIs/strValue")
	}
}

// FuzzScan checks the scanner against gjson on valid JSON.
func FuzzScan(f *testing.F) {
	f.Add(`{"a":1,"b":[{"c":"d\""}],"e":{"f":null}}`)
	f.Add(`[1, "two", {"three": [3]}, null, true]`)
	f.Add(`{"messages":[{"role":"user","content":"hi"}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		// Never panics, whatever the input.
		eachField(s, func(_, _ string) bool { return true })
		eachElem(s, func(string) bool { return true })
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
			ok = eachField(s, func(k, v string) bool {
				got = append(got, strValue(k), v)
				return true
			})
		case root.IsArray():
			ok = eachElem(s, func(v string) bool {
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
