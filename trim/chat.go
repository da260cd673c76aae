package trim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"taskgate/internal/jsonscan"
)

// Budget is one endpoint a call may go to: the history must fit each.
type Budget struct {
	Tokenizer     string // "o200k_base" | "cl100k_base" | "estimate"
	ContextWindow int    // tokens; 0 or less: no window to fit
	ReserveOutput int    // output tokens to keep free (already resolved by the caller)
}

// Options are a task's trim settings.
type Options struct {
	Enabled                bool    // false: never drop or cut; an over-long call is ErrContextLength
	AttachmentsShare       float64 // of the window, shared by one message's attachments; 0: no share
	DropEarlierToolResults bool    // leave out tool calls and results before the newest user message
	// Fields, when Known, are the body's top-level fields as the caller
	// already read them, so that Chat does not read the top level again.
	Fields Fields
}

// Fields are the top-level fields of a chat body that Chat reads, each the
// raw JSON of the body's only field of that name, as a substring of the
// very body given to Chat ("" when absent).
type Fields struct {
	Known                      bool
	Messages, Tools, Functions string
	// MessageList, when not nil, is Messages's elements in order, as
	// jsonscan.EachElem gives them (the caller went through them already),
	// so that Chat does not go through the array again.
	MessageList []string
}

// Result is a chat body fitted to its budgets.
type Result struct {
	Body         []byte // the body to forward; the very input slice when nothing changed
	Dropped      int    // messages dropped to fit the window (X-Taskgate-Trimmed); not those left out by DropEarlierToolResults
	PromptTokens int    // the prompt's tokens for the first budget (exact when Counted, else the estimate-mode count)
	Counted      bool   // whether PromptTokens is an exact tokenizer count
	Cut          int    // attachment parts cut to their share
}

// ErrContextLength is returned when even the system and developer messages
// and the newest turn do not fit a budget (or, with trimming off, when the
// prompt does not). It comes wrapped with a message saying by how much; test
// with errors.Is.
var ErrContextLength = errors.New("context length exceeded")

// Chat fits a /v1/chat/completions body to every budget as the package doc
// describes. The body must be valid JSON (the caller has checked it); a
// malformed request is an *InvalidError, a history that cannot fit wraps
// ErrContextLength.
func Chat(body []byte, budgets []Budget, opt Options) (Result, error) {
	var msgBuf [8]message // most calls send a few messages
	p, err := parseBody(bytesString(body), opt.Fields, msgBuf[:0])
	if err != nil {
		return Result{}, err
	}
	msgs, tools := p.msgs, p.tools

	var csBuf [4]counter // most calls have a few budgets
	cs := csBuf[:0]
	if len(budgets) > len(csBuf) {
		cs = make([]counter, 0, len(budgets))
	}
	cs = cs[:len(budgets)]
	for i, b := range budgets {
		if cs[i], err = getCounter(b.Tokenizer); err != nil {
			return Result{}, err
		}
	}

	var res Result
	if opt.DropEarlierToolResults {
		dropEarlierToolResults(msgs)
	}
	if opt.Enabled && opt.AttachmentsShare > 0 {
		res.Cut = cutAttachments(msgs, budgets, cs, opt.AttachmentsShare)
	}

	f := fitter{msgs: msgs, budgets: budgets, cs: cs, tools: tools}
	if err := f.fit(opt.Enabled, &res); err != nil {
		return Result{}, err
	}

	changed := false
	for i := range msgs {
		if msgs[i].omitted || msgs[i].dropped || msgs[i].changed {
			changed = true
			break
		}
	}
	if !changed {
		res.Body = body
		return res, nil
	}
	out := make([]byte, 0, len(body))
	out = append(out, body[:p.arrStart]...)
	out = append(out, '[')
	first := true
	for i := range msgs {
		m := &msgs[i]
		if m.omitted || m.dropped {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, m.raw...)
	}
	out = append(out, ']')
	out = append(out, body[p.arrEnd:]...)
	res.Body = out
	return res, nil
}

