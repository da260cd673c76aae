package fakeupstream

import (
	"net/http"
	"strconv"
	"sync"
	"taskgate/internal/jsonstr"
	"time"

	"github.com/tidwall/gjson"
)

// responseStore keeps created Responses API objects for GET, oldest dropped
// first beyond max.
type responseStore struct {
	mu    sync.Mutex
	max   int
	byID  map[string]storedResponse
	order []string
}

// storedResponse is a created response's final JSON and its input items.
type storedResponse struct {
	object []byte
	items  [][]byte // input items, oldest first
}

func (rs *responseStore) put(id string, sr storedResponse) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byID == nil {
		rs.byID = make(map[string]storedResponse)
	}
	if _, ok := rs.byID[id]; !ok {
		rs.order = append(rs.order, id)
	}
	rs.byID[id] = sr
	for len(rs.order) > rs.max {
		delete(rs.byID, rs.order[0])
		rs.order[0] = ""
		rs.order = rs.order[1:]
	}
}

func (rs *responseStore) get(id string) (storedResponse, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	sr, ok := rs.byID[id]
	return sr, ok
}

func (rs *responseStore) remove(id string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := rs.byID[id]; !ok {
		return false
	}
	delete(rs.byID, id)
	for i, v := range rs.order {
		if v == id {
			rs.order = append(rs.order[:i], rs.order[i+1:]...)
			break
		}
	}
	return true
}

// respState is what a Responses API object is built from.
type respState struct {
	a         *answer
	id        string
	itemID    string // msg_… or fc_…
	created   int64
	req       []byte // the request body
	store     bool
	usage     bool // report usage
	incomplet bool // finish "length": status incomplete
}

// appendResponsesUsage appends a Responses API usage object.
func appendResponsesUsage(b []byte, u Usage) []byte {
	b = appendKInt(append(b, '{'), "input_tokens", u.PromptTokens)
	b = append(b, `,"input_tokens_details":{"cached_tokens":0},`...)
	b = appendKInt(b, "output_tokens", u.CompletionTokens)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},`...)
	b = appendKInt(b, "total_tokens", u.TotalTokens)
	return append(b, '}')
}

// appendOutputItem appends the output item; done = complete with its text.
func (rs *respState) appendOutputItem(b []byte, done bool) []byte {
	a := rs.a
	status := "in_progress"
	if done {
		status = "completed"
		if rs.incomplet {
			status = "incomplete"
		}
	}
	if a.tool != nil {
		b = append(b, `{"id":"`...)
		b = append(b, rs.itemID...)
		b = append(b, `","type":"function_call","status":"`...)
		b = append(b, status...)
		b = append(b, `","call_id":`...)
		b = jsonstr.Append(b, a.toolID)
		b = append(b, `,"name":`...)
		b = jsonstr.Append(b, a.tool.Name)
		b = append(b, `,"arguments":`...)
		if done {
			b = jsonstr.Append(b, a.tool.Arguments)
		} else {
			b = append(b, `""`...)
		}
		return append(b, '}')
	}
	b = append(b, `{"id":"`...)
	b = append(b, rs.itemID...)
	b = append(b, `","type":"message","status":"`...)
	b = append(b, status...)
	b = append(b, `","role":"assistant","content":[`...)
	if done {
		b = appendOutputText(b, a.content)
	}
	return append(b, "]}"...)
}

// appendOutputText appends an output_text content part.
func appendOutputText(b []byte, text string) []byte {
	b = append(b, `{"type":"output_text","text":`...)
	b = jsonstr.Append(b, text)
	return append(b, `,"annotations":[],"logprobs":[]}`...)
}

// rawOr appends the raw JSON of the request's field, or def when absent.
func rawOr(b []byte, req []byte, field, def string) []byte {
	if v := gjson.GetBytes(req, field); v.Exists() {
		return append(b, v.Raw...)
	}
	return append(b, def...)
}

