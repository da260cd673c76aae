package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"gopkg.in/yaml.v3"
)

// maxNodes bounds the nodes one decode visits, aliases included, so that an
// alias bomb cannot make a load slow.
const maxNodes = 200000

// decoder walks a yaml.Node tree into the config types and collects every
// error with its path and line.
type decoder struct {
	errs      Errors
	lookupEnv func(string) (string, bool)
	refs      *envRefs // ${VAR} placeholders of the document
	nodes     int      // nodes visited
	stop      bool     // too many nodes or errors: give up quietly
	// lines maps the path of every value given in the file (even null) to
	// its line: the key's line for a field, the item's line for a list item.
	lines map[string]int
}

func (d *decoder) mark(path string, line int) {
	if d.lines == nil {
		d.lines = map[string]int{}
	}
	if _, ok := d.lines[path]; !ok {
		d.lines[path] = line
	}
}

// has reports whether the file gave a value (possibly null) at path.
func (d *decoder) has(path string) bool {
	_, ok := d.lines[path]
	return ok
}

// line gives the line of path, or of its closest given parent.
func (d *decoder) line(path string) int {
	for path != "" {
		if l, ok := d.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// at adds an error at path, on path's line (or its parent's).
func (d *decoder) at(path, format string, args ...any) {
	d.add(path, d.line(path), fmt.Sprintf(format, args...))
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func (d *decoder) add(path string, line int, msg string) {
	if d.stop {
		return
	}
	if len(d.errs) >= maxErrors {
		d.errs = append(d.errs, Error{Msg: fmt.Sprintf("too many errors; only the first %d are shown", maxErrors)})
		d.stop = true
		return
	}
	d.errs = append(d.errs, Error{Path: path, Line: line, Msg: msg})
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.add(path, line, fmt.Sprintf(format, args...))
}

// resolve follows aliases and counts the node against the budget. It
// returns nil once the budget is spent.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode; depth++ {
		if depth > 100 {
			return nil
		}
		n = n.Alias
	}
	if d.stop || n == nil {
		return nil
	}
	d.nodes++
	if d.nodes > maxNodes {
		d.errs = append(d.errs, Error{Line: n.Line, Msg: fmt.Sprintf("the document is too large (more than %d values, aliases expanded)", maxNodes)})
		d.stop = true
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// kindOf names what a node holds, for messages.
func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "a boolean"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a float"
		default:
			return fmt.Sprintf("the string %q", n.Value)
		}
	}
	return "something else"
}

// pair is one key and value of a mapping.
type pair struct{ k, v *yaml.Node }

// field decodes one mapping value; path is the value's path.
type field func(n *yaml.Node, path string)

// mapping decodes a mapping, calling fields by key. Unknown and duplicate
// keys are errors; "<<" merge keys are honoured. It reports whether n was a
// mapping (false for null, which callers treat as absent).
func (d *decoder) mapping(n *yaml.Node, path string, fields map[string]field) bool {
	n = d.resolve(n)
	if n == nil || isNull(n) {
		return false
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", kindOf(n))
		return false
	}
	var explicit, merged []pair
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.resolve(n.Content[i])
		if k == nil {
			return true
		}
		v := n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "a key must be a plain name, not %s", kindOf(k))
			continue
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergeSources(v, path)...)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, joinPath(path, k.Value), "duplicate field %q (first at line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		explicit = append(explicit, pair{k, v})
	}
	// Merged keys first (explicit ones win), each once.
	done := map[string]bool{}
	for _, p := range explicit {
		done[p.k.Value] = true
	}
	var all []pair
	for _, p := range merged {
		if !done[p.k.Value] {
			done[p.k.Value] = true
			all = append(all, p)
		}
	}
	all = append(all, explicit...)
	for _, p := range all {
		if d.stop {
			return true
		}
		fn, ok := fields[p.k.Value]
		if ok {
			d.mark(joinPath(path, p.k.Value), p.k.Line)
		} else {
			msg := fmt.Sprintf("unknown field %q", p.k.Value)
			if s := suggest(p.k.Value, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.errorf(p.k, joinPath(path, p.k.Value), "%s", msg)
			continue
		}
		fn(p.v, joinPath(path, p.k.Value))
	}
	return true
}

