package trim

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"taskgate/internal/jsonstr"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "chat", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawMessages returns the raw JSON of a body's messages.
func rawMessages(body []byte) []string {
	var out []string
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		out = append(out, m.Raw)
		return true
	})
	return out
}

func roles(body []byte) string {
	var out []string
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		out = append(out, m.Get("role").Str)
		return true
	})
	return strings.Join(out, ",")
}

func TestChatUnchanged(t *testing.T) {
	body := readFixture(t, "history.json")
	for _, budgets := range [][]Budget{
		nil,
		{{Tokenizer: "o200k_base", ContextWindow: 128000, ReserveOutput: 1024}},
		{{Tokenizer: "o200k_base", ContextWindow: 300, ReserveOutput: 10}}, // needs a real count
		{{Tokenizer: "estimate", ContextWindow: 8000}, {Tokenizer: "cl100k_base", ContextWindow: 8000}},
	} {
		r, err := Chat(body, budgets, Options{Enabled: true, AttachmentsShare: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		if &r.Body[0] != &body[0] || len(r.Body) != len(body) || r.Dropped != 0 || r.Cut != 0 {
			t.Errorf("%v: body changed (dropped %d, cut %d)", budgets, r.Dropped, r.Cut)
		}
		if r.PromptTokens <= 0 {
			t.Errorf("%v: PromptTokens = %d", budgets, r.PromptTokens)
		}
	}
}

func TestChatCountedFlag(t *testing.T) {
	body := readFixture(t, "history.json")
	exact := promptTokens(t, "o200k_base", body)
	estim := promptTokens(t, "estimate", body)
	tests := []struct {
		name    string
		budgets []Budget
		want    int
		counted bool
	}{
		{"bound fits", []Budget{{Tokenizer: "o200k_base", ContextWindow: 100000}}, estim, false},
		{"needs a count", []Budget{{Tokenizer: "o200k_base", ContextWindow: exact + 5, ReserveOutput: 5}}, exact, true},
		{"estimate budget", []Budget{{Tokenizer: "estimate", ContextWindow: estim + 1, ReserveOutput: 1}, {Tokenizer: "o200k_base", ContextWindow: 100000}}, estim, false},
	}
	for _, tt := range tests {
		r, err := Chat(body, tt.budgets, Options{Enabled: true})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if r.PromptTokens != tt.want || r.Counted != tt.counted || r.Dropped != 0 {
			t.Errorf("%s: PromptTokens %d Counted %v Dropped %d; want %d %v 0", tt.name, r.PromptTokens, r.Counted, r.Dropped, tt.want, tt.counted)
		}
	}
}

func TestChatDrop(t *testing.T) {
	body := readFixture(t, "history.json")
	in := rawMessages(body)
	total := promptTokens(t, "o200k_base", body)
	c, _ := getCounter("o200k_base")
	p := parseRoot(t, body)
	per := make([]int, len(p.msgs))
	for i := range p.msgs {
		per[i] = exactCount(c, &p.msgs[i])
	}
	tests := []struct {
		name    string
		window  int
		roles   string
		dropped int
	}{
		{"fits", total + 100, "system,user,assistant,user,assistant,tool,assistant,developer,user", 0},
		{"one too many", total + 99, "system,assistant,user,assistant,tool,assistant,developer,user", 1},
		{"two", total + 100 - per[1] - 1, "system,user,assistant,tool,assistant,developer,user", 2},
		// Dropping the user message leaves the call first: it goes with its result.
		{"call with result", total + 100 - per[1] - per[2] - per[3] - 1, "system,assistant,developer,user", 5},
		{"all droppable", total + 100 - per[1] - per[2] - per[3] - per[4] - per[5] - per[6], "system,developer,user", 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: tt.window, ReserveOutput: 100}}, Options{Enabled: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := roles(r.Body); got != tt.roles || r.Dropped != tt.dropped {
				t.Fatalf("roles %s dropped %d; want %s, %d", got, r.Dropped, tt.roles, tt.dropped)
			}
			checkSubset(t, in, rawMessages(r.Body))
			checkOtherFields(t, body, r.Body)
			if !r.Counted || r.PromptTokens+100 > tt.window {
				t.Errorf("PromptTokens %d (counted %v) + 100 over window %d", r.PromptTokens, r.Counted, tt.window)
			}
			if got := promptTokens(t, "o200k_base", r.Body); got != r.PromptTokens {
				t.Errorf("PromptTokens %d, recount %d", r.PromptTokens, got)
			}
		})
	}
	_, err := Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: total + 99 - per[1] - per[2] - per[3] - per[4] - per[5] - per[6], ReserveOutput: 100}}, Options{Enabled: true})
	if !errors.Is(err, ErrContextLength) || !strings.Contains(err.Error(), "1 more than the") {
		t.Errorf("err = %v, want ErrContextLength by 1", err)
	}
}

