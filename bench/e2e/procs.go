package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process the benchmark started and must stop.
type proc struct {
	name  string
	cmd   *exec.Cmd
	log   *os.File
	done  chan struct{}
	admin string // a gateway's admin address (host:port)
}

var (
	procsMu sync.Mutex
	procs   []*proc
)

// startProc starts bin with args, its stdout and stderr going to logPath.
// The child gets SIGKILL if the benchmark dies first.
func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	return startProcEnv(name, logPath, nil, bin, args...)
}

// startProcEnv is startProc with env added to the benchmark's environment.
func startProcEnv(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: log file: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p, nil
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive reports whether the process is still running.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to grace, then kills. Safe to call twice.
func (p *proc) stop(grace time.Duration) {
	if p.alive() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.log.Close()
}

// kill stops the process at once.
func (p *proc) kill() {
	if p.alive() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
}

// stopAll stops every process started, newest first.
func stopAll() {
	procsMu.Lock()
	ps := procs
	procs = nil
	procsMu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].stop(3 * time.Second)
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitTCP polls until addr accepts a connection or p exits or timeout passes.
func waitTCP(p *proc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p != nil && !p.alive() {
			return fmt.Errorf("wait for %s: %s exited (see %s)", addr, p.name, p.log.Name())
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("wait for %s: not listening after %s", addr, timeout)
}

// waitHTTP polls url until it answers 200 or p exits or timeout passes.
func waitHTTP(p *proc, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		if p != nil && !p.alive() {
			return fmt.Errorf("wait for %s: %s exited (see %s)", url, p.name, p.log.Name())
		}
		res, err := client.Get(url)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("wait for %s: no 200 after %s", url, timeout)
}

// goStats scrapes the Go runtime gauges of a gateway's /metrics
// (go_goroutines, go_memstats_*): metric name → value.
func goStats(admin string) (map[string]float64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	res, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s/metrics: %w", admin, err)
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "go_") || strings.ContainsAny(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s/metrics: %w", admin, err)
	}
	return out, nil
}

// clockTicks is the kernel's clock ticks per second (getconf CLK_TCK, else 100).
var clockTicks = sync.OnceValue(func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100
})

// parseStatCPU returns utime+stime (clock ticks) from the text of /proc/PID/stat.
func parseStatCPU(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("parse /proc stat: no ')' after the command name")
	}
	// After "pid (comm) " come state (field 3) … utime (14), stime (15).
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc stat: %d fields after the command name, want at least 13", len(f))
	}
	u, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse /proc stat utime: %w", err)
	}
	s, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse /proc stat stime: %w", err)
	}
	return u + s, nil
}

// cpuSeconds is the CPU time (user + system) process pid has used so far.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read cpu time of %d: %w", pid, err)
	}
	t, err := parseStatCPU(string(b))
	if err != nil {
		return 0, err
	}
	return float64(t) / clockTicks(), nil
}

// memInfo is a process's memory as /proc/PID/status tells it, in KiB.
type memInfo struct {
	RSS, HWM int64 // VmRSS, VmHWM
}

// parseStatus reads VmRSS and VmHWM from the text of /proc/PID/status.
func parseStatus(status string) (memInfo, error) {
	var m memInfo
	var seen int
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return m, fmt.Errorf("parse /proc status: %s has no value", k)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("parse /proc status %s: %w", k, err)
		}
		if k == "VmRSS" {
			m.RSS = n
		} else {
			m.HWM = n
		}
		seen++
	}
	if seen < 2 {
		return m, errors.New("parse /proc status: VmRSS or VmHWM missing")
	}
	return m, nil
}

// memory reads the memory of process pid.
func memory(pid int) (memInfo, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return memInfo{}, fmt.Errorf("read memory of %d: %w", pid, err)
	}
	return parseStatus(string(b))
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module; run from the taskgate tree")
	}
	return filepath.Dir(mod), nil
}

// buildGateway builds ./cmd/gateway into dir and returns the binary's path.
func buildGateway(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "gateway")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/gateway")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the gateway: %w\n%s", err, out.String())
	}
	return bin, nil
}

// machine describes this machine for the report: cores, CPU model, memory.
func machine() string {
	cpus := 0
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "processor":
				cpus++
			case "model name":
				model = strings.TrimSpace(v)
			}
		}
	}
	mem := "unknown memory"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
						mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
					}
				}
			}
		}
	}
	return fmt.Sprintf("%d CPUs (nproc), %s, %s memory", cpus, model, mem)
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
