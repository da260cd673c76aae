package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Client credentials and headers every request carries (the fake upstream
// ignores them, so direct and gateway requests are the same bytes).
const (
	benchKey   = "bench-key"
	chatPath   = "/v1/chat/completions"
	benchUsers = 8 // requests spread over this many users
)

// target is where a run sends its calls.
type target struct {
	name string // "direct", "redis", "memory"
	addr string // host:port
	gw   *proc  // the gateway process, nil for direct

	plain  *fasthttp.HostClient // buffers whole responses
	stream *fasthttp.HostClient // streams response bodies
}

// newTarget makes the clients of a target; conns bounds each pool.
func newTarget(name, addr string, gw *proc, conns int) *target {
	mk := func(stream bool) *fasthttp.HostClient {
		return &fasthttp.HostClient{
			Addr:                addr,
			MaxConns:            conns,
			ReadTimeout:         60 * time.Second,
			WriteTimeout:        60 * time.Second,
			MaxIdleConnDuration: 5 * time.Minute,
			MaxResponseBodySize: 64 << 20,
			StreamResponseBody:  stream,
		}
	}
	return &target{name: name, addr: addr, gw: gw, plain: mk(false), stream: mk(true)}
}

// chatBody is a short chat request to task; stream asks for SSE.
func chatBody(task string, stream bool) []byte {
	s := ""
	if stream {
		s = `"stream":true,`
	}
	return []byte(`{"model":"` + task + `",` + s + `"max_tokens":64,"messages":[{"role":"system","content":"You count stock."},{"role":"user","content":"How many boxes are on shelf 4?"}]}`)
}

// setRequest fills req as a POST of body to t for user number u.
func setRequest(req *fasthttp.Request, t *target, body []byte, u int) {
	req.SetRequestURI("http://" + t.addr + chatPath)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer "+benchKey)
	req.Header.Set("X-Taskgate-User", "user-"+strconv.Itoa(u%benchUsers))
	req.SetBody(body)
}

// closedResult is what a closed-loop run measured.
type closedResult struct {
	calls, errors int64
	elapsed       time.Duration
	cpu           float64 // gateway CPU seconds during the run (0 for direct)
	store         storeDelta
	firstErr      string
}

// throughput is calls per second.
func (r closedResult) throughput() float64 { return float64(r.calls) / r.elapsed.Seconds() }

// cpuPerCall is gateway CPU milliseconds per call.
func (r closedResult) cpuPerCall() float64 {
	if r.calls == 0 {
		return 0
	}
	return r.cpu / float64(r.calls) * 1000
}

// checkBody reports whether a 200 answer's body is whole: a JSON object with
// choices, or an SSE stream ending in [DONE].
func checkBody(body []byte, stream bool) error {
	if stream {
		if !bytes.Contains(body, []byte("data: [DONE]")) {
			return fmt.Errorf("stream without [DONE]: %.120q", body)
		}
		return nil
	}
	if !bytes.Contains(body, []byte(`"choices"`)) {
		return fmt.Errorf("answer without choices: %.120q", body)
	}
	return nil
}

// errorOnce keeps the first error message of a run.
type errorOnce struct {
	once sync.Once
	msg  string
}

func (e *errorOnce) set(err error) { e.once.Do(func() { e.msg = err.Error() }) }

// closedLoop runs conns workers, each sending its next call as soon as the
// last one finished, for dur. Calls whose answer is not a whole 200 count as
// errors. settle is waited after the run before CPU and store are read, so
// settlements finishing after the answers are included.
func closedLoop(t *target, body []byte, stream bool, conns int, dur time.Duration, st *storeWatch) (closedResult, error) {
	var calls, errs atomic.Int64
	var first errorOnce
	cpu0, err := t.cpu()
	if err != nil {
		return closedResult{}, err
	}
	s0, err := st.snapshot()
	if err != nil {
		return closedResult{}, err
	}
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(res)
			setRequest(req, t, body, w)
			for time.Now().Before(deadline) {
				err := t.plain.Do(req, res)
				if err == nil && res.StatusCode() != fasthttp.StatusOK {
					err = fmt.Errorf("status %d: %.200s", res.StatusCode(), res.Body())
				}
				if err == nil {
					err = checkBody(res.Body(), stream)
				}
				if err != nil {
					errs.Add(1)
					first.set(err)
					time.Sleep(time.Millisecond)
					continue
				}
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(150 * time.Millisecond) // late settlements
	cpu1, err := t.cpu()
	if err != nil {
		return closedResult{}, err
	}
	s1, err := st.snapshot()
	if err != nil {
		return closedResult{}, err
	}
	return closedResult{calls: calls.Load(), errors: errs.Load(), elapsed: elapsed, cpu: cpu1 - cpu0,
		store: s1.sub(s0), firstErr: first.msg}, nil
}

// cpu is the gateway's CPU seconds so far (0 for direct).
func (t *target) cpu() (float64, error) {
	if t.gw == nil {
		return 0, nil
	}
	return cpuSeconds(t.gw.pid())
}

// openResult is what an open-loop run measured; durations are from each
// request's scheduled send time.
type openResult struct {
	calls, errors int64
	latency       []time.Duration // whole answer, sorted
	ttfb          []time.Duration // first body byte (streams), sorted
	lateness      []time.Duration // how late the sends left, sorted
	cpu           float64
	store         storeDelta
	firstErr      string
}

// openLoop sends calls at a fixed rate for dur, each in its own goroutine,
// whatever the earlier calls are doing (open loop).
func openLoop(t *target, body []byte, stream bool, rate int, dur time.Duration, st *storeWatch) (openResult, error) {
	n := int(dur.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	ttfb := make([]time.Duration, n)
	late := make([]time.Duration, n)
	ok := make([]bool, n)
	var errs atomic.Int64
	var first errorOnce
	cpu0, err := t.cpu()
	if err != nil {
		return openResult{}, err
	}
	s0, err := st.snapshot()
	if err != nil {
		return openResult{}, err
	}
	var wg sync.WaitGroup
	start := time.Now().Add(20 * time.Millisecond)
	for i := range n {
		sched := start.Add(time.Duration(i) * interval)
		if d := time.Until(sched); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			late[i] = time.Since(sched)
			var err error
			if stream {
				ttfb[i], lat[i], err = streamCall(t, body, i, sched)
			} else {
				lat[i], err = plainCall(t, body, i, sched)
			}
			if err != nil {
				errs.Add(1)
				first.set(err)
				return
			}
			ok[i] = true
		}()
	}
	wg.Wait()
	time.Sleep(150 * time.Millisecond)
	cpu1, err := t.cpu()
	if err != nil {
		return openResult{}, err
	}
	s1, err := st.snapshot()
	if err != nil {
		return openResult{}, err
	}
	r := openResult{errors: errs.Load(), cpu: cpu1 - cpu0, store: s1.sub(s0), firstErr: first.msg}
	for i := range n {
		if ok[i] {
			r.calls++
			r.latency = append(r.latency, lat[i])
			r.lateness = append(r.lateness, late[i])
			if stream {
				r.ttfb = append(r.ttfb, ttfb[i])
			}
		}
	}
	slices.Sort(r.latency)
	slices.Sort(r.ttfb)
	slices.Sort(r.lateness)
	return r, nil
}

// plainCall sends one buffered call and returns its latency from sched.
func plainCall(t *target, body []byte, u int, sched time.Time) (time.Duration, error) {
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	setRequest(req, t, body, u)
	if err := t.plain.Do(req, res); err != nil {
		return 0, fmt.Errorf("%s: %w", t.name, err)
	}
	d := time.Since(sched)
	if res.StatusCode() != fasthttp.StatusOK {
		return 0, fmt.Errorf("%s: status %d: %.200s", t.name, res.StatusCode(), res.Body())
	}
	return d, checkBody(res.Body(), false)
}

// streamCall sends one streamed call and returns the time from sched to its
// first body byte and to its end.
func streamCall(t *target, body []byte, u int, sched time.Time) (first, total time.Duration, err error) {
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	setRequest(req, t, body, u)
	if err := t.stream.Do(req, res); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", t.name, err)
	}
	defer res.CloseBodyStream() //nolint:errcheck // the body was read to its end or the call failed
	if res.StatusCode() != fasthttp.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.BodyStream(), 512))
		return 0, 0, fmt.Errorf("%s: status %d: %.200s", t.name, res.StatusCode(), b)
	}
	r := res.BodyStream()
	buf := make([]byte, 4096)
	var all []byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if first == 0 {
				first = time.Since(sched)
			}
			all = append(all, buf[:n]...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%s: read stream: %w", t.name, err)
		}
	}
	total = time.Since(sched)
	return first, total, checkBody(all, true)
}

