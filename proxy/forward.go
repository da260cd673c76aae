package proxy

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"taskgate/config"
	"taskgate/guard"
	"taskgate/internal/jsonscan"
)

// tryResult is how one upstream try ended.
type tryResult struct {
	kind       string // "" success or pass-through; else a failure kind
	status     int
	retryAfter string
}

// forward sends the call to its endpoints in order until one answers, and
// answers the client.
func (c *call) forward(fc *fiber.Ctx) error {
	var last tryResult
	allOpen, allTimeout := true, true
	for i, up := range c.endpoints {
		if i > 0 {
			c.failedOver = true
		}
		try, ok := up.breaker.allow()
		if !ok {
			last = tryResult{kind: kindOpen}
			allTimeout = false
			c.s.m.UpstreamErrors.WithLabelValues(up.ep.Name, kindOpen).Inc()
			if i < len(c.endpoints)-1 {
				c.s.m.Failovers.WithLabelValues(up.ep.Name, kindOpen).Inc()
			}
			continue
		}
		allOpen = false
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		c.buildRequest(req, up)
		t0 := time.Now()
		deadline := t0.Add(up.ep.Timeout)
		var uc *upConn
		var rest []byte
		var err error
		if c.stream {
			uc, rest, err = up.streams.do(req, resp, deadline)
		} else {
			err = up.client.DoDeadline(req, resp, deadline)
		}
		fasthttp.ReleaseRequest(req)
		if err != nil {
			kind := classifyErr(err)
			up.breaker.done(try, false)
			fasthttp.ReleaseResponse(resp)
			c.s.m.UpstreamErrors.WithLabelValues(up.ep.Name, kind).Inc()
			c.s.log.Warn("upstream try failed", "request_id", c.id, "endpoint", up.ep.Name, "kind", kind, "err", err)
			if kind != kindTimeout {
				allTimeout = false
			}
			last = tryResult{kind: kind}
			if i < len(c.endpoints)-1 {
				c.s.m.Failovers.WithLabelValues(up.ep.Name, kind).Inc()
			}
			continue
		}
		up.ttfb.Observe(time.Since(t0).Seconds())
		status := resp.StatusCode()
		kind := statusKind(status)
		if kind == "" {
			up.breaker.done(try, true)
			c.served = up
			c.status = status
			if status >= 300 {
				// The caller's fault (400, 404, 413, 422 …): pass it through, no failover.
				return c.passThrough(fc, resp)
			}
			if uc != nil {
				return c.relay(fc, resp, uc, rest, deadline)
			}
			return c.answer(fc, resp)
		}
		// A rate limit is not the endpoint being broken.
		up.breaker.done(try, kind == kindStatus429)
		allTimeout = allTimeout && kind == kindStatus408
		last = tryResult{kind: kind, status: status, retryAfter: string(resp.Header.Peek("Retry-After"))}
		if kind == kindAuth {
			c.s.log.Error("upstream refused the gateway's key for this endpoint", "request_id", c.id, "endpoint", up.ep.Name, "status", status)
		}
		c.s.m.UpstreamErrors.WithLabelValues(up.ep.Name, kind).Inc()
		if i < len(c.endpoints)-1 {
			c.s.m.Failovers.WithLabelValues(up.ep.Name, kind).Inc()
		}
		if uc != nil {
			uc.Close()
		}
		fasthttp.ReleaseResponse(resp)
	}
	// Every endpoint failed.
	c.failed = true
	var e *apiError
	switch {
	case last.kind == kindStatus429:
		e = &apiError{Status: 429, Code: "upstream_rate_limited", Message: "every endpoint of task " + c.task.Key + " is rate limited upstream", RetryAfterRaw: last.retryAfter}
	case allOpen:
		e = &apiError{Status: 503, Code: "unavailable", Message: "every endpoint of task " + c.task.Key + " is unavailable (circuit open); try again later"}
	case allTimeout:
		e = &apiError{Status: 504, Code: "upstream_timeout", Message: "every endpoint of task " + c.task.Key + " timed out"}
	default:
		e = &apiError{Status: 502, Code: "upstream_error", Message: "every endpoint of task " + c.task.Key + " failed (last: " + last.kind + ")"}
	}
	if len(c.endpoints) > 0 {
		c.served = c.endpoints[len(c.endpoints)-1]
	}
	return c.refuse(fc, e)
}

// statusKind classifies an upstream status: "" for an answer to pass on
// (2xx, and the caller's own 4xx), else the failure kind that fails over.
func statusKind(status int) string {
	switch {
	case status == 401 || status == 403:
		return kindAuth
	case status == 408:
		return kindStatus408
	case status == 429:
		return kindStatus429
	case status >= 500:
		return kindStatus5xx
	}
	return ""
}

