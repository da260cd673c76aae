package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"taskgate/config"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       int64
		err        bool
	}{
		{"plain", "1234 (gateway) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 8 0 100 0 0", 287, false},
		{"spaces and parens in comm", "77 (a (b) c) R 1 77 77 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 1 0 0", 11, false},
		{"no paren", "77 gateway R 1", 0, true},
		{"short", "77 (x) R 1 2 3", 0, true},
		{"not a number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 3 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU(tc.stat)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         memInfo
		err          bool
	}{
		{"both", "Name:\tgateway\nVmHWM:\t   61234 kB\nVmRSS:\t   50000 kB\nThreads:\t8\n", memInfo{RSS: 50000, HWM: 61234}, false},
		{"missing HWM", "VmRSS:\t 1 kB\n", memInfo{RSS: 1}, true},
		{"bad number", "VmRSS:\t x kB\nVmHWM:\t 2 kB\n", memInfo{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatus(tc.status)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !tc.err && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseInfoAndSub(t *testing.T) {
	before, err := parseInfo("# Stats\r\ntotal_commands_processed:100\r\ntotal_reads_processed:50\r\n# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5,usec_per_call=0.5,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=4,usec=1\r\n")
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseInfo("total_commands_processed:162\ntotal_reads_processed:72\ncmdstat_evalsha:calls=30,usec=9\ncmdstat_eval:calls=1,usec=9\ncmdstat_hincrby:calls=40,usec=9\ncmdstat_info:calls=6,usec=1\n")
	if err != nil {
		t.Fatal(err)
	}
	d := after.sub(before)
	for _, tc := range []struct {
		name      string
		got, want int64
	}{
		{"commands", d.commands, 60},
		{"reads", d.reads, 20},
		{"scripts", d.scripts(), 21},
		{"hincrby", d.calls["hincrby"], 40},
		{"info left out", d.calls["info"], 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if got, want := d.perCall(10), "hincrby 4.00, evalsha 2.00, eval 0.10"; got != want {
		t.Errorf("perCall = %q, want %q", got, want)
	}
	if _, err := parseInfo("cmdstat_get:calls=1\n"); err == nil {
		t.Error("parseInfo without totals: no error")
	}
	if _, err := parseInfo("total_commands_processed:x\ntotal_reads_processed:1\n"); err == nil {
		t.Error("parseInfo with a bad total: no error")
	}
}

func TestPercentileAndMedian(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := pct(ds, tc.p); got != tc.want {
			t.Errorf("pct(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := pct(nil, 50); got != 0 {
		t.Errorf("pct(nil) = %v", got)
	}
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestReplaceSection(t *testing.T) {
	old := "# Performance\n\n## Tokenizer\n\nfast.\n\n## End to end\n\nold table\n\n### Findings\n\nthe hot spot is X.\n\n### History\n\n- run 1\n- run 0\n\n## Other\n\nkept.\n"
	got := replaceSection(old, "new table\n", "- run 2")
	for _, want := range []string{
		"## Tokenizer\n\nfast.\n\n## End to end\n\n",
		"new table\n\n### Findings\n\nthe hot spot is X.\n\n### History\n\n" + historyLegend + "\n\n- run 2\n- run 1\n- run 0\n",
		"\n## Other\n\nkept.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old table") {
		t.Errorf("old table kept:\n%s", got)
	}
	if n := strings.Count(got, sectionTitle); n != 1 {
		t.Errorf("%d sections", n)
	}

	fresh := replaceSection("# Performance\n", "table\n", "- run 1")
	if !strings.HasPrefix(fresh, "# Performance\n\n## End to end\n\n") || !strings.HasSuffix(fresh, "### History\n\n"+historyLegend+"\n\n- run 1\n") {
		t.Errorf("appended section:\n%s", fresh)
	}

	var hist string
	doc := "# P\n"
	for i := range 20 {
		hist = "- run " + string(rune('a'+i))
		doc = replaceSection(doc, "t\n", hist)
	}
	if n := strings.Count(doc, "\n- run "); n != 12 {
		t.Errorf("history keeps %d lines, want 12", n)
	}
}

func TestPerfParsing(t *testing.T) {
	self := parsePerf("# Overhead  Symbol\n#\n    12.50%  [k] do_syscall_64\n     7.25%  [.] runtime.mallocgc\n     3.00%  [.] github.com/gofiber/fiber/v2.(*Ctx).Next\n     2.00%  [.] taskgate/proxy.(*Server).chat\n     1.00%  [.] 0x000000000045a1b2\n")
	if len(self) != 5 {
		t.Fatalf("parsed %d lines, want 5: %+v", len(self), self)
	}
	if self[0].self != 12.5 || !self[0].kernel || self[1].sym != "runtime.mallocgc" {
		t.Errorf("parsed %+v", self[:2])
	}
	padded := parsePerf("    28.57%  [k] pvm_irq_enable                                  -      -            \n     0.91%  [.] sync/atomic.(*Pointer[go.shape.struct { a int }]).Load      -      -  \n")
	if len(padded) != 2 || padded[0].sym != "pvm_irq_enable" || padded[1].sym != "sync/atomic.(*Pointer[go.shape.struct { a int }]).Load" {
		t.Errorf("padded report parsed %+v", padded)
	}
	cum := parsePerf("    45.00%     0.10%  [.] taskgate/proxy.(*Server).chat\n")
	if len(cum) != 1 || cum[0].children != 45 || cum[0].self != 0.1 {
		t.Errorf("children report parsed %+v", cum)
	}
	pk := byPackage(self)
	if pk[0].sym != "kernel" || pk[1].sym != "runtime" {
		t.Errorf("byPackage = %+v", pk)
	}
	for _, tc := range []struct {
		sym, pkg, short string
	}{
		{"runtime.mallocgc", "runtime", "runtime.mallocgc"},
		{"github.com/gofiber/fiber/v2.(*Ctx).Next", "github.com/gofiber/fiber/v2", "fiber/v2.(*Ctx).Next"},
		{"github.com/valyala/fasthttp.(*HostClient).Do", "github.com/valyala/fasthttp", "fasthttp.(*HostClient).Do"},
		{"taskgate/limits.(*RedisStore).Reserve", "taskgate/limits", "limits.(*RedisStore).Reserve"},
		{"sync/atomic.(*Pointer[go.shape.struct { a/b.c }]).Load", "sync/atomic", "atomic.(*Pointer[go.shape.struct { a/b.c }]).Load"},
		{"0x000000000045a1b2", "unknown", "unknown0x000000000045a1b2"},
	} {
		if got := symPackage(tc.sym, false); got != tc.pkg {
			t.Errorf("symPackage(%q) = %q, want %q", tc.sym, got, tc.pkg)
		}
		if tc.pkg != "unknown" {
			if got := short(tc.sym); got != tc.short {
				t.Errorf("short(%q) = %q, want %q", tc.sym, got, tc.short)
			}
		}
	}
}

func TestParsePerfStat(t *testing.T) {
	got := parsePerfStat("# started on Mon\n\n123456,,raw_syscalls:sys_enter,5000,100.00,,\n789,,syscalls:sys_enter_write,5000,100.00,,\n<not counted>,,syscalls:sys_enter_futex,0,0.00,,\n")
	if got["raw_syscalls:sys_enter"] != 123456 || got["syscalls:sys_enter_write"] != 789 {
		t.Errorf("parsed %v", got)
	}
	if _, ok := got["syscalls:sys_enter_futex"]; ok {
		t.Errorf("not-counted event parsed: %v", got)
	}
}

func TestProse(t *testing.T) {
	a, b := prose(1, 100_000), prose(2, 100_000)
	if a == b {
		t.Error("two seeds gave the same prose")
	}
	if a != prose(1, 100_000) {
		t.Error("prose is not deterministic")
	}
	if len(a) < 100_000 || len(a) > 100_300 {
		t.Errorf("len = %d, want about 100000", len(a))
	}
}

// TestGatewayConfig checks that the benchmark's config loads in the
// gateway's own config package, with both stores and the estimate variant.
func TestGatewayConfig(t *testing.T) {
	for _, tc := range []struct {
		name     string
		redis    string
		estimate bool
	}{{"redis", "redis://127.0.0.1:6379/0", false}, {"memory", "", false}, {"estimate", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(gatewayConfig(18080, 19090, tc.redis, "http://127.0.0.1:1/v1", tc.estimate)), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Store.Redis != tc.redis || len(cfg.Tasks) != 4 || len(cfg.Endpoints) != 4 {
				t.Errorf("store %q, %d tasks, %d endpoints", cfg.Store.Redis, len(cfg.Tasks), len(cfg.Endpoints))
			}
			for _, e := range cfg.Endpoints {
				if (e.Tokenizer == "estimate") != tc.estimate {
					t.Errorf("endpoint %s tokenizer %s", e.Name, e.Tokenizer)
				}
			}
			if len(cfg.Tasks[0].Limits.List()) != 7 {
				t.Errorf("limits %+v", cfg.Tasks[0].Limits.List())
			}
		})
	}
}

func TestFigureMet(t *testing.T) {
	for _, tc := range []struct {
		f    figure
		v    float64
		want bool
	}{
		{figure{cmp: ">=", target: 0.45}, 0.45, true},
		{figure{cmp: ">=", target: 0.45}, 0.44, false},
		{figure{cmp: "<=", target: 0.25}, 0.3, false},
		{figure{cmp: "=", target: 2}, 2.01, true},
		{figure{cmp: "=", target: 2}, 3, false},
	} {
		if got := tc.f.met(tc.v); got != tc.want {
			t.Errorf("%s %v with %v: %v, want %v", tc.f.cmp, tc.f.target, tc.v, got, tc.want)
		}
	}
	if got := (figure{cmp: "<=", target: 0.25, unit: "ms", prec: 3}).targetText(); got != "≤ 0.25 ms" {
		t.Errorf("targetText = %q", got)
	}
}

func TestCallgrindTotal(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, text string
		want       int64
		ok         bool
	}{
		{"complete", "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 614281451\n\nfn=(1) main\n3 17\n\ntotals: 614281479\n", 614281479, true},
		{"still being written", "version: 1\nevents: Ir\nsummary: 614281451\n\nfn=(1) main\n3 17\n", 0, false},
		{"empty totals", "totals:\n", 0, false},
		{"not a number", "totals: many\n", 0, false},
	}
	for _, tt := range tests {
		path := filepath.Join(dir, tt.name)
		if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
			t.Fatal(err)
		}
		got, ok := callgrindTotal(path)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: callgrindTotal = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := callgrindTotal(filepath.Join(dir, "absent")); ok {
		t.Error("an absent file has a total")
	}
}
