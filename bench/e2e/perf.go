package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// perfLine is one symbol of a perf report.
type perfLine struct {
	self, children float64 // percent of samples; children only in --children reports
	sym            string
	kernel         bool
}

// perfLineRE matches "  12.34%  [.] sym" and "  45.00%   0.10%  [k] sym",
// either maybe followed by more columns after two or more spaces.
var perfLineRE = regexp.MustCompile(`^\s*([\d.]+)%\s+(?:([\d.]+)%\s+)?\[(.)\]\s+(\S.*?)(?:\s{2,}.*)?\s*$`)

// parsePerf reads the lines of `perf report --stdio -g none --sort symbol`.
// In a --children report the first percentage is the cumulative one.
func parsePerf(text string) []perfLine {
	var out []perfLine
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		m := perfLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a, _ := strconv.ParseFloat(m[1], 64)
		l := perfLine{self: a, sym: m[4], kernel: m[3] == "k"}
		if m[2] != "" {
			b, _ := strconv.ParseFloat(m[2], 64)
			l.children, l.self = a, b
		}
		out = append(out, l)
	}
	return out
}

// symPackage is the Go package of a symbol ("runtime", "taskgate/proxy",
// "github.com/gofiber/fiber/v2"); kernel symbols are "kernel".
func symPackage(sym string, kernel bool) string {
	if kernel {
		return "kernel"
	}
	if strings.HasPrefix(sym, "0x") {
		return "unknown"
	}
	head := sym
	if i := strings.IndexAny(head, "(["); i >= 0 {
		head = head[:i]
	}
	slash := strings.LastIndexByte(head, '/')
	if dot := strings.IndexByte(head[slash+1:], '.'); dot >= 0 {
		return sym[:slash+1+dot]
	}
	return head
}

// byPackage sums self percentages by package, largest first.
func byPackage(lines []perfLine) []perfLine {
	sum := map[string]float64{}
	for _, l := range lines {
		sum[symPackage(l.sym, l.kernel)] += l.self
	}
	var out []perfLine
	for k, v := range sum {
		out = append(out, perfLine{self: v, sym: k})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].self != out[j].self {
			return out[i].self > out[j].self
		}
		return out[i].sym < out[j].sym
	})
	return out
}

// syscallNames are the system calls counted one by one in a profile; the
// rest are summed as "other".
var syscallNames = []string{"read", "write", "writev", "epoll_pwait", "futex", "nanosleep", "sched_yield", "tgkill", "getpid", "madvise", "mmap"}

// parsePerfStat reads `perf stat -x ,` output: event name → count.
func parsePerfStat(text string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(f[0]), 10, 64)
		if err != nil {
			continue
		}
		out[strings.TrimSpace(f[2])] = n
	}
	return out
}

