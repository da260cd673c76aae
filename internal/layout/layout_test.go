// Package layout holds a test of the module's package layout: dependencies
// point one way (config ← tasks ← trim, limits, guard ← proxy ← cmd/gateway),
// and the lower packages stay free of the HTTP stack, Redis and Prometheus.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

func deps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	m := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		m[l] = true
	}
	return m
}

func TestDependenciesPointOneWay(t *testing.T) {
	heavy := []string{"github.com/gofiber/fiber/v2", "github.com/valyala/fasthttp", "github.com/redis/go-redis/v9", "github.com/prometheus/client_golang/prometheus"}
	cases := []struct {
		pkg       string
		forbidden []string
	}{
		{"taskgate/config", append([]string{"taskgate/tasks", "taskgate/trim", "taskgate/limits", "taskgate/guard", "taskgate/proxy"}, heavy...)},
		{"taskgate/tasks", append([]string{"taskgate/trim", "taskgate/limits", "taskgate/guard", "taskgate/proxy"}, heavy...)},
		{"taskgate/trim", append([]string{"taskgate/limits", "taskgate/guard", "taskgate/proxy"}, heavy...)},
		{"taskgate/guard", append([]string{"taskgate/trim", "taskgate/limits", "taskgate/proxy"}, heavy...)},
		{"taskgate/limits", []string{"taskgate/trim", "taskgate/guard", "taskgate/proxy", "github.com/gofiber/fiber/v2", "github.com/valyala/fasthttp", "github.com/prometheus/client_golang/prometheus"}},
	}
	for _, tc := range cases {
		d := deps(t, tc.pkg)
		for _, f := range tc.forbidden {
			if d[f] {
				t.Errorf("%s depends on %s", tc.pkg, f)
			}
		}
	}
}

func TestNothingImportsProxy(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "taskgate/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "taskgate/cmd/gateway" || f[0] == "taskgate/proxy" {
			continue
		}
		for _, imp := range f[1:] {
			if imp == "taskgate/proxy" {
				t.Errorf("%s imports taskgate/proxy", f[0])
			}
		}
	}
}
