package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// options are the command-line settings of one run.
type options struct {
	quick    bool
	rounds   int
	dur      time.Duration // closed-loop run
	openDur  time.Duration // open-loop run
	warm     time.Duration // warm-up per target and kind
	conns    int
	rate     int
	streams  int
	prompts  int
	promptKB int
	doc      string // report file; "" = none
	profile  string // "auto", "on", "off"
	keep     bool
	command  string // the command line, for the report

	instrCalls int  // plain calls counted under callgrind (0: none)
	instrOnly  bool // count instructions only, report nothing else
}

func main() {
	var o options
	fake := flag.String("serve-fake", "", "run as the fake upstream process on this address (used by the benchmark itself)")
	bare := flag.String("serve-bare", "", "run as the bare reference proxy on this address, forwarding to -upstream (used by the benchmark itself)")
	upstream := flag.String("upstream", "", "the upstream host:port of -serve-bare")
	flag.BoolVar(&o.quick, "quick", false, "short runs (about 2 minutes instead of 5)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of alternated direct and gateway runs (medians reported)")
	flag.DurationVar(&o.dur, "duration", 0, "length of each closed-loop run (default 5s, -quick 1.5s)")
	flag.DurationVar(&o.openDur, "open-duration", 0, "length of each fixed-rate run (default 5s, -quick 2s)")
	flag.IntVar(&o.conns, "conns", 32, "concurrent connections of the saturation runs")
	flag.IntVar(&o.rate, "rate", 500, "requests per second of the fixed-rate runs")
	flag.IntVar(&o.streams, "streams", 1000, "streams held open for the memory-per-stream figure")
	flag.IntVar(&o.prompts, "prompts", 0, "distinct ~100 KB prompts (default 9, -quick 5)")
	flag.IntVar(&o.promptKB, "prompt-kb", 100, "size of the long prompts in KB")
	flag.StringVar(&o.doc, "doc", "docs/PERFORMANCE.md", "file whose \"## End to end\" section gets the results, relative to the module root; \"\" = none")
	flag.StringVar(&o.profile, "profile", "auto", "perf profile of the gateway: auto (when a CPU, throughput or latency target is missed), on, off")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configs, logs, perf data)")
	flag.BoolVar(&o.instrOnly, "instructions-only", false, "only count the instructions a plain call costs (gateway and bare proxy), print them and stop: a quick check of a change to the call path")
	flag.IntVar(&o.instrCalls, "instructions", 2000, "plain calls counted under callgrind for the instructions-per-call figure (0: skip it)")
	flag.Parse()
	if *fake != "" {
		os.Exit(serveFake(*fake))
	}
	if *bare != "" {
		os.Exit(serveBare(*bare, *upstream))
	}
	o.command = commandLine()
	o.defaults()
	os.Exit(run(o))
}

// defaults fills the settings left at zero.
func (o *options) defaults() {
	pick := func(d *time.Duration, full, quick time.Duration) {
		if *d == 0 {
			*d = full
			if o.quick {
				*d = quick
			}
		}
	}
	pick(&o.dur, 5*time.Second, 1500*time.Millisecond)
	pick(&o.openDur, 5*time.Second, 2*time.Second)
	pick(&o.warm, time.Second, 500*time.Millisecond)
	if o.prompts == 0 {
		o.prompts = 9
		if o.quick {
			o.prompts = 5
		}
	}
	o.rounds = max(o.rounds, 1)
	o.conns = max(o.conns, 1)
	o.rate = max(o.rate, 1)
}

// commandLine is how this run was started, as a user would type it.
func commandLine() string {
	args := strings.Join(os.Args[1:], " ")
	if args == "" {
		return "make bench-e2e (go run ./bench/e2e)"
	}
	return "go run ./bench/e2e " + args
}

// env is everything a run started.
type env struct {
	o        options
	root     string
	tmp      string
	gwBin    string
	fakeAddr string
	redisURL string
	rdb      *redis.Client
	watch    *storeWatch
	direct   *target
	redis    *target
	memory   *target
	bare     *target // the reference proxy: fiber + fasthttp client, no features
}

