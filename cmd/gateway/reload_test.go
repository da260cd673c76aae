package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"taskgate/internal/fakeupstream"
)

// TestReload checks, on the real process, that a changed config file is
// picked up without a restart, that SIGHUP reloads, that a bad file keeps
// the running config (logged and counted), and that POST /admin/reload
// answers 400 with the errors of a bad file and 200 for a good one.
func TestReload(t *testing.T) {
	t.Parallel()
	up, err := fakeupstream.New(fakeupstream.Options{APIKey: upKey})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	path := filepath.Join(t.TempDir(), "taskgate.yaml")
	good := procConfig(up.URL(), "", "", simpleTask("proc.a", ""))
	writeFile(t, path, good)
	p := startGateway(t, path)

	if st, body := p.call("proc.a", ""); st != 200 {
		t.Fatalf("proc.a: %d %s", st, body)
	}
	// The call's journal line (written by hand, not by slog) is one JSON
	// line on stderr among slog's own.
	waitUntil(t, "the call's journal line", 5*time.Second, func() bool { return journalLine(p.log.String(), "proc.a") != nil })
	if line := journalLine(p.log.String(), "proc.a"); line["level"] != "INFO" || line["status"] != 200.0 || line["time"] == nil || line["cost"] == nil {
		t.Errorf("journal line %v", line)
	}
	if st, _ := p.call("proc.b", ""); st != 404 {
		t.Fatalf("proc.b before it exists: %d", st)
	}

	// A changed file: the new task is callable without a restart.
	withB := procConfig(up.URL(), "", "", simpleTask("proc.a", ""), simpleTask("proc.b", ""))
	writeFile(t, path, withB)
	waitUntil(t, "proc.b after the file changed", 5*time.Second, func() bool {
		st, _ := p.call("proc.b", "")
		return st == 200
	})
	waitUntil(t, "the reload to be counted", 2*time.Second, func() bool {
		return p.metric("taskgate_config_reloads_total", "result", "success") >= 1
	})

	// SIGHUP reloads the (unchanged) file.
	ok := p.metric("taskgate_config_reloads_total", "result", "success")
	p.signal(syscall.SIGHUP)
	waitUntil(t, "a reload on SIGHUP", 5*time.Second, func() bool {
		return p.metric("taskgate_config_reloads_total", "result", "success") > ok
	})

	// A bad file keeps the running config; the failure is counted.
	bad := strings.Replace(withB, `price: {input: "0.15", output: "0.60"}`, `price: {input: 15, output: "0.60"}`, 1)
	writeFile(t, path, bad)
	waitUntil(t, "the bad reload to be counted", 5*time.Second, func() bool {
		return p.metric("taskgate_config_reloads_total", "result", "error") >= 1
	})
	for _, task := range []string{"proc.a", "proc.b"} {
		if st, body := p.call(task, ""); st != 200 {
			t.Errorf("%s after a bad reload: %d %s", task, st, body)
		}
	}
	// Log lines reach stderr within the log writer's flush delay.
	waitUntil(t, "the bad reload to be logged", 5*time.Second, func() bool {
		return strings.Contains(p.log.String(), "config reload failed")
	})

	// POST /admin/reload: 400 with the errors, then 200.
	st, body := p.adminDo("POST", "/admin/reload", "")
	if st != 400 || !strings.Contains(body, "price.input") {
		t.Errorf("POST /admin/reload with a bad file: %d %s", st, body)
	}
	withC := procConfig(up.URL(), "", "", simpleTask("proc.a", ""), simpleTask("proc.c", ""))
	writeFile(t, path, withC)
	if st, body := p.adminDo("POST", "/admin/reload", ""); st != 200 {
		t.Fatalf("POST /admin/reload with a good file: %d %s", st, body)
	}
	if st, body := p.call("proc.c", ""); st != 200 {
		t.Errorf("proc.c right after POST /admin/reload: %d %s", st, body)
	}
	waitUntil(t, "proc.b to be gone", 5*time.Second, func() bool {
		st, _ := p.call("proc.b", "")
		return st == 404
	})

	p.signal(syscall.SIGTERM)
	if code := p.waitExit(15 * time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// TestReloadKubernetesConfigMap updates the config the way the kubelet
// updates a mounted ConfigMap: the file is a symlink through "..data" to a
// timestamped directory, and an update swaps "..data" atomically.
func TestReloadKubernetesConfigMap(t *testing.T) {
	t.Parallel()
	up, err := fakeupstream.New(fakeupstream.Options{APIKey: upKey})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	dir := t.TempDir()
	version := func(name, content string) {
		t.Helper()
		vdir := filepath.Join(dir, name)
		if err := os.Mkdir(vdir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(vdir, "taskgate.yaml"), content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_11_30_01", procConfig(up.URL(), "", "", simpleTask("proc.a", "")))
	path := filepath.Join(dir, "taskgate.yaml")
	if err := os.Symlink(filepath.Join("..data", "taskgate.yaml"), path); err != nil {
		t.Fatal(err)
	}
	p := startGateway(t, path)
	if st, _ := p.call("proc.b", ""); st != 404 {
		t.Fatalf("proc.b before the update: %d", st)
	}
	version("..2026_11_30_02", procConfig(up.URL(), "", "", simpleTask("proc.a", ""), simpleTask("proc.b", "")))
	waitUntil(t, "proc.b after the ConfigMap update", 5*time.Second, func() bool {
		st, _ := p.call("proc.b", "")
		return st == 200
	})
}

// journalLine is the first journal line ("msg":"call") for task in a
// gateway's log, decoded; nil if there is none. Every line must be JSON.
func journalLine(log, task string) map[string]any {
	for _, l := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "call" && m["task"] == task {
			return m
		}
	}
	return nil
}
