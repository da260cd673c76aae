package proxy

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"taskgate/limits"
)

// Metrics holds every taskgate metric (DESIGN §8). No metric has a user label.
type Metrics struct {
	Registry *prometheus.Registry

	Requests           *prometheus.CounterVec   // task, endpoint, status, code
	Duration           *prometheus.HistogramVec // task, endpoint
	UpstreamTTFB       *prometheus.HistogramVec // endpoint
	Tokens             *prometheus.CounterVec   // task, endpoint, direction
	Cost               *prometheus.CounterVec   // task, endpoint
	LimitRefusals      *prometheus.CounterVec   // task, scope, unit, period
	LimitUsageRatio    *prometheus.GaugeVec     // task, unit, period
	CapabilityRefusals *prometheus.CounterVec   // task, need
	SoftNeedsUnmet     *prometheus.CounterVec   // task, need
	Anomalies          *prometheus.CounterVec   // task, kind
	TrimmedMessages    *prometheus.CounterVec   // task
	UpstreamErrors     *prometheus.CounterVec   // endpoint, kind
	Failovers          *prometheus.CounterVec   // endpoint, kind
	StoreErrors        *prometheus.CounterVec   // op
	StoreDuration      *prometheus.HistogramVec // op
	StoreDegraded      prometheus.Gauge
	ConfigReloads      *prometheus.CounterVec // result
	Flags              *prometheus.CounterVec // task
	WatcherDeliveries  *prometheus.CounterVec // result
	BreakerOpen        *prometheus.GaugeVec   // endpoint
	ActiveStreams      prometheus.Gauge
}

// NewMetrics registers the metrics in a fresh registry (with the Go and
// process collectors).
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{Registry: r}
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_requests_total", Help: "Calls answered, by task, endpoint, HTTP status and error code."}, []string{"task", "endpoint", "status", "code"})
	m.Duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskgate_request_duration_seconds", Help: "Whole-call latency seen by the gateway.", Buckets: latency}, []string{"task", "endpoint"})
	m.UpstreamTTFB = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskgate_upstream_ttfb_seconds", Help: "Time to the upstream's response headers.", Buckets: latency}, []string{"endpoint"})
	m.Tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_tokens_total", Help: "Tokens used, by direction (input, output)."}, []string{"task", "endpoint", "direction"})
	m.Cost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_cost_dollars_total", Help: "Money spent, in dollars (summed from exact micro-dollar costs)."}, []string{"task", "endpoint"})
	m.LimitRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_limit_refusals_total", Help: "Calls refused by a limit."}, []string{"task", "scope", "unit", "period"})
	m.LimitUsageRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskgate_limit_usage_ratio", Help: "Used (with reserved) over limit of a task window, as last seen by this replica."}, []string{"task", "unit", "period"})
	m.CapabilityRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_capability_refusals_total", Help: "Calls refused because no endpoint has a hard need."}, []string{"task", "need"})
	m.SoftNeedsUnmet = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_soft_needs_unmet_total", Help: "Calls served by an endpoint lacking a soft need."}, []string{"task", "need"})
	m.Anomalies = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_anomalies_total", Help: "Anomalies signalled (never blocked)."}, []string{"task", "kind"})
	m.TrimmedMessages = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_trimmed_messages_total", Help: "Messages dropped to fit a model's window."}, []string{"task"})
	m.UpstreamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_upstream_errors_total", Help: "Failed upstream tries, by kind (connect, timeout, status_5xx, status_429, auth, …)."}, []string{"endpoint", "kind"})
	m.Failovers = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_failovers_total", Help: "Calls moved on from an endpoint to the next, by the failure's kind."}, []string{"endpoint", "kind"})
	m.StoreErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_store_errors_total", Help: "Store operations that failed."}, []string{"op"})
	m.StoreDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskgate_store_duration_seconds", Help: "Store operation latency.", Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"op"})
	m.StoreDegraded = prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskgate_store_degraded", Help: "1 while limits are counted in process because the store is down (fail_open)."})
	m.ConfigReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_config_reloads_total", Help: "Config reloads, by result (success, error)."}, []string{"result"})
	m.Flags = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_flags_total", Help: "Answers the model flagged as off-purpose."}, []string{"task"})
	m.WatcherDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_watcher_deliveries_total", Help: "Watcher webhook deliveries, by result."}, []string{"result"})
	m.BreakerOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskgate_breaker_open", Help: "1 while an endpoint's circuit breaker is open (0.5 half-open)."}, []string{"endpoint"})
	m.ActiveStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskgate_active_streams", Help: "Streams being relayed now."})
	r.MustRegister(m.Requests, m.Duration, m.UpstreamTTFB, m.Tokens, m.Cost, m.LimitRefusals, m.LimitUsageRatio,
		m.CapabilityRefusals, m.SoftNeedsUnmet, m.Anomalies, m.TrimmedMessages, m.UpstreamErrors, m.Failovers,
		m.StoreErrors, m.StoreDuration, m.StoreDegraded, m.ConfigReloads, m.Flags, m.WatcherDeliveries, m.BreakerOpen, m.ActiveStreams,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Names lists the names of every taskgate_ metric registered (histograms by
// their base name).
func (m *Metrics) Names() []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		m.Registry.Describe(ch)
		close(ch)
	}()
	var out []string
	for d := range ch {
		s := d.String()
		const k = `fqName: "`
		i := strings.Index(s, k)
		if i < 0 {
			continue
		}
		s = s[i+len(k):]
		if j := strings.IndexByte(s, '"'); j >= 0 {
			out = append(out, s[:j])
		}
	}
	return out
}