func run(o options) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "\ninterrupted; stopping the processes")
		stopAll()
		os.Exit(130)
	}()
	defer stopAll()
	e, err := setup(o)
	if e != nil && e.tmp != "" {
		if o.keep {
			defer fmt.Println("kept", e.tmp)
		} else {
			defer os.RemoveAll(e.tmp)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if o.instrOnly {
		r := &results{}
		if err := e.instructions(r); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		return 0
	}
	res, err := e.measure()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	table := res.markdown(e)
	fmt.Println()
	fmt.Println(table)
	if o.doc != "" {
		path := o.doc
		if !filepath.IsAbs(path) {
			path = filepath.Join(e.root, path)
		}
		if err := writeSection(path, table, res.historyLine(o)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		fmt.Println("written to", path)
	}
	return 0
}

// setup builds the gateway and starts the fake upstream, Redis and the two
// gateways under test.
func setup(o options) (*env, error) {
	e := &env{o: o}
	var err error
	if e.root, err = moduleRoot(); err != nil {
		return nil, err
	}
	if e.tmp, err = os.MkdirTemp("", "taskgate-e2e-"); err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	step("build the gateway")
	if e.gwBin, err = buildGateway(context.Background(), e.root, e.tmp); err != nil {
		return e, err
	}

	step("start the fake upstream")
	self, err := os.Executable()
	if err != nil {
		return e, fmt.Errorf("find this program: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return e, err
	}
	e.fakeAddr = "127.0.0.1:" + strconv.Itoa(port)
	fake, err := startProc("fake upstream", filepath.Join(e.tmp, "fake.log"), self, "-serve-fake", e.fakeAddr)
	if err != nil {
		return e, err
	}
	if err := waitTCP(fake, e.fakeAddr, 10*time.Second); err != nil {
		return e, err
	}

	step("start redis-server")
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return e, fmt.Errorf("redis-server is needed: %w", err)
	}
	if port, err = freePort(); err != nil {
		return e, err
	}
	raddr := "127.0.0.1:" + strconv.Itoa(port)
	rp, err := startProc("redis-server", filepath.Join(e.tmp, "redis.log"), bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err != nil {
		return e, err
	}
	if err := waitTCP(rp, raddr, 10*time.Second); err != nil {
		return e, err
	}
	e.redisURL = "redis://" + raddr + "/0"
	e.rdb = redis.NewClient(&redis.Options{Addr: raddr})
	e.watch = &storeWatch{c: e.rdb, pid: rp.pid()}

	step("start the gateways (Redis store, in-process store)")
	gr, addr, err := e.startGateway("gateway-redis", e.redisURL, false)
	if err != nil {
		return e, err
	}
	gm, maddr, err := e.startGateway("gateway-memory", "", false)
	if err != nil {
		return e, err
	}
	step("start the bare reference proxy")
	if port, err = freePort(); err != nil {
		return e, err
	}
	baddr := "127.0.0.1:" + strconv.Itoa(port)
	bp, err := startProc("bare proxy", filepath.Join(e.tmp, "bare.log"), self, "-serve-bare", baddr, "-upstream", e.fakeAddr)
	if err != nil {
		return e, err
	}
	if err := waitTCP(bp, baddr, 10*time.Second); err != nil {
		return e, err
	}

	conns := max(e.o.conns, 64) + 512 // the open-loop runs may stack calls up
	e.direct = newTarget("direct", e.fakeAddr, nil, conns)
	e.redis = newTarget("redis", addr, gr, conns)
	e.memory = newTarget("memory", maddr, gm, conns)
	e.bare = newTarget("bare", baddr, bp, conns)
	return e, nil
}

// startGateway writes a config and starts a gateway on it; redisURL "" is
// the in-process store, estimate makes every endpoint's tokenizer
// "estimate". It returns the process and its client address once /readyz
// answers 200.
func (e *env) startGateway(name, redisURL string, estimate bool) (*proc, string, error) {
	return e.startGatewayUnder(name, redisURL, estimate, nil, nil, 30*time.Second)
}

// startGatewayUnder is startGateway with the gateway run by wrapper (a
// command and its arguments, such as valgrind's; nil: none) with env added,
// waiting up to ready for /readyz.
func (e *env) startGatewayUnder(name, redisURL string, estimate bool, wrapper, env []string, ready time.Duration) (*proc, string, error) {
	lp, err := freePort()
	if err != nil {
		return nil, "", err
	}
	ap, err := freePort()
	if err != nil {
		return nil, "", err
	}
	cfg := gatewayConfig(lp, ap, redisURL, "http://"+e.fakeAddr+"/v1", estimate)
	// Configs live in a directory of their own, as in a deployment: the
	// gateway watches its config's directory, and the logs and perf data
	// written to e.tmp must not wake that watcher.
	dir := filepath.Join(e.tmp, "config")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, "", fmt.Errorf("write %s: %w", path, err)
	}
	cmd := append(append(wrapper[:len(wrapper):len(wrapper)], e.gwBin), "-config", path)
	p, err := startProcEnv(name, filepath.Join(e.tmp, name+".log"), env, cmd[0], cmd[1:]...)
	if err != nil {
		return nil, "", err
	}
	p.admin = "127.0.0.1:" + strconv.Itoa(ap)
	if err := waitHTTP(p, "http://"+p.admin+"/readyz", ready); err != nil {
		return nil, "", err
	}
	return p, "127.0.0.1:" + strconv.Itoa(lp), nil
}

// benchLimits are limits on every unit, task and user, far above what a run
// can reach, so that every call is checked and counted and none refused.
const benchLimits = `{task: {requests: {minute: 1000000000, day: 100000000000}, tokens: {minute: 1000000000000}, money: {day: "100000000.00"}}, user: {requests: {minute: 1000000000}, tokens: {day: 1000000000000}, money: {day: "100000000.00"}}}`

// Tasks of the benchmark's gateway config.
const (
	taskChat       = "bench.chat"        // short calls, endpoint with a large window
	taskLong       = "bench.long"        // o200k_base, window smaller than 100 KB
	taskLongCL100k = "bench.long_cl100k" // cl100k_base, window smaller than 100 KB
	taskHold       = "bench.hold"        // streams the fake upstream holds open
)

// longWindow is the context window of the long-prompt endpoints: fewer
// tokens than a 100 KB prompt has bytes (so a byte bound cannot settle it
// and the prompt must be counted), more than it has tokens (so it fits).
const longWindow = 32000

// gatewayConfig is the gateway's config for the benchmark.
func gatewayConfig(listen, admin int, redisURL, upstream string, estimate bool) string {
	store := "{}"
	if redisURL != "" {
		store = fmt.Sprintf("{redis: %q}", redisURL)
	}
	tok := func(name string) string {
		if estimate {
			return "estimate"
		}
		return name
	}
	return fmt.Sprintf(`# taskgate end-to-end benchmark config (written by bench/e2e)
listen: "127.0.0.1:%d"
admin_listen: "127.0.0.1:%d"
admin_token: "bench-admin"
shutdown_grace: 2s
store: %s
endpoints:
  - {name: mini, base_url: %[4]q, model: fake-mini, context_window: 128000, max_output_tokens: 4096, price: {input: "0.15", output: "0.60"}, tokenizer: %[5]s}
  - {name: long-o200k, base_url: %[4]q, model: fake-mini, context_window: %[8]d, max_output_tokens: 1024, price: {input: "0.15", output: "0.60"}, tokenizer: %[5]s}
  - {name: long-cl100k, base_url: %[4]q, model: fake-mini, context_window: %[8]d, max_output_tokens: 1024, price: {input: "0.50", output: "1.50"}, tokenizer: %[6]s}
  - {name: hold, base_url: %[4]q, model: %[9]s, context_window: 128000, max_output_tokens: 4096, price: {input: "0.15", output: "0.60"}, tokenizer: %[5]s, timeout: 15m, idle_timeout: 15m}
tasks:
  - {key: %[10]s, endpoints: [mini], limits: %[7]s, typical_tokens: [500, 200]}
  - {key: %[11]s, endpoints: [long-o200k], limits: %[7]s}
  - {key: %[12]s, endpoints: [long-cl100k], limits: %[7]s}
  - {key: %[13]s, endpoints: [hold], limits: %[7]s}
keys:
  - {name: bench, secret: %[14]q, tasks: ["*"]}
`, listen, admin, store, upstream, tok("o200k_base"), tok("cl100k_base"), benchLimits, longWindow, holdModel,
		taskChat, taskLong, taskLongCL100k, taskHold, benchKey)
}

// step prints what the benchmark does next.
func step(s string) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), s)
}
