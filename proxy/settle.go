package proxy

import (
	"context"
	"strconv"
	"sync"
	"time"

	"taskgate/config"
	"taskgate/guard"
	"taskgate/limits"
	"taskgate/tasks"
	"taskgate/trim"
)

// finish records the call's metrics and journal line and settles its
// reservation. With a store across the network the settlement runs on a
// worker, so its round trip never delays the client; the in-process store,
// and a call served from a lease (which settles into the lease), settle
// inline. It runs exactly once per call.
func (c *call) finish() {
	if c.settled {
		return
	}
	c.settled = true
	taskKey, epName := "", ""
	if c.task != nil {
		taskKey = c.task.Key
	}
	if c.served != nil {
		epName = c.served.ep.Name
	}
	now := time.Now() // the call's end: its latency, events and journal line
	latency := now.Sub(c.start)
	var cm *callMetrics
	if c.task != nil {
		cm = c.s.mc.call(taskKey, epName)
	}
	if cm != nil && c.status == 200 && c.code == "" {
		cm.ok.Inc()
	} else {
		c.s.m.Requests.WithLabelValues(taskKey, epName, strconv.Itoa(c.status), c.code).Inc()
	}
	if c.task == nil {
		c.journal(now, latency, 0, false)
		return
	}
	cm.duration.Observe(latency.Seconds())
	if c.hold == nil {
		c.journal(now, latency, 0, false)
		return
	}
	cost := c.cost()
	if !c.failed && c.served != nil {
		cm.tokensIn.Add(float64(c.in))
		cm.tokensOut.Add(float64(c.out))
		if cost > 0 {
			cm.cost.Add(float64(cost) / 1e6)
		}
	}
	if c.task.MaxTokensPerCall > 0 && guard.TokensPerCallExceeded(c.task.MaxTokensPerCall, c.in+c.out) {
		c.anomaly(guard.KindTokensPerCall, map[string]any{"tokens": c.in + c.out, "max": c.task.MaxTokensPerCall})
	}
	if c.flagged {
		c.s.m.Flags.WithLabelValues(taskKey).Inc()
		detail := map[string]any{}
		if !c.task.Private {
			detail["purpose"] = c.task.Purpose
		}
		c.events = append(c.events, limits.Event{Time: now, Kind: "flag", Task: taskKey, User: c.user, Source: c.source, RequestID: c.id, Detail: detail})
		c.s.log.Warn("flag", "request_id", c.id, "task", taskKey, "user", c.user, "source", c.source)
	}
	ev := c.journal(now, latency, cost, true)
	c.events = append(c.events, limits.Event{Time: now, Kind: "call", Task: taskKey, User: c.user, Source: c.source, RequestID: c.id, Encoded: ev})
	out := limits.Outcome{Failed: c.failed, Flagged: c.flagged, Events: c.events}
	if !c.failed {
		out.Actual = limits.Usage{InputTokens: c.in, OutputTokens: c.out, Money: cost}
	}
	if c.s.lim.InProcess() || (c.hold.Leased() && !c.flagged) {
		// Microseconds, no round trip: cheaper than waking a worker.
		c.s.pending.Add(1)
		c.s.settle(c.id, c.task, c.user, c.hold, out)
		return
	}
	id, hold, task, user := c.id, c.hold, c.task, c.user
	c.s.pending.Add(1)
	c.s.workers.run(func() { c.s.settle(id, task, user, hold, out) })
}

// settle settles one call's hold and signals what the settlement found; it
// ends one pending settlement.
func (s *Server) settle(id string, task *tasks.Task, user string, hold *limits.Hold, out limits.Outcome) {
	defer s.pending.Done()
	t0 := time.Now()
	// No deadline of its own: the store bounds its round trips (store.timeout).
	res, err := s.lim.Settle(context.Background(), hold, out)
	s.mc.settleDur.Observe(time.Since(t0).Seconds())
	if err != nil {
		s.m.StoreErrors.WithLabelValues("settle").Inc()
		s.log.Error("settle failed", "request_id", id, "task", task.Key, "err", err)
		return
	}
	s.signalSettlement(task.Key, user, task.Watchers, res)
}

