package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"taskgate/config"
	"taskgate/guard"
	"taskgate/internal/jsonscan"
	"taskgate/internal/jsonstr"
	"taskgate/limits"
	"taskgate/tasks"
	"taskgate/trim"
)

// Hostile-input bounds (documented in the README).
const (
	maxJSONDepth = 64
	maxMessages  = 10000
	maxParts     = 1000
	leaseMargin  = 30 * time.Second
)

// call is the state of one client call along the path.
type call struct {
	top   topFields // the body's top-level fields
	s     *Server
	st    *state
	rt    *route
	id    string // a view of idBuf
	idBuf [36]byte
	start time.Time

	hdr    clientHeaders
	key    *tasks.Key
	task   *tasks.Task
	user   string
	source string
	model  string // the body's model as sent by the client

	body             []byte // the body to forward (trimmed, instruction added)
	raw              []byte // the body as the client sent it (top was read from it)
	stream           bool
	clientWantsUsage bool
	needs            tasks.Needs
	endpoints        []*upstream // qualifying, preferred first
	trimmed          int
	tokenizer        string // the first qualifying endpoint's
	promptTokens     int64
	maxOut           int64 // the body's stated output maximum, 0 if none
	estMoney         int64 // the reserved money estimate, micro-dollars
	images           int64 // images asked for (images route)

	endpointBuf [4]*upstream // c.endpoints' first storage

	decision  limits.Decision
	hold      *limits.Hold
	holdSpace limits.Hold // where Reserve makes hold (a call reserves once)
	anomalies []string
	events    []limits.Event
	eventBuf  [1]limits.Event // events' first storage: most calls have one event

	// outcome
	served     *upstream
	failedOver bool
	status     int
	code       string
	in, out    int64 // actual usage
	haveUsage  bool
	flagged    bool
	failed     bool // upstream failed: refund tokens and money
	settled    bool
}

// handler returns the fiber handler for a route.
func (s *Server) handler(rt *route) fiber.Handler {
	return func(fc *fiber.Ctx) error {
		c := &call{s: s, st: s.state.Load(), rt: rt, start: time.Now()}
		// The id lives in the call (no allocation of its own); its bytes
		// never change, and what keeps the id keeps the call.
		if id := s.appendRequestID(c.idBuf[:0]); len(id) <= len(c.idBuf) {
			c.id = unsafe.String(unsafe.SliceData(id), len(id))
		} else {
			c.id = string(id) // not reached: the prefix is 12 bytes, the number at most 13
		}
		c.events = c.eventBuf[:0]
		fc.Response().Header.SetCanonical(view("X-Request-Id"), view(c.id)) // as fasthttp writes it: no normalizing
		if e := c.prepare(fc); e != nil {
			return c.refuse(fc, e)
		}
		return c.forward(fc)
	}
}

