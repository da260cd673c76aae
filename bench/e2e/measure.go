package main

import (
	"fmt"
	"os/exec"
	"strings"
	"time"

	"taskgate/trim/tokenizer"
)

// results holds every figure of a run. Series are keyed by what they
// measure, e.g. "sat.ratio.plain.redis", one value per round.
type results struct {
	start        time.Time
	load0, load1 string
	series       map[string][]float64
	errors       map[string]int64  // failed calls by target
	firstErr     map[string]string // the first failure by target
	breakdown    string            // Redis commands per plain call, by command
	promptBytes  int
	promptTokens int
	trimmed      int // long prompts the gateway trimmed
	rss          rssFigures
	profile      string // markdown of the perf profile, "" if none
	profileNote  string // why there is no profile
	instr        instrFigures
}

// rssFigures are the gateway's memory figures, KiB.
type rssFigures struct {
	idle        int64 // estimate-only config: no encoding loaded
	start       int64 // full config right after start (Preload running or done)
	encodings   int64 // after a prompt counted with each encoding
	warm        int64 // after short plain and streamed traffic
	streams     int64 // with the streams open
	peak        int64 // VmHWM at the end
	loadedPeak  int64 // VmHWM of the Redis gateway after every load run
	streamsOpen int

	// Per open stream, from the gateway's Go runtime metrics.
	goroutines, stackKB, heapKB, heapAllocKB float64
}

func (r *results) add(key string, v float64) { r.series[key] = append(r.series[key], v) }

// med is the median of a series; ok is false when it has no value.
func (r *results) med(key string) (float64, bool) {
	s, ok := r.series[key]
	if !ok || len(s) == 0 {
		return 0, false
	}
	return median(s), true
}

func (r *results) fail(t string, n int64, msg string) {
	if n == 0 {
		return
	}
	r.errors[t] += n
	if _, ok := r.firstErr[t]; !ok {
		r.firstErr[t] = msg
	}
}

var kinds = []string{"plain", "stream"}

// proxies are the targets measured against direct: the two gateways and the
// bare reference proxy.
var proxies = []string{"redis", "memory", "bare"}

// measure runs every phase and returns the figures.
func (e *env) measure() (*results, error) {
	r := &results{start: time.Now(), load0: loadAverage(), series: map[string][]float64{},
		errors: map[string]int64{}, firstErr: map[string]string{}}
	o := e.o

	if err := e.idleRSS(r); err != nil {
		return nil, err
	}

	bodies := map[string][]byte{"plain": chatBody(taskChat, false), "stream": chatBody(taskChat, true)}
	targets := []*target{e.direct, e.redis, e.memory, e.bare}
	watch := func(t *target) *storeWatch {
		if t == e.redis {
			return e.watch
		}
		return nil
	}

	step("warm up")
	for _, k := range kinds {
		for _, t := range targets {
			res, err := closedLoop(t, bodies[k], k == "stream", o.conns, o.warm, nil)
			if err != nil {
				return nil, err
			}
			if res.calls == 0 {
				return nil, fmt.Errorf("warm-up %s %s: no call succeeded: %s", k, t.name, res.firstErr)
			}
		}
	}

	for round := range o.rounds {
		order := rotate(targets, round)
		for _, k := range kinds {
			step(fmt.Sprintf("round %d/%d: saturation, %s chat, %d connections, %s each", round+1, o.rounds, k, o.conns, o.dur))
			got := map[string]closedResult{}
			for _, t := range order {
				res, err := closedLoop(t, bodies[k], k == "stream", o.conns, o.dur, watch(t))
				if err != nil {
					return nil, err
				}
				r.fail(t.name, res.errors, res.firstErr)
				got[t.name] = res
				fmt.Printf("          %-7s %8.0f calls/s  cpu %.3f ms/call  errors %d\n", t.name, res.throughput(), res.cpuPerCall(), res.errors)
				r.add("sat.tput."+k+"."+t.name, res.throughput())
			}
			for _, gw := range proxies {
				r.add("sat.ratio."+k+"."+gw, got[gw].throughput()/got["direct"].throughput())
				r.add("cpu.sat."+k+"."+gw, got[gw].cpuPerCall())
			}
			e.addStore(r, "sat."+k, got["redis"].store, got["redis"].calls)
		}
	}

	for round := range o.rounds {
		order := rotate(targets, round)
		for _, k := range kinds {
			step(fmt.Sprintf("round %d/%d: fixed rate, %s chat, %d req/s, %s each", round+1, o.rounds, k, o.rate, o.openDur))
			got := map[string]openResult{}
			for _, t := range order {
				res, err := openLoop(t, bodies[k], k == "stream", o.rate, o.openDur, watch(t))
				if err != nil {
					return nil, err
				}
				r.fail(t.name, res.errors, res.firstErr)
				got[t.name] = res
				fmt.Printf("          %-7s p50 %s  p99 %s  first byte p50 %s  late p50 %s  errors %d\n", t.name,
					ms(pct(res.latency, 50)), ms(pct(res.latency, 99)), ms(pct(res.ttfb, 50)), ms(pct(res.lateness, 50)), res.errors)
				r.add("open.p50."+k+"."+t.name, msf(pct(res.latency, 50)))
				r.add("open.p99."+k+"."+t.name, msf(pct(res.latency, 99)))
				if k == "stream" {
					r.add("open.ttfb."+t.name, msf(pct(res.ttfb, 50)))
				}
				if t.gw != nil && res.calls > 0 {
					r.add("cpu.open."+k+"."+t.name, res.cpu/float64(res.calls)*1000)
				}
				r.add("open.late50", msf(pct(res.lateness, 50)))
				r.add("open.late99", msf(pct(res.lateness, 99)))
			}
			for _, gw := range proxies {
				r.add("add.p50."+k+"."+gw, msf(pct(got[gw].latency, 50))-msf(pct(got["direct"].latency, 50)))
				r.add("add.p99."+k+"."+gw, msf(pct(got[gw].latency, 99))-msf(pct(got["direct"].latency, 99)))
				if k == "stream" {
					r.add("add.ttfb."+gw, msf(pct(got[gw].ttfb, 50))-msf(pct(got["direct"].ttfb, 50)))
				}
			}
			e.addStore(r, "open."+k, got["redis"].store, got["redis"].calls)
			if k == "plain" {
				r.breakdown = got["redis"].store.perCall(got["redis"].calls)
			}
		}
	}

	if err := e.longPrompts(r); err != nil {
		return nil, err
	}
	if err := e.maybeProfile(r, bodies); err != nil {
		return nil, err
	}
	if err := e.memoryPhase(r); err != nil {
		return nil, err
	}
	if err := e.instructions(r); err != nil {
		return nil, err
	}
	if m, err := memory(e.redis.gw.pid()); err == nil {
		r.rss.loadedPeak = m.HWM
	}
	r.load1 = loadAverage()
	return r, nil
}

