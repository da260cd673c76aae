package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"taskgate/config"
	"taskgate/internal/jsonstr"
)

// Threshold is what a watcher is told when a window's count crosses one of
// the task's thresholds (DESIGN.md §3). Its JSON form is
//
//	{"event":"threshold","task","scope","user","unit","period",
//	 "threshold","used","limit","window_end"}
//
// with user null on task windows, window_end RFC 3339, and used and limit
// integers for requests and tokens but decimal dollar strings ("0.000123")
// for money, as everywhere in taskgate's JSON.
type Threshold struct {
	Task      string
	Scope     string // config.ScopeTask or config.ScopeUser
	User      string // ignored (sent as null) on task windows
	Unit      string // config.UnitRequests, UnitTokens or UnitMoney
	Period    string // config.PeriodMinute … PeriodMonth
	Threshold float64
	Used      int64 // as settled after the crossing call; micro-dollars for money
	Limit     int64 // micro-dollars for money
	WindowEnd time.Time
}

// thresholdJSON is Threshold's wire form, for decoding.
type thresholdJSON struct {
	Event     string          `json:"event"`
	Task      string          `json:"task"`
	Scope     string          `json:"scope"`
	User      *string         `json:"user"`
	Unit      string          `json:"unit"`
	Period    string          `json:"period"`
	Threshold float64         `json:"threshold"`
	Used      json.RawMessage `json:"used"`  // an integer, or a dollar string for money
	Limit     json.RawMessage `json:"limit"` // an integer, or a dollar string for money
	WindowEnd string          `json:"window_end"`
}

// amount is a count as an int64, or micro-dollars as a dollar string.
func amount(unit string, v int64) any {
	if unit == config.UnitMoney {
		return config.FormatMicros(v)
	}
	return v
}

// appendAmount appends a count as an integer, or micro-dollars as a dollar string.
func appendAmount(b []byte, unit string, v int64) []byte {
	if unit == config.UnitMoney {
		return jsonstr.Append(b, config.FormatMicros(v))
	}
	return strconv.AppendInt(b, v, 10)
}

// MarshalJSON renders the watcher payload. It is hand-encoded, as Notify
// runs on a call's path. A threshold that is NaN or infinite is an error.
func (t Threshold) MarshalJSON() ([]byte, error) {
	if math.IsNaN(t.Threshold) || math.IsInf(t.Threshold, 0) {
		return nil, fmt.Errorf("encode threshold: threshold is %v", t.Threshold)
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"event":"threshold","task":`...)
	b = jsonstr.Append(b, t.Task)
	b = append(b, `,"scope":`...)
	b = jsonstr.Append(b, t.Scope)
	b = append(b, `,"user":`...)
	if t.Scope == config.ScopeTask {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, t.User)
	}
	b = append(b, `,"unit":`...)
	b = jsonstr.Append(b, t.Unit)
	b = append(b, `,"period":`...)
	b = jsonstr.Append(b, t.Period)
	b = append(b, `,"threshold":`...)
	b = strconv.AppendFloat(b, t.Threshold, 'g', -1, 64)
	b = append(b, `,"used":`...)
	b = appendAmount(b, t.Unit, t.Used)
	b = append(b, `,"limit":`...)
	b = appendAmount(b, t.Unit, t.Limit)
	b = append(b, `,"window_end":"`...)
	b = t.WindowEnd.AppendFormat(b, time.RFC3339)
	return append(b, `"}`...), nil
}

// UnmarshalJSON reads the watcher payload back (for receivers and tests).
func (t *Threshold) UnmarshalJSON(b []byte) error {
	var w thresholdJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("decode threshold: %w", err)
	}
	if w.Event != "threshold" {
		return fmt.Errorf("decode threshold: event is %q, not \"threshold\"", w.Event)
	}
	end, err := time.Parse(time.RFC3339, w.WindowEnd)
	if err != nil {
		return fmt.Errorf("decode threshold: window_end: %w", err)
	}
	used, err := parseAmount(w.Unit, w.Used)
	if err != nil {
		return fmt.Errorf("decode threshold: used: %w", err)
	}
	limit, err := parseAmount(w.Unit, w.Limit)
	if err != nil {
		return fmt.Errorf("decode threshold: limit: %w", err)
	}
	*t = Threshold{Task: w.Task, Scope: w.Scope, Unit: w.Unit, Period: w.Period,
		Threshold: w.Threshold, Used: used, Limit: limit, WindowEnd: end}
	if w.User != nil {
		t.User = *w.User
	}
	return nil
}