// prepare runs every step before forwarding: auth, identify, needs, trim,
// reserve. An error it returns is answered as is; nothing was counted
// unless a hold exists (which refuse settles).
func (c *call) prepare(fc *fiber.Ctx) *apiError {
	reg := c.st.reg
	c.hdr.read(&fc.Request().Header)
	c.key = reg.Authenticate(bearerToken(c.hdr.auth))
	if c.key == nil {
		return newError(401, "invalid_api_key", "missing or invalid API key: send Authorization: Bearer <key>")
	}
	body := fc.Request().Body()
	if c.hdr.encoded {
		// Bounded by the limit the app enforces as sent (body_limit as at start).
		var e *apiError
		if body, e = decodedBody(fc.Request(), fc.App().Config().BodyLimit); e != nil {
			return e
		}
	}
	if e := c.top.readChecked(body, c.rt.fieldNeeds); e != nil {
		return e
	}
	m := c.top.model.result()
	if m.Exists() && m.Type != gjson.String {
		return invalidRequest("model", "model must be a string")
	}
	c.model = strings.Clone(m.Str) // m.Str may view the request body, which fasthttp reuses
	if st := c.top.stream.result(); st.Exists() {
		if st.Type != gjson.True && st.Type != gjson.False {
			return invalidRequest("stream", "stream must be a boolean")
		}
		c.stream = st.Type == gjson.True && c.rt.streams
	}
	if c.stream {
		c.clientWantsUsage = c.top.streamOptions.result().Get("include_usage").Type == gjson.True
	}

	// Task.
	if e := c.identifyTask(); e != nil {
		return e
	}
	if !c.task.Enabled {
		return newError(403, "task_disabled", "task "+c.task.Key+" is disabled")
	}
	// User and source.
	if e := c.identifyUser(); e != nil {
		return e
	}
	if c.user == "" && c.task.RequireUser {
		return &apiError{Status: 400, Code: "user_required", Message: "task " + c.task.Key + " requires a user: send X-Taskgate-User, safety_identifier or user", NoRetry: true}
	}
	if src := c.hdr.source; len(src) > 0 {
		c.source = string(src)
	} else {
		c.source = c.key.Source
	}

	// Needs.
	if e := c.routeChecks(); e != nil {
		return e
	}
	c.needs = c.task.Declared | c.bodyNeeds(body)
	eps, missing := c.task.Qualifying(c.needs)
	if missing != 0 {
		for _, n := range missing.Names() {
			c.s.m.CapabilityRefusals.WithLabelValues(c.task.Key, n).Inc()
		}
		return &apiError{Status: 400, Code: "missing_capability", NoRetry: true,
			Message: "no endpoint of task " + c.task.Key + " can serve this call: it needs " + missing.String()}
	}
	if c.model != "" && c.model != c.task.Key {
		eps = tasks.Prefer(eps, c.model)
	}
	if c.needs&tasks.JSON != 0 && eps[0].Capabilities&tasks.JSON == 0 {
		c.s.m.SoftNeedsUnmet.WithLabelValues(c.task.Key, config.NeedJSON).Inc()
	}
	c.endpoints = c.endpointBuf[:0] // appends past it allocate
	for _, ep := range eps {
		if up := c.st.upstreams[ep.Name]; up != nil {
			c.endpoints = append(c.endpoints, up)
		}
	}
	c.tokenizer = eps[0].Tokenizer

	// Self-flag instruction, then trim and count.
	c.body, c.raw = body, body
	if c.task.SelfFlag {
		var err error
		switch c.rt {
		case routeChat:
			c.body, err = guard.InjectChat(c.body, c.task.Purpose)
		case routeResponses:
			c.body, err = guard.InjectResponses(c.body, c.task.Purpose)
		}
		if err != nil {
			return invalidRequest("", "cannot add the task's instruction: "+err.Error())
		}
	}
	if e := c.count(eps); e != nil {
		return e
	}

	// Source anomaly: signalled, never blocking.
	if !guard.SourceExpected(c.task.Sources, c.source) {
		c.anomaly(guard.KindSource, map[string]any{"source": c.source, "expected": c.task.Sources})
	}
	return c.reserve(eps)
}

// bodyNeeds is what body asks for (DESIGN.md §4), as tasks.DetectChat and
// DetectResponses find it, from what the top-level read and routeChecks
// found on their way: no pass of its own.
func (c *call) bodyNeeds(body []byte) tasks.Needs {
	n := c.rt.needs | c.top.needs
	if c.rt == routeChat && c.top.dups {
		// routeChecks read the first messages field; every one counts.
		n |= tasks.DetectChat(body)
	}
	return n
}

// identifyTask resolves the task per DESIGN §3 (c.hdr read).
func (c *call) identifyTask() *apiError {
	reg := c.st.reg
	if h := unsafe.String(unsafe.SliceData(c.hdr.task), len(c.hdr.task)); h != "" {
		t := reg.Task(h)
		if t == nil {
			return newError(404, "unknown_task", "unknown task "+quote(h)+" (X-Taskgate-Task)")
		}
		c.task = t
	} else if t := reg.Task(c.model); c.model != "" && t != nil {
		c.task = t
	} else if c.key.Only != nil {
		c.task = c.key.Only
	} else if c.model != "" && looksLikeTask(c.model) {
		return newError(404, "unknown_task", "unknown task "+quote(c.model)+" (model)")
	} else {
		return &apiError{Status: 400, Code: "task_required", Message: "name a task: set model to a task key or send X-Taskgate-Task", Param: "model"}
	}
	if !c.key.MayCall(c.task.Key) {
		return newError(403, "task_not_allowed", "this key may not call task "+c.task.Key)
	}
	return nil
}