// parsedBody is what Chat reads of a body.
type parsedBody struct {
	msgs             []message
	tools            []string // the raw tools and functions arrays, when not empty
	arrStart, arrEnd int      // the messages array's bytes
}

// parseBody reads and checks the messages and tools of a chat body; the
// messages go in buf when they fit.
func parseBody(js string, known Fields, buf []message) (parsedBody, error) {
	var p parsedBody
	msgsRaw, found := "", false
	if jsonscan.Kind(js[jsonscan.SkipSpace(js, 0):]) != '{' {
		return p, &InvalidError{Message: "the request body must be a JSON object"}
	}
	if known.Known && (known.Messages == "" || offsetIn(known.Messages, js) >= 0) {
		msgsRaw, found = known.Messages, known.Messages != ""
		p.tools = appendTools(appendTools(p.tools, known.Tools), known.Functions)
	} else if !jsonscan.EachField(js, func(k, v string) bool {
		switch jsonscan.Str(k) {
		case "messages":
			msgsRaw, found = v, true
		case "tools", "functions":
			p.tools = appendTools(p.tools, v)
		}
		return true
	}) {
		return p, &InvalidError{Message: "the request body must be a JSON object"}
	}
	if !found {
		return p, invalid("messages", "is required")
	}
	if jsonscan.Kind(msgsRaw) != '[' {
		return p, invalid("messages", "must be an array")
	}
	var err error
	add := func(m string) bool {
		var msg message
		msg, err = parseMessage(m, len(p.msgs))
		p.msgs = append(p.msgs, msg)
		return err == nil
	}
	ok := true
	p.msgs = buf[:0]
	if list := known.MessageList; known.Known && list != nil {
		if len(list) > cap(buf) {
			p.msgs = make([]message, 0, len(list))
		}
		for _, m := range list {
			if !add(m) {
				break
			}
		}
	} else {
		ok = jsonscan.EachElem(msgsRaw, add)
	}
	if err != nil {
		return p, err
	}
	if !ok {
		return p, invalid("messages", "must be an array")
	}
	if len(p.msgs) == 0 {
		return p, invalid("messages", "must hold at least one message")
	}
	p.arrStart = offsetIn(msgsRaw, js)
	if p.arrStart < 0 {
		return p, fmt.Errorf("trim: locate messages in the body")
	}
	p.arrEnd = p.arrStart + len(msgsRaw)
	return p, nil
}

// appendTools appends a tools or functions value that is a non-empty array.
func appendTools(tools []string, v string) []string {
	if jsonscan.Kind(v) == '[' && len(strings.TrimSpace(v[1:len(v)-1])) > 0 {
		return append(tools, v)
	}
	return tools
}

// isSystem reports whether a role always stays.
func isSystem(role string) bool { return role == "system" || role == "developer" }

// isTool reports whether a role is a tool (or legacy function) result.
func isTool(role string) bool { return role == "tool" || role == "function" }

// newestUser is the index of the newest kept user message, or -1.
func newestUser(msgs []message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if !msgs[i].omitted && msgs[i].role == "user" {
			return i
		}
	}
	return -1
}

// dropEarlierToolResults leaves out the tool results and assistant tool
// calls before the newest user message; an assistant message with text keeps
// it without its calls.
func dropEarlierToolResults(msgs []message) {
	u := newestUser(msgs)
	for i := 0; i < u; i++ {
		m := &msgs[i]
		switch {
		case isTool(m.role):
			m.omitted = true
		case m.role == "assistant" && m.calls:
			if !m.text {
				m.omitted = true
				continue
			}
			raw := []byte(m.raw)
			for _, key := range []string{"tool_calls", "function_call"} {
				if gjson.Get(m.raw, key).Exists() {
					if b, err := sjson.DeleteBytes(raw, key); err == nil {
						raw = b
					}
				}
			}
			m.raw = string(raw)
			m.calls, m.changed = false, true
			if nm, err := parseMessage(m.raw, i); err == nil {
				m.info = nm.info
			}
		}
	}
}