// callMetrics are the metric children an answered call of one task through
// one endpoint updates, looked up once instead of by label values on every
// call.
type callMetrics struct {
	ok                  prometheus.Counter  // taskgate_requests_total with status 200 and no code
	duration            prometheus.Observer // taskgate_request_duration_seconds
	tokensIn, tokensOut prometheus.Counter  // taskgate_tokens_total
	cost                prometheus.Counter  // taskgate_cost_dollars_total
}

// childCache keeps the metric children of each task and endpoint pair and of
// each task window's usage ratio. Children stay valid across reloads (the
// vectors are never reset).
type childCache struct {
	m                     *Metrics
	reserveDur, settleDur prometheus.Observer // taskgate_store_duration_seconds
	mu                    sync.RWMutex
	calls                 map[[2]string]*callMetrics // task, endpoint
	ratios                map[string][]ratioGauge    // by task, in the order of its decisions' ratios
}

// ratioGauge is the usage ratio gauge of one window of a task.
type ratioGauge struct {
	unit, period string
	g            prometheus.Gauge
}

func newChildCache(m *Metrics) *childCache {
	return &childCache{m: m, calls: map[[2]string]*callMetrics{}, ratios: map[string][]ratioGauge{},
		reserveDur: m.StoreDuration.WithLabelValues("reserve"), settleDur: m.StoreDuration.WithLabelValues("settle")}
}

// call returns the children of task and endpoint.
func (cc *childCache) call(task, endpoint string) *callMetrics {
	k := [2]string{task, endpoint}
	cc.mu.RLock()
	cm := cc.calls[k]
	cc.mu.RUnlock()
	if cm != nil {
		return cm
	}
	cm = &callMetrics{
		ok:        cc.m.Requests.WithLabelValues(task, endpoint, "200", ""),
		duration:  cc.m.Duration.WithLabelValues(task, endpoint),
		tokensIn:  cc.m.Tokens.WithLabelValues(task, endpoint, "input"),
		tokensOut: cc.m.Tokens.WithLabelValues(task, endpoint, "output"),
		cost:      cc.m.Cost.WithLabelValues(task, endpoint),
	}
	cc.mu.Lock()
	cc.calls[k] = cm
	cc.mu.Unlock()
	return cm
}

// setRatios sets the usage ratio gauges of a task's windows. A task's
// decisions list its windows in one order, so its gauges are looked up
// once per call, not once per window.
func (cc *childCache) setRatios(task string, ratios []limits.Ratio) {
	if len(ratios) == 0 {
		return
	}
	cc.mu.RLock()
	gs := cc.ratios[task]
	cc.mu.RUnlock()
	same := len(gs) == len(ratios)
	for i := 0; same && i < len(ratios); i++ {
		same = gs[i].unit == ratios[i].Unit && gs[i].period == ratios[i].Period
	}
	if !same { // first call, or the task's limits changed
		gs = make([]ratioGauge, len(ratios))
		for i, r := range ratios {
			gs[i] = ratioGauge{unit: r.Unit, period: r.Period, g: cc.m.LimitUsageRatio.WithLabelValues(task, r.Unit, r.Period)}
		}
		cc.mu.Lock()
		cc.ratios[task] = gs
		cc.mu.Unlock()
	}
	for i, r := range ratios {
		gs[i].g.Set(r.Ratio)
	}
}