// appendResponse appends the response object in the given status
// ("in_progress" has no output and no usage).
func (rs *respState) appendResponse(b []byte, status string) []byte {
	final := status != "in_progress"
	b = append(b, `{"id":"`...)
	b = append(b, rs.id...)
	b = append(b, `","object":"response","created_at":`...)
	b = strconv.AppendInt(b, rs.created, 10)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","background":false,"error":null,"incomplete_details":`...)
	if final && rs.incomplet {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	b = rawOr(b, rs.req, "instructions", "null")
	b = append(b, `,"max_output_tokens":`...)
	b = rawOr(b, rs.req, "max_output_tokens", "null")
	b = append(b, `,"model":`...)
	b = jsonstr.Append(b, rs.a.model)
	b = append(b, `,"output":[`...)
	if final {
		b = rs.appendOutputItem(b, true)
	}
	b = append(b, `],"parallel_tool_calls":true,"previous_response_id":`...)
	b = rawOr(b, rs.req, "previous_response_id", "null")
	b = append(b, `,"reasoning":{"effort":null,"summary":null},"store":`...)
	b = strconv.AppendBool(b, rs.store)
	b = append(b, `,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":`...)
	b = rawOr(b, rs.req, "tools", "[]")
	b = append(b, `,"top_p":1.0,"truncation":"disabled","usage":`...)
	if final && rs.usage {
		b = appendResponsesUsage(b, rs.a.usage)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"user":null,"metadata":`...)
	b = rawOr(b, rs.req, "metadata", "{}")
	return append(b, '}')
}

// responses answers POST /v1/responses, plain or streamed.
func (c *call) responses() {
	a := c.answer(routeResponses)
	seq := strconv.FormatUint(c.seq, 10)
	rs := &respState{
		a:         a,
		id:        "resp_fake" + seq,
		itemID:    "msg_fake" + seq,
		created:   time.Now().Unix(),
		req:       c.body,
		store:     gjson.GetBytes(c.body, "store").Type != gjson.False,
		usage:     !c.b.NoUsage,
		incomplet: a.finish == "length",
	}
	if a.tool != nil {
		rs.itemID = "fc_fake" + seq
	}
	status := "completed"
	if rs.incomplet {
		status = "incomplete"
	}
	if gjson.GetBytes(c.body, "stream").Bool() {
		c.responsesStream(rs, status)
		return
	}
	b := rs.appendResponse(make([]byte, 0, 1024+len(a.content)), status)
	if rs.usage {
		c.s.addUsage(a.usage)
	}
	c.keep(rs, b)
	writeJSON(c.w, b)
}

// keep stores a finished response for GET, unless the request said store: false.
func (c *call) keep(rs *respState, object []byte) {
	if !rs.store {
		return
	}
	c.s.store.put(rs.id, storedResponse{object: object, items: inputItems(c.body, rs.id)})
}

// inputItems turns the request's input into Responses API input items.
func inputItems(body []byte, id string) [][]byte {
	in := gjson.GetBytes(body, "input")
	if in.Type == gjson.String {
		b := append([]byte(`{"id":"`), "msg_in_"+id+`","type":"message","role":"user","status":"completed","content":[{"type":"input_text","text":`...)
		b = jsonstr.Append(b, in.Str)
		return [][]byte{append(b, "}]}"...)}
	}
	var items [][]byte
	for i, item := range in.Array() {
		raw := []byte(item.Raw)
		if !item.Get("id").Exists() && item.IsObject() {
			b := append([]byte(`{"id":"`), "item_in_"+id+"_"+strconv.Itoa(i)+`",`...)
			b = append(b, raw[1:]...) // raw starts with '{'
			if len(raw) == 2 {        // {} → {"id":"…",} → drop the comma
				b = append(b[:len(b)-2], '}')
			}
			raw = b
		}
		items = append(items, raw)
	}
	return items
}

// responsesStream streams Responses API events (event: + data:, no [DONE]).
func (c *call) responsesStream(rs *respState, status string) {
	a := rs.a
	st := c.startStream()
	st.responses = true
	ev := make([]byte, 0, 1024)
	// begin starts an event's data: {"type":…,"sequence_number":n
	begin := func(typ string) {
		ev = append(ev[:0], `{"type":"`...)
		ev = append(ev, typ...)
		ev = append(ev, `","sequence_number":`...)
		ev = strconv.AppendInt(ev, st.seq, 10)
		st.seq++
	}
	item := func() {
		ev = append(ev, `,"item_id":"`...)
		ev = append(ev, rs.itemID...)
		ev = append(ev, `","output_index":0`...)
	}
	send := func(typ string) bool {
		ev = append(ev, '}')
		return st.send(typ, ev)
	}

	begin("response.created")
	ev = rs.appendResponse(append(ev, `,"response":`...), "in_progress")
	if !send("response.created") {
		return
	}
	begin("response.in_progress")
	ev = rs.appendResponse(append(ev, `,"response":`...), "in_progress")
	if !send("response.in_progress") {
		return
	}
	begin("response.output_item.added")
	ev = rs.appendOutputItem(append(ev, `,"output_index":0,"item":`...), false)
	if !send("response.output_item.added") {
		return
	}
	if a.tool != nil {
		for _, p := range a.pieces {
			begin("response.function_call_arguments.delta")
			item()
			ev = jsonstr.Append(append(ev, `,"delta":`...), p)
			if !send("response.function_call_arguments.delta") {
				return
			}
		}
		begin("response.function_call_arguments.done")
		item()
		ev = jsonstr.Append(append(ev, `,"name":`...), a.tool.Name)
		ev = jsonstr.Append(append(ev, `,"arguments":`...), a.tool.Arguments)
		if !send("response.function_call_arguments.done") {
			return
		}
	} else {
		begin("response.content_part.added")
		item()
		ev = append(ev, `,"content_index":0,"part":`...)
		ev = appendOutputText(ev, "")
		if !send("response.content_part.added") {
			return
		}
		for _, p := range a.pieces {
			begin("response.output_text.delta")
			item()
			ev = jsonstr.Append(append(ev, `,"content_index":0,"delta":`...), p)
			ev = append(ev, `,"logprobs":[]`...)
			if !send("response.output_text.delta") {
				return
			}
		}
		begin("response.output_text.done")
		item()
		ev = jsonstr.Append(append(ev, `,"content_index":0,"text":`...), a.content)
		ev = append(ev, `,"logprobs":[]`...)
		if !send("response.output_text.done") {
			return
		}
		begin("response.content_part.done")
		item()
		ev = append(ev, `,"content_index":0,"part":`...)
		ev = appendOutputText(ev, a.content)
		if !send("response.content_part.done") {
			return
		}
	}
	begin("response.output_item.done")
	ev = rs.appendOutputItem(append(ev, `,"output_index":0,"item":`...), true)
	if !send("response.output_item.done") {
		return
	}
	terminal := "response." + status
	begin(terminal)
	start := len(ev) + len(`,"response":`)
	ev = rs.appendResponse(append(ev, `,"response":`...), status)
	object := append([]byte(nil), ev[start:]...)
	ev = append(ev, '}')
	c.keep(rs, object) // before the client can see the terminal event
	if rs.usage {
		st.sendUsage(terminal, ev, a.usage)
	} else {
		st.send(terminal, ev)
	}
}

// storedResponse answers GET and DELETE /v1/responses/{id} and GET
// /v1/responses/{id}/input_items.
func (c *call) storedResponse(rt route) {
	if rt == routeResponseDelete {
		if !c.s.store.remove(c.id) {
			c.notFound()
			return
		}
		b := append([]byte(`{"id":`), jsonstr.Append(nil, c.id)...)
		writeJSON(c.w, append(b, `,"object":"response.deleted","deleted":true}`...))
		return
	}
	sr, ok := c.s.store.get(c.id)
	if !ok {
		c.notFound()
		return
	}
	if rt == routeResponseGet {
		writeJSON(c.w, sr.object)
		return
	}
	items := sr.items
	desc := c.r.URL.Query().Get("order") != "asc"
	b := append(make([]byte, 0, 256), `{"object":"list","data":[`...)
	for i := range items {
		j := i
		if desc {
			j = len(items) - 1 - i
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, items[j]...)
	}
	b = append(b, `],"first_id":`...)
	first, last := "", ""
	if len(items) > 0 {
		f, l := items[0], items[len(items)-1]
		if desc {
			f, l = l, f
		}
		first, last = gjson.GetBytes(f, "id").String(), gjson.GetBytes(l, "id").String()
	}
	b = appendNullable(b, first)
	b = append(b, `,"last_id":`...)
	b = appendNullable(b, last)
	b = append(b, `,"has_more":false}`...)
	writeJSON(c.w, b)
}

// appendNullable appends s quoted, or null when empty.
func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsonstr.Append(b, s)
}

func (c *call) notFound() {
	writeError(c.w, http.StatusNotFound, "invalid_request_error", "not_found", "Response with id '"+c.id+"' not found.", "")
}