// buildRequest fills the upstream request: the endpoint's URL, key, model
// and headers; the client's key and X-Taskgate-* headers are never sent.
func (c *call) buildRequest(req *fasthttp.Request, up *upstream) {
	req.Header.SetMethod(fasthttp.MethodPost)
	up.setURI(req, c.rt.path)
	req.Header.SetContentType("application/json")
	if up.auth != "" {
		req.Header.SetCanonical(view(fasthttp.HeaderAuthorization), view(up.auth)) // no normalizing
	}
	for k, v := range up.ep.Headers {
		req.Header.Set(k, v)
	}
	at := c.top.model
	if len(c.body) == 0 || !sameBytes(c.body, c.raw) {
		at = topField{} // not the body topFields read
	}
	body := setModel(c.body, up.ep.Model, at)
	if c.stream {
		req.Header.SetCanonical(view("Accept"), view("text/event-stream"))
		if c.rt.includeUsage && !c.clientWantsUsage {
			body = askUsage(body, !c.top.streamOptions.Exists())
		}
	}
	req.SetBodyRaw(body)
}

// askUsage asks a streamed call's upstream to report usage
// (stream_options.include_usage). When the body has no stream_options
// (absent: true), the field is spliced in after the opening brace, with no
// parse; otherwise sjson sets it.
func askUsage(body []byte, absent bool) []byte {
	const field = `"stream_options":{"include_usage":true}`
	if absent {
		i := 0
		for i < len(body) && body[i] != '{' {
			i++
		}
		if i < len(body) {
			j := i + 1
			for j < len(body) && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r') {
				j++
			}
			out := make([]byte, 0, len(body)+len(field)+1)
			out = append(out, body[:i+1]...)
			out = append(out, field...)
			if j < len(body) && body[j] != '}' {
				out = append(out, ',')
			}
			return append(out, body[i+1:]...)
		}
	}
	if b, err := sjson.SetBytes(body, "stream_options.include_usage", true); err == nil {
		return b
	}
	return body
}

// answer relays a plain 2xx answer, settling with its usage.
func (c *call) answer(fc *fiber.Ctx, resp *fasthttp.Response) error {
	defer fasthttp.ReleaseResponse(resp)
	body := resp.Body()
	c.readUsage(body)
	if c.rt == routeResponses {
		if id := gjson.GetBytes(body, "id").Str; id != "" {
			c.s.rememberResponse(id, c.served.ep.Name)
		}
	}
	if c.task.SelfFlag {
		body = c.stripPlain(body)
	}
	c.setHeaders(fc)
	var nb [32]byte // SetCanonical copies
	fc.Response().Header.SetCanonical(view("X-Taskgate-Cost"), config.AppendMicros(nb[:0], c.cost()))
	setContentType(fc, resp)
	fc.Status(c.status)
	fc.Response().SetBody(body) // copies
	c.finish()
	return nil
}

// passThrough relays an upstream 4xx unchanged and ends the call.
func (c *call) passThrough(fc *fiber.Ctx, resp *fasthttp.Response) error {
	defer fasthttp.ReleaseResponse(resp)
	body := resp.Body() // a streamed call's error answer was read whole too (maxErrorBody)
	c.readUsage(body)
	c.code = "upstream_" + strconv.Itoa(c.status)
	c.setHeaders(fc)
	if ra := resp.Header.Peek("Retry-After"); len(ra) > 0 {
		fc.Set("retry-after", string(ra))
	}
	setContentType(fc, resp)
	fc.Status(c.status)
	fc.Response().SetBody(body)
	c.finish()
	return nil
}

// readUsage takes the usage of a plain answer.
func (c *call) readUsage(body []byte) {
	if c.rt == routeImages {
		if d := gjson.GetBytes(body, "data"); d.IsArray() {
			c.images = int64(len(d.Array()))
			c.haveUsage = true
		}
		return
	}
	// Read in place (no copy of the body): only numbers are kept. The usage
	// comes last but for two short fields in OpenAI's answers: it is looked
	// for from the end.
	u, ok := jsonscan.FieldNearEnd(unsafe.String(unsafe.SliceData(body), len(body)), `"usage"`)
	if !ok || jsonscan.Kind(u) != '{' {
		return
	}
	// Both counts in one pass over the usage object (the first of a
	// duplicate name counts, as with gjson).
	var in, out string
	jsonscan.EachField(u, func(k, v string) bool {
		switch {
		case in == "" && jsonscan.KeyIs(k, c.rt.usageIn):
			in = v
		case out == "" && jsonscan.KeyIs(k, c.rt.usageOut):
			out = v
		}
		return in == "" || out == ""
	})
	c.in, c.out = jsonscan.Int(in), jsonscan.Int(out)
	c.haveUsage = true
}