// looksLikeTask reports whether a model name is shaped like a task key
// (lowercase words joined by dots), so an unknown one is reported as such.
func looksLikeTask(s string) bool {
	if !strings.Contains(s, ".") {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// identifyUser resolves the user: the key's fixed user, else the header,
// else safety_identifier, else user.
func (c *call) identifyUser() *apiError {
	if c.key.User != "" {
		c.user = c.key.User
		return nil
	}
	if h := c.hdr.user; len(h) > 0 {
		c.user = string(h)
		return nil
	}
	for _, f := range []string{"safety_identifier", "user"} {
		v := c.top.get(f)
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		if v.Type != gjson.String {
			return invalidRequest(f, f+" must be a string")
		}
		if v.Str != "" {
			c.user = strings.Clone(v.Str) // it may view the request body
			return nil
		}
	}
	return nil
}

// routeChecks checks the shape of the fields the route relies on.
func (c *call) routeChecks() *apiError {
	switch c.rt {
	case routeChat:
		msgs := c.top.messages.result()
		if !msgs.IsArray() {
			return invalidRequest("messages", "messages must be an array of message objects")
		}
		if !c.top.listed {
			c.top.list = c.top.listBuf[:0]
			jsonscan.EachElem(msgs.Raw, func(m string) bool {
				c.top.addMessage(m)
				return len(c.top.list) <= maxMessages
			})
			c.top.listed = true
		}
		for _, m := range c.top.list {
			if jsonscan.Kind(m) != '{' {
				return invalidRequest("messages", "each message must be an object")
			}
			parts := "" // a message with no '[' has no parts list
			if strings.IndexByte(m, '[') >= 0 {
				parts, _, _ = jsonscan.Field(m, "content")
			}
			if jsonscan.Kind(parts) == '[' {
				k := 0
				jsonscan.EachElem(parts, func(p string) bool {
					k++
					if jsonscan.Kind(p) == '{' {
						c.top.needs |= tasks.PartNeeds(gjson.Result{Type: gjson.JSON, Raw: p})
					}
					return k <= maxParts
				})
				if k > maxParts {
					return invalidRequest("messages", "a message has more than 1000 content parts")
				}
			}
		}
		if n := len(c.top.list); n > maxMessages {
			return invalidRequest("messages", "more than 10000 messages")
		} else if n == 0 {
			return invalidRequest("messages", "messages must not be empty")
		}
	case routeEmbeddings:
		if !c.top.input.Exists() {
			return invalidRequest("input", "input is required")
		}
	case routeCompletions:
		if !c.top.prompt.Exists() {
			return invalidRequest("prompt", "prompt is required")
		}
	case routeResponses:
		if !c.top.input.Exists() && !c.top.previousResponseID.Exists() {
			return invalidRequest("input", "input is required")
		}
	case routeImages:
		p := c.top.prompt.result()
		if p.Type != gjson.String {
			return invalidRequest("prompt", "prompt must be a string")
		}
		c.images = 1
		if n := c.top.n.result(); n.Exists() {
			if n.Type != gjson.Number || n.Int() < 1 || n.Int() > 128 {
				return invalidRequest("n", "n must be an integer from 1 to 128")
			}
			c.images = n.Int()
		}
	}
	// The stated output maximum: the first of the route's fields, in order.
	for _, f := range c.rt.maxOutput {
		v := c.top.get(f)
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		if v.Type != gjson.Number || v.Int() < 0 {
			return invalidRequest(f, f+" must be a non-negative integer")
		}
		if c.maxOut == 0 {
			c.maxOut = v.Int()
		}
	}
	return nil
}

// count trims a chat history to fit every qualifying endpoint and counts the
// prompt; other routes are counted only.
func (c *call) count(eps []*tasks.Endpoint) *apiError {
	if c.rt == routeChat {
		var budgetBuf [4]trim.Budget // most tasks have a few endpoints
		budgets := budgetBuf[:0]
		if len(eps) > len(budgetBuf) {
			budgets = make([]trim.Budget, 0, len(eps))
		}
		budgets = budgets[:len(eps)]
		for i, ep := range eps {
			reserve := int64(c.task.Trim.ReserveOutput)
			if c.maxOut > 0 {
				reserve = c.maxOut
			}
			if reserve > int64(ep.MaxOutputTokens) {
				reserve = int64(ep.MaxOutputTokens)
			}
			budgets[i] = trim.Budget{Tokenizer: ep.Tokenizer, ContextWindow: ep.ContextWindow, ReserveOutput: int(reserve)}
		}
		opt := trim.Options{
			Enabled:                c.task.Trim.Enabled,
			AttachmentsShare:       c.task.Trim.AttachmentsShare,
			DropEarlierToolResults: c.task.Trim.DropEarlierToolResults,
		}
		if !c.top.dups && sameBytes(c.body, c.raw) {
			// The fields as read in place from this very body: trim does
			// not read the top level again.
			opt.Fields = trim.Fields{Known: true, Messages: c.top.messages.raw, Tools: c.top.tools.raw, Functions: c.top.functions.raw, MessageList: c.top.list}
		}
		res, err := trim.Chat(c.body, budgets, opt)
		if err != nil {
			var inv *trim.InvalidError
			if errors.As(err, &inv) {
				return invalidRequest(inv.Param, inv.Message)
			}
			if errors.Is(err, trim.ErrContextLength) {
				return &apiError{Status: 400, Code: "context_length_exceeded", NoRetry: true, Param: "messages", Message: err.Error()}
			}
			return invalidRequest("messages", err.Error())
		}
		c.body = res.Body
		c.trimmed = res.Dropped
		c.promptTokens = int64(res.PromptTokens)
		if res.Dropped > 0 {
			c.s.m.TrimmedMessages.WithLabelValues(c.task.Key).Add(float64(res.Dropped))
		}
		return nil
	}
	if c.rt.count != nil {
		n, err := c.rt.count(c.tokenizer, c.body)
		if err != nil {
			var inv *trim.InvalidError
			if errors.As(err, &inv) {
				return invalidRequest(inv.Param, inv.Message)
			}
			return invalidRequest("", err.Error())
		}
		c.promptTokens = int64(n)
	}
	return nil
}

// reserve estimates the call and reserves it in one store round trip.
func (c *call) reserve(eps []*tasks.Endpoint) *apiError {
	est := limits.Usage{InputTokens: c.promptTokens}
	var lease time.Duration
	for _, ep := range eps {
		out := int64(0)
		if !c.rt.noOutput {
			out = c.maxOut
			if out == 0 {
				out = c.task.EstimateOutput(ep)
			}
		}
		cost := ep.Price.CostMicros(c.promptTokens, out)
		if c.rt == routeImages {
			cost = ep.Price.ImageCostMicros(c.images)
		}
		// The dearest qualifying endpoint bounds the estimate, so a failover
		// never spends more than was reserved.
		if out > est.OutputTokens {
			est.OutputTokens = out
		}
		if cost > est.Money {
			est.Money = cost
		}
		if ep.Timeout > lease {
			lease = ep.Timeout
		}
	}
	lease = lease*time.Duration(len(eps)) + leaseMargin
	t0 := time.Now()
	d, err := c.s.lim.Reserve(context.Background(), limits.Call{
		RequestID: c.id, Task: c.task, User: c.user, Estimate: est, Lease: lease, Now: c.start,
		HoldSpace: &c.holdSpace,
	})
	c.s.mc.reserveDur.Observe(time.Since(t0).Seconds())
	if err != nil {
		c.s.m.StoreErrors.WithLabelValues("reserve").Inc()
		c.s.log.Error("reserve failed", "request_id", c.id, "task", c.task.Key, "err", err)
		return &apiError{Status: 503, Code: "store_unavailable", Message: "the limits store cannot be reached; try again shortly", RetryAfterRaw: "1"}
	}
	c.decision = d
	if c.s.lim.Degraded() {
		c.s.m.StoreDegraded.Set(1)
	} else {
		c.s.m.StoreDegraded.Set(0)
	}
	c.s.mc.setRatios(c.task.Key, d.TaskRatios)
	if d.Blocked != nil {
		return &apiError{Status: 403, Code: "blocked", NoRetry: true, Message: guard.BlockMessage(d.Blocked.Reason, c.task.Private)}
	}
	if r := d.Refusal; r != nil {
		c.s.m.LimitRefusals.WithLabelValues(c.task.Key, r.Window.Scope, r.Window.Unit, r.Window.Period).Inc()
		wait := r.Window.End.Sub(c.start)
		if wait < time.Millisecond {
			wait = time.Millisecond
		}
		unit := r.Window.Unit
		limit, used := formatAmount(unit, r.Limit), formatAmount(unit, r.Used)
		who := "task " + c.task.Key
		if r.Window.Scope == config.ScopeUser {
			who = "user " + quote(c.user) + " in task " + c.task.Key
		}
		return &apiError{Status: 429, Code: "limit_exceeded",
			Message:      "limit exceeded: " + r.Window.Scope + " " + unit + " per " + r.Window.Period + " for " + who + " is " + limit + " and " + used + " is used; the window resets at " + r.Window.End.UTC().Format(time.RFC3339),
			RetryAfterMs: wait.Milliseconds() + 1, NoRetry: wait > time.Minute}
	}
	c.hold = d.Hold
	c.estMoney = est.Money
	if c.task.MaxCallsPerHour > 0 && c.user != "" && guard.CallsPerHourExceeded(c.task.MaxCallsPerHour, d.CallsLastHour) {
		c.anomaly(guard.KindCallsPerHour, map[string]any{"calls_last_hour": d.CallsLastHour, "max": c.task.MaxCallsPerHour})
	}
	return nil
}

// formatAmount renders a limit amount: money as dollars, others as integers.
func formatAmount(unit string, v int64) string {
	if unit == config.UnitMoney {
		return "$" + config.FormatMicros(v)
	}
	return itoa(v)
}

// anomaly signals an anomaly now (metric, log) and keeps its event for the
// settlement's round trip.
func (c *call) anomaly(kind string, detail map[string]any) {
	c.anomalies = append(c.anomalies, kind)
	c.s.m.Anomalies.WithLabelValues(c.task.Key, kind).Inc()
	guard.LogAnomaly(c.s.log, kind, c.task.Key, c.user, c.source, c.id, detail)
	c.events = append(c.events, limits.Event{Time: time.Now(), Kind: "anomaly", Task: c.task.Key, User: c.user, Source: c.source, RequestID: c.id,
		Detail: mergeDetail(map[string]any{"kind": kind}, detail)})
}

func mergeDetail(a, b map[string]any) map[string]any {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// bearer returns the bearer token of the Authorization header.
func bearer(fc *fiber.Ctx) []byte {
	return bearerToken(fc.Request().Header.Peek(fiber.HeaderAuthorization))
}

// bearerToken returns the token of an Authorization header's value h.
func bearerToken(h []byte) []byte {
	if len(h) > 7 && strings.EqualFold(string(h[:7]), "bearer ") {
		return bytes.TrimSpace(h[7:])
	}
	return nil
}

// decodedBody is the body of a request sent with a Content-Encoding,
// decoded, and no larger than limit decoded (a small compressed body can
// decode to gigabytes).
func decodedBody(req *fasthttp.Request, limit int) ([]byte, *apiError) {
	body, err := req.BodyUncompressedWithLimit(limit)
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return nil, newError(413, "request_too_large", "the request body, decoded, is larger than the gateway's body_limit")
	case errors.Is(err, fasthttp.ErrContentEncodingUnsupported):
		return nil, invalidRequest("", fmt.Sprintf("unsupported Content-Encoding %q: gzip, deflate, br and zstd are decoded", req.Header.ContentEncoding()))
	}
	return nil, invalidRequest("", "the request body cannot be decoded as its Content-Encoding says: "+err.Error())
}

// clientHeaders are the request headers a call reads, found in one pass
// over the headers (a lookup by name normalizes the name and searches every
// header, each time). The values view the request: copy what must outlive
// it.
type clientHeaders struct {
	auth, task, user, source []byte
	encoded                  bool // the body has a Content-Encoding
}

// read takes the first value of each header of ch from h, as a lookup by
// name would (fasthttp has already put the names in canonical case).
func (ch *clientHeaders) read(h *fasthttp.RequestHeader) {
	var seen uint8
	for k, v := range h.All() {
		var dst *[]byte
		var bit uint8
		switch string(k) {
		case fiber.HeaderAuthorization:
			dst, bit = &ch.auth, 1
		case "X-Taskgate-Task":
			dst, bit = &ch.task, 2
		case "X-Taskgate-User":
			dst, bit = &ch.user, 4
		case "X-Taskgate-Source":
			dst, bit = &ch.source, 8
		case fiber.HeaderContentEncoding:
			ch.encoded = true
			continue
		default:
			continue
		}
		if seen&bit == 0 {
			seen |= bit
			*dst = v
		}
	}
}

// checkBody refuses bodies that are empty, not UTF-8, nested too deeply or
// not a JSON object. One pass accepts a good body; the checks that name
// the problem run only for a bad one.
func checkBody(body []byte) *apiError {
	if validObject(body, maxJSONDepth) {
		return nil
	}
	return bodyProblem(body)
}

// bodyProblem names what is wrong with a body validObject refused, in a
// fixed order of checks (nil if none finds anything).
func bodyProblem(body []byte) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalidRequest("", "the request body is empty; send a JSON object")
	}
	if !utf8.Valid(body) {
		return invalidRequest("", "the request body is not valid UTF-8")
	}
	if depthExceeds(body, maxJSONDepth) {
		return invalidRequest("", "the request body nests JSON deeper than 64 levels")
	}
	if !gjson.ValidBytes(body) {
		return invalidRequest("", "the request body is not valid JSON")
	}
	if b := bytes.TrimLeft(body, " \t\r\n"); b[0] != '{' {
		return invalidRequest("", "the request body must be a JSON object")
	}
	return nil
}