// pct is the p-th percentile (0..100) of sorted durations, nearest rank.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// median is the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// words are the vocabulary of the generated prose.
var words = strings.Fields(`the a of and to in is was that for on with as by at from it this be are
were which an or have has had not but they their there been one all would will can more
when who what some into its only other than then time could these two may first new
years people way over such after most also made many before must through back where much
should well because each just those how too little state good very make world still own
see men work long here between both life being under never day same another know while
last might great since against right three states old year take end does general high
again house upon use place small found public part every told came went thought among
river market village teacher garden winter morning evening summer letter story question
number water country light window mountain history voice paper money music family
warehouse shelf inventory carton pallet invoice supplier delivery order quantity record`)

// prose is about size bytes of English-like text, different for each seed.
func prose(seed uint64, size int) string {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	var b strings.Builder
	b.Grow(size + 64)
	for b.Len() < size {
		n := 6 + r.IntN(14)
		for i := range n {
			w := words[r.IntN(len(words))]
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			} else {
				b.WriteByte(' ')
			}
			b.WriteString(w)
			if i == n/2 && r.IntN(3) == 0 {
				b.WriteByte(',')
			}
		}
		b.WriteString(". ")
		if r.IntN(8) == 0 {
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// promptBody is a chat request to task with one user message of text.
func promptBody(task, text string) []byte {
	msg, _ := json.Marshal(text) // a string always marshals
	return []byte(`{"model":"` + task + `","max_tokens":16,"messages":[{"role":"user","content":` + string(msg) + `}]}`)
}

// oneCall sends body to t and returns its latency and the answer's
// X-Taskgate-Trimmed header; a non-200 answer is an error.
func oneCall(t *target, body []byte) (time.Duration, string, error) {
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	setRequest(req, t, body, 0)
	start := time.Now()
	if err := t.plain.Do(req, res); err != nil {
		return 0, "", fmt.Errorf("%s: %w", t.name, err)
	}
	d := time.Since(start)
	if res.StatusCode() != fasthttp.StatusOK {
		return 0, "", fmt.Errorf("%s: status %d: %.300s", t.name, res.StatusCode(), res.Body())
	}
	return d, string(res.Header.Peek("X-Taskgate-Trimmed")), nil
}

// heldStreams opens n streams to t (whose upstream holds them after the
// first event), at most 50 opening at a time, and waits until each has
// received its first byte or failed, or timeout passes. It returns how many
// are open, the first failure, and a function that abandons them (call it
// after the gateway is gone, so that nothing waits on a drain).
func heldStreams(t *target, body []byte, n int, timeout time.Duration) (int, string, func()) {
	client := &fasthttp.HostClient{
		Addr: t.addr, MaxConns: n + 16, ReadTimeout: holdDelay, WriteTimeout: time.Minute,
		StreamResponseBody: true,
	}
	var open atomic.Int64
	var first errorOnce
	opened := make(chan struct{}, n)
	release := make(chan struct{})
	sem := make(chan struct{}, 50)
	for i := range n {
		go func() {
			sem <- struct{}{}
			req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			setRequest(req, t, body, i)
			defer fasthttp.ReleaseRequest(req)
			err := client.Do(req, res)
			if err == nil {
				buf := make([]byte, 512)
				k, rerr := res.BodyStream().Read(buf)
				switch {
				case res.StatusCode() != fasthttp.StatusOK:
					err = fmt.Errorf("status %d: %.200s", res.StatusCode(), buf[:k])
				case k == 0:
					err = fmt.Errorf("no first byte: %v", rerr)
				}
			}
			<-sem
			if err != nil {
				first.set(err)
				opened <- struct{}{}
				return
			}
			open.Add(1)
			opened <- struct{}{}
			<-release
			if rc, ok := res.BodyStream().(fasthttp.ReadCloserWithError); ok {
				_ = rc.CloseWithError(errors.New("benchmark done"))
			}
		}()
	}
	deadline := time.After(timeout)
wait:
	for range n {
		select {
		case <-opened:
		case <-deadline:
			break wait
		}
	}
	return int(open.Load()), first.msg, func() { close(release) }
}