// stripPlain removes the self-flag marker from a plain answer's text (every
// choice of a chat answer, every output text of a Responses answer).
func (c *call) stripPlain(body []byte) []byte {
	var (
		out     []byte
		flagged bool
		err     error
	)
	switch c.rt {
	case routeChat:
		out, flagged, err = guard.StripChatResponse(body)
	case routeResponses:
		out, flagged, err = guard.StripResponsesResponse(body)
	default:
		return body
	}
	if err != nil {
		return body
	}
	c.flagged = c.flagged || flagged
	return out
}

// cost is the call's actual cost in micro-dollars on the serving endpoint.
func (c *call) cost() int64 {
	if c.served == nil || c.failed {
		return 0
	}
	if c.rt == routeImages {
		return c.served.ep.Price.ImageCostMicros(c.images)
	}
	return c.served.ep.Price.CostMicros(c.in, c.out)
}

// setHeaders sets the gateway's response headers (task, endpoint, trim,
// OpenAI rate-limit trios).
func (c *call) setHeaders(fc *fiber.Ctx) {
	// Keys are given as fasthttp writes them (canonical), which skips its
	// normalizing on every call.
	h := &fc.Response().Header
	// SetCanonical copies its arguments and never writes to them, so they
	// are given as views of the strings (a []byte(s) would copy each first).
	set := func(k, v string) { h.SetCanonical(view(k), view(v)) }
	// Numbers are formatted into a stack buffer.
	var nb [24]byte
	num := func(k string, v int64) { h.SetCanonical(view(k), strconv.AppendInt(nb[:0], v, 10)) }
	reset := func(k string, d time.Duration) { h.SetCanonical(view(k), appendReset(nb[:0], d)) }
	if c.task != nil {
		set("X-Taskgate-Task", c.task.Key)
	}
	if c.served != nil {
		set("X-Taskgate-Endpoint", c.served.ep.Name)
	}
	if c.trimmed > 0 {
		num("X-Taskgate-Trimmed", int64(c.trimmed))
	}
	if t := c.decision.Requests; t != nil {
		num("X-Ratelimit-Limit-Requests", t.Limit)
		num("X-Ratelimit-Remaining-Requests", t.Remaining)
		reset("X-Ratelimit-Reset-Requests", t.Reset)
	}
	if t := c.decision.Tokens; t != nil {
		num("X-Ratelimit-Limit-Tokens", t.Limit)
		num("X-Ratelimit-Remaining-Tokens", t.Remaining)
		reset("X-Ratelimit-Reset-Tokens", t.Reset)
	}
}

// view is s as a byte slice without a copy, for fasthttp calls that copy
// what they are given and never write to it.
func view(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// appendReset appends a duration rounded up to the second, as
// time.Duration.String writes it: 1s, 6m0s, 20h4m3s.
func appendReset(dst []byte, d time.Duration) []byte {
	s := int64((max(d, time.Second) + time.Second - 1) / time.Second)
	if h := s / 3600; h > 0 {
		dst = append(strconv.AppendInt(dst, h, 10), 'h')
	}
	if s >= 60 {
		dst = append(strconv.AppendInt(dst, s/60%60, 10), 'm')
	}
	return append(strconv.AppendInt(dst, s%60, 10), 's')
}

// refuse answers an error; a call that holds a reservation is settled as failed.
func (c *call) refuse(fc *fiber.Ctx, e *apiError) error {
	c.status = e.Status
	c.code = e.Code
	if c.hold != nil {
		c.failed = true
	}
	c.setHeaders(fc)
	err := e.write(fc)
	c.finish()
	return err
}

// setContentType gives the client's answer the upstream answer's content
// type, application/json if it has none.
func setContentType(fc *fiber.Ctx, resp *fasthttp.Response) {
	if ct := resp.Header.ContentType(); len(ct) > 0 {
		fc.Response().Header.SetContentTypeBytes(ct) // copies
	} else {
		fc.Response().Header.SetContentType("application/json")
	}
}

func contentType(resp *fasthttp.Response, def string) string {
	if ct := resp.Header.ContentType(); len(ct) > 0 {
		return string(ct)
	}
	return def
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