// depthExceeds reports whether JSON nesting passes max, skipping strings.
func depthExceeds(b []byte, max int) bool {
	depth := 0
	inStr := false
	for i := 0; i < len(b); i++ {
		ch := b[i]
		if inStr {
			if ch == '\\' {
				i++
			} else if ch == '"' {
				inStr = false
			}
			continue
		}
		switch ch {
		case '"':
			inStr = true
		case '{', '[':
			depth++
			if depth > max {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// sameBytes reports whether a and b are the same bytes in memory (not
// merely equal).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// setModel replaces the body's model with the endpoint's. at is the model
// as topFields found it in body (at is where its value starts), or a zero
// topField when body is not the body topFields read (an instruction
// was added, messages were trimmed): the value is then found again.
func setModel(body []byte, model string, at topField) []byte {
	if end := at.at + len(at.raw); at.at > 0 && end <= len(body) && string(body[at.at:end]) == at.raw {
		out := make([]byte, 0, len(body)-len(at.raw)+len(model)+8)
		out = append(out, body[:at.at]...)
		out = jsonstr.Append(out, model)
		return append(out, body[end:]...)
	}
	out, err := sjson.SetBytes(body, "model", model)
	if err != nil {
		return body
	}
	return out
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return `"` + s + `"`
}

// topFields are the request body's top-level fields a call reads, taken in
// one pass over the body: gjson.GetBytes scans the body once per field, and
// to its end for each absent one. As with gjson.Get, the first of duplicate
// keys counts.
type topFields struct {
	model, stream, streamOptions, messages, input, prompt, previousResponseID, n topField
	safetyIdentifier, user, maxCompletionTokens, maxTokens, maxOutputTokens      topField
	tools, functions                                                             topField

	needs tasks.Needs // what the fields ask for (the route's fieldNeeds; routeChecks adds the chat parts')
	dups  bool        // a field read here is given more than once

	// The elements of the messages array (at most maxMessages+1): taken
	// by the validator (listed), or else by routeChecks.
	list    []string
	listBuf [8]string // list's first storage
	listed  bool
}

// addMessage appends an element of the messages array to the list, up to
// one more than a body may have.
func (f *topFields) addMessage(m string) {
	if f.list == nil {
		f.list = f.listBuf[:0]
	}
	if len(f.list) <= maxMessages {
		f.list = append(f.list, m)
	}
}

// readChecked checks body as checkBody does (the same error) and, in the
// same pass, fills f from its top-level members, with the needs fieldNeeds
// (if any) finds. f is filled only when it returns nil.
func (f *topFields) readChecked(body []byte, fieldNeeds fieldNeedsFunc) *apiError {
	if validObjectInto(body, maxJSONDepth, f, fieldNeeds) {
		return nil
	}
	*f = topFields{}
	if e := bodyProblem(body); e != nil {
		return e
	}
	return invalidRequest("", "the request body is not valid JSON") // not reached: bodyProblem finds what validObject refuses
}

// resultOf is the gjson.Result of the raw value found at offset at, as
// gjson.Result.ForEach gives it, made without gjson's parse where the
// value's first byte tells its type.
func resultOf(raw string, at int) gjson.Result {
	switch jsonscan.Kind(raw) {
	case '"':
		if strings.IndexByte(raw, '\\') < 0 {
			return gjson.Result{Type: gjson.String, Raw: raw, Str: raw[1 : len(raw)-1], Index: at}
		}
	case '{', '[':
		return gjson.Result{Type: gjson.JSON, Raw: raw, Index: at}
	case 't':
		return gjson.Result{Type: gjson.True, Raw: raw, Index: at}
	case 'f':
		return gjson.Result{Type: gjson.False, Raw: raw, Index: at}
	case 'n':
		return gjson.Result{Type: gjson.Null, Raw: raw, Index: at}
	}
	r := gjson.Parse(raw)
	r.Index = at
	return r
}

// member takes one member of the outermost object (raw key with quotes,
// raw value, the value's offset in the body), with the needs fieldNeeds
// (if any) finds in it.
func (f *topFields) member(rawKey, raw string, at int, fieldNeeds fieldNeedsFunc) {
	k := jsonscan.Str(rawKey)
	if dst := f.field(k); dst != nil {
		if dst.Exists() {
			f.dups = true
		} else {
			*dst = topField{raw: raw, at: at}
		}
	}
	if fieldNeeds != nil {
		f.needs |= fieldNeeds(k, resultOf(raw, at))
	}
}

// fieldNeedsFunc tells the needs a top-level field asks for (a route's
// fieldNeeds).
type fieldNeedsFunc = func(key string, v gjson.Result) tasks.Needs

// topField is a top-level field as read: its raw value and where that
// begins in the body; raw is "" for a field the body does not have. (A
// gjson.Result is 80 bytes; the call keeps fifteen of these.)
type topField struct {
	raw string
	at  int
}

// Exists reports whether the body has the field.
func (t topField) Exists() bool { return t.raw != "" }

// result is the field as gjson.Get would give it.
func (t topField) result() gjson.Result {
	if t.raw == "" {
		return gjson.Result{}
	}
	return resultOf(t.raw, t.at)
}

// field is where the top-level field name is kept, nil for one not read.
func (f *topFields) field(name string) *topField {
	switch name {
	case "model":
		return &f.model
	case "stream":
		return &f.stream
	case "stream_options":
		return &f.streamOptions
	case "messages":
		return &f.messages
	case "input":
		return &f.input
	case "prompt":
		return &f.prompt
	case "previous_response_id":
		return &f.previousResponseID
	case "n":
		return &f.n
	case "safety_identifier":
		return &f.safetyIdentifier
	case "user":
		return &f.user
	case "max_completion_tokens":
		return &f.maxCompletionTokens
	case "max_tokens":
		return &f.maxTokens
	case "max_output_tokens":
		return &f.maxOutputTokens
	case "tools":
		return &f.tools
	case "functions":
		return &f.functions
	}
	return nil
}

// get is the top-level field name; a name field does not keep reads as
// absent (TestTopFieldsKeepEveryRouteField checks the routes' names).
func (f *topFields) get(name string) gjson.Result {
	if p := f.field(name); p != nil {
		return p.result()
	}
	return gjson.Result{}
}