// mergeSources gives the key/value pairs a "<<" merge key brings in.
func (d *decoder) mergeSources(v *yaml.Node, path string) []pair {
	v = d.resolve(v)
	if v == nil {
		return nil
	}
	var out []pair
	add := func(m *yaml.Node) {
		m = d.resolve(m)
		if m == nil {
			return
		}
		if m.Kind != yaml.MappingNode {
			d.errorf(m, path, "a merge (<<) takes a mapping or a list of mappings, not %s", kindOf(m))
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := d.resolve(m.Content[i])
			if k == nil {
				return
			}
			if k.Kind != yaml.ScalarNode {
				continue
			}
			if k.Value == "<<" && k.ShortTag() == "!!merge" {
				out = append(out, d.mergeSources(m.Content[i+1], path)...)
				continue
			}
			out = append(out, pair{k, m.Content[i+1]})
		}
	}
	if v.Kind == yaml.SequenceNode {
		for _, m := range v.Content {
			add(m)
		}
	} else {
		add(v)
	}
	return out
}

// suggest returns the known field closest to name, if it is close.
func suggest(name string, fields map[string]field) string {
	best, bestD := "", 3
	for k := range fields {
		if dd := editDistance(name, k); dd < bestD || (dd == bestD && best != "" && k < best) {
			best, bestD = k, dd
		}
	}
	if bestD > 2 || bestD >= len(name) {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// sequence calls item for each element of a list; null is an empty list.
// It reports whether n was a list.
func (d *decoder) sequence(n *yaml.Node, path string, item func(n *yaml.Node, path string, i int)) bool {
	n = d.resolve(n)
	if n == nil || isNull(n) {
		return false
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, not %s", kindOf(n))
		return false
	}
	for i, c := range n.Content {
		if d.stop {
			break
		}
		d.mark(index(path, i), c.Line)
		item(c, index(path, i), i)
	}
	return true
}

// scalar resolves n and checks that it is a scalar; null gives nil, false.
func (d *decoder) scalar(n *yaml.Node, path, want string) (*yaml.Node, bool) {
	n = d.resolve(n)
	if n == nil || isNull(n) {
		return nil, false
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be %s, not %s", want, kindOf(n))
		return nil, false
	}
	return n, true
}

// str decodes a string; any scalar reads as its text, null as "".
func (d *decoder) str(dst *string) field {
	return func(n *yaml.Node, path string) {
		if s, ok := d.scalar(n, path, "a string"); ok {
			*dst = s.Value
		} else {
			*dst = ""
		}
	}
}

// strs decodes a list of strings; null is nil. Each item must be a
// non-empty scalar.
func (d *decoder) strs(dst *[]string) field {
	return func(n *yaml.Node, path string) {
		out := []string{}
		if !d.sequence(n, path, func(n *yaml.Node, path string, _ int) {
			s, ok := d.scalar(n, path, "a string")
			if !ok {
				if isNull(d.resolve(n)) {
					d.errorf(n, path, "must not be empty")
				}
				return
			}
			if s.Value == "" {
				d.errorf(s, path, "must not be empty")
				return
			}
			out = append(out, s.Value)
		}) {
			*dst = nil
			return
		}
		*dst = out
	}
}

// integer parses an integer scalar in [lo, math.MaxInt].
func (d *decoder) integer(n *yaml.Node, path string, lo int64) (int64, bool) {
	s, ok := d.scalar(n, path, "an integer")
	if !ok {
		return 0, false
	}
	if s.ShortTag() != "!!int" {
		d.errorf(s, path, "must be an integer, not %s", kindOf(s))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(s.Value, "_", ""), 0, 64)
	if err != nil || v > math.MaxInt {
		d.errorf(s, path, "%q is not an integer in range", s.Value)
		return 0, false
	}
	if v < lo {
		if lo == 0 {
			d.errorf(s, path, "must not be negative, got %d", v)
		} else {
			d.errorf(s, path, "must be at least %d, got %d", lo, v)
		}
		return 0, false
	}
	return v, true
}

// intf decodes a non-negative int; null leaves dst as is.
func (d *decoder) intf(dst *int) field {
	return func(n *yaml.Node, path string) {
		if v, ok := d.integer(n, path, 0); ok {
			*dst = int(v)
		}
	}
}

// boolf decodes true or false; null leaves dst (the default) as is.
func (d *decoder) boolf(dst *bool) field {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path, "true or false")
		if !ok {
			return
		}
		if s.ShortTag() != "!!bool" {
			d.errorf(s, path, "must be true or false, not %s", kindOf(s))
			return
		}
		*dst = strings.EqualFold(s.Value, "true")
	}
}

