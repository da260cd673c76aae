package guard

import (
	"context"
	"log/slog"
	"time"

	"taskgate/config"
)

// CallRecord is the journal entry of one call (DESIGN.md §7). It holds no
// secret: Key is the client key's name, never its secret.
type CallRecord struct {
	RequestID    string
	Key          string // the client key's name
	Task         string
	User         string
	Source       string
	Endpoint     string // the endpoint's name that answered (or was tried last)
	Model        string // the model sent upstream
	Status       int    // the HTTP status given to the client
	Code         string // the error code, "" on success
	InputTokens  int64
	OutputTokens int64
	CostMicros   int64 // settled cost in micro-dollars
	Latency      time.Duration
	Trimmed      int  // messages dropped to fit the window
	Flagged      bool // the model flagged the call off-purpose
	FailedOver   bool // another endpoint was tried before the one that answered
	Stream       bool
	Anomalies    []string // anomaly kinds signalled for the call
}

// noAnomalies renders an empty list as [] rather than null.
var noAnomalies = []string{}

func (r *CallRecord) anomalies() []string {
	if len(r.Anomalies) == 0 {
		return noAnomalies
	}
	return r.Anomalies
}

// latencyMS is the latency in milliseconds, with microsecond precision.
func (r *CallRecord) latencyMS() float64 {
	return float64(r.Latency.Microseconds()) / 1000
}

// Log writes the record as one info line, msg "call", with the attributes
// request_id, key, task, user, source, endpoint, model, status, code,
// input_tokens, output_tokens, cost_micros, cost (dollar string),
// latency_ms (float), trimmed, flagged, failed_over, stream and anomalies.
func (r *CallRecord) Log(l *slog.Logger) {
	if l == nil {
		return
	}
	l.LogAttrs(context.Background(), slog.LevelInfo, "call",
		slog.String("request_id", r.RequestID),
		slog.String("key", r.Key),
		slog.String("task", r.Task),
		slog.String("user", r.User),
		slog.String("source", r.Source),
		slog.String("endpoint", r.Endpoint),
		slog.String("model", r.Model),
		slog.Int("status", r.Status),
		slog.String("code", r.Code),
		slog.Int64("input_tokens", r.InputTokens),
		slog.Int64("output_tokens", r.OutputTokens),
		slog.Int64("cost_micros", r.CostMicros),
		slog.String("cost", config.FormatMicros(r.CostMicros)),
		slog.Float64("latency_ms", r.latencyMS()),
		slog.Int("trimmed", r.Trimmed),
		slog.Bool("flagged", r.Flagged),
		slog.Bool("failed_over", r.FailedOver),
		slog.Bool("stream", r.Stream),
		slog.Any("anomalies", r.anomalies()),
	)
}

// Detail is the "detail" of the event log's "call" event: the record's
// fields except those the event carries itself (task, user, source,
// request_id), under the same names as in Log.
func (r *CallRecord) Detail() map[string]any {
	return map[string]any{
		"key":           r.Key,
		"endpoint":      r.Endpoint,
		"model":         r.Model,
		"status":        r.Status,
		"code":          r.Code,
		"input_tokens":  r.InputTokens,
		"output_tokens": r.OutputTokens,
		"cost_micros":   r.CostMicros,
		"cost":          config.FormatMicros(r.CostMicros),
		"latency_ms":    r.latencyMS(),
		"trimmed":       r.Trimmed,
		"flagged":       r.Flagged,
		"failed_over":   r.FailedOver,
		"stream":        r.Stream,
		"anomalies":     r.anomalies(),
	}
}