// signalSettlement tells watchers of crossed thresholds and logs auto-blocks.
func (s *Server) signalSettlement(task, user string, watchers []config.Watcher, res limits.SettleResult) {
	if len(res.Crossings) > 0 {
		var evs []limits.Event
		hooks := make([]string, 0, len(watchers))
		for _, w := range watchers {
			hooks = append(hooks, w.Webhook)
		}
		for _, x := range res.Crossings {
			th := guard.Threshold{Task: x.Task, Scope: x.Scope, User: x.User, Unit: x.Unit, Period: x.Period, Threshold: x.Threshold, Used: x.Used, Limit: x.Limit, WindowEnd: x.WindowEnd}
			if s.notifier != nil && len(hooks) > 0 {
				s.notifier.Notify(hooks, th)
			}
			s.log.Info("threshold", "task", x.Task, "scope", x.Scope, "user", x.User, "unit", x.Unit, "period", x.Period, "threshold", x.Threshold, "used", x.Used, "limit", x.Limit)
			evs = append(evs, limits.Event{Time: time.Now(), Kind: "threshold", Task: x.Task, User: x.User,
				Detail: map[string]any{"scope": x.Scope, "unit": x.Unit, "period": x.Period, "threshold": x.Threshold, "used": x.Used, "limit": x.Limit, "window_end": x.WindowEnd.UTC().Format(time.RFC3339)}})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.lim.AddEvents(ctx, evs...); err != nil {
			s.m.StoreErrors.WithLabelValues("events").Inc()
		}
		cancel()
	}
	if b := res.AutoBlocked; b != nil {
		s.log.Warn("auto-block", "task", task, "user", user, "group", b.Group, "flags_today", res.FlagsToday)
	}
}

// journal writes the call's one structured log line, timed now. With
// withEvent it returns the call's event for the store's journal, taken
// from the line (a copy of its own).
func (c *call) journal(now time.Time, latency time.Duration, cost int64, withEvent bool) []byte {
	rec := &guard.CallRecord{
		RequestID: c.id, User: c.user, Source: c.source, Status: c.status, Code: c.code,
		InputTokens: c.in, OutputTokens: c.out, CostMicros: cost, Latency: latency,
		Trimmed: c.trimmed, Flagged: c.flagged, FailedOver: c.failedOver, Stream: c.stream, Anomalies: c.anomalies,
	}
	if c.key != nil {
		rec.Key = c.key.Name
	}
	if c.task != nil {
		rec.Task = c.task.Key
	}
	if c.served != nil {
		rec.Endpoint = c.served.ep.Name
		rec.Model = c.served.ep.Model
	}
	if c.s.journal == nil && !withEvent {
		rec.Log(c.s.log)
		return nil
	}
	bp := journalBufs.Get().(*[]byte)
	var marks guard.LineMarks
	*bp, marks = rec.AppendLineMarks((*bp)[:0], now)
	if c.s.journal != nil {
		_, _ = c.s.journal.Write(*bp)
	} else {
		rec.Log(c.s.log)
	}
	var ev []byte
	if withEvent {
		ev = guard.LineEventAt(make([]byte, 0, len(*bp)+32), *bp, marks)
	}
	journalBufs.Put(bp)
	return ev
}

// journalBufs are buffers for journal lines; a line is copied by the
// journal writer before Write returns.
var journalBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// countStreamed counts streamed text with the serving endpoint's tokenizer,
// for streams that end without a usage object.
func (c *call) countStreamed(text []byte) int64 {
	tok := c.tokenizer
	if c.served != nil {
		tok = c.served.ep.Tokenizer
	}
	return int64(trim.CountText(tok, string(text)))
}