// parseAmount reads an integer, or a dollar string for money.
func parseAmount(unit string, raw json.RawMessage) (int64, error) {
	if unit == config.UnitMoney {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
		return config.ParseDollars(s)
	}
	var n int64
	err := json.Unmarshal(raw, &n)
	return n, err
}

// Detail is the "detail" of the event log's "threshold" event: scope, unit,
// period, threshold, used and limit (int64, or a dollar string for money)
// and window_end (RFC 3339).
func (t Threshold) Detail() map[string]any {
	return map[string]any{
		"scope":      t.Scope,
		"unit":       t.Unit,
		"period":     t.Period,
		"threshold":  t.Threshold,
		"used":       amount(t.Unit, t.Used),
		"limit":      amount(t.Unit, t.Limit),
		"window_end": t.WindowEnd.Format(time.RFC3339),
	}
}

// Delivery results reported through NotifierOptions.OnResult; they are the
// values of taskgate_watcher_deliveries_total's "result" label.
const (
	ResultDelivered = "delivered" // a webhook answered 2xx
	ResultFailed    = "failed"    // every attempt failed, or Close gave up on it
	ResultDropped   = "dropped"   // the queue was full, or the notifier closed
	ResultRetried   = "retried"   // an attempt failed and another is scheduled
)

// NotifierOptions configures a Notifier; the zero value of each field means
// its default.
type NotifierOptions struct {
	// QueueSize is how many deliveries may wait; default 1000.
	QueueSize int
	// Workers is how many deliveries run at once; default 4.
	Workers int
	// Attempts is how many POSTs a delivery may take; default 5.
	Attempts int
	// Backoff is the wait before the first retry, doubling after each
	// failure up to MaxBackoff, with jitter; default 200ms.
	Backoff time.Duration
	// MaxBackoff caps the wait between attempts; default 10s.
	MaxBackoff time.Duration
	// Timeout bounds one POST; default 5s.
	Timeout time.Duration
	// Client sends the POSTs; default a client of its own.
	Client *http.Client
	// OnResult, if set, is told each result (Result* constants); it must
	// be fast and safe for concurrent use.
	OnResult func(result string)
	// Logger receives a warning for each failed delivery; default none.
	Logger *slog.Logger
}

// Notifier delivers threshold payloads to watchers' webhooks in the
// background: Notify never blocks a call, a fixed pool of workers POSTs,
// failures are retried with backoff.
type Notifier struct {
	o      NotifierOptions
	queue  chan *delivery
	ctx    context.Context // cancelled when Close gives up
	cancel context.CancelFunc

	mu      sync.RWMutex // guards closed against pending.Add racing pending.Wait
	closed  bool
	pending sync.WaitGroup // deliveries queued, in flight or waiting to retry
	workers sync.WaitGroup
}

// delivery is one payload for one webhook.
type delivery struct {
	url     string
	body    []byte
	attempt int // attempts made so far
}

