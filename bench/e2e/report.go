package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"sort"
	"strings"
)

// figure is one row of the results table: a measured value for each store
// against a target of the performance issue.
type figure struct {
	name          string
	unit          string // "×", "ms", "MB", "KB" or ""
	prec          int
	redis, memory float64
	hasMemory     bool
	bare          float64 // the bare reference proxy (no target applies to it)
	hasBare       bool
	cmp           string // ">=", "<=" or "=" (within 0.02)
	target        float64
	speed         bool // a CPU, throughput or latency target (a miss triggers the profile)
	missing       bool // no value was measured
}

// met reports whether v meets the figure's target.
func (f figure) met(v float64) bool {
	switch f.cmp {
	case ">=":
		return v >= f.target
	case "<=":
		return v <= f.target
	default:
		return math.Abs(v-f.target) < 0.02
	}
}

func (f figure) format(v float64) string {
	s := fmt.Sprintf("%.*f", f.prec, v)
	switch f.unit {
	case "":
		return s
	case "×":
		return s + "×"
	default:
		return s + " " + f.unit
	}
}

func (f figure) targetText() string {
	op := map[string]string{">=": "≥ ", "<=": "≤ ", "=": "exactly "}[f.cmp]
	t := f
	t.prec = 2
	if f.target == math.Trunc(f.target) {
		t.prec = 0
	}
	return op + t.format(f.target)
}

// kb converts KiB (as /proc reports) to decimal units: div 1000 gives KB,
// div 1e6 gives MB.
func kb(kib int64, div float64) float64 { return float64(kib) * 1024 / div }

// figures are the table's rows.
func (r *results) figures(rate int) []figure {
	var out []figure
	pair := func(name, key, unit string, prec int, cmp string, target float64, speed bool) {
		f := figure{name: name, unit: unit, prec: prec, cmp: cmp, target: target, speed: speed}
		var ok bool
		if f.redis, ok = r.med(strings.ReplaceAll(key, "*", "redis")); !ok {
			f.missing = true
		}
		f.memory, f.hasMemory = r.med(strings.ReplaceAll(key, "*", "memory"))
		f.bare, f.hasBare = r.med(strings.ReplaceAll(key, "*", "bare"))
		out = append(out, f)
	}
	one := func(name, key, unit string, prec int, cmp string, target float64) {
		f := figure{name: name, unit: unit, prec: prec, cmp: cmp, target: target}
		var ok bool
		if f.redis, ok = r.med(key); !ok {
			f.missing = true
		}
		out = append(out, f)
	}
	pair("throughput vs direct, plain chat", "sat.ratio.plain.*", "×", 2, ">=", 0.45, true)
	pair("throughput vs direct, streamed chat", "sat.ratio.stream.*", "×", 2, ">=", 0.40, true)
	pair(fmt.Sprintf("added latency p50 at %d req/s", rate), "add.p50.plain.*", "ms", 3, "<=", 0.25, true)
	pair(fmt.Sprintf("added latency p99 at %d req/s", rate), "add.p99.plain.*", "ms", 3, "<=", 2, true)
	pair(fmt.Sprintf("added first streamed byte p50 at %d req/s", rate), "add.ttfb.*", "ms", 3, "<=", 0.3, true)
	pair("gateway CPU per plain call", "cpu.sat.plain.*", "ms", 3, "<=", 0.20, true)
	pair("gateway CPU per streamed call", "cpu.sat.stream.*", "ms", 3, "<=", 0.35, true)
	// Round trips as redis-server sees them: its read events (a pipeline
	// is one). With leases a busy user's call makes none of its own (its
	// replica's blocks mirror answers its check) and shares a lease's two
	// scripts; without (store.leases: false) it runs exactly two scripts,
	// reserve and settle.
	one("store round trips per plain call (Redis read events)", "store.reads.open.plain", "", 2, "<=", 2)
	one("store round trips per streamed call (Redis read events)", "store.reads.open.stream", "", 2, "<=", 2)
	one("a fresh ~100 KB prompt adds (vs a short one)", "long.vsshort", "ms", 2, "<=", 8)
	rss := []struct {
		name string
		v    float64
		unit string
		t    float64
		ok   bool
	}{
		{"RSS idle (no encoding loaded)", kb(r.rss.idle, 1e6), "MB", 40, r.rss.idle > 0},
		{"RSS with both encodings loaded", kb(r.rss.encodings, 1e6), "MB", 90, r.rss.encodings > 0},
		{"memory per open stream", perStream(r.rss), "KB", 8, r.rss.streamsOpen > 0},
	}
	for _, x := range rss {
		out = append(out, figure{name: x.name, unit: x.unit, prec: 1, redis: x.v, cmp: "<=", target: x.t, missing: !x.ok})
	}
	return out
}

