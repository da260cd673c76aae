package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// env returns a lookup function over a fixed map.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

var noEnv = env(nil)

// minimal is a valid config with one endpoint, one task and one key.
const minimal = `
endpoints:
  - name: mini
    base_url: https://api.example.com/v1
    model: gpt-4o-mini
    context_window: 128000
    capabilities: [vision, json_schema]
    price: {input: "0.15", output: "0.60"}
tasks:
  - key: shop.reply
    endpoints: [mini]
keys:
  - name: app
    secret: s3cret
    tasks: [shop.reply]
`

func mustParse(t *testing.T, src string, lookup func(string) (string, bool)) *Config {
	t.Helper()
	c, err := Parse([]byte(src), lookup)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

// expectedErrors lists, for each testdata/NAME.bad.yaml, every error it
// must report, rendered in full (path, line and message).
var expectedErrors = map[string][]string{
	"collections": {
		`endpoints[0].capabilities[1] (line 6): must not be empty`,
		`endpoints[0].capabilities[2] (line 6): must not be empty`,
		`endpoints[0].headers.X-A (line 8): duplicate field "X-A"`,
		`endpoints[1].headers (line 14): must be a mapping of names to strings, not a list`,
		`tasks[0].typical_tokens[1] (line 18): must be an integer, not null`,
		`tasks[0].thresholds[0] (line 19): must be a number, not the string "high"`,
		`tasks[0].thresholds[1] (line 19): must be a number, not null`,
		`tasks[0].limits.task.money.day (line 21): money is a dollar string like "20.00", not a boolean`,
		`tasks[0].limits.user (line 22): must be a mapping, not a list`,
		`tasks[1].endpoints (line 24): must be a list, not the string "mini"`,
		`tasks[1].typical_tokens (line 25): must be a list, not an integer`,
	},
	"merge": {
		`tasks[0] (line 10): a merge (<<) takes a mapping or a list of mappings, not the string "a"`,
		`tasks[0] (line 10): a merge (<<) takes a mapping or a list of mappings, not the string "b"`,
		`tasks[0] (line 11): a key must be a plain name, not a list`,
	},
	"multidoc": {
		`line 2: more than one YAML document in the file`,
	},
	"base_url": {
		`endpoints[0].base_url (line 3): "ftp://files.example.com" is not an http:// or https:// URL`,
	},
	"capability_unknown": {
		`endpoints[0].capabilities[1] (line 6): unknown capability "telepathy" (known: vision, file_input, image_output, tools, json_schema, json)`,
		`tasks[0].needs[0] (line 10): unknown need "vison" (known: vision, file_input, image_output, tools, json_schema, json)`,
	},
	"count_negative": {
		`tasks[0].limits.task.requests.day (line 12): must not be negative, got -1`,
		`tasks[0].limits.task.tokens.hour (line 12): must be an integer, not the string "100"`,
	},
	"duplicate_field": {
		`endpoints[0].name (line 3): duplicate field "name" (first at line 2)`,
	},
	"duplicate_names": {
		`endpoints[1].name (line 8): endpoint name "mini" is already used by endpoints[0]`,
		`tasks[1].key (line 16): task key "shop.reply" is already used by tasks[0]`,
		`tasks[1].endpoints[1] (line 17): endpoint "mini" is listed twice`,
		`keys[1].name (line 22): key name "app" is already used by keys[0]`,
		`keys[2].secret (line 26): the same secret as keys[0] ("app"); every key needs its own`,
		`keys[3].secret_sha256 (line 29): the same secret as keys[1] ("app"); every key needs its own`,
	},
	"duration": {
		`shutdown_grace (line 1): must be a duration like "30s" or "1m30s"; 30 has no unit`,
		`endpoints[0].timeout (line 8): must not be negative, got -5s`,
		`endpoints[0].connect_timeout (line 9): "soon" is not a duration like "30s" or "1m30s"`,
		`endpoints[0].breaker.cooldown (line 10): must be positive`,
		`endpoints[0].breaker.failures (line 10): must be at least 1`,
	},
	"empty": {
		`the file is empty`,
	},
	"endpoint_null": {
		`endpoints[0] (line 2): is empty; expected an endpoint`,
		`endpoints[0].price (line 2): is required: dollars per million tokens, like {input: "0.15", output: "0.60"} (an endpoint is never free by default; write "0" for a free one)`,
		`endpoints[0].name (line 2): is required (the endpoint's name, used by tasks)`,
		`endpoints[0].base_url (line 2): is required (the API's base URL, like https://api.openai.com/v1)`,
		`endpoints[0].model (line 2): is required (the model name sent upstream)`,
		`endpoints[0].context_window (line 2): is required (the model's context window in tokens)`,
		`tasks[0].endpoints[0] (line 5): no endpoint is named "mini"`,
	},
	"endpoint_required": {
		`endpoints[0].name (line 2): is required (the endpoint's name, used by tasks)`,
		`endpoints[0].base_url (line 2): is required (the API's base URL, like https://api.openai.com/v1)`,
		`endpoints[0].model (line 2): is required (the model name sent upstream)`,
		`endpoints[0].context_window (line 2): is required (the model's context window in tokens)`,
		`tasks[0].endpoints[0] (line 6): no endpoint is named "mini"`,
	},
	"env_unset": {
		`keys[0].secret (line 13): environment variable TASKGATE_TEST_UNSET is not set`,
		`keys[1].secret (line 16): ${not a name} is not a variable reference (names are letters, digits and _, not starting with a digit; write $$ for a literal $)`,
	},
	"key_secret": {
		`keys[0] (line 12): has both secret and secret_sha256; give exactly one`,
		`keys[1] (line 16): needs a secret or a secret_sha256 (the hex SHA-256 of the secret)`,
		`keys[2].secret_sha256 (line 19): must be 64 hex digits (the SHA-256 of the secret), got 6 characters`,
		`keys[3].secret (line 22): is empty (is its environment variable set to an empty value?)`,
		`keys[4].name (line 24): is required (the key's name, used in logs)`,
	},
	"key_task_unknown": {
		`keys[0].tasks[1] (line 14): no task has the key "shop.refund"`,
		`keys[1].tasks (line 17): must name at least one task (or "*" for every task)`,
	},
	"listen": {
		`listen (line 1): "8080" is not a listen address like ":8080" or "127.0.0.1:9090"`,
	},
	"many": {
		`body_limit (line 2): "lots" is not a size like "32MiB", "512KiB", "10MB" or "1024" (bytes)`,
		`endpoints[0].price.output (line 8): is required: dollars per million output tokens, like "0.60" ("0" for free)`,
		`tasks[0].key (line 10): task key "Shop" must be the owning module or app, a dot, then the use, in lowercase, like "warehouse.inventory_photo" (each part: a-z, 0-9, _ and -, starting with a letter or digit)`,
		`tasks[0].endpoints[0] (line 11): no endpoint is named "maxi" (known: mini)`,
		`tasks[0].limits.user.money.day (line 14): money is a dollar string like "20.00"; an integer is ambiguous (older configs read integers as millionths of a dollar)`,
		`tasks[0].thresholds[0] (line 15): a threshold is a share of the limit, more than 0 and at most 1 (0.8 = 80%), got 2`,
		`keys[0] (line 17): needs a secret or a secret_sha256 (the hex SHA-256 of the secret)`,
		`keys[0].tasks[0] (line 18): no task has the key "shop.nothing"`,
	},
	"max_output_tokens": {
		`endpoints[0].max_output_tokens (line 6): must be less than context_window (4096), got 4096`,
		`endpoints[1].context_window (line 11): must be positive`,
		`endpoints[1].max_output_tokens (line 12): must be positive`,
	},
	"money_float": {
		`tasks[0].limits.task.money.month (line 14): money is a dollar string like "20.00"; a float is inexact`,
	},
	"money_int": {
		`tasks[0].limits.user.money.day (line 13): money is a dollar string like "20.00"; an integer is ambiguous (older configs read integers as millionths of a dollar)`,
	},
	"money_negative": {
		`tasks[0].limits.task.money.day (line 12): "-5.00" must not be negative`,
	},
	"money_places": {
		`tasks[0].limits.task.money.day (line 12): "0.0000001" has more than 6 decimal places; limits count whole micro-dollars`,
	},
	"money_text": {
		`tasks[0].limits.task.money.day (line 12): "$5" is not a dollar amount like "20.00"`,
	},
	"needs_unmet": {
		`tasks[0].needs (line 16): no endpoint of task "a.b" has "image_output" (endpoints: mini, local)`,
		`tasks[1].needs (line 19): no endpoint of task "a.c" has all of "vision", "tools" (endpoints: mini, local)`,
	},
	"not_mapping": {
		`line 1: the file must be a mapping of settings (listen, store, endpoints, tasks, keys, …), not a list`,
	},
	"price_bad": {
		`endpoints[0].price.input (line 7): a price is a dollar string like "0.15"; an integer is ambiguous (older configs read integers as millionths of a dollar)`,
		`endpoints[0].price.output (line 8): "-0.60" must not be negative`,
		`endpoints[0].price.image (line 9): a price is a dollar string like "0.15"; a float is inexact`,
	},
	"price_missing": {
		`endpoints[0].price (line 2): is required: dollars per million tokens, like {input: "0.15", output: "0.60"} (an endpoint is never free by default; write "0" for a free one)`,
	},
	"price_output_missing": {
		`endpoints[0].price.output (line 6): is required: dollars per million output tokens, like "0.60" ("0" for free)`,
	},
	"redis_sentinel": {
		`store.redis (line 2): a redis-sentinel:// URL names the master: redis-sentinel://host1:26379,host2:26379/mymaster`,
	},
	"self_flag": {
		`tasks[0].self_flag (line 11): needs the task's purpose: the model is asked whether a request serves it`,
		`tasks[0].block_group (line 12): "*" means every group and cannot be a task's block group`,
	},
	"size": {
		`body_limit (line 1): "32 potatoes" is not a size like "32MiB", "512KiB", "10MB" or "1024" (bytes)`,
	},
	"store": {
		`store.redis (line 2): scheme "http": want redis://, rediss://, redis-sentinel:// or redis-cluster://`,
		`store.on_error (line 3): must be fail_closed or fail_open, not "fail_sometimes"`,
		`store.timeout (line 4): must be positive`,
	},
	"task_endpoint_unknown": {
		`tasks[0].endpoints[1] (line 10): no endpoint is named "maxi" (known: mini)`,
	},
	"task_key_form": {
		`tasks[0].key (line 9): task key "Shop.Reply" must be the owning module or app, a dot, then the use, in lowercase, like "warehouse.inventory_photo" (each part: a-z, 0-9, _ and -, starting with a letter or digit)`,
		`tasks[1].key (line 11): task key "inventory_photo" must be the owning module or app, a dot, then the use, in lowercase, like "warehouse.inventory_photo" (each part: a-z, 0-9, _ and -, starting with a letter or digit)`,
		`tasks[2].key (line 13): task key "shop..reply" must be the owning module or app, a dot, then the use, in lowercase, like "warehouse.inventory_photo" (each part: a-z, 0-9, _ and -, starting with a letter or digit)`,
	},
	"task_required": {
		`tasks[0].key (line 9): is required (the task's name, like "warehouse.inventory_photo")`,
		`tasks[0].endpoints (line 9): is required (the endpoints that serve the task, in order of preference)`,
		`tasks[1].endpoints (line 11): must name at least one endpoint`,
	},
	"thresholds": {
		`tasks[0].thresholds[0] (line 11): a threshold is a share of the limit, more than 0 and at most 1 (0.8 = 80%), got 0`,
		`tasks[0].thresholds[2] (line 11): a threshold is a share of the limit, more than 0 and at most 1 (0.8 = 80%), got 1.5`,
	},
	"timezone": {
		`timezone (line 1): unknown time zone "Mars/Olympus_Mons" (use an IANA name like "Europe/Berlin" or "UTC")`,
	},
	"tokenizer": {
		`endpoints[0].tokenizer (line 6): must be one of o200k_base, cl100k_base, estimate, not "p50k_base"`,
	},
	"trim": {
		`tasks[0].trim.attachments_share (line 12): must be more than 0 and at most 1, got 0`,
		`tasks[0].trim.reserve_output (line 13): must not be negative, got -1`,
	},
	"types": {
		`tasks[0].enabled (line 11): must be true or false, not the string "yes"`,
		`tasks[0].require_user (line 12): must be true or false, not an integer`,
		`tasks[0].sources (line 13): must be a list, not the string "inventory-app"`,
		`tasks[0].label (line 14): must be a string, not a list`,
		`tasks[0].max_calls_per_hour (line 15): must be an integer, not a float`,
	},
	"typical_tokens": {
		`tasks[0].typical_tokens (line 11): must be two integers, [input, output], like [1500, 300]; got 3`,
	},
	"unknown_field": {
		`tasks[0].limts (line 11): unknown field "limts" (did you mean "limits"?)`,
	},
	"unknown_nested": {
		`tasks[0].limits.user.money.dayy (line 13): unknown field "dayy" (did you mean "day"?)`,
	},
	"unknown_top": {
		`lisen (line 1): unknown field "lisen" (did you mean "listen"?)`,
	},
	"webhook": {
		`tasks[0].watchers[0].webhook (line 12): "hooks.example.com/x" is not an http:// or https:// URL`,
		`tasks[0].watchers[1].webhook (line 13): is required (the URL told about thresholds)`,
	},
	"yaml_syntax": {
		`line 9: bad YAML: did not find expected ',' or ']'`,
	},
}

func TestBadFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".bad.yaml")
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			want, ok := expectedErrors[name]
			if !ok {
				t.Fatalf("no expected errors for %s", f)
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Parse(data, noEnv)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error is %T, not Errors: %v", err, err)
			}
			got := make([]string, len(es))
			for i, e := range es {
				got[i] = e.Error()
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("errors:\n got:\n  %s\n want:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
	for name := range expectedErrors {
		if !seen[name] {
			t.Errorf("expected errors for %s, but testdata/%s.bad.yaml is missing", name, name)
		}
	}
}

func TestErrorsCarryPathAndLine(t *testing.T) {
	_, err := Parse([]byte(minimal+"    user: [x]\n"), noEnv)
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 {
		t.Fatalf("want one error, got %v", err)
	}
	if es[0].Path != "keys[0].user" || es[0].Line != 16 || es[0].Msg != "must be a string, not a list" {
		t.Errorf("got %#v", es[0])
	}
	var one Error
	if !errors.As(err, &one) || one.Path != "keys[0].user" {
		t.Errorf("errors.As(Error) = %#v", one)
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		e    Error
		want string
	}{
		{Error{"tasks[1].limits.user.money.day", 12, "bad"}, "tasks[1].limits.user.money.day (line 12): bad"},
		{Error{"listen", 0, "bad"}, "listen: bad"},
		{Error{"", 3, "bad YAML"}, "line 3: bad YAML"},
		{Error{"", 0, "empty"}, "empty"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%#v.Error() = %q, want %q", tt.e, got, tt.want)
		}
	}
	es := Errors{tests[0].e, tests[1].e}
	if got, want := es.Error(), tests[0].want+"\n"+tests[1].want; got != want {
		t.Errorf("Errors.Error() = %q, want %q", got, want)
	}
}

func TestSeveralErrorsAllReported(t *testing.T) {
	data, err := os.ReadFile("testdata/many.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(data, noEnv)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("got %v", err)
	}
	// One from each section of the file: top level, endpoints, tasks, keys.
	for _, prefix := range []string{"body_limit", "endpoints[0]", "tasks[0].key", "tasks[0].endpoints", "tasks[0].limits", "tasks[0].thresholds", "keys[0]", "keys[0].tasks"} {
		found := false
		for _, e := range es {
			if strings.HasPrefix(e.Path, prefix) {
				found = true
			}
		}
		if !found {
			t.Errorf("no error at %s in:\n%v", prefix, err)
		}
	}
	if len(es) < 8 {
		t.Errorf("want at least 8 errors, got %d", len(es))
	}
	for i := 1; i < len(es); i++ {
		if es[i].Line < es[i-1].Line {
			t.Errorf("errors not in line order: %v", err)
		}
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, minimal, noEnv)
	if c.Listen != ":8080" || c.AdminListen != "127.0.0.1:9090" || c.BodyLimit != 32<<20 ||
		c.Timezone != "UTC" || c.Location != time.UTC || c.ShutdownGrace != 30*time.Second {
		t.Errorf("top-level defaults: %+v", c)
	}
	if want := (Store{KeyPrefix: "taskgate:", OnError: FailClosed, Timeout: 250 * time.Millisecond, Leases: true}); c.Store != want {
		t.Errorf("store = %+v, want %+v", c.Store, want)
	}
	e := c.Endpoints[0]
	if e.Tokenizer != "o200k_base" || e.MaxOutputTokens != 4096 || e.Timeout != 120*time.Second ||
		e.ConnectTimeout != 5*time.Second || e.FirstByteTimeout != 60*time.Second || e.IdleTimeout != 60*time.Second ||
		e.Breaker != (Breaker{Failures: 5, Cooldown: 30 * time.Second}) || e.Price.HasImage {
		t.Errorf("endpoint defaults: %+v", e)
	}
	task := c.Tasks[0]
	if !task.Enabled || !task.UserLimits || task.RequireUser || task.BlockGroup != "shop.reply" ||
		!reflect.DeepEqual(task.Thresholds, []float64{0.8, 1.0}) || task.Sources != nil || task.TypicalTokens != nil ||
		task.Trim != (Trim{Enabled: true, ReserveOutput: 1024, AttachmentsShare: 0.5}) || !task.Limits.IsZero() {
		t.Errorf("task defaults: %+v", task)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
}

func TestBooleansAbsentNullFalse(t *testing.T) {
	tests := []struct {
		line              string
		enabled, userLims bool
	}{
		{"", true, true},
		{"    enabled: false\n", false, true},
		{"    enabled: null\n", true, true},
		{"    enabled: true\n", true, true},
		{"    user_limits: false\n", true, false},
		{"    user_limits: null\n", true, true},
		{"    user_limits:\n", true, true},
		{"    user_limits: true\n", true, true},
	}
	for _, tt := range tests {
		src := strings.Replace(minimal, "    endpoints: [mini]\n", "    endpoints: [mini]\n"+tt.line, 1)
		c := mustParse(t, src, noEnv)
		if got := c.Tasks[0]; got.Enabled != tt.enabled || got.UserLimits != tt.userLims {
			t.Errorf("%q: enabled=%v user_limits=%v, want %v %v", tt.line, got.Enabled, got.UserLimits, tt.enabled, tt.userLims)
		}
	}
}

func TestUserLimitsOffWarns(t *testing.T) {
	src := strings.Replace(minimal, "    endpoints: [mini]\n", `    endpoints: [mini]
    user_limits: false
    limits:
      task: {requests: {day: 10}}
      user: {requests: {hour: 5}}
`, 1)
	c := mustParse(t, src, noEnv)
	l := c.Tasks[0].Limits
	if !l.User.IsZero() || !l.Has(ScopeTask, UnitRequests, PeriodDay) {
		t.Errorf("limits = %+v; want user limits dropped, task kept", l.List())
	}
	want := `tasks[0].limits.user (line 15): task "shop.reply" has user_limits: false; its user limits are ignored`
	if len(c.Warnings) != 1 || c.Warnings[0] != want {
		t.Errorf("warnings = %q, want %q", c.Warnings, want)
	}
}

var fullEnv = env(map[string]string{
	"ADMIN_TOKEN":       "admin-secret",
	"OPENAI_API_KEY":    "sk-openai",
	"AZURE_KEY":         "az-key",
	"INVENTORY_APP_KEY": "inv-key",
})

func p64(v int64) *int64 { return &v }

func TestFullFixture(t *testing.T) {
	c, err := Load("testdata/full.good.yaml")
	if err == nil || !strings.Contains(err.Error(), "environment variable ADMIN_TOKEN is not set") {
		// Load uses the process environment, where these are unset.
		t.Fatalf("Load without env: %v", err)
	}
	data, err := os.ReadFile("testdata/full.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err = Parse(data, fullEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	if c.Listen != "0.0.0.0:8081" || c.AdminListen != "127.0.0.1:9191" || c.AdminToken != "admin-secret" ||
		c.BodyLimit != 512*1024 || c.Timezone != "America/New_York" || c.Location.String() != ny.String() ||
		c.ShutdownGrace != 90*time.Second {
		t.Errorf("top level: %+v", c)
	}
	if want := (Store{Redis: "redis-sentinel://:pw@s1:26379,s2/mymaster?db=2", KeyPrefix: "tg:", OnError: FailOpen, Timeout: 100 * time.Millisecond, Leases: false}); c.Store != want {
		t.Errorf("store = %+v", c.Store)
	}

	wantEP := []Endpoint{{
		Name: "openai-mini", BaseURL: "https://api.openai.com/v1", APIKey: "sk-openai", Model: "gpt-4o-mini",
		ContextWindow: 128000, MaxOutputTokens: 16384,
		Capabilities: []string{"vision", "file_input", "tools", "json_schema", "json"},
		Price:        NewPrice(decimal.RequireFromString("0.15"), decimal.RequireFromString("0.60")),
		Tokenizer:    "o200k_base", Headers: map[string]string{"X-Team": "warehouse"},
		Timeout: 90 * time.Second, ConnectTimeout: 2 * time.Second, FirstByteTimeout: 30 * time.Second, IdleTimeout: 15 * time.Second,
		Breaker: Breaker{Failures: 3, Cooldown: 10 * time.Second},
	}, {
		Name: "azure-image", BaseURL: "https://example.openai.azure.com/openai/v1", APIKey: "az-key", Model: "gpt-image-1",
		ContextWindow: 32000, MaxOutputTokens: 4096, Capabilities: []string{"image_output"},
		Price:     imagePrice(NewPrice(decimal.RequireFromString("5.00"), decimal.RequireFromString("40.00")), "0.0425"),
		Tokenizer: "cl100k_base", Headers: map[string]string{"api-key": "az-key"},
		Timeout: 120 * time.Second, ConnectTimeout: 5 * time.Second, FirstByteTimeout: 60 * time.Second, IdleTimeout: 60 * time.Second,
		Breaker: Breaker{Failures: 5, Cooldown: 30 * time.Second},
	}}
	if !reflect.DeepEqual(c.Endpoints, wantEP) {
		t.Errorf("endpoints:\n got %+v\nwant %+v", c.Endpoints, wantEP)
	}

	wantTasks := []Task{{
		Key: "warehouse.inventory_photo", Enabled: false, Label: "Inventory by photo",
		Purpose: "Count the stock items visible in shelf photos.",
		Needs:   []string{"vision", "json_schema", "json"}, Endpoints: []string{"openai-mini"},
		Limits: Limits{
			Task: ScopeLimits{
				Money:    Periods{Minute: p64(500_000), Hour: p64(2_500_000), Day: p64(20_000_000), Month: p64(300_000_000)},
				Requests: Periods{Day: p64(5000)},
			},
			User: ScopeLimits{Tokens: Periods{Day: p64(200000)}, Requests: Periods{Hour: p64(60)}},
		},
		UserLimits: true, RequireUser: true, Sources: []string{"inventory-app", "scanner"},
		MaxCallsPerHour: 60, MaxTokensPerCall: 8000, TypicalTokens: []int{1500, 300},
		Trim:     Trim{Enabled: false, ReserveOutput: 2048, AttachmentsShare: 1, DropEarlierToolResults: true},
		SelfFlag: true, AutoBlockThreshold: 3, Private: true, BlockGroup: "warehouse",
		Watchers: []Watcher{{Webhook: "https://hooks.example.com/taskgate"}}, Thresholds: []float64{0.5, 1},
	}, {
		Key: "marketing.banner-v2", Enabled: true, Needs: []string{"image_output"},
		Endpoints: []string{"azure-image", "openai-mini"}, UserLimits: false,
		Trim:       Trim{Enabled: true, ReserveOutput: 1024, AttachmentsShare: 0.5},
		BlockGroup: "marketing.banner-v2", Thresholds: []float64{},
	}}
	if !reflect.DeepEqual(c.Tasks, wantTasks) {
		t.Errorf("tasks:\n got %+v\nwant %+v", c.Tasks, wantTasks)
	}

	wantKeys := []Key{
		{Name: "inventory-app", Secret: "inv-key", Tasks: []string{"warehouse.inventory_photo"}, Source: "inventory-app"},
		{Name: "alice", SecretSHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", Tasks: []string{"*"}, User: "alice@example.com"},
	}
	if !reflect.DeepEqual(c.Keys, wantKeys) {
		t.Errorf("keys:\n got %+v\nwant %+v", c.Keys, wantKeys)
	}
	if e, ok := c.Endpoint("azure-image"); !ok || e.Model != "gpt-image-1" || !e.Has(NeedImageOutput) || e.Has(NeedVision) {
		t.Errorf("Endpoint lookup: %v %v", e, ok)
	}
	if task, ok := c.Task("warehouse.inventory_photo"); !ok {
		t.Error("Task lookup failed")
	} else if in, out, ok := task.Typical(); !ok || in != 1500 || out != 300 {
		t.Errorf("Typical = %d %d %v", in, out, ok)
	}
	if _, ok := c.Task("nope.nope"); ok {
		t.Error("Task found an unknown key")
	}
}

func imagePrice(p Price, image string) Price {
	p.Image, p.HasImage = decimal.RequireFromString(image), true
	return p
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taskgate.yaml")
	if err := os.WriteFile(path, []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != path {
		t.Errorf("Path = %q, want %q", c.Path, path)
	}
	_, err = Load(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "load config: ") {
		t.Errorf("missing file: %v", err)
	}
}

func TestExampleConfig(t *testing.T) {
	data, err := os.ReadFile("../examples/taskgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"OPENAI_API_KEY":       "sk-test",
		"TASKGATE_ADMIN_TOKEN": "admin",
		"REDIS_URL":            "redis://localhost:6379/0",
		"INVENTORY_APP_KEY":    "inv",
		"SUPPORT_DESK_KEY":     "desk",
	}
	c, err := Parse(data, env(vars))
	if err != nil {
		t.Fatalf("example: %v", err)
	}
	if len(c.Tasks) != 2 || len(c.Endpoints) != 2 || len(c.Keys) != 2 || len(c.Warnings) != 0 {
		t.Errorf("example decoded to %d tasks, %d endpoints, %d keys, warnings %v", len(c.Tasks), len(c.Endpoints), len(c.Keys), c.Warnings)
	}
	// An empty REDIS_URL means the in-process store.
	vars["REDIS_URL"] = ""
	if c, err = Parse(data, env(vars)); err != nil || c.Store.Redis != "" {
		t.Errorf("empty REDIS_URL: %v %q", err, c.Store.Redis)
	}
	// Every variable it references is required.
	for name := range vars {
		short := map[string]string{}
		for k, v := range vars {
			if k != name {
				short[k] = v
			}
		}
		_, err := Parse(data, env(short))
		if err == nil || !strings.Contains(err.Error(), "environment variable "+name+" is not set") {
			t.Errorf("without %s: %v", name, err)
		}
	}
}

func TestEnvExpansion(t *testing.T) {
	vars := env(map[string]string{
		"CTX":    "64000",
		"SECRET": "a#b: c\nd: [e]", // would break the YAML if pasted into the text
		"HOST":   "api.example.com",
		"EMPTY":  "",
		"DAY":    "20",
	})
	src := strings.NewReplacer(
		"context_window: 128000", "context_window: ${CTX}",
		"secret: s3cret", "secret: ${SECRET}",
		"https://api.example.com/v1", "https://${HOST}/v1",
		"    endpoints: [mini]\n", "    endpoints: [mini]\n    label: \"costs $$5 ${EMPTY}\"\n    purpose: $HOME and $\n    block_group: ${EMPTY}\n",
	).Replace(minimal)
	c := mustParse(t, src, vars)
	if c.Endpoints[0].ContextWindow != 64000 {
		t.Errorf("context_window = %d", c.Endpoints[0].ContextWindow)
	}
	if c.Keys[0].Secret != "a#b: c\nd: [e]" {
		t.Errorf("secret = %q", c.Keys[0].Secret)
	}
	if c.Endpoints[0].BaseURL != "https://api.example.com/v1" {
		t.Errorf("base_url = %q", c.Endpoints[0].BaseURL)
	}
	if got := c.Tasks[0].Label; got != "costs $5 " {
		t.Errorf("label = %q", got)
	}
	if got := c.Tasks[0].Purpose; got != "$HOME and $" {
		t.Errorf("purpose = %q", got)
	}
	if got := c.Tasks[0].BlockGroup; got != "shop.reply" {
		t.Errorf("block_group from an empty variable = %q, want the task key", got)
	}

	// A plain ${VAR} holding an integer in a money field is still an integer.
	money := strings.Replace(minimal, "    endpoints: [mini]\n", "    endpoints: [mini]\n    limits: {task: {money: {day: ${DAY}}}}\n", 1)
	_, err := Parse([]byte(money), vars)
	if err == nil || !strings.Contains(err.Error(), "an integer is ambiguous") {
		t.Errorf("money from ${DAY}: %v", err)
	}
	quoted := strings.Replace(money, "${DAY}", `"${DAY}"`, 1)
	c = mustParse(t, quoted, vars)
	if v, ok := c.Tasks[0].Limits.Get(ScopeTask, UnitMoney, PeriodDay); !ok || v != 20_000_000 {
		t.Errorf("quoted money from env = %d %v", v, ok)
	}

	// Keys and comments are never expanded.
	commented := "# ${NOT_SET_IN_A_COMMENT}\n" + minimal
	mustParse(t, commented, vars)
	_, err = Parse([]byte("${HOST}: 1\n"+minimal), vars)
	if err == nil || err.Error() != `${HOST} (line 1): unknown field "${HOST}"` {
		t.Errorf("a key with ${HOST}: %v", err)
	}

	// References work in flow collections, and adjacent ones stay apart.
	flow := strings.Replace(minimal, "    endpoints: [mini]\n", "    endpoints: [mini]\n    sources: [${HOST}${CTX}, \"${EMPTY}x\", \"$${HOST}\"]\n", 1)
	c = mustParse(t, flow, vars)
	if got, want := c.Tasks[0].Sources, []string{"api.example.com64000", "x", "${HOST}"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sources = %q, want %q", got, want)
	}
	// Text that looks like a placeholder is left alone.
	look := strings.Replace(minimal, "model: gpt-4o-mini", "model: tgenv0x ${HOST}", 1)
	if c = mustParse(t, look, vars); c.Endpoints[0].Model != "tgenv0x api.example.com" {
		t.Errorf("model = %q", c.Endpoints[0].Model)
	}

	// Every unset variable is reported, each with its line.
	bad := strings.NewReplacer("model: gpt-4o-mini", "model: ${MODEL_UNSET}", "secret: s3cret", "secret: ${KEY_UNSET}x${EMPTY}").Replace(minimal)
	_, err = Parse([]byte(bad), vars)
	want := "endpoints[0].model (line 5): environment variable MODEL_UNSET is not set\n" +
		"keys[0].secret (line 14): environment variable KEY_UNSET is not set"
	if err == nil || err.Error() != want {
		t.Errorf("unset variables:\n got %v\nwant %s", err, want)
	}
	_, err = Parse([]byte(strings.Replace(minimal, "model: gpt-4o-mini", "model: ${OPEN", 1)), vars)
	if err == nil || !strings.Contains(err.Error(), `endpoints[0].model (line 5): "${" without a closing "}"`) {
		t.Errorf("unclosed reference: %v", err)
	}
}

func TestEnvDefaultsToProcess(t *testing.T) {
	t.Setenv("TASKGATE_CONFIG_TEST_MODEL", "from-process")
	c := mustParse(t, strings.Replace(minimal, "model: gpt-4o-mini", "model: ${TASKGATE_CONFIG_TEST_MODEL}", 1), nil)
	if c.Endpoints[0].Model != "from-process" {
		t.Errorf("model = %q", c.Endpoints[0].Model)
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	src := `
endpoints:
  - &base
    name: mini
    base_url: https://api.example.com/v1
    model: gpt-4o-mini
    context_window: 128000
    price: {input: "0.15", output: "0.60"}
  - <<: *base
    name: mini-2
    model: gpt-4.1-mini
tasks:
  - key: shop.reply
    endpoints: [mini, mini-2]
    limits: &lim
      task: {money: {day: "1.00"}}
  - key: shop.refund
    endpoints: [mini]
    limits: *lim
keys:
  - {name: app, secret: s3cret, tasks: ["*"]}
`
	c := mustParse(t, src, noEnv)
	if e := c.Endpoints[1]; e.Name != "mini-2" || e.Model != "gpt-4.1-mini" || e.ContextWindow != 128000 || e.Price.Output.String() != "0.6" {
		t.Errorf("merged endpoint = %+v", e)
	}
	if v, ok := c.Tasks[1].Limits.Get(ScopeTask, UnitMoney, PeriodDay); !ok || v != 1_000_000 {
		t.Errorf("aliased limits = %d %v", v, ok)
	}
}

func TestAliasBombIsBounded(t *testing.T) {
	// Each level merges the previous one ten times: 10^12 keys if expanded.
	var b strings.Builder
	b.WriteString("x: [&m0 {name: a}")
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&b, ", &m%d {<<: [", i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*m%d", i-1)
		}
		b.WriteString("]}")
	}
	b.WriteString("]\nendpoints:\n  - <<: *m12\n")
	start := time.Now()
	_, err := Parse([]byte(b.String()), noEnv)
	if err == nil {
		t.Fatal("alias bomb parsed")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("alias bomb took %v", d)
	}
	if !strings.Contains(err.Error(), "the document is too large") && !strings.Contains(err.Error(), "too many errors") {
		t.Errorf("alias bomb: %v", err)
	}
	if es := err.(Errors); len(es) > maxErrors+2 {
		t.Errorf("%d errors reported", len(es))
	}
}

func TestDuplicateSecretAcrossForms(t *testing.T) {
	// sha256("hello") = 2cf24dba…
	src := minimal + `  - name: hashed
    secret_sha256: 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
    tasks: ["*"]
  - name: plain
    secret: hello
    tasks: ["*"]
`
	_, err := Parse([]byte(src), noEnv)
	want := `keys[2].secret (line 20): the same secret as keys[1] ("hashed"); every key needs its own`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	if strings.Contains(err.Error(), "hello") {
		t.Error("the error shows the secret")
	}
}

func TestTaskKeyPattern(t *testing.T) {
	for key, ok := range map[string]bool{
		"warehouse.inventory_photo": true,
		"a.b":                       true,
		"billing.export.csv":        true,
		"app-1.use_2":               true,
		"0.0":                       true,
		"warehouse":                 false,
		"Warehouse.photo":           false,
		"warehouse.":                false,
		".photo":                    false,
		"warehouse._photo":          false,
		"ware house.photo":          false,
		"warehouse..photo":          false,
	} {
		if got := TaskKeyPattern.MatchString(key); got != ok {
			t.Errorf("%q: match = %v, want %v", key, got, ok)
		}
	}
}

func TestParsePrice(t *testing.T) {
	for in, want := range map[string]string{"0.15": "0.15", "0": "0", "0.0000000125": "0.0000000125", "40.00": "40"} {
		got, err := ParsePrice(in)
		if err != nil || got.String() != want {
			t.Errorf("ParsePrice(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"-0.15", "1e3", "", "0.1.2", strings.Repeat("1", 65)} {
		if got, err := ParsePrice(in); err == nil {
			t.Errorf("ParsePrice(%q) = %s, want an error", in, got)
		}
	}
}

func TestParseDollars(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{"20.00", 20_000_000, ""},
		{"0.15", 150_000, ""},
		{"0", 0, ""},
		{"3", 3_000_000, ""},
		{"0.000001", 1, ""},
		{"007.5", 7_500_000, ""},
		{"9223372036854.775807", 9223372036854775807, ""},
		{"9223372036854.775808", 0, "too large"},
		{"99999999999999999999", 0, "too large"},
		{"0.0000001", 0, "more than 6 decimal places"},
		{"-1.00", 0, "must not be negative"},
		{"", 0, "not a dollar amount"},
		{"1.", 0, "not a dollar amount"},
		{".5", 0, "not a dollar amount"},
		{"1e3", 0, "not a dollar amount"},
		{"+1", 0, "not a dollar amount"},
		{" 1", 0, "not a dollar amount"},
		{"1,50", 0, "not a dollar amount"},
	}
	for _, tt := range tests {
		got, err := ParseDollars(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseDollars(%q) = %d, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDollars(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatMicros(t *testing.T) {
	tests := map[int64]string{
		4:                    "0.000004",
		20_000_000:           "20.000000",
		0:                    "0.000000",
		405:                  "0.000405",
		1_234_567:            "1.234567",
		-5:                   "-0.000005",
		-1_500_000:           "-1.500000",
		9223372036854775807:  "9223372036854.775807",
		-9223372036854775808: "-9223372036854.775808",
	}
	for in, want := range tests {
		if got := FormatMicros(in); got != want {
			t.Errorf("FormatMicros(%d) = %q, want %q", in, got, want)
		}
		if got := string(AppendMicros([]byte("$"), in)); got != "$"+want {
			t.Errorf("AppendMicros($, %d) = %q, want %q", in, got, "$"+want)
		}
		if in >= 0 {
			if back, err := ParseDollars(want); err != nil || back != in {
				t.Errorf("ParseDollars(FormatMicros(%d)) = %d, %v", in, back, err)
			}
		}
	}
}

func price(in, out string) Price {
	return Price{Input: decimal.RequireFromString(in), Output: decimal.RequireFromString(out)}
}

func TestCostMicros(t *testing.T) {
	tests := []struct {
		p       Price
		in, out int64
		want    int64
	}{
		{price("0.15", "0.60"), 1500, 300, 405},                              // 225 + 180, exact
		{price("0.15", "0.60"), 1, 0, 1},                                     // 0.15 rounds up to 1
		{price("0.15", "0.60"), 7, 3, 3},                                     // 1.05 + 1.80 = 2.85 → 3, rounded once (not 2 + 2)
		{price("0.15", "0.60"), 10, 0, 2},                                    // 1.5 → 2
		{price("0.15", "0.60"), 0, 0, 0},                                     // nothing
		{price("2.50", "10.00"), 1_000_000, 1_000_000, 12_500_000},           // $12.50
		{price("0", "0"), 123456, 654321, 0},                                 // free
		{price("0.0000001", "0"), 1, 0, 1},                                   // any precision, rounded up
		{price("0.15", "0.60"), -5, 10, 6},                                   // negative counts as 0
		{price("1000000", "1000000"), 1 << 62, 1 << 62, 9223372036854775807}, // saturates
	}
	for _, tt := range tests {
		// A literal Price takes the decimal path, a prepared one the fast
		// path where it can: both must agree.
		for _, p := range []Price{tt.p, NewPrice(tt.p.Input, tt.p.Output)} {
			if got := p.CostMicros(tt.in, tt.out); got != tt.want {
				t.Errorf("%s/%s × %d/%d = %d micros (fast %v), want %d", p.Input, p.Output, tt.in, tt.out, got, p.fast.ok, tt.want)
			}
		}
	}
	// A prepared price whose fields are changed afterwards is not stale.
	p := NewPrice(decimal.RequireFromString("0.15"), decimal.RequireFromString("0.60"))
	p.Output = decimal.RequireFromString("1.00")
	if got := p.CostMicros(1500, 300); got != 525 {
		t.Errorf("changed price: %d, want 525", got)
	}
	if got := FormatMicros(price("0.15", "0.60").CostMicros(1500, 300)); got != "0.000405" {
		t.Errorf("formatted cost = %q", got)
	}
}

func FuzzCostMicros(f *testing.F) {
	f.Add("0.15", "0.60", int64(1500), int64(300))
	f.Add("0.0000000001", "123456.789", int64(1)<<40, int64(7))
	f.Fuzz(func(t *testing.T, in, out string, a, b int64) {
		pi, err1 := ParsePrice(in)
		po, err2 := ParsePrice(out)
		if err1 != nil || err2 != nil {
			return
		}
		slow := Price{Input: pi, Output: po}.CostMicros(a, b)
		if fast := NewPrice(pi, po).CostMicros(a, b); fast != slow {
			t.Fatalf("%s/%s × %d/%d: fast %d, decimal %d", in, out, a, b, fast, slow)
		}
	})
}

func TestImageCostMicros(t *testing.T) {
	p := Price{Image: decimal.RequireFromString("0.0425"), HasImage: true}
	tests := map[int64]int64{1: 42_500, 3: 127_500, 0: 0, -1: 0}
	for n, want := range tests {
		if got := p.ImageCostMicros(n); got != want {
			t.Errorf("ImageCostMicros(%d) = %d, want %d", n, got, want)
		}
	}
	tiny := Price{Image: decimal.RequireFromString("0.0000001"), HasImage: true}
	if got := tiny.ImageCostMicros(1); got != 1 {
		t.Errorf("tiny image price rounds to %d, want 1", got)
	}
	if got := (Price{}).ImageCostMicros(5); got != 0 {
		t.Errorf("no image price: %d", got)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  bool
	}{
		{"32MiB", 32 << 20, false},
		{"512KiB", 512 << 10, false},
		{"1GiB", 1 << 30, false},
		{"10MB", 10_000_000, false},
		{"1024", 1024, false},
		{"1 KB", 1000, false},
		{"5B", 5, false},
		{"1.5MiB", 0, true},
		{"MiB", 0, true},
		{"32mib", 0, true},
		{"-1", 0, true},
		{"99999999999TiB", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
	for s, want := range map[Size]string{32 << 20: "32MiB", 1500: "1500", 0: "0", 1 << 40: "1TiB"} {
		if got := s.String(); got != want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(s), got, want)
		}
	}
}

func TestParseRedisURL(t *testing.T) {
	tests := []struct {
		in   string
		want RedisTarget
		err  string
	}{
		{in: "redis://localhost:6379/0", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"localhost:6379"}}},
		{in: "redis://localhost", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"localhost:6379"}}},
		{in: "rediss://u:p%40ss@cache.example.com:6380/3?dial_timeout=1s", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"cache.example.com:6380"}, Username: "u", Password: "p@ss", DB: 3, TLS: true}},
		{in: "redis://[::1]:7000", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"[::1]:7000"}}},
		{in: "redis-sentinel://host1:26379,host2:26379/mymaster?db=0", want: RedisTarget{Mode: RedisSentinel, Addrs: []string{"host1:26379", "host2:26379"}, MasterName: "mymaster"}},
		{in: "redis-sentinel://:pw@s1,s2:5000/m?db=2&sentinel_password=sp&tls=true", want: RedisTarget{Mode: RedisSentinel, Addrs: []string{"s1:26379", "s2:5000"}, Password: "pw", MasterName: "m", DB: 2, SentinelPassword: "sp", TLS: true}},
		{in: "redis-cluster://host1:6379,host2:6379", want: RedisTarget{Mode: RedisCluster, Addrs: []string{"host1:6379", "host2:6379"}}},
		{in: "redis-cluster://host1,host2?tls=true", want: RedisTarget{Mode: RedisCluster, Addrs: []string{"host1:6379", "host2:6379"}, TLS: true}},
		{in: "http://localhost:6379", err: `scheme "http"`},
		{in: "localhost:6379", err: "is not a redis://"},
		{in: "redis://a:6379,b:6379", err: "names one host"},
		{in: "redis://localhost/x", err: "not a database number"},
		{in: "redis://localhost:0", err: "bad port"},
		{in: "redis://:secretpw@", err: "empty host"},
		{in: "redis-sentinel://h1,h2", err: "names the master"},
		{in: "redis-sentinel://h1/m?db=x", err: "db="},
		{in: "redis-sentinel://h1/m?pool=3", err: `unknown parameter "pool"`},
		{in: "redis-cluster://h1/2", err: "has no path"},
		{in: "redis-cluster://h1?db=1", err: `unknown parameter "db"`},
		{in: "redis-cluster://h1,,h2", err: "empty host"},
	}
	for _, tt := range tests {
		got, err := ParseRedisURL(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseRedisURL(%q) = %+v, %v; want error %q", tt.in, got, err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "secretpw") {
				t.Errorf("error shows the password: %v", err)
			}
			continue
		}
		tt.want.URL = tt.in
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseRedisURL(%q) =\n %+v, %v\nwant %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits([]byte(`{"task": {"money": {"day": "20.00"}, "requests": {"minute": 100}}, "user": {"tokens": {"hour": 5000, "day": null}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Limit{
		{ScopeTask, UnitRequests, PeriodMinute, 100},
		{ScopeTask, UnitMoney, PeriodDay, 20_000_000},
		{ScopeUser, UnitTokens, PeriodHour, 5000},
	}
	if got := l.List(); !reflect.DeepEqual(got, want) {
		t.Errorf("List() = %+v, want %+v", got, want)
	}
	if l.IsZero() || !l.Has(ScopeUser, UnitTokens, PeriodHour) || l.Has(ScopeUser, UnitTokens, PeriodDay) || l.Has("bogus", UnitTokens, PeriodDay) {
		t.Error("IsZero/Has wrong")
	}
	yl, err := ParseLimits([]byte("task:\n  money: {day: \"20.00\"}\n  requests: {minute: 100}\nuser: {tokens: {hour: 5000}}\n"))
	if err != nil || !reflect.DeepEqual(yl.List(), want) {
		t.Errorf("YAML body: %+v, %v", yl.List(), err)
	}
	if z, err := ParseLimits([]byte(`{}`)); err != nil || !z.IsZero() {
		t.Errorf("{}: %+v, %v", z, err)
	}

	bad := []struct{ body, want string }{
		{`{"task": {"money": {"day": 20}}}`, `task.money.day (line 1): money is a dollar string like "20.00"; an integer is ambiguous (older configs read integers as millionths of a dollar)`},
		{`{"task": {"money": {"day": 20.5}}}`, `task.money.day (line 1): money is a dollar string like "20.00"; a float is inexact`},
		{`{"task": {"money": {"day": "0.0000001"}}}`, `task.money.day (line 1): "0.0000001" has more than 6 decimal places; limits count whole micro-dollars`},
		{"{\n\"user\": {\"tokens\": {\"week\": 5}},\n\"team\": {}}", "user.tokens.week (line 2): unknown field \"week\"\nteam (line 3): unknown field \"team\""},
		{`{"task": {"requests": {"day": -1}}}`, `task.requests.day (line 1): must not be negative, got -1`},
		{`{"task": {"requests": {"day": "10"}}}`, `task.requests.day (line 1): must be an integer, not the string "10"`},
		{`[1, 2]`, `line 1: the limits must be an object with "task" and/or "user", not a list`},
		{`{"task": `, `line 1: bad YAML: did not find expected node content`},
		{``, `the body is empty; send the limits as JSON, like {"task": {"money": {"day": "20.00"}}}`},
	}
	for _, tt := range bad {
		_, err := ParseLimits([]byte(tt.body))
		var es Errors
		if !errors.As(err, &es) || err.Error() != tt.want {
			t.Errorf("ParseLimits(%s):\n got %v\nwant %s", tt.body, err, tt.want)
		}
	}
}

func TestLimitsMergeAndJSON(t *testing.T) {
	base, _ := ParseLimits([]byte(`{"task": {"money": {"day": "20.00", "month": "300.00"}}, "user": {"requests": {"hour": 60}}}`))
	over, _ := ParseLimits([]byte(`{"task": {"money": {"day": "5.50"}}, "user": {"tokens": {"day": 1000}}}`))
	m := base.Merge(over)
	want := []Limit{
		{ScopeTask, UnitMoney, PeriodDay, 5_500_000},
		{ScopeTask, UnitMoney, PeriodMonth, 300_000_000},
		{ScopeUser, UnitRequests, PeriodHour, 60},
		{ScopeUser, UnitTokens, PeriodDay, 1000},
	}
	if got := m.List(); !reflect.DeepEqual(got, want) {
		t.Errorf("Merge = %+v, want %+v", got, want)
	}
	if v, _ := base.Get(ScopeTask, UnitMoney, PeriodDay); v != 20_000_000 {
		t.Errorf("Merge changed its receiver: %d", v)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"task":{"money":{"day":"5.500000","month":"300.000000"}},"user":{"requests":{"hour":60},"tokens":{"day":1000}}}`
	if string(b) != wantJSON {
		t.Errorf("JSON = %s, want %s", b, wantJSON)
	}
	var back Limits
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.List(), want) {
		t.Errorf("round trip: %+v, %v", back.List(), err)
	}
	if err := json.Unmarshal([]byte(`{"task": {"money": {"day": 5}}}`), &back); err == nil {
		t.Error("json.Unmarshal accepted integer money")
	}
}

func TestNoForbiddenDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"gofiber", "fasthttp", "go-redis", "prometheus", "taskgate/"} {
			if strings.Contains(dep, bad) && dep != "taskgate/config" {
				t.Errorf("config depends on %s", dep)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("tasks: [{key: a.b, limits: {task: {money: {day: 1}}}}]"))
	f.Add([]byte("endpoints:\n  - <<: [{name: x}, *y]\n"))
	f.Add([]byte("keys: [{secret: ${X}, secret_sha256: $$}]\nstore: {redis: 'redis-sentinel://a,b/m?db=1'}"))
	f.Add([]byte("body_limit: 99999999999999999999TiB\ntimezone: ../../etc/passwd"))
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	if data, err := os.ReadFile("../examples/taskgate.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, env(map[string]string{"X": "1", "OPENAI_API_KEY": "k"}))
		if err == nil && c == nil {
			t.Fatal("nil config without error")
		}
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a non-empty Errors: %T %v", err, err)
			}
		}
		_, _ = ParseLimits(data)
	})
}
