package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckExampleConfig(t *testing.T) {
	for _, v := range []string{"OPENAI_API_KEY", "TASKGATE_ADMIN_TOKEN", "INVENTORY_APP_KEY", "SUPPORT_DESK_KEY"} {
		t.Setenv(v, "dummy-"+strings.ToLower(v))
	}
	t.Setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
	var out, errOut bytes.Buffer
	if code := check([]string{"-config", "../../examples/taskgate.yaml"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"task warehouse.inventory_photo", "endpoint openai-mini", "typical call (1500 in, 300 out) costs $0.000405"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCheckBadConfigPrintsEveryError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := `
endpoints:
  - name: e
    base_url: http://x/v1
    model: m
    context_window: 1000
    price: {input: 1, output: "0.5"}
tasks:
  - key: notdotted
    endpoints: [missing]
keys: []
`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := check([]string{"-config", path}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	msg := errOut.String()
	for _, want := range []string{"endpoints[0].price.input", "tasks[0].key", "tasks[0].endpoints"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors lack %q:\n%s", want, msg)
		}
	}
}