// checkSubset checks that out is an order-preserving subset of in and
// returns where each out message was in in.
func checkSubset(t testing.TB, in, out []string) []int {
	t.Helper()
	j := 0
	idx := make([]int, len(out))
	for k, m := range out {
		for j < len(in) && in[j] != m {
			j++
		}
		if j == len(in) {
			t.Fatalf("message not in the input, or out of order: %s", m)
		}
		idx[k] = j
		j++
	}
	return idx
}

// callStatus tells, for each message, whether it is a tool result that
// follows its assistant call.
func callStatus(msgs []string) []bool {
	out := make([]bool, len(msgs))
	inCall := false
	for i, m := range msgs {
		switch r := gjson.Get(m, "role").Str; {
		case r == "system" || r == "developer":
		case r == "tool":
			out[i] = inCall
		default:
			inCall = r == "assistant" && len(gjson.Get(m, "tool_calls").Array()) > 0
		}
	}
	return out
}

// checkOtherFields checks that everything but the messages is untouched.
func checkOtherFields(t testing.TB, in, out []byte) {
	t.Helper()
	ms := gjson.GetBytes(in, "messages")
	mo := gjson.GetBytes(out, "messages")
	if !bytes.Equal(in[:ms.Index], out[:mo.Index]) || !bytes.Equal(in[ms.Index+len(ms.Raw):], out[mo.Index+len(mo.Raw):]) {
		t.Fatalf("fields besides messages changed:\n%s\n%s", in, out)
	}
}

func TestChatToolResultNeverFirst(t *testing.T) {
	body := readFixture(t, "tool_first.json")
	in := rawMessages(body)
	full := promptTokens(t, "cl100k_base", body)
	c, _ := getCounter("cl100k_base")
	p := parseRoot(t, body)
	first := exactCount(c, &p.msgs[1])
	tests := []struct {
		window  int
		roles   string
		dropped int
	}{
		// The first user message goes; a call with its results may come first.
		{full - 1, "system,assistant,tool,tool,user,assistant,tool", 1},
		{full - first, "system,assistant,tool,tool,user,assistant,tool", 1},
		// A bit more: the call goes with both results; the newest turn
		// (user, call, result) stays.
		{full - first - 1, "system,user,assistant,tool", 4},
	}
	for _, tt := range tests {
		r, err := Chat(body, []Budget{{Tokenizer: "cl100k_base", ContextWindow: tt.window}}, Options{Enabled: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := roles(r.Body); got != tt.roles || r.Dropped != tt.dropped {
			t.Fatalf("window %d: roles %s dropped %d; want %s, %d", tt.window, got, r.Dropped, tt.roles, tt.dropped)
		}
		checkSubset(t, in, rawMessages(r.Body))
	}
	// An orphaned tool result left first by the drop goes too.
	orphan := []byte(`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"` + strings.Repeat("long ", 50) + `"},` +
		`{"role":"tool","tool_call_id":"x","content":"orphan"},{"role":"assistant","content":"a"},{"role":"user","content":"q"}]}`)
	r, err := Chat(orphan, []Budget{{Tokenizer: "o200k_base", ContextWindow: 40}}, Options{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := roles(r.Body); got != "system,assistant,user" || r.Dropped != 2 {
		t.Fatalf("orphan: roles %s dropped %d", got, r.Dropped)
	}
}

func TestChatContextLength(t *testing.T) {
	body := readFixture(t, "history.json")
	_, err := Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: 20, ReserveOutput: 5}}, Options{Enabled: true})
	if !errors.Is(err, ErrContextLength) || !strings.Contains(err.Error(), "20-token window") {
		t.Fatalf("err = %v", err)
	}
	var inv *InvalidError
	if errors.As(err, &inv) {
		t.Fatal("an InvalidError")
	}
}

func TestChatDisabled(t *testing.T) {
	body := readFixture(t, "history.json")
	total := promptTokens(t, "o200k_base", body)
	r, err := Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: total + 10, ReserveOutput: 10}}, Options{})
	if err != nil || &r.Body[0] != &body[0] {
		t.Fatalf("fits: %v", err)
	}
	_, err = Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: total + 9, ReserveOutput: 10}}, Options{})
	if !errors.Is(err, ErrContextLength) || !strings.Contains(err.Error(), "trimming is off") || !strings.Contains(err.Error(), "1 more than") {
		t.Fatalf("err = %v", err)
	}
}

