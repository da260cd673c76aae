package config

import (
	"encoding/json"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// ParseLimits parses an admin API limits body: JSON (or YAML) with the shape
// of a task's `limits:` in the config, e.g.
//
//	{"task": {"money": {"day": "20.00"}}, "user": {"requests": {"hour": 60}}}
//
// Money is a dollar string (integers and floats are refused, as in the
// config); requests and tokens are non-negative integers; unknown fields
// are errors. A null window is the same as a window not named. Problems come
// back as Errors with paths like task.money.day. No ${VAR} is expanded.
func ParseLimits(data []byte) (Limits, error) {
	d := &decoder{}
	if strings.TrimSpace(string(data)) == "" {
		return Limits{}, Errors{{Msg: "the body is empty; send the limits as JSON, like {\"task\": {\"money\": {\"day\": \"20.00\"}}}"}}
	}
	root, ok := d.parseDocument(data)
	if !ok {
		return Limits{}, d.errs.sorted()
	}
	if r := d.resolve(root); r != nil && r.Kind != yaml.MappingNode && !isNull(r) {
		d.errorf(r, "", "the limits must be an object with \"task\" and/or \"user\", not %s", kindOf(r))
		return Limits{}, d.errs
	}
	l := d.limits(root, "")
	if len(d.errs) > 0 {
		return Limits{}, d.errs.sorted()
	}
	return l, nil
}

// IsZero reports whether the scope names no limit.
func (s ScopeLimits) IsZero() bool {
	return s.Requests.IsZero() && s.Tokens.IsZero() && s.Money.IsZero()
}

// IsZero reports whether no period has a limit.
func (p Periods) IsZero() bool {
	return p.Minute == nil && p.Hour == nil && p.Day == nil && p.Month == nil
}

// IsZero reports whether the limits name no window.
func (l Limits) IsZero() bool { return l.Task.IsZero() && l.User.IsZero() }

// Scope returns the limits of a scope (ScopeTask or ScopeUser); nil for an
// unknown name.
func (l *Limits) Scope(scope string) *ScopeLimits {
	switch scope {
	case ScopeTask:
		return &l.Task
	case ScopeUser:
		return &l.User
	}
	return nil
}

// Unit returns the periods of a unit (UnitRequests, UnitTokens, UnitMoney);
// nil for an unknown name.
func (s *ScopeLimits) Unit(unit string) *Periods {
	switch unit {
	case UnitRequests:
		return &s.Requests
	case UnitTokens:
		return &s.Tokens
	case UnitMoney:
		return &s.Money
	}
	return nil
}

// Period returns the slot of a period (PeriodMinute … PeriodMonth); nil for
// an unknown name.
func (p *Periods) Period(period string) **int64 {
	switch period {
	case PeriodMinute:
		return &p.Minute
	case PeriodHour:
		return &p.Hour
	case PeriodDay:
		return &p.Day
	case PeriodMonth:
		return &p.Month
	}
	return nil
}

// Get returns the limit of one window and whether the limits name it.
func (l Limits) Get(scope, unit, period string) (int64, bool) {
	s := l.Scope(scope)
	if s == nil {
		return 0, false
	}
	u := s.Unit(unit)
	if u == nil {
		return 0, false
	}
	p := u.Period(period)
	if p == nil || *p == nil {
		return 0, false
	}
	return **p, true
}

// Has reports whether the limits name the window.
func (l Limits) Has(scope, unit, period string) bool {
	_, ok := l.Get(scope, unit, period)
	return ok
}

// Set names one window with value v; unknown names are ignored.
func (l *Limits) Set(scope, unit, period string, v int64) {
	if s := l.Scope(scope); s != nil {
		if u := s.Unit(unit); u != nil {
			if p := u.Period(period); p != nil {
				*p = &v
			}
		}
	}
}

// Merge returns l with every window that over names replaced by over's
// value (an admin override over the config's limits). l is not changed.
func (l Limits) Merge(over Limits) Limits {
	out := l.Clone()
	for _, w := range over.List() {
		out.Set(w.Scope, w.Unit, w.Period, w.Value)
	}
	return out
}

// Clone returns a deep copy (the windows are pointers).
func (l Limits) Clone() Limits {
	var out Limits
	for _, w := range l.List() {
		out.Set(w.Scope, w.Unit, w.Period, w.Value)
	}
	return out
}

// MarshalJSON renders the config's shape: only the windows named, money as
// a dollar string ("20.000000"), counts as integers.
func (l Limits) MarshalJSON() ([]byte, error) {
	out := map[string]map[string]map[string]any{}
	for _, w := range l.List() {
		if out[w.Scope] == nil {
			out[w.Scope] = map[string]map[string]any{}
		}
		if out[w.Scope][w.Unit] == nil {
			out[w.Scope][w.Unit] = map[string]any{}
		}
		var v any = w.Value
		if w.Unit == UnitMoney {
			v = FormatMicros(w.Value)
		}
		out[w.Scope][w.Unit][w.Period] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("marshal limits: %w", err)
	}
	return b, nil
}

// UnmarshalJSON parses the config's shape with ParseLimits' rules.
func (l *Limits) UnmarshalJSON(data []byte) error {
	v, err := ParseLimits(data)
	if err != nil {
		return err
	}
	*l = v
	return nil
}
