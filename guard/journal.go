package guard

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"time"

	"taskgate/config"
	"taskgate/internal/jsonstr"
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
// request_id, task, user, source, key, endpoint, model, status, code,
// input_tokens, output_tokens, cost_micros, cost (dollar string),
// latency_ms (float), trimmed, flagged, failed_over, stream and anomalies.
func (r *CallRecord) Log(l *slog.Logger) {
	if l == nil {
		return
	}
	l.LogAttrs(context.Background(), slog.LevelInfo, "call",
		slog.String("request_id", r.RequestID),
		slog.String("task", r.Task),
		slog.String("user", r.User),
		slog.String("source", r.Source),
		slog.String("key", r.Key),
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

// AppendLine appends the line Log writes through log/slog's JSON handler
// (level info and above), byte for byte, newline included, with t as its
// time, without slog's per-attribute work: the journal's hot path.
func (r *CallRecord) AppendLine(dst []byte, t time.Time) []byte {
	dst, _ = r.AppendLineMarks(dst, t)
	return dst
}

// LineMarks are where a line's parts begin, from the line's start: its
// levelKey, requestID and detailKey.
type LineMarks struct{ level, requestID, detail int }

// AppendLineMarks is AppendLine that also returns the line's marks, for
// LineEventAt (LineEvent looks for them).
func (r *CallRecord) AppendLineMarks(dst []byte, t time.Time) ([]byte, LineMarks) {
	var m LineMarks
	start := len(dst)
	dst = append(dst, `{"time":"`...)
	dst = jsonstr.AppendTime(dst, t)
	m.level = len(dst) + 1 - start
	dst = append(dst, `","level":"INFO","msg":"call","request_id":`...)
	m.requestID = len(dst) - len(requestID) - start
	dst = jsonstr.AppendLog(dst, r.RequestID)
	dst = append(dst, `,"task":`...)
	dst = jsonstr.AppendLog(dst, r.Task)
	dst = append(dst, `,"user":`...)
	dst = jsonstr.AppendLog(dst, r.User)
	dst = append(dst, `,"source":`...)
	dst = jsonstr.AppendLog(dst, r.Source)
	m.detail = len(dst) - start
	dst = append(dst, detailKey...)
	dst = jsonstr.AppendLog(dst, r.Key)
	dst = append(dst, `,"endpoint":`...)
	dst = jsonstr.AppendLog(dst, r.Endpoint)
	dst = append(dst, `,"model":`...)
	dst = jsonstr.AppendLog(dst, r.Model)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, `,"code":`...)
	dst = jsonstr.AppendLog(dst, r.Code)
	dst = r.appendCounts(dst)
	dst = append(dst, `,"anomalies":`...)
	dst = appendStrings(dst, r.anomalies(), jsonstr.Append) // slog marshals it without HTML escaping
	return append(dst, "}\n"...), m
}

// appendCounts appends the attributes from input_tokens to stream, in
// Log's order, each after a comma.
func (r *CallRecord) appendCounts(dst []byte) []byte {
	dst = append(dst, `,"input_tokens":`...)
	dst = strconv.AppendInt(dst, r.InputTokens, 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, r.OutputTokens, 10)
	dst = append(dst, `,"cost_micros":`...)
	dst = strconv.AppendInt(dst, r.CostMicros, 10)
	dst = append(dst, `,"cost":"`...)
	dst = append(config.AppendMicros(dst, r.CostMicros), '"') // digits, a dot and a sign: nothing to escape
	dst = append(dst, `,"latency_ms":`...)
	dst = jsonstr.AppendMilli(dst, r.Latency.Microseconds()) // as AppendFloat(r.latencyMS()), without float formatting
	dst = append(dst, `,"trimmed":`...)
	dst = strconv.AppendInt(dst, int64(r.Trimmed), 10)
	dst = append(dst, `,"flagged":`...)
	dst = strconv.AppendBool(dst, r.Flagged)
	dst = append(dst, `,"failed_over":`...)
	dst = strconv.AppendBool(dst, r.FailedOver)
	dst = append(dst, `,"stream":`...)
	return strconv.AppendBool(dst, r.Stream)
}

// Marks of a journal line's parts: the first place each appears in a line
// is the part's own, since a string's quotes are escaped.
const (
	levelKey  = `,"level":`      // ends the time
	requestID = `,"request_id":` // begins request_id, task, user and source
	detailKey = `,"key":`        // begins the fields from key to anomalies
)

// LineEvent appends the event log's "call" event of a line AppendLine
// wrote: the line's time, kind "call", its request_id, task, user and
// source, and as detail its fields from key to anomalies (those the event
// does not carry itself), as the line writes them. It appends nothing
// when line is not such a line.
func LineEvent(dst, line []byte) []byte {
	m := LineMarks{bytes.Index(line, []byte(levelKey)), bytes.Index(line, []byte(requestID)), bytes.Index(line, []byte(detailKey))}
	if m.level < 0 || m.requestID < m.level || m.detail < m.requestID || !bytes.HasPrefix(line, []byte(`{"time":`)) || !bytes.HasSuffix(line, []byte("}\n")) {
		return dst
	}
	return LineEventAt(dst, line, m)
}

// LineEventAt is LineEvent of a line AppendLineMarks wrote, whose marks it
// returned: no search.
func LineEventAt(dst, line []byte, m LineMarks) []byte {
	dst = append(dst, line[:m.level]...)
	dst = append(dst, `,"kind":"call"`...)
	dst = append(dst, line[m.requestID:m.detail]...)
	dst = append(dst, `,"detail":{`...)
	dst = append(dst, line[m.detail+1:len(line)-2]...)
	return append(dst, "}}"...)
}

// appendStrings appends a string list as a JSON array, each string
// appended by str.
func appendStrings(dst []byte, list []string, str func([]byte, string) []byte) []byte {
	dst = append(dst, '[')
	for i, s := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = str(dst, s)
	}
	return append(dst, ']')
}