func TestChatMultipleBudgets(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	body := genHistory(r, 200, genOpts{tools: true})
	o := promptTokens(t, "o200k_base", body)
	cl := promptTokens(t, "cl100k_base", body)
	est := promptTokens(t, "estimate", body)
	budgets := []Budget{
		{Tokenizer: "o200k_base", ContextWindow: o, ReserveOutput: 100},
		{Tokenizer: "cl100k_base", ContextWindow: cl / 2, ReserveOutput: 500}, // the tightest
		{Tokenizer: "estimate", ContextWindow: est, ReserveOutput: 50},
	}
	res, err := Chat(body, budgets, Options{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Dropped == 0 {
		t.Fatal("nothing dropped")
	}
	for _, b := range budgets {
		if got := promptTokens(t, b.Tokenizer, res.Body); got+b.ReserveOutput > b.ContextWindow {
			t.Errorf("%s: %d + %d over %d", b.Tokenizer, got, b.ReserveOutput, b.ContextWindow)
		}
	}
	if got := promptTokens(t, "o200k_base", res.Body); got != res.PromptTokens {
		t.Errorf("PromptTokens %d, want the first budget's %d", res.PromptTokens, got)
	}
	// Dropping only what the tightest needs: one message fewer would not fit it.
	if got := promptTokens(t, "cl100k_base", res.Body); got+500 < cl/2-2000 {
		t.Errorf("dropped far too much: %d of %d", got, cl/2-500)
	}
	checkHistory(t, body, res, budgets)
}

func TestChatDropEarlierToolResults(t *testing.T) {
	body := readFixture(t, "tool_first.json")
	r, err := Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: 100000}}, Options{Enabled: true, DropEarlierToolResults: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := roles(r.Body); got != "system,user,assistant,user,assistant,tool" || r.Dropped != 0 {
		t.Fatalf("roles %s dropped %d", got, r.Dropped)
	}
	msgs := rawMessages(r.Body)
	if msgs[2] != `{"role":"assistant","content":"Looking them up now."}` {
		t.Errorf("assistant with text: %s", msgs[2])
	}
	in := rawMessages(body)
	if msgs[4] != in[6] || msgs[5] != in[7] {
		t.Errorf("calls after the newest user message changed")
	}
	if !gjson.ValidBytes(r.Body) {
		t.Fatalf("invalid JSON: %s", r.Body)
	}
	// Also with trimming off, and an assistant without text goes whole.
	body2 := readFixture(t, "history.json")
	r, err = Chat(body2, nil, Options{DropEarlierToolResults: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := roles(r.Body); got != "system,user,assistant,user,assistant,developer,user" || r.Dropped != 0 {
		t.Fatalf("roles %s dropped %d", got, r.Dropped)
	}
	checkOtherFields(t, body2, r.Body)
}

func bigText(r *rand.Rand, runes int) string {
	var b strings.Builder
	for b.Len() < runes {
		b.WriteString(randomText(r, 50))
		b.WriteString("\n")
	}
	return b.String()
}

func TestChatAttachmentCut(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	a := bigText(r, 40000)
	fileB := bigText(r, 20000)
	body := readFixture(t, "attachments.json")
	body = bytes.Replace(body, []byte(`"ATTACHMENT_A"`), jsonstr.Append(nil, a), 1)
	body = bytes.Replace(body, []byte(`"FILE_B"`), []byte(`"data:text/plain;base64,`+base64.StdEncoding.EncodeToString([]byte(fileB))+`"`), 1)
	e := enc(t, "o200k_base")
	ta, tb, tn := e.Count(a), e.Count(fileB), e.Count("short note")
	const window = 40000
	share := window / 4
	if ta+tb+tn <= share || tn > share/3 {
		t.Fatalf("fixture sizes: %d %d %d", ta, tb, tn)
	}
	res, err := Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: window, ReserveOutput: 100}}, Options{Enabled: true, AttachmentsShare: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cut != 2 || res.Dropped != 0 {
		t.Fatalf("cut %d dropped %d", res.Cut, res.Dropped)
	}
	parts := gjson.GetBytes(res.Body, "messages.1.content").Array()
	if parts[0].Get("text").Str != "Compare the two files below." || parts[3].Get("text").Str != "short note" {
		t.Error("the first text or a small attachment changed")
	}
	if parts[2].Raw != `{"type":"image_url","image_url":{"url":"https://example.com/x.png"}}` || !strings.HasPrefix(parts[5].Get("file.file_data").Str, "data:application/pdf;base64,JVBERi0xLjQK") {
		t.Error("an image or a binary file changed")
	}
	gotA := parts[1].Get("text").Str
	dataB := strings.TrimPrefix(parts[4].Get("file.file_data").Str, "data:text/plain;base64,")
	rawB, err := base64.StdEncoding.DecodeString(dataB)
	if err != nil {
		t.Fatal(err)
	}
	gotB := string(rawB)
	// Max-min fair: the note keeps its tokens, the two big ones split the rest.
	each := (share - tn) / 2
	for _, c := range []struct{ name, orig, got string }{{"A", a, gotA}, {"B", fileB, gotB}} {
		i := strings.LastIndex(c.got, "\n[cut: the first ")
		if i < 0 {
			t.Fatalf("%s: no cut line", c.name)
		}
		prefix := c.got[:i]
		wantLine := "\n[cut: the first " + itoa(utf8.RuneCountInString(prefix)) + " of " + itoa(utf8.RuneCountInString(c.orig)) + " characters are shown]"
		if c.got[i:] != wantLine {
			t.Errorf("%s: cut line %q, want %q", c.name, c.got[i:], wantLine)
		}
		if !strings.HasPrefix(c.orig, prefix) || !utf8.ValidString(prefix) {
			t.Errorf("%s: not a prefix on a character boundary", c.name)
		}
		n := e.Count(prefix)
		if n > each || n < each-5 {
			t.Errorf("%s: prefix of %d tokens, want at most and about %d", c.name, n, each)
		}
		// The longest: one more character passes the share.
		_, size := utf8.DecodeRuneInString(c.orig[len(prefix):])
		if e.Count(c.orig[:len(prefix)+size]) <= each && n < each-1 {
			t.Errorf("%s: a longer prefix fits", c.name)
		}
	}
	// The same call again costs nothing new and gives the same body.
	res2, err := Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: window, ReserveOutput: 100}}, Options{Enabled: true, AttachmentsShare: 0.25})
	if err != nil || !bytes.Equal(res2.Body, res.Body) {
		t.Fatal("not repeatable")
	}
	// Estimate mode: 4 bytes a token.
	res3, err := Chat(body, []Budget{{Tokenizer: "estimate", ContextWindow: window, ReserveOutput: 100}}, Options{Enabled: true, AttachmentsShare: 0.25})
	if err != nil || res3.Cut == 0 {
		t.Fatalf("estimate: %v cut %d", err, res3.Cut)
	}
	// Disabled or no share: nothing is cut.
	for _, opt := range []Options{{AttachmentsShare: 0.25}, {Enabled: true}} {
		res, err := Chat(body, []Budget{{Tokenizer: "o200k_base", ContextWindow: 1000000}}, opt)
		if err != nil || res.Cut != 0 || &res.Body[0] != &body[0] {
			t.Errorf("%+v: cut %d, %v", opt, res.Cut, err)
		}
	}
}

