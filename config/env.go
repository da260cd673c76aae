package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ${VAR} expansion runs in two steps so that a variable's value is always
// data and never YAML: before parsing, each well-formed ${NAME} in the text
// is swapped for a placeholder (letters and digits only, valid anywhere a
// plain scalar is, flow lists included); after parsing, placeholders in
// scalar values are replaced by the variables' values. A secret holding
// "#", ": " or a newline therefore cannot change the structure of the file,
// references in comments are ignored, and mapping keys are never expanded.
// A plain scalar that held a reference is re-typed from its new value as
// YAML would type it (`context_window: ${CTX}` with CTX=128000 is an
// integer; an empty value is null). "$$" is a literal "$" in values.

// envRefs holds the references swapped out of one document.
type envRefs struct {
	prefix string   // absent from the original text
	names  []string // variable name of placeholder i
}

// placeholders swaps each ${NAME} in data for prefix+i+"x".
func placeholders(data []byte) ([]byte, *envRefs) {
	refs := &envRefs{prefix: "tgenv"}
	for bytes.Contains(data, []byte(refs.prefix)) {
		refs.prefix += "q"
	}
	if !bytes.Contains(data, []byte("${")) {
		return data, refs
	}
	var b bytes.Buffer
	b.Grow(len(data))
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c != '$' || i+1 >= len(data) {
			b.WriteByte(c)
			continue
		}
		switch data[i+1] {
		case '$':
			b.WriteString("$$")
			i++
		case '{':
			end := bytes.IndexAny(data[i+2:], "}\n")
			if end < 0 || data[i+2+end] != '}' || !validEnvName(string(data[i+2:i+2+end])) {
				b.WriteByte(c) // left for expand to report, if in a value
				continue
			}
			fmt.Fprintf(&b, "%s%dx", refs.prefix, len(refs.names))
			refs.names = append(refs.names, string(data[i+2:i+2+end]))
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.Bytes(), refs
}

// ref parses a placeholder at the start of s: its index and length.
func (r *envRefs) ref(s string) (int, int, bool) {
	if r == nil || !strings.HasPrefix(s, r.prefix) {
		return 0, 0, false
	}
	j := len(r.prefix)
	k := j
	for k < len(s) && s[k] >= '0' && s[k] <= '9' {
		k++
	}
	if k == j || k >= len(s) || s[k] != 'x' {
		return 0, 0, false
	}
	n, err := strconv.Atoi(s[j:k])
	if err != nil || n >= len(r.names) {
		return 0, 0, false
	}
	return n, k + 1, true
}

// restore puts the original ${NAME} text back (for keys, which are not
// expanded).
func (r *envRefs) restore(s string) string {
	if r == nil || len(r.names) == 0 || !strings.Contains(s, r.prefix) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if n, l, ok := r.ref(s[i:]); ok {
			b.WriteString("${" + r.names[n] + "}")
			i += l - 1
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// expand replaces placeholders by their variables and "$$" by "$"; any
// other "$" stays. It returns a message for unset variables and malformed
// references.
func (r *envRefs) expand(s string, lookup func(string) (string, bool)) (string, string) {
	var b strings.Builder
	var problems []string
	for i := 0; i < len(s); i++ {
		if n, l, ok := r.ref(s[i:]); ok {
			name := r.names[n]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				problems = append(problems, fmt.Sprintf("environment variable %s is not set", name))
			}
			i += l - 1
			continue
		}
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				problems = append(problems, `"${" without a closing "}" (write $$ for a literal $)`)
				b.WriteString(s[i:])
				i = len(s)
				continue
			}
			problems = append(problems, fmt.Sprintf("${%s} is not a variable reference (names are letters, digits and _, not starting with a digit; write $$ for a literal $)", r.restore(s[i+2:i+2+end])))
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), strings.Join(problems, "; ")
}

// expandNode expands the scalar values of the tree in place and restores
// the keys.
func (d *decoder) expandNode(n *yaml.Node, path string) {
	if n == nil {
		return
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			d.expandNode(c, path)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.expandNode(c, index(path, i))
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind == yaml.ScalarNode {
				k.Value = d.refs.restore(k.Value)
			}
			d.expandNode(n.Content[i+1], joinPath(path, k.Value))
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") && (len(d.refs.names) == 0 || !strings.Contains(n.Value, d.refs.prefix)) {
			return
		}
		v, err := d.refs.expand(n.Value, d.lookupEnv)
		if err != "" {
			d.add(path, n.Line, err)
			return
		}
		if v == n.Value {
			return
		}
		n.Value = v
		if n.Style&(yaml.TaggedStyle|yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
			n.Tag = "" // re-resolve: ShortTag types the new value
		}
	}
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