// durationf decodes a Go duration ("120s", "1m30s"); null leaves the default.
func (d *decoder) durationf(dst *time.Duration) field {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path, `a duration like "30s"`)
		if !ok {
			return
		}
		if t := s.ShortTag(); t == "!!int" || t == "!!float" {
			d.errorf(s, path, `must be a duration like "30s" or "1m30s"; %s has no unit`, s.Value)
			return
		}
		v, err := time.ParseDuration(s.Value)
		if err != nil {
			d.errorf(s, path, `%q is not a duration like "30s" or "1m30s"`, s.Value)
			return
		}
		if v < 0 {
			d.errorf(s, path, "must not be negative, got %s", s.Value)
			return
		}
		*dst = v
	}
}

// sizef decodes a byte size ("32MiB", "1024"); null leaves the default.
func (d *decoder) sizef(dst *Size) field {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path, `a size like "32MiB"`)
		if !ok {
			return
		}
		v, err := ParseSize(s.Value)
		if err != nil {
			d.errorf(s, path, "%v", err)
			return
		}
		*dst = v
	}
}

// moneyNode checks that n is a dollar string and returns its text. what
// names the field for messages ("money", "price").
func (d *decoder) moneyNode(n *yaml.Node, path, what, example string) (*yaml.Node, bool) {
	s, ok := d.scalar(n, path, fmt.Sprintf("a dollar string like %q", example))
	if !ok {
		return nil, false
	}
	switch s.ShortTag() {
	case "!!int":
		d.errorf(s, path, "%s is a dollar string like %q; an integer is ambiguous (older configs read integers as millionths of a dollar)", what, example)
		return nil, false
	case "!!float":
		d.errorf(s, path, "%s is a dollar string like %q; a float is inexact", what, example)
		return nil, false
	case "!!str":
	default:
		d.errorf(s, path, "%s is a dollar string like %q, not %s", what, example, kindOf(s))
		return nil, false
	}
	return s, true
}

// moneyf decodes a money limit into micro-dollars; null means no limit.
func (d *decoder) moneyf(dst **int64) field {
	return func(n *yaml.Node, path string) {
		*dst = nil
		s, ok := d.moneyNode(n, path, "money", "20.00")
		if !ok {
			return
		}
		v, err := ParseDollars(s.Value)
		if err != nil {
			d.errorf(s, path, "%v", moneyMsg(err))
			return
		}
		*dst = &v
	}
}

// countf decodes a count limit (requests, tokens); null means no limit.
func (d *decoder) countf(dst **int64) field {
	return func(n *yaml.Node, path string) {
		*dst = nil
		if v, ok := d.integer(n, path, 0); ok {
			*dst = &v
		}
	}
}

// pricef decodes a price (exact decimal dollars, any precision, not negative).
func (d *decoder) pricef(dst *decimal.Decimal, given *bool) field {
	return func(n *yaml.Node, path string) {
		*given = true
		s, ok := d.moneyNode(n, path, "a price", "0.15")
		if !ok {
			if isNull(d.resolve(n)) {
				d.errorf(n, path, `must be a dollar string like "0.15" (write "0" for free)`)
			}
			return
		}
		v, err := parseDecimal(s.Value)
		if err != nil {
			d.errorf(s, path, "%v", moneyMsg(err))
			return
		}
		*dst = v
	}
}

// moneyMsg strips the "parse dollars" prefix from a ParseDollars error.
func moneyMsg(err error) string {
	msg := err.Error()
	return strings.TrimPrefix(msg, "parse dollars: ")
}