func itoa(n int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + fmtInt(n)) }

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

func TestWaterFill(t *testing.T) {
	tests := []struct {
		sizes []int
		share int
		want  []int
	}{
		{[]int{10, 100, 1000}, 300, []int{10, 100, 190}},
		{[]int{1000, 10, 400, 500}, 610, []int{200, 10, 200, 200}},
		{[]int{10, 20}, 100, []int{10, 20}},
		{[]int{500, 500}, 300, []int{150, 150}},
		{[]int{5}, 0, []int{0}},
	}
	for _, tt := range tests {
		got := waterFill(tt.sizes, tt.share)
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("waterFill(%v, %d) = %v, want %v", tt.sizes, tt.share, got, tt.want)
				break
			}
		}
	}
}

func TestChatInvalid(t *testing.T) {
	tests := []struct {
		body, param string
	}{
		{`[]`, ""},
		{`{"model":"m"}`, "messages"},
		{`{"messages":{}}`, "messages"},
		{`{"messages":[]}`, "messages"},
		{`{"messages":[1]}`, "messages[0]"},
		{`{"messages":[{"role":"user","content":"x"},{"content":"x"}]}`, "messages[1].role"},
		{`{"messages":[{"role":7,"content":"x"}]}`, "messages[0].role"},
		{`{"messages":[{"role":"user","content":7}]}`, "messages[0].content"},
		{`{"messages":[{"role":"user","content":{"type":"text"}}]}`, "messages[0].content"},
		{`{"messages":[{"role":"user","content":["x"]}]}`, "messages[0].content[0]"},
		{`{"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type"},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":5}]}]}`, "messages[0].content[1].text"},
		{`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":5}]}]}`, "messages[0].content[0].image_url"},
		{`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"detail":"low"}}]}]}`, "messages[0].content[0].image_url.url"},
		{`{"messages":[{"role":"user","content":[{"type":"file","file":"x"}]}]}`, "messages[0].content[0].file"},
		{`{"messages":[{"role":"user","content":[{"type":"file","file":{"file_data":1}}]}]}`, "messages[0].content[0].file.file_data"},
		{`{"messages":[{"role":"assistant","tool_calls":{}}]}`, "messages[0].tool_calls"},
		{`{"messages":[{"role":"assistant","function_call":"f"}]}`, "messages[0].function_call"},
		{`{"messages":[{"role":"user","name":1,"content":"x"}]}`, "messages[0].name"},
	}
	for _, tt := range tests {
		_, err := Chat([]byte(tt.body), []Budget{{Tokenizer: "o200k_base", ContextWindow: 100}}, Options{Enabled: true})
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Param != tt.param || !strings.HasPrefix(inv.Error(), tt.param) {
			t.Errorf("%s: err %v, want an InvalidError for %q", tt.body, err, tt.param)
		}
	}
	// Unknown tokenizer: an error, not a panic.
	if _, err := Chat(readFixture(t, "history.json"), []Budget{{Tokenizer: "p50k"}}, Options{}); err == nil {
		t.Error("unknown tokenizer accepted")
	}
}