// cutAttachments cuts every kept message's attachments to their share of
// each budget's window and returns how many parts were cut.
func cutAttachments(msgs []message, budgets []Budget, cs []counter, share float64) int {
	var reqs []shareReq
	minShare := -1
	for i, b := range budgets {
		if b.ContextWindow <= 0 {
			continue
		}
		s := int(share * float64(b.ContextWindow))
		reqs = append(reqs, shareReq{c: cs[i], share: s})
		if minShare < 0 || s < minShare {
			minShare = s
		}
	}
	if len(reqs) == 0 {
		return 0
	}
	cut := 0
	for i := range msgs {
		m := &msgs[i]
		// Tokens never pass bytes: attachments within the smallest share in
		// bytes need no count.
		if m.omitted || m.info.attBytes <= minShare {
			continue
		}
		raw, n := cutMessage(m.raw, reqs)
		if n == 0 {
			continue
		}
		nm, err := parseMessage(raw, i)
		if err != nil {
			continue
		}
		m.raw, m.info, m.changed = raw, nm.info, true
		cut += n
	}
	return cut
}

// fitter fits kept messages to the budgets.
type fitter struct {
	msgs    []message
	budgets []Budget
	cs      []counter
	tools   []string
	hashes  []uint64
	per     [numCounters][]int // per counter id: each message's count
	totals  [numCounters]int
	have    [numCounters]bool
}

// fit decides what to drop (setting msgs[i].dropped) and fills res's counts.
func (f *fitter) fit(enabled bool, res *Result) error {
	// The cheap bound: no tokenizer when it already fits everywhere.
	bound := priming
	for _, t := range f.tools {
		bound += len(t)
	}
	for i := range f.msgs {
		if !f.msgs[i].omitted {
			bound += f.msgs[i].info.bound()
		}
	}
	fits := true
	for _, b := range f.budgets {
		if b.ContextWindow > 0 && bound+b.ReserveOutput > b.ContextWindow {
			fits = false
			break
		}
	}
	if fits {
		res.PromptTokens = f.count(counter{})
		return nil
	}

	for _, c := range f.cs {
		f.count(c)
	}
	over := make([]int, len(f.budgets))
	anyOver := false
	for i, b := range f.budgets {
		if b.ContextWindow > 0 {
			over[i] = f.totals[f.cs[i].id] + b.ReserveOutput - b.ContextWindow
		}
		anyOver = anyOver || over[i] > 0
	}
	res.PromptTokens, res.Counted = f.totals[f.cs[0].id], f.cs[0].exact()
	if !anyOver {
		return nil
	}
	if !enabled {
		i := firstOver(over)
		b := f.budgets[i]
		return fmt.Errorf("%w: the messages take %d tokens and %d are kept for the answer, %d more than the %d-token window (trimming is off)",
			ErrContextLength, f.totals[f.cs[i].id], b.ReserveOutput, over[i], b.ContextWindow)
	}

	members, offs := f.units(f.turnStart())
	unit := func(k int) []int { return members[offs[k]:offs[k+1]] }
	nunits := len(offs) - 1
	dropped := 0
	k := 0
	for ; k < nunits && anyPositive(over); k++ {
		dropped += f.dropUnit(unit(k), over)
	}
	if anyPositive(over) {
		i := firstOver(over)
		b := f.budgets[i]
		return fmt.Errorf("%w: the system and developer messages and the newest turn take %d tokens and %d are kept for the answer, %d more than the %d-token window",
			ErrContextLength, f.totals[f.cs[i].id]-sumDropped(f, i), b.ReserveOutput, over[i], b.ContextWindow)
	}
	// The first kept non-system message must not be a tool result.
	for ; k < nunits && isTool(f.msgs[unit(k)[0]].role); k++ {
		dropped += f.dropUnit(unit(k), over)
	}
	res.Dropped = dropped
	res.PromptTokens = f.totals[f.cs[0].id] - sumDropped(f, 0)
	return nil
}

