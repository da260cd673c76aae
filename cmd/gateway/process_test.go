package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The process-level tests run the real gateway binary, built once per test
// run (with -race when the tests run with it), against fake upstreams and
// real redis-servers, over real sockets.

var (
	buildOnce  sync.Once
	buildErr   error
	buildDir   string
	gatewayBin string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds the gateway once per test run and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "taskgate-bin")
		if buildErr != nil {
			return
		}
		gatewayBin = filepath.Join(buildDir, "gateway")
		args := []string{"build", "-o", gatewayBin}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, ".")
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return gatewayBin
}

// syncBuffer is a bytes.Buffer safe for one writer and many readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is one running gateway process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	client string // http://host:port
	admin  string
	log    *syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // its Wait error, once done
}

// startGateway runs the gateway with a config file and waits until it
// listens and /readyz answers 200.
func startGateway(t *testing.T, cfgPath string) *proc {
	t.Helper()
	p := &proc{t: t, log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary(t), "-config", cfgPath)
	p.cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.log.Write([]byte(line + "\n"))
			if sent || !strings.Contains(line, `"msg":"serving"`) {
				continue
			}
			var m struct {
				Listen      string `json:"listen"`
				AdminListen string `json:"admin_listen"`
			}
			if json.Unmarshal([]byte(line), &m) == nil {
				addrs <- [2]string{m.Listen, m.AdminListen}
				sent = true
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", tail(p.log.String(), 4000))
		}
		if strings.Contains(p.log.String(), "WARNING: DATA RACE") {
			t.Errorf("the gateway process reported a data race:\n%s", tail(p.log.String(), 8000))
		}
	})
	select {
	case a := <-addrs:
		p.client, p.admin = "http://"+a[0], "http://"+a[1]
	case <-p.done:
		t.Fatalf("gateway exited before serving: %v\n%s", p.err, p.log.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("gateway did not start within 20s:\n%s", p.log.String())
	}
	waitUntil(t, "/readyz 200", 10*time.Second, func() bool { return p.ready() == 200 })
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// ready is the status of /readyz (0 when it cannot be reached).
func (p *proc) ready() int {
	resp, err := http.Get(p.admin + "/readyz")
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// call posts a chat call for task (and user, if not empty); it returns the
// status and body.
func (p *proc) call(task, user string) (int, string) {
	p.t.Helper()
	req, _ := http.NewRequest("POST", p.client+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+task+`","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+clientKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Taskgate-Task", task)
	if user != "" {
		req.Header.Set("X-Taskgate-User", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("call %s: %v", task, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// adminDo calls the admin API with the token.
func (p *proc) adminDo(method, path, body string) (int, string) {
	p.t.Helper()
	req, _ := http.NewRequest(method, p.admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric sums a metric's samples whose labels include every given pair.
func (p *proc) metric(name string, labels ...string) float64 {
	p.t.Helper()
	resp, err := http.Get(p.admin + "/metrics")
	if err != nil {
		p.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// waitExit waits for the process to exit and returns its exit code.
func (p *proc) waitExit(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("gateway did not exit within %v", within)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	p.t.Fatalf("wait: %v", p.err)
	return -1
}

func (p *proc) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// waitUntil polls cond every 10ms until it holds or within passes.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const (
	clientKey   = "sk-proc-client"
	adminSecret = "proc-admin-secret"
	upKey       = "sk-proc-upstream"
)

// procConfig renders a gateway config: loopback listeners on free ports,
// the store (redisURL may be ""), one endpoint and the given task entries
// (YAML list items, indented by two spaces).
func procConfig(upstreamURL, redisURL, prefix string, tasks ...string) string {
	var b strings.Builder
	b.WriteString(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
admin_token: ` + adminSecret + `
shutdown_grace: 10s
store:
  redis: "` + redisURL + `"
  key_prefix: "` + prefix + `"
  on_error: fail_closed
endpoints:
  - name: fake
    base_url: ` + upstreamURL + `
    api_key: ` + upKey + `
    model: fake-mini
    context_window: 100000
    max_output_tokens: 1000
    price: {input: "0.15", output: "0.60"}
    tokenizer: estimate
    timeout: 20s
keys:
  - name: all
    secret: ` + clientKey + `
    tasks: ["*"]
tasks:
`)
	for _, t := range tasks {
		b.WriteString(t)
	}
	return b.String()
}

// simpleTask is a task entry on the fake endpoint with optional limits YAML.
func simpleTask(key, limits string) string {
	s := "  - key: " + key + "\n    endpoints: [fake]\n    typical_tokens: [10, 10]\n"
	if limits != "" {
		s += "    limits: " + limits + "\n"
	}
	return s
}

// writeFile replaces a file's content the way an editor might (in place).
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// streamLines reads an SSE body line by line, sending each data payload.
func streamLines(ctx context.Context, r io.Reader, out chan<- string) {
	defer close(out)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			select {
			case out <- d:
			case <-ctx.Done():
				return
			}
		}
	}
}