// checkHistory asserts the trimming invariants of res for body.
func checkHistory(t testing.TB, body []byte, res Result, budgets []Budget) {
	t.Helper()
	if !gjson.ValidBytes(res.Body) {
		t.Fatalf("invalid JSON: %s", res.Body)
	}
	in, out := rawMessages(body), rawMessages(res.Body)
	idx := checkSubset(t, in, out)
	checkOtherFields(t, body, res.Body)
	if len(in)-len(out) != res.Dropped {
		t.Fatalf("Dropped %d, but %d messages fewer", res.Dropped, len(in)-len(out))
	}
	newest := -1
	for i, m := range in {
		if r := gjson.Get(m, "role").Str; r == "user" {
			newest = i
		}
	}
	kept := make([]bool, len(in))
	for _, j := range idx {
		kept[j] = true
	}
	for i, m := range in {
		r := gjson.Get(m, "role").Str
		if (r == "system" || r == "developer" || newest >= 0 && i >= newest) && !kept[i] {
			t.Fatalf("message %d (%s) dropped", i, r)
		}
	}
	// No tool result loses its call (one orphaned in the input may stay
	// orphaned), and after a drop none comes first.
	inStatus, outStatus := callStatus(in), callStatus(out)
	for k, j := range idx {
		if inStatus[j] && !outStatus[k] {
			t.Fatalf("tool result %d lost its call: %s", j, out[k])
		}
	}
	if res.Dropped > 0 {
		for _, m := range out {
			r := gjson.Get(m, "role").Str
			if r == "system" || r == "developer" {
				continue
			}
			if r == "tool" {
				t.Fatalf("a tool result comes first: %s", m)
			}
			break
		}
	}
	for _, b := range budgets {
		if got := promptTokens(t, b.Tokenizer, res.Body); b.ContextWindow > 0 && got+b.ReserveOutput > b.ContextWindow {
			t.Fatalf("%s: %d + %d over %d", b.Tokenizer, got, b.ReserveOutput, b.ContextWindow)
		}
	}
}