// sumDropped is the tokens of the dropped messages under budget i's counter.
func sumDropped(f *fitter, i int) int {
	id := f.cs[i].id
	n := 0
	for j := range f.msgs {
		if f.msgs[j].dropped {
			n += f.per[id][j]
		}
	}
	return n
}

func anyPositive(xs []int) bool {
	for _, x := range xs {
		if x > 0 {
			return true
		}
	}
	return false
}

func firstOver(over []int) int {
	for i, x := range over {
		if x > 0 {
			return i
		}
	}
	return 0
}

// dropUnit drops the messages of unit u and lowers over by their tokens.
func (f *fitter) dropUnit(u []int, over []int) int {
	for _, j := range u {
		f.msgs[j].dropped = true
		for i := range over {
			over[i] -= f.per[f.cs[i].id][j]
		}
	}
	return len(u)
}

// turnStart is the index where the newest turn begins: the newest user
// message, else the last message (moved back over tool results to their
// call).
func (f *fitter) turnStart() int {
	if u := newestUser(f.msgs); u >= 0 {
		return u
	}
	prev := func(i int) int { // the kept non-system message before i, or -1
		for i--; i >= 0; i-- {
			if !f.msgs[i].omitted && !isSystem(f.msgs[i].role) {
				return i
			}
		}
		return -1
	}
	t := prev(len(f.msgs))
	if t < 0 {
		return len(f.msgs)
	}
	for isTool(f.msgs[t].role) {
		j := prev(t)
		if j < 0 {
			break
		}
		t = j
	}
	return t
}

// units groups the droppable messages before the turn, oldest first: a
// message alone, or an assistant message with calls and the tool results
// that follow it. Unit k is members[offs[k]:offs[k+1]].
func (f *fitter) units(turn int) (members, offs []int) {
	members = make([]int, 0, turn)
	offs = make([]int, 0, turn+1)
	open := false // the last unit is a call that takes tool results
	for i := 0; i < turn; i++ {
		m := &f.msgs[i]
		if m.omitted || isSystem(m.role) {
			continue
		}
		if !isTool(m.role) || !open {
			offs = append(offs, len(members))
			open = m.role == "assistant" && m.calls
		}
		members = append(members, i)
	}
	return members, append(offs, len(members))
}

// count counts every kept message with c (once per counter) and returns
// the prompt's total.
func (f *fitter) count(c counter) int {
	if f.have[c.id] {
		return f.totals[c.id]
	}
	per := make([]int, len(f.msgs))
	total := priming
	for _, t := range f.tools {
		total += toolsTokens(c, t)
	}
	if c.exact() && f.hashes == nil {
		f.hashes = make([]uint64, len(f.msgs))
		for i := range f.msgs {
			if !f.msgs[i].omitted {
				f.hashes[i] = hashString(f.msgs[i].raw)
			}
		}
	}
	for i := range f.msgs {
		m := &f.msgs[i]
		if m.omitted {
			continue
		}
		if c.exact() {
			per[i] = cachedCount(c, f.hashes[i], m.raw, func() int { return exactCount(c, m) })
		} else {
			per[i] = m.info.estimate()
		}
		total += per[i]
	}
	f.per[c.id], f.totals[c.id], f.have[c.id] = per, total, true
	return total
}

// toolsTokens counts a tools (or functions) array: its compact JSON.
func toolsTokens(c counter, raw string) int {
	if !c.exact() {
		return ceilDiv(len(raw), 4)
	}
	h := hashString(raw)
	return cachedCount(c, h, raw, func() int {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(raw)); err != nil {
			return c.text(raw)
		}
		return c.text(buf.String())
	})
}