// perStream is the RSS growth per open stream, KB.
func perStream(m rssFigures) float64 {
	if m.streamsOpen == 0 {
		return 0
	}
	return kb(m.streams-m.warm, 1000) / float64(m.streamsOpen)
}

// cpuOrSpeedMissed reports whether a CPU, throughput or latency target is
// missed with the Redis store.
func (r *results) cpuOrSpeedMissed() bool {
	for _, f := range r.figures(0) {
		if f.speed && !f.missing && !f.met(f.redis) {
			return true
		}
	}
	return false
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// markdown is the report: what was run, the table, details and the profile.
func (r *results) markdown(e *env) string {
	o := e.o
	var b strings.Builder
	mode := "full"
	if o.quick {
		mode = "quick"
	}
	fmt.Fprintf(&b, "Last run: %s · `%s` · %s: %d rounds, saturation runs of %s at %d connections, fixed-rate runs of %s at %d req/s · %s · load average %s at the start, %s at the end.\n\n",
		r.start.UTC().Format("2006-01-02 15:04 MST"), o.command, mode, o.rounds, o.dur, o.conns, o.openDur, o.rate,
		machine(), r.load0, r.load1)
	b.WriteString("| figure (median of rounds) | Redis store | in-process store | target | met (Redis / in-process) | bare proxy (reference) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, f := range r.figures(o.rate) {
		red, mem, met, bare := "—", "—", "—", "—"
		if f.hasBare {
			bare = f.format(f.bare)
		}
		if !f.missing {
			red = f.format(f.redis)
			met = yesNo(f.met(f.redis))
		}
		if f.hasMemory {
			mem = f.format(f.memory)
			met += " / " + yesNo(f.met(f.memory))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", f.name, red, mem, f.targetText(), met, bare)
	}
	b.WriteString("\nThe bare proxy is a reference measured in the same rounds, not a product: a fiber handler and a fasthttp client forwarding each request as it came (no key, task, limit, count, metric or log; `-serve-bare`), the third row of the calibration table in ../shared/PERFORMANCE.md. It shows what this machine and this baseline allow any proxy.\n")

	b.WriteString("\nDetails (medians of rounds):\n\n| measured | direct | Redis store | in-process store | bare proxy |\n| --- | --- | --- | --- | --- |\n")
	row := func(name string, keys ...string) {
		cells := []string{name}
		for _, k := range keys {
			if v, ok := r.med(k); ok {
				cells = append(cells, fmt.Sprintf("%.3f", v))
			} else {
				cells = append(cells, "—")
			}
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	for _, k := range kinds {
		name := map[string]string{"plain": "plain", "stream": "streamed"}[k]
		b.WriteString(fmt.Sprintf("| saturation, %s chat, calls/s | %.0f | %.0f | %.0f | %.0f |\n", name,
			r.mv("sat.tput."+k+".direct"), r.mv("sat.tput."+k+".redis"), r.mv("sat.tput."+k+".memory"), r.mv("sat.tput."+k+".bare")))
	}
	row("gateway CPU per call at saturation, plain, ms", "none", "cpu.sat.plain.redis", "cpu.sat.plain.memory", "cpu.sat.plain.bare")
	row("gateway CPU per call at saturation, streamed, ms", "none", "cpu.sat.stream.redis", "cpu.sat.stream.memory", "cpu.sat.stream.bare")
	row(fmt.Sprintf("latency p50 at %d req/s, plain, ms", o.rate), "open.p50.plain.direct", "open.p50.plain.redis", "open.p50.plain.memory", "open.p50.plain.bare")
	row(fmt.Sprintf("latency p99 at %d req/s, plain, ms", o.rate), "open.p99.plain.direct", "open.p99.plain.redis", "open.p99.plain.memory", "open.p99.plain.bare")
	row(fmt.Sprintf("first streamed byte p50 at %d req/s, ms", o.rate), "open.ttfb.direct", "open.ttfb.redis", "open.ttfb.memory", "open.ttfb.bare")
	row(fmt.Sprintf("whole stream p50 at %d req/s, ms", o.rate), "open.p50.stream.direct", "open.p50.stream.redis", "open.p50.stream.memory", "open.p50.stream.bare")
	row(fmt.Sprintf("whole stream p99 at %d req/s, ms", o.rate), "open.p99.stream.direct", "open.p99.stream.redis", "open.p99.stream.memory", "open.p99.stream.bare")
	row(fmt.Sprintf("gateway CPU per call at %d req/s, plain, ms", o.rate), "none", "cpu.open.plain.redis", "cpu.open.plain.memory", "cpu.open.plain.bare")
	row(fmt.Sprintf("gateway CPU per call at %d req/s, streamed, ms", o.rate), "none", "cpu.open.stream.redis", "cpu.open.stream.memory", "cpu.open.stream.bare")
	row("redis-server CPU per call at saturation, plain, ms", "none", "store.cpu.sat.plain", "none", "none")
	row("redis-server CPU per call at saturation, streamed, ms", "none", "store.cpu.sat.stream", "none", "none")

	b.WriteString("\n")
	fmt.Fprintf(&b, "- Redis, per call at %d req/s: plain %.2f EVALSHA/EVAL, %.2f commands as redis-server counts them (commands run inside scripts included), %.2f read events (about one per round trip, a pipeline being one); streamed %.2f / %.2f / %.2f. Plain, by command: %s.\n",
		o.rate, r.mv("store.scripts.open.plain"), r.mv("store.commands.open.plain"), r.mv("store.reads.open.plain"),
		r.mv("store.scripts.open.stream"), r.mv("store.commands.open.stream"), r.mv("store.reads.open.stream"), r.breakdown)
	fmt.Fprintf(&b, "- The fixed-rate sends left %.3f ms (p50) / %.3f ms (p99) after their scheduled time (the load generator's timer lateness, present in direct and gateway latencies alike; latencies are measured from the scheduled time).\n",
		r.mv("open.late50"), r.mv("open.late99"))
	fmt.Fprintf(&b, "- Long prompts: %d distinct prompts of %d bytes (%d tokens in o200k_base) to an endpoint with a %d-token window, one call at a time; through the gateway %.2f ms vs %.2f ms for a short prompt; direct %.2f ms vs %.2f ms; gateway − direct on the same long prompt %.2f ms; trimmed: %d.\n",
		o.prompts, r.promptBytes, r.promptTokens, longWindow, r.mv("long.gw"), r.mv("long.gwshort"), r.mv("long.direct"), r.mv("long.directshort"), r.mv("long.vsdirect"), r.trimmed)
	m := r.rss
	fmt.Fprintf(&b, "- Memory (MB = 10⁶ bytes): idle %.1f MB (a gateway whose endpoints all use `estimate`, so no encoding loads); a fresh gateway with the benchmark's config (Redis store, both encodings preloaded at start) %.1f MB at start, %.1f MB after a prompt counted with each encoding, %.1f MB after short traffic, %.1f MB with %d of %d streams open (%.1f KB each), peak (VmHWM) %.1f MB; the Redis-store gateway of the load runs peaked at %.1f MB. Per open stream, from the gateway's Go metrics: %.1f goroutines, %.1f KB of goroutine stacks, %.1f KB of heap in use (%.1f KB allocated and live).\n",
		kb(m.idle, 1e6), kb(m.start, 1e6), kb(m.encodings, 1e6), kb(m.warm, 1e6), kb(m.streams, 1e6), m.streamsOpen, o.streams, perStream(m), kb(m.peak, 1e6), kb(m.loadedPeak, 1e6), m.goroutines, m.stackKB, m.heapKB, m.heapAllocKB)
	if in := r.instr; in.note != "" {
		fmt.Fprintf(&b, "- Instructions per call (callgrind): %s.\n", in.note)
	} else {
		fmt.Fprintf(&b, "- Instructions per plain call (callgrind, user space, GOMAXPROCS=1 and GOGC=off so that no timing-dependent runtime work is counted, %d sequential calls after %d warm-up calls; a count, so it does not drift with the machine's load): gateway with the Redis store %.0f, bare proxy %.0f, %.2f× the bare proxy.\n",
			in.calls, instrWarm, in.gateway, in.bare, in.gateway/in.bare)
	}
	if len(r.errors) == 0 {
		b.WriteString("- Failed calls: none.\n")
	} else {
		var names []string
		for k := range r.errors {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fmt.Fprintf(&b, "- Failed calls, %s: %d (first: %.200s).\n", k, r.errors[k], r.firstErr[k])
		}
	}
	b.WriteString("\n### Profile\n")
	if r.profile != "" {
		b.WriteString("\nEach gateway under `perf record -g` (999 Hz) during a saturation run; percentages of the gateway's samples. System calls counted with `perf stat` (tracepoints).\n")
		b.WriteString(r.profile)
	} else {
		b.WriteString("\n" + strings.ToUpper(r.profileNote[:1]) + r.profileNote[1:] + ".\n")
	}
	return b.String()
}

// mv is the median of a series, 0 when empty.
func (r *results) mv(key string) float64 {
	v, _ := r.med(key)
	return v
}

// historyLine is the one-line summary of a run kept under History.
func (r *results) historyLine(o options) string {
	mode := "full"
	if o.quick {
		mode = "quick"
	}
	var parts []string
	for _, f := range r.figures(o.rate) {
		if f.missing {
			continue
		}
		mark := ""
		if !f.met(f.redis) {
			mark = " ✗"
		}
		parts = append(parts, f.format(f.redis)+mark)
	}
	return fmt.Sprintf("- %s, %s, Redis store: %s", r.start.UTC().Format("2006-01-02 15:04"), mode, strings.Join(parts, " · "))
}

// sectionTitle is the heading of this benchmark's section of the report.
const sectionTitle = "## End to end"

// howTo is the fixed opening of the section.
const howTo = `Run with ` + "`make bench-e2e`" + ` (that is ` + "`go run ./bench/e2e`" + `; about five minutes) or
` + "`go run ./bench/e2e -quick`" + ` (about two). It needs ` + "`redis-server`" + ` on the PATH (and
` + "`perf`" + ` for the profile). The program (bench/e2e) builds the gateway binary, starts the
fake upstream in a process of its own (the benchmark binary re-run with
` + "`-serve-fake`" + `), a redis-server on a free loopback port, and two gateways with limits
on: requests, tokens and money, task and user windows, a user header, limits far
above what a run reaches (one gateway on the Redis store, one on the in-process
store), and a bare reference proxy (fiber + fasthttp client, no features; the
benchmark binary re-run with ` + "`-serve-bare`" + `). A fasthttp load generator on 127.0.0.1
then alternates direct runs (to the fake upstream) with runs through each gateway
and the reference proxy, rotating the order every round,
and reports medians of rounds: saturation throughput (closed loop), latency at a
fixed rate (open loop, measured from each request's scheduled send time, so
coordinated omission is avoided), first streamed byte, gateway CPU per call
(utime+stime of /proc/PID/stat), Redis commands per call (INFO before and after),
a fresh ~100 KB prompt that must be token-counted, and memory (VmRSS, VmHWM).
When a CPU, throughput or latency target is missed it profiles the gateways and
the reference proxy with perf (samples, system calls and context switches a
call). Last, it runs the Redis-store gateway and the reference proxy under valgrind's
callgrind for the user-space instructions a plain call costs each (a count, with
garbage collection and idle spinning left out: it repeats to a fraction of a
percent however busy the machine is). It replaces this
section on each run, keeping the Findings and History subsections. Flags:
` + "`-rounds -duration -open-duration -conns -rate -streams -prompts -profile on|off|auto -instructions N -doc '' -keep`; `-instructions-only` counts the instructions alone (about 15 s), to judge a change to the call path" + `.
Absolute numbers drift with the machine's load; ratios and differences hold better.
`

// historyLegend explains the History lines.
const historyLegend = "One line a run, newest first: the table's figures in its order, Redis store; ✗ marks a missed target."

// replaceSection returns doc with its "## End to end" section replaced by
// body, keeping the old section's "### Findings" subsection and adding hist
// to its "### History" (newest first, at most 12 lines). A doc without the
// section gets it appended.
func replaceSection(doc, body, hist string) string {
	lines := strings.Split(doc, "\n")
	start, end := -1, len(lines)
	for i, l := range lines {
		if start < 0 && strings.TrimSpace(l) == sectionTitle {
			start = i
			continue
		}
		if start >= 0 && strings.HasPrefix(l, "## ") {
			end = i
			break
		}
	}
	var findings, history []string
	if start >= 0 {
		sub := ""
		for _, l := range lines[start+1 : end] {
			if strings.HasPrefix(l, "### ") {
				sub = strings.TrimSpace(strings.TrimPrefix(l, "### "))
			}
			switch sub {
			case "Findings":
				findings = append(findings, l)
			case "History":
				if strings.HasPrefix(l, "- ") {
					history = append(history, l)
				}
			}
		}
	}
	history = append([]string{hist}, history...)
	if len(history) > 12 {
		history = history[:12]
	}
	var s strings.Builder
	s.WriteString(sectionTitle + "\n\n" + howTo + "\n" + strings.TrimRight(body, "\n") + "\n\n")
	if len(findings) > 0 {
		s.WriteString(strings.TrimRight(strings.Join(findings, "\n"), "\n") + "\n\n")
	}
	s.WriteString("### History\n\n" + historyLegend + "\n\n" + strings.Join(history, "\n") + "\n")
	if start < 0 {
		return strings.TrimRight(doc, "\n") + "\n\n" + s.String()
	}
	out := strings.Join(lines[:start], "\n")
	if out != "" {
		out += "\n"
	}
	out += s.String()
	if end < len(lines) {
		out += "\n" + strings.Join(lines[end:], "\n")
	}
	return out
}

// writeSection puts body (and hist) into path's section, creating the file
// when it does not exist.
func writeSection(path, body, hist string) error {
	doc, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		doc = []byte("# Performance\n")
	} else if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	out := replaceSection(string(doc), body, hist)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
