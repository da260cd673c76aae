package tokenizer

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the package's production imports to the standard library
// and tiktoken-go-loader's embedded assets: tiktoken-go and its regex engine
// are test-only oracles.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if !strings.Contains(strings.SplitN(pkg, "/", 2)[0], ".") {
			continue // standard library
		}
		if pkg != "github.com/pkoukk/tiktoken-go-loader/assets" {
			t.Errorf("tokenizer imports %s", pkg)
		}
	}
}
