package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// instrFigures are the user-space instructions per plain call that
// callgrind counts in the gateway (Redis store) and in the bare proxy.
type instrFigures struct {
	gateway, bare float64
	calls         int
	note          string // why they were not measured, "" when they were
}

// instrWarm is how many calls warm a process up before counting starts.
const instrWarm = 300

// instructions counts, under valgrind's callgrind, the instructions the
// gateway with the Redis store and the bare proxy execute per plain call
// over o.instrCalls sequential calls after a warm-up. Unlike times, these
// counts do not drift with the machine's load: they show what the gateway
// adds to a call however busy the machine is. The processes run with
// GOMAXPROCS=1 and GOGC=off, so that the count leaves out the two parts
// of the runtime's work that depend on timing (an idle P spinning for work,
// collections whose number depends on when they start: 12% apart between
// two runs without them), and with asynchronous preemption off (its
// signals break callgrind). Allocation, whose collection cost is left out,
// is what the Go benchmarks report. The kernel's work is not counted.
func (e *env) instructions(r *results) error {
	n := e.o.instrCalls
	r.instr.calls = n
	if n <= 0 {
		r.instr.note = "not measured (-instructions 0)"
		return nil
	}
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		r.instr.note = "not measured: valgrind is not installed (apt-get install valgrind)"
		return nil
	}
	control, err := exec.LookPath("callgrind_control")
	if err != nil {
		r.instr.note = "not measured: callgrind_control is not installed (it comes with valgrind)"
		return nil
	}
	env := []string{"GODEBUG=asyncpreemptoff=1", "GOMAXPROCS=1", "GOGC=off"}
	outFile := func(name string) string { return filepath.Join(e.tmp, name+".callgrind") }
	wrapper := func(name string) []string {
		return []string{valgrind, "--tool=callgrind", "--callgrind-out-file=" + outFile(name)}
	}
	body := chatBody(taskChat, false)

	step(fmt.Sprintf("instructions: the gateway (Redis store) under callgrind, %d plain calls", n))
	gp, addr, err := e.startGatewayUnder("gateway-callgrind", e.redisURL, false, wrapper("gateway"), env, 3*time.Minute)
	if err != nil {
		return err
	}
	if r.instr.gateway, err = countInstructions(control, outFile("gateway"), gp, newTarget("gateway-callgrind", addr, gp, 2), body, n); err != nil {
		return err
	}

	step(fmt.Sprintf("instructions: the bare proxy under callgrind, %d plain calls", n))
	port, err := freePort()
	if err != nil {
		return err
	}
	baddr := "127.0.0.1:" + strconv.Itoa(port)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := append(wrapper("bare"), self, "-serve-bare", baddr, "-upstream", e.fakeAddr)
	bp, err := startProcEnv("bare-callgrind", filepath.Join(e.tmp, "bare-callgrind.log"), env, cmd[0], cmd[1:]...)
	if err != nil {
		return err
	}
	if err := waitTCP(bp, baddr, 3*time.Minute); err != nil {
		return err
	}
	if r.instr.bare, err = countInstructions(control, outFile("bare"), bp, newTarget("bare-callgrind", baddr, bp, 2), body, n); err != nil {
		return err
	}
	fmt.Printf("          instructions per plain call: gateway %.0f, bare %.0f (%.2f×)\n",
		r.instr.gateway, r.instr.bare, r.instr.gateway/r.instr.bare)
	return nil
}

// countInstructions warms p up, zeroes its callgrind counters, makes n
// sequential plain calls to t, dumps the counters and stops p. It returns
// the instructions per call. outFile is p's --callgrind-out-file: the
// dump is written by p itself, as outFile.<part>.
func countInstructions(control, outFile string, p *proc, t *target, body []byte, n int) (float64, error) {
	defer p.kill()
	for i := 0; i < instrWarm; i++ {
		if _, _, err := oneCall(t, body); err != nil {
			return 0, fmt.Errorf("instructions: warm-up: %w", err)
		}
	}
	pid := strconv.Itoa(p.pid())
	if out, err := exec.Command(control, "--zero", pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("instructions: callgrind_control --zero: %v: %s", err, out)
	}
	for i := 0; i < n; i++ {
		if _, _, err := oneCall(t, body); err != nil {
			return 0, fmt.Errorf("instructions: %w", err)
		}
	}
	if out, err := exec.Command(control, "--dump", pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("instructions: callgrind_control --dump: %v: %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		matches, _ := filepath.Glob(outFile + ".*")
		for _, m := range matches {
			if total, ok := callgrindTotal(m); ok {
				return float64(total) / float64(n), nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("instructions: no complete callgrind dump at %s.*", outFile)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// callgrindTotal reads the "totals:" line that ends a complete callgrind
// dump (instructions, the default event); ok is false until it is there.
func callgrindTotal(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "totals:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				return 0, false
			}
			v, err := strconv.ParseInt(fields[0], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