// NewNotifier starts a notifier's workers. Stop them with Close.
func NewNotifier(o NotifierOptions) *Notifier {
	if o.QueueSize <= 0 {
		o.QueueSize = 1000
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = 200 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Second
	}
	if o.MaxBackoff < o.Backoff {
		o.MaxBackoff = o.Backoff
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{o: o, queue: make(chan *delivery, o.QueueSize), ctx: ctx, cancel: cancel}
	n.workers.Add(o.Workers)
	for range o.Workers {
		go n.work()
	}
	return n
}

// Notify queues t for each webhook and returns at once. A delivery that
// finds the queue full, or the notifier closed, is dropped and reported as
// ResultDropped.
func (n *Notifier) Notify(webhooks []string, t Threshold) {
	if len(webhooks) == 0 {
		return
	}
	body, err := t.MarshalJSON()
	if err != nil {
		n.logWarn("watcher delivery failed", "error", err)
		for range webhooks {
			n.report(ResultFailed)
		}
		return
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, w := range webhooks {
		if n.closed {
			n.report(ResultDropped)
			continue
		}
		n.pending.Add(1)
		select {
		case n.queue <- &delivery{url: w, body: body}:
		default:
			n.pending.Done()
			n.report(ResultDropped)
			n.logWarn("watcher queue full, delivery dropped", "webhook", redactURL(w))
		}
	}
}

// Close stops taking deliveries and waits until every queued one is
// delivered or has failed, or until ctx ends; then it abandons the rest
// (reported as ResultFailed), stops the workers and returns ctx's error.
// Calls after the first return nil at once.
func (n *Notifier) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()

	done := make(chan struct{})
	go func() { n.pending.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("close watcher notifier: %w", ctx.Err())
		n.cancel() // in-flight POSTs abort, waits end, queued ones fail at once
		<-done
	}
	n.cancel()
	close(n.queue) // safe: closed is set and nothing is pending, so nobody sends
	n.workers.Wait()
	return err
}

// work delivers queued payloads until the queue is closed.
func (n *Notifier) work() {
	defer n.workers.Done()
	for d := range n.queue {
		n.attempt(d)
	}
}

// attempt makes one POST and then finishes the delivery or schedules a retry.
func (n *Notifier) attempt(d *delivery) {
	if n.ctx.Err() != nil {
		n.finish(ResultFailed)
		return
	}
	d.attempt++
	err := n.post(d)
	if err == nil {
		n.finish(ResultDelivered)
		return
	}
	if d.attempt >= n.o.Attempts || n.ctx.Err() != nil {
		n.logWarn("watcher delivery failed", "webhook", redactURL(d.url), "attempts", d.attempt, "error", err)
		n.finish(ResultFailed)
		return
	}
	n.report(ResultRetried)
	go n.retryAfter(d, n.backoff(d.attempt))
}

// retryAfter waits, then queues d again; it does not hold a worker.
func (n *Notifier) retryAfter(d *delivery, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-n.ctx.Done():
		n.finish(ResultFailed)
		return
	}
	// The queue stays open while d is pending, so this send is safe.
	select {
	case n.queue <- d:
	default:
		n.logWarn("watcher queue full, retry dropped", "webhook", redactURL(d.url))
		n.finish(ResultDropped)
	}
}

// backoff is the wait after the given number of failed attempts: Backoff
// doubled per earlier failure, capped at MaxBackoff, jittered into
// [wait/2, wait].
func (n *Notifier) backoff(failures int) time.Duration {
	wait := n.o.Backoff
	for i := 1; i < failures && wait < n.o.MaxBackoff; i++ {
		wait *= 2
	}
	wait = min(wait, n.o.MaxBackoff)
	half := wait / 2
	return half + rand.N(wait-half+1)
}

// post sends one POST; any answer but 2xx is an error.
func (n *Notifier) post(d *delivery) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "taskgate")
	resp, err := n.o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry a secret; it is logged redacted
		}
		return fmt.Errorf("post: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("post: status %d", resp.StatusCode)
	}
	return nil
}

// finish ends a pending delivery with a result.
func (n *Notifier) finish(result string) {
	n.report(result)
	n.pending.Done()
}

func (n *Notifier) report(result string) {
	if n.o.OnResult != nil {
		n.o.OnResult(result)
	}
}

func (n *Notifier) logWarn(msg string, args ...any) {
	if n.o.Logger != nil {
		n.o.Logger.Warn(msg, args...)
	}
}

// redactURL keeps a webhook URL's scheme and host: paths and queries of
// webhooks often hold a token.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(unparsable webhook URL)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}
