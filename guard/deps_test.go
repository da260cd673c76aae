package guard

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps guard light: no HTTP framework, Redis or
// Prometheus, and never the proxy package (DESIGN.md §9).
func TestDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"gofiber", "fasthttp", "go-redis", "prometheus", "taskgate/proxy", "taskgate/limits", "taskgate/trim"} {
			if strings.Contains(dep, banned) {
				t.Errorf("guard depends on %s", dep)
			}
		}
	}
}
