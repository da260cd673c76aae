package tasks

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"taskgate/config"
)

const registryYAML = `
endpoints:
  - {name: mini, base_url: "http://a/v1", model: gpt-mini, context_window: 1000, max_output_tokens: 100, capabilities: [tools, json], price: {input: "1", output: "2"}}
  - {name: big, base_url: "http://b/v1", model: gpt-big, context_window: 9000, max_output_tokens: 500, capabilities: [vision, tools, json_schema], price: {input: "3", output: "4"}}
  - {name: files, base_url: "http://c/v1", model: gpt-files, context_window: 9000, capabilities: [file_input], price: {input: "3", output: "4"}}
tasks:
  - key: app.one
    endpoints: [mini, big, files]
    limits:
      task: {requests: {day: 10}}
      user: {tokens: {hour: 5}}
  - key: app.two
    endpoints: [big]
    user_limits: false
    limits:
      user: {tokens: {hour: 5}}
    typical_tokens: [10, 20]
keys:
  - {name: k1, secret: s1, tasks: ["*"]}
  - {name: k2, secret_sha256: "%s", tasks: [app.two]}
  - {name: k3, secret: s3, tasks: [app.one, app.two]}
`

func newTestRegistry(t testing.TB) *Registry {
	t.Helper()
	h := sha256.Sum256([]byte("s2"))
	cfg, err := config.Parse([]byte(fmt.Sprintf(registryYAML, hex.EncodeToString(h[:]))), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAuthenticate(t *testing.T) {
	r := newTestRegistry(t)
	cases := []struct {
		secret, want string
	}{
		{"s1", "k1"}, {"s2", "k2"}, {"s3", "k3"}, {"s4", ""}, {"", ""}, {"S1", ""}, {"s1 ", ""}, {"s", ""},
	}
	// Three passes: the first hashes, the later ones find the secrets that
	// matched among those seen; the answers must not change.
	for pass := range 3 {
		for _, tc := range cases {
			secret := []byte(tc.secret)
			k := r.Authenticate(secret)
			got := ""
			if k != nil {
				got = k.Name
			}
			if got != tc.want {
				t.Errorf("pass %d: Authenticate(%q) = %q, want %q", pass, tc.secret, got, tc.want)
			}
			for i := range secret {
				secret[i] = 'x' // the registry keeps no view of the caller's buffer
			}
		}
	}
	if m := r.seen.Load(); m == nil || len(*m) != 3 {
		t.Errorf("seen secrets: %v, want the three that matched", m)
	}
}

// TestAuthenticateConcurrently authenticates from many goroutines while the
// seen secrets are first filled (run with -race).
func TestAuthenticateConcurrently(t *testing.T) {
	r := newTestRegistry(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				secret, want := []string{"s1", "s2", "s3", "nope"}[(g+i)%4], []string{"k1", "k2", "k3", ""}[(g+i)%4]
				k := r.Authenticate([]byte(secret))
				if (k == nil) != (want == "") || k != nil && k.Name != want {
					t.Errorf("Authenticate(%q) = %v, want %q", secret, k, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestKeysAndTasks(t *testing.T) {
	r := newTestRegistry(t)
	k1, k2, k3 := r.Authenticate([]byte("s1")), r.Authenticate([]byte("s2")), r.Authenticate([]byte("s3"))
	if !k1.MayCall("app.one") || !k1.MayCall("app.two") || k1.Only != nil {
		t.Errorf("k1: %+v", k1)
	}
	if k2.MayCall("app.one") || !k2.MayCall("app.two") || k2.Only == nil || k2.Only.Key != "app.two" {
		t.Errorf("k2: only %v", k2.Only)
	}
	if k3.Only != nil || len(r.Callable(k3)) != 2 {
		t.Errorf("k3: %v", r.Callable(k3))
	}
	one, two := r.Task("app.one"), r.Task("app.two")
	if len(one.Limits) != 2 || len(two.Limits) != 0 {
		t.Errorf("limits: one %v two %v (user limits must be dropped when user_limits is false)", one.Limits, two.Limits)
	}
	if one.BlockGroup != "app.one" {
		t.Errorf("block group %q", one.BlockGroup)
	}
	if got := two.EstimateOutput(two.Endpoints[0]); got != 20 {
		t.Errorf("typical output %d", got)
	}
	if got := one.EstimateOutput(one.Endpoints[1]); got != 500 {
		t.Errorf("fallback output %d", got)
	}
}

func TestQualifying(t *testing.T) {
	r := newTestRegistry(t)
	one := r.Task("app.one")
	names := func(eps []*Endpoint) []string {
		var out []string
		for _, e := range eps {
			out = append(out, e.Name)
		}
		return out
	}
	cases := []struct {
		needs   Needs
		want    []string
		missing Needs
	}{
		{0, []string{"mini", "big", "files"}, 0},
		{JSON, []string{"mini", "big", "files"}, 0}, // soft: never filters
		{Tools, []string{"mini", "big"}, 0},
		{Vision, []string{"big"}, 0},
		{Vision | Tools, []string{"big"}, 0},
		{ImageOutput, nil, ImageOutput},
		{ImageOutput | Vision, nil, ImageOutput},
		{Vision | FileInput, nil, Vision | FileInput}, // each met, never together
	}
	for _, tc := range cases {
		eps, missing := one.Qualifying(tc.needs)
		if got := names(eps); len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) || missing != tc.missing {
			t.Errorf("Qualifying(%s) = %v, missing %s; want %v, missing %s", tc.needs, got, missing, tc.want, tc.missing)
		}
	}
}

func TestPrefer(t *testing.T) {
	r := newTestRegistry(t)
	eps := r.Task("app.one").Endpoints
	for _, tc := range []struct{ model, first string }{
		{"", "mini"}, {"big", "big"}, {"gpt-files", "files"}, {"unknown", "mini"},
	} {
		got := Prefer(eps, tc.model)
		if got[0].Name != tc.first || len(got) != 3 {
			t.Errorf("Prefer(%q) first %s, want %s", tc.model, got[0].Name, tc.first)
		}
	}
	if eps[0].Name != "mini" {
		t.Error("Prefer changed its input")
	}
}

func TestNeedsNames(t *testing.T) {
	n := ParseNeeds([]string{"vision", "json", "bogus"})
	if n != Vision|JSON || n.String() != "vision, json" {
		t.Errorf("ParseNeeds = %v (%s)", n, n)
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	r := newTestRegistry(b)
	secret := []byte("s3")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if r.Authenticate(secret) == nil {
			b.Fatal("no key")
		}
	}
}