// perfRun records gateway t with perf during one saturation run of kind
// and returns a markdown summary: system calls per call, packages and
// functions by self time, and taskgate's functions by cumulative time.
func (e *env) perfRun(perf string, t *target, kind string, body []byte) (string, error) {
	name := t.name + "-" + kind
	data := filepath.Join(e.tmp, "perf-"+name+".data")
	statOut := filepath.Join(e.tmp, "perf-"+name+".stat")
	dur := max(e.o.dur, 5*time.Second)
	secs := fmt.Sprintf("%.1f", dur.Seconds()+0.3)
	pid := strconv.Itoa(t.gw.pid())
	rec, err := startProc("perf record", filepath.Join(e.tmp, "perf-"+name+".log"), perf,
		"record", "-F", "999", "-g", "-p", pid, "-o", data, "--", "sleep", secs)
	if err != nil {
		return "", err
	}
	events := []string{"raw_syscalls:sys_enter", "context-switches"}
	for _, n := range syscallNames {
		events = append(events, "syscalls:sys_enter_"+n)
	}
	stat, err := startProc("perf stat", filepath.Join(e.tmp, "perf-"+name+".stat.log"), perf,
		"stat", "-x", ",", "-o", statOut, "-e", strings.Join(events, ","), "-p", pid, "--", "sleep", secs)
	if err != nil {
		return "", err
	}
	time.Sleep(150 * time.Millisecond)
	res, err := closedLoop(t, body, kind == "stream", e.o.conns, dur, nil)
	if err != nil {
		return "", err
	}
	for _, p := range []*proc{rec, stat} {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.kill()
			return "", fmt.Errorf("%s did not end", p.name)
		}
		p.log.Close()
	}
	report := func(children bool) (string, error) {
		args := []string{"report", "-i", data, "--stdio", "-g", "none", "--sort", "symbol", "--percent-limit", "0"}
		if children {
			args = append(args, "--children")
		} else {
			args = append(args, "--no-children")
		}
		out, err := exec.Command(perf, args...).Output()
		if err != nil {
			return "", fmt.Errorf("perf report: %w", err)
		}
		return string(out), nil
	}
	selfText, err := report(false)
	if err != nil {
		return "", err
	}
	cumText, err := report(true)
	if err != nil {
		return "", err
	}
	self := parsePerf(selfText)
	if len(self) == 0 {
		return "", fmt.Errorf("perf report: no samples (see %s)", rec.log.Name())
	}
	var b strings.Builder
	store := map[string]string{"redis": "Redis store", "memory": "In-process store", "bare": "Bare proxy (reference)"}[t.name]
	what := map[string]string{"plain": "plain", "stream": "streamed"}[kind]
	fmt.Fprintf(&b, "\n**%s, %s chat**, saturation (%d connections, %s, %.0f calls/s during the profile, %.3f ms gateway CPU per call).",
		store, what, e.o.conns, dur, res.throughput(), res.cpuPerCall())
	if st, err := os.ReadFile(statOut); err == nil && res.calls > 0 {
		counts := parsePerfStat(string(st))
		if total, ok := counts["raw_syscalls:sys_enter"]; ok {
			n := float64(res.calls)
			fmt.Fprintf(&b, " System calls per call: %.1f (", float64(total)/n)
			rest := total
			var parts []string
			for _, name := range syscallNames {
				c := counts["syscalls:sys_enter_"+name]
				rest -= c
				if c > 0 {
					parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(c)/n))
				}
			}
			parts = append(parts, fmt.Sprintf("other %.2f", float64(rest)/n))
			b.WriteString(strings.Join(parts, ", ") + ").")
		}
		if cs, ok := counts["context-switches"]; ok {
			fmt.Fprintf(&b, " Context switches per call: %.2f.", float64(cs)/float64(res.calls))
		}
	}
	b.WriteString("\n\n| self time by package | % | hottest functions (self) | % |\n| --- | --- | --- | --- |\n")
	pk := byPackage(self)
	for i := range 15 {
		var l, r string
		if i < len(pk) {
			l = fmt.Sprintf("%s | %.1f", pk[i].sym, pk[i].self)
		} else {
			l = " | "
		}
		if i < len(self) {
			r = fmt.Sprintf("`%s` | %.1f", short(self[i].sym), self[i].self)
		} else {
			r = " | "
		}
		fmt.Fprintf(&b, "| %s | %s |\n", l, r)
	}
	var cum []perfLine
	for _, l := range parsePerf(cumText) {
		if strings.HasPrefix(symPackage(l.sym, l.kernel), "taskgate/") {
			cum = append(cum, l)
		}
	}
	if len(cum) > 0 {
		b.WriteString("\ntaskgate functions by cumulative time (with what they call): ")
		var parts []string
		for i := 0; i < len(cum) && i < 18; i++ {
			parts = append(parts, fmt.Sprintf("`%s` %.1f%%", short(cum[i].sym), cum[i].children))
		}
		b.WriteString(strings.Join(parts, ", "))
		b.WriteString(".\n")
	}
	return b.String(), nil
}

// short drops the module path of a symbol, keeping the package's last
// element ("github.com/valyala/fasthttp.(*Server).serveConn" →
// "fasthttp.(*Server).serveConn", "github.com/gofiber/fiber/v2.(*Ctx).Next"
// → "fiber/v2.(*Ctx).Next"); long names are cut.
func short(sym string) string {
	pkg := symPackage(sym, false)
	rest := strings.TrimPrefix(sym, pkg)
	parts := strings.Split(pkg, "/")
	name := parts[len(parts)-1]
	if len(parts) > 1 && len(name) > 1 && name[0] == 'v' && name[1] >= '0' && name[1] <= '9' {
		name = parts[len(parts)-2] + "/" + name
	}
	out := name + rest
	if len(out) > 70 {
		out = out[:67] + "..."
	}
	return out
}