// addStore records the Redis figures of one run of calls through the Redis gateway.
func (e *env) addStore(r *results, key string, d storeDelta, calls int64) {
	if calls == 0 || d.calls == nil {
		return
	}
	n := float64(calls)
	r.add("store.scripts."+key, float64(d.scripts())/n)
	r.add("store.commands."+key, float64(d.commands)/n)
	r.add("store.reads."+key, float64(d.reads)/n)
	r.add("store.cpu."+key, d.cpu/n*1000)
}

// rotate is ts rotated left by n, so each target leads one round in turn.
func rotate(ts []*target, n int) []*target {
	out := make([]*target, 0, len(ts))
	for i := range ts {
		out = append(out, ts[(i+n)%len(ts)])
	}
	return out
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", msf(d)) }

// idleRSS measures a gateway that loads no encoding: every endpoint's
// tokenizer is "estimate", in-process store, no traffic.
func (e *env) idleRSS(r *results) error {
	step("idle RSS: a gateway whose endpoints all use the estimate tokenizer")
	p, _, err := e.startGateway("gateway-idle", "", true)
	if err != nil {
		return err
	}
	defer p.stop(3 * time.Second)
	m, err := stableRSS(p.pid())
	if err != nil {
		return err
	}
	r.rss.idle = m.RSS
	return nil
}

// stableRSS waits (up to 10 s) until a process's RSS stops moving and returns it.
func stableRSS(pid int) (memInfo, error) {
	var last memInfo
	same := 0
	for range 40 {
		m, err := memory(pid)
		if err != nil {
			return m, err
		}
		if d := m.RSS - last.RSS; d > -256 && d < 256 {
			same++
			if same >= 3 {
				return m, nil
			}
		} else {
			same = 0
		}
		last = m
		time.Sleep(250 * time.Millisecond)
	}
	return last, nil
}

// longPrompts measures distinct ~100 KB prompts that the gateway must count
// (more bytes than the endpoint's window, fewer tokens), against short ones,
// one call at a time, direct and through the Redis gateway.
func (e *env) longPrompts(r *results) error {
	o := e.o
	step(fmt.Sprintf("long prompts: %d distinct prompts of %d KB, one at a time", o.prompts, o.promptKB))
	size := o.promptKB * 1000
	short := chatBody(taskLong, false)
	// One call first, so that nothing measured pays for a first use.
	if _, _, err := oneCall(e.redis, promptBody(taskLong, prose(1<<40, size))); err != nil {
		return fmt.Errorf("long prompt warm-up: %w", err)
	}
	var gwLong, gwShort, dLong, dShort []float64
	for i := range o.prompts {
		text := prose(uint64(i+1), size)
		if i == 0 {
			r.promptBytes = len(text)
			if enc, err := tokenizer.Get(tokenizer.O200kBase); err == nil {
				r.promptTokens = enc.Count(text)
			}
		}
		long := promptBody(taskLong, text)
		calls := []struct {
			t    *target
			body []byte
			out  *[]float64
		}{{e.direct, short, &dShort}, {e.redis, short, &gwShort}, {e.direct, long, &dLong}, {e.redis, long, &gwLong}}
		for _, c := range calls {
			d, trimmed, err := oneCall(c.t, c.body)
			if err != nil {
				return fmt.Errorf("long prompt %d: %w", i, err)
			}
			if c.t == e.redis && len(c.body) > len(short) && trimmed != "" {
				r.trimmed++
			}
			*c.out = append(*c.out, msf(d))
		}
		r.add("long.vsdirect", gwLong[i]-dLong[i])
	}
	r.add("long.vsshort", median(gwLong)-median(gwShort))
	r.add("long.gw", median(gwLong))
	r.add("long.gwshort", median(gwShort))
	r.add("long.direct", median(dLong))
	r.add("long.directshort", median(dShort))
	fmt.Printf("          through the gateway: long %.2f ms, short %.2f ms; direct: long %.2f ms, short %.2f ms\n",
		median(gwLong), median(gwShort), median(dLong), median(dShort))
	return nil
}

// memoryPhase measures a fresh gateway (Redis store): RSS at start, after
// a prompt counted with each encoding, after short traffic, and with
// o.streams streams held open.
func (e *env) memoryPhase(r *results) error {
	o := e.o
	step("memory: a fresh gateway (Redis store)")
	p, addr, err := e.startGateway("gateway-rss", e.redisURL, false)
	if err != nil {
		return err
	}
	defer p.kill()
	t := newTarget("rss", addr, p, 64)
	m, err := stableRSS(p.pid())
	if err != nil {
		return err
	}
	r.rss.start = m.RSS
	size := o.promptKB * 1000
	for i, task := range []string{taskLong, taskLongCL100k} {
		if _, _, err := oneCall(t, promptBody(task, prose(uint64(1<<41+i), size))); err != nil {
			return fmt.Errorf("memory phase, long prompt to %s: %w", task, err)
		}
	}
	if m, err = stableRSS(p.pid()); err != nil {
		return err
	}
	r.rss.encodings = m.RSS
	for _, stream := range []bool{false, true} {
		if _, err := closedLoop(t, chatBody(taskChat, stream), stream, 8, o.warm, nil); err != nil {
			return err
		}
	}
	if m, err = stableRSS(p.pid()); err != nil {
		return err
	}
	r.rss.warm = m.RSS
	before, err := goStats(p.admin)
	if err != nil {
		return err
	}
	step(fmt.Sprintf("memory: %d streams held open", o.streams))
	open, streamErr, release := heldStreams(t, chatBody(taskHold, true), o.streams, time.Minute)
	defer release()
	r.rss.streamsOpen = open
	if open < o.streams {
		r.fail("held streams", int64(o.streams-open), streamErr)
	}
	if m, err = stableRSS(p.pid()); err != nil {
		return err
	}
	r.rss.streams = m.RSS
	r.rss.peak = m.HWM
	after, err := goStats(p.admin)
	if err != nil {
		return err
	}
	if open > 0 {
		per := func(k string) float64 { return (after[k] - before[k]) / float64(open) }
		r.rss.goroutines = per("go_goroutines")
		r.rss.stackKB = per("go_memstats_stack_inuse_bytes") / 1000
		r.rss.heapKB = per("go_memstats_heap_inuse_bytes") / 1000
		r.rss.heapAllocKB = per("go_memstats_heap_alloc_bytes") / 1000
	}
	fmt.Printf("          RSS: start %d KiB, encodings %d KiB, warm %d KiB, %d streams %d KiB, peak %d KiB\n",
		r.rss.start, r.rss.encodings, r.rss.warm, open, r.rss.streams, r.rss.peak)
	p.kill() // before release: the streams then end at once, with no drain
	return nil
}

// maybeProfile profiles the gateways with perf when a target of CPU,
// throughput or latency is missed (or always with -profile on).
func (e *env) maybeProfile(r *results, bodies map[string][]byte) error {
	switch e.o.profile {
	case "off":
		r.profileNote = "not taken (-profile off)"
		return nil
	case "auto":
		if !r.cpuOrSpeedMissed() {
			r.profileNote = "not taken: every CPU, throughput and latency target met"
			return nil
		}
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		r.profileNote = "not taken: perf is not installed (apt-get install linux-perf)"
		return nil
	}
	var b strings.Builder
	for _, run := range []struct {
		t    *target
		kind string
	}{{e.redis, "plain"}, {e.redis, "stream"}, {e.memory, "plain"}, {e.bare, "plain"}} {
		step(fmt.Sprintf("profile the %s gateway with perf: saturation, %s chat", run.t.name, run.kind))
		rep, err := e.perfRun(perf, run.t, run.kind, bodies[run.kind])
		if err != nil {
			r.profileNote = "failed: " + err.Error()
			fmt.Println("          " + r.profileNote)
			return nil
		}
		b.WriteString(rep)
	}
	r.profile = b.String()
	return nil
}