// TestChatProperties trims generated histories to random windows.
func TestChatProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	toks := []string{"o200k_base", "cl100k_base", "estimate"}
	for i := range 150 {
		o := genOpts{tools: i%3 != 0, images: i%2 == 0, trailing: i%4 == 0}
		body := genHistory(r, 2+r.IntN(60), o)
		var budgets []Budget
		for range 1 + r.IntN(3) {
			tok := toks[r.IntN(len(toks))]
			full := promptTokens(t, tok, body)
			budgets = append(budgets, Budget{Tokenizer: tok, ContextWindow: 1 + r.IntN(full+200), ReserveOutput: r.IntN(50)})
		}
		res, err := Chat(body, budgets, Options{Enabled: true})
		if errors.Is(err, ErrContextLength) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		checkHistory(t, body, res, budgets)
	}
}

func FuzzTrim(f *testing.F) {
	f.Add(uint64(1), uint16(20), uint16(500), uint8(0), []byte(nil))
	f.Add(uint64(2), uint16(3), uint16(60), uint8(5), []byte(nil))
	f.Add(uint64(3), uint16(0), uint16(0), uint8(1), readFixture(f, "history.json"))
	f.Add(uint64(4), uint16(0), uint16(200), uint8(2), readFixture(f, "tool_first.json"))
	f.Fuzz(func(t *testing.T, seed uint64, n, window uint16, flags uint8, raw []byte) {
		body := raw
		if len(body) == 0 {
			r := rand.New(rand.NewPCG(seed, seed^0x9e37))
			body = genHistory(r, 1+int(n%80), genOpts{tools: flags&1 != 0, images: flags&2 != 0, trailing: flags&4 != 0, attachments: flags&8 != 0})
		}
		tok := []string{"o200k_base", "cl100k_base", "estimate"}[int(flags>>4)%3]
		budgets := []Budget{{Tokenizer: tok, ContextWindow: int(window), ReserveOutput: int(flags % 32)}}
		opt := Options{Enabled: flags&16 == 0, DropEarlierToolResults: flags&32 != 0}
		if gjson.ValidBytes(body) {
			chatAgrees(t, body, budgets, opt)
		}
		res, err := Chat(body, budgets, opt)
		if err != nil || !gjson.ValidBytes(body) || opt.DropEarlierToolResults {
			return // errors are fine; invariants hold for valid bodies
		}
		checkHistory(t, body, res, budgets)
	})
}

