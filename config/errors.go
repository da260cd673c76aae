package config

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in a configuration, located by its field path and
// line. Paths count list items from 0: tasks[1].limits.user.money.day.
type Error struct {
	Path string // field path; "" for a problem of the whole file (e.g. YAML syntax)
	Line int    // 1-based line in the file; 0 when unknown
	Msg  string
}

// Error renders "PATH (line N): message"; the path or the line is left out
// when unknown.
func (e Error) Error() string {
	switch {
	case e.Path != "" && e.Line > 0:
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Msg)
	case e.Path != "":
		return e.Path + ": " + e.Msg
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	default:
		return e.Msg
	}
}

// Errors is every problem found in one configuration, in line order. Load,
// Parse and ParseLimits return it (as error) when anything is wrong.
type Errors []Error

// Error renders one error per line.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap gives each Error to errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// maxErrors caps how many errors one file reports, so that a pathological
// document (a huge list of bad items, aliases expanded) stays cheap.
const maxErrors = 200

// sorted returns the errors ordered by line (stable; unknown lines last).
func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		li, lj := es[i].Line, es[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
	return es
}