// knownFields reads body's top-level fields as a caller of Chat would
// (gjson, in place); ok is false for a body Fields cannot describe (not an
// object, or one of the fields given twice).
func knownFields(body []byte) (Fields, bool) {
	f := Fields{Known: true}
	root := gjson.Parse(bytesString(body))
	if !root.IsObject() {
		return f, false
	}
	ok := true
	root.ForEach(func(k, v gjson.Result) bool {
		var dst *string
		switch k.Str {
		case "messages":
			dst = &f.Messages
		case "tools":
			dst = &f.Tools
		case "functions":
			dst = &f.Functions
		default:
			return true
		}
		if *dst != "" {
			ok = false
		}
		*dst = v.Raw
		return true
	})
	return f, ok
}

// chatAgrees checks that Chat gives the same with the fields a caller read
// as when it reads them itself, with and without the messages' elements.
func chatAgrees(t *testing.T, body []byte, budgets []Budget, opt Options) {
	t.Helper()
	f, ok := knownFields(body)
	if !ok {
		return
	}
	want, wantErr := Chat(body, budgets, opt)
	withList := f
	if m := gjson.Parse(f.Messages); m.IsArray() {
		withList.MessageList = []string{}
		m.ForEach(func(_, v gjson.Result) bool {
			withList.MessageList = append(withList.MessageList, v.Raw)
			return true
		})
	}
	for _, known := range []Fields{f, withList} {
		opt.Fields = known
		got, gotErr := Chat(body, budgets, opt)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !bytes.Equal(got.Body, want.Body) ||
			got.Dropped != want.Dropped || got.PromptTokens != want.PromptTokens || got.Counted != want.Counted || got.Cut != want.Cut {
			t.Errorf("%.200s: with known fields (%d listed messages) %+v, %v; reading them %+v, %v", body, len(known.MessageList), got, gotErr, want, wantErr)
		}
	}
}

// TestChatKnownFieldsAgree checks Options.Fields against Chat's own read
// of the top level, on generated histories, the fixtures and odd shapes.
func TestChatKnownFieldsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	budget := []Budget{{Tokenizer: "o200k_base", ContextWindow: 400, ReserveOutput: 20}}
	var bodies [][]byte
	for i := range 40 {
		bodies = append(bodies, genHistory(r, 1+r.IntN(30), genOpts{tools: i%2 == 0, images: i%3 == 0, trailing: i%5 == 0, attachments: i%4 == 0}))
	}
	for _, name := range []string{"history.json", "tool_first.json", "attachments.json"} {
		bodies = append(bodies, readFixture(t, name))
	}
	for _, s := range []string{
		`{}`,
		`{"model":"m"}`,
		`{"messages":"text"}`,
		`{"messages":[]}`,
		`{"messages":[1,2]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[ ],"functions":[{"name":"f","parameters":{}}]}`,
		`{"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}`,
		` { "messages" : [ {"role":"user","content":"spaced"} ] } `,
	} {
		bodies = append(bodies, []byte(s))
	}
	for _, body := range bodies {
		for _, opt := range []Options{{Enabled: true}, {Enabled: false}, {Enabled: true, DropEarlierToolResults: true, AttachmentsShare: 0.3}} {
			chatAgrees(t, body, budget, opt)
		}
	}
}
