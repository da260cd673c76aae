package config

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// endpoint decodes endpoints[i], defaults first.
func (d *decoder) endpoint(n *yaml.Node, path string) Endpoint {
	e := Endpoint{
		MaxOutputTokens:  DefaultMaxOutputTokens,
		Tokenizer:        DefaultTokenizer,
		Timeout:          DefaultTimeout,
		ConnectTimeout:   DefaultConnectTimeout,
		FirstByteTimeout: DefaultFirstByteTimeout,
		IdleTimeout:      DefaultIdleTimeout,
		Breaker:          Breaker{Failures: DefaultBreakerFailures, Cooldown: DefaultBreakerCooldown},
	}
	var priceGiven, inGiven, outGiven, imgGiven bool
	if !d.mapping(n, path, map[string]field{
		"name":              d.str(&e.Name),
		"base_url":          d.str(&e.BaseURL),
		"api_key":           d.str(&e.APIKey),
		"model":             d.str(&e.Model),
		"context_window":    d.intf(&e.ContextWindow),
		"max_output_tokens": d.intf(&e.MaxOutputTokens),
		"capabilities":      d.strs(&e.Capabilities),
		"price": func(n *yaml.Node, path string) {
			priceGiven = true
			d.mapping(n, path, map[string]field{
				"input":  d.pricef(&e.Price.Input, &inGiven),
				"output": d.pricef(&e.Price.Output, &outGiven),
				"image":  d.pricef(&e.Price.Image, &imgGiven),
			})
		},
		"tokenizer": d.str(&e.Tokenizer),
		"headers": func(n *yaml.Node, path string) {
			e.Headers = d.stringMap(n, path)
		},
		"timeout":            d.durationf(&e.Timeout),
		"connect_timeout":    d.durationf(&e.ConnectTimeout),
		"first_byte_timeout": d.durationf(&e.FirstByteTimeout),
		"idle_timeout":       d.durationf(&e.IdleTimeout),
		"breaker": func(n *yaml.Node, path string) {
			d.mapping(n, path, map[string]field{
				"failures": d.intf(&e.Breaker.Failures),
				"cooldown": d.durationf(&e.Breaker.Cooldown),
			})
		},
	}) {
		d.requireMapping(n, path, "an endpoint")
	}
	e.Price.HasImage = imgGiven
	e.Price.prepare()
	if e.Tokenizer == "" {
		e.Tokenizer = DefaultTokenizer
	}
	e.BaseURL = strings.TrimRight(e.BaseURL, "/")
	if !priceGiven {
		d.at(path+".price", `is required: dollars per million tokens, like {input: "0.15", output: "0.60"} (an endpoint is never free by default; write "0" for a free one)`)
	} else {
		if !inGiven {
			d.at(path+".price.input", `is required: dollars per million input tokens, like "0.15" ("0" for free)`)
		}
		if !outGiven {
			d.at(path+".price.output", `is required: dollars per million output tokens, like "0.60" ("0" for free)`)
		}
	}
	return e
}

// requireMapping reports an item that is null (a mapping is expected).
func (d *decoder) requireMapping(n *yaml.Node, path, what string) {
	if r := d.resolve(n); r != nil && isNull(r) {
		d.errorf(r, path, "is empty; expected %s", what)
	}
}

// stringMap decodes a mapping of strings to strings.
func (d *decoder) stringMap(n *yaml.Node, path string) map[string]string {
	r := d.resolve(n)
	if r == nil || isNull(r) {
		return nil
	}
	if r.Kind != yaml.MappingNode {
		d.errorf(r, path, "must be a mapping of names to strings, not %s", kindOf(r))
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(r.Content); i += 2 {
		k := d.resolve(r.Content[i])
		if k == nil {
			break
		}
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			d.errorf(k, path, "a name must be a non-empty string")
			continue
		}
		p := joinPath(path, k.Value)
		if _, dup := out[k.Value]; dup {
			d.errorf(k, p, "duplicate field %q", k.Value)
			continue
		}
		d.mark(p, k.Line)
		var v string
		d.str(&v)(r.Content[i+1], p)
		out[k.Value] = v
	}
	return out
}

// task decodes tasks[i], defaults first.
func (d *decoder) task(n *yaml.Node, path string) Task {
	t := Task{
		Enabled:    true,
		UserLimits: true,
		Trim:       Trim{Enabled: true, ReserveOutput: DefaultReserveOutput, AttachmentsShare: DefaultAttachmentsShare},
	}
	if !d.mapping(n, path, map[string]field{
		"key":                 d.str(&t.Key),
		"enabled":             d.boolf(&t.Enabled),
		"label":               d.str(&t.Label),
		"purpose":             d.str(&t.Purpose),
		"needs":               d.strs(&t.Needs),
		"endpoints":           d.strs(&t.Endpoints),
		"limits":              func(n *yaml.Node, path string) { t.Limits = d.limits(n, path) },
		"user_limits":         d.boolf(&t.UserLimits),
		"require_user":        d.boolf(&t.RequireUser),
		"sources":             d.strs(&t.Sources),
		"max_calls_per_hour":  d.intf(&t.MaxCallsPerHour),
		"max_tokens_per_call": d.intf(&t.MaxTokensPerCall),
		"typical_tokens": func(n *yaml.Node, path string) {
			t.TypicalTokens = []int{}
			if !d.sequence(n, path, func(n *yaml.Node, path string, _ int) {
				if v, ok := d.integer(n, path, 0); ok {
					t.TypicalTokens = append(t.TypicalTokens, int(v))
				} else if isNull(d.resolve(n)) {
					d.errorf(n, path, "must be an integer, not null")
				}
			}) {
				t.TypicalTokens = nil
			}
		},
		"trim": func(n *yaml.Node, path string) {
			d.mapping(n, path, map[string]field{
				"enabled":        d.boolf(&t.Trim.Enabled),
				"reserve_output": d.intf(&t.Trim.ReserveOutput),
				"attachments_share": func(n *yaml.Node, path string) {
					if v, ok := d.number(n, path); ok {
						t.Trim.AttachmentsShare = v
					}
				},
				"drop_earlier_tool_results": d.boolf(&t.Trim.DropEarlierToolResults),
			})
		},
		"self_flag":            d.boolf(&t.SelfFlag),
		"auto_block_threshold": d.intf(&t.AutoBlockThreshold),
		"private":              d.boolf(&t.Private),
		"block_group":          d.str(&t.BlockGroup),
		"watchers": func(n *yaml.Node, path string) {
			d.sequence(n, path, func(n *yaml.Node, path string, _ int) {
				var w Watcher
				if !d.mapping(n, path, map[string]field{"webhook": d.str(&w.Webhook)}) {
					d.requireMapping(n, path, "a watcher like {webhook: https://…}")
				}
				t.Watchers = append(t.Watchers, w)
			})
		},
		"thresholds": func(n *yaml.Node, path string) {
			t.Thresholds = []float64{}
			if !d.sequence(n, path, func(n *yaml.Node, path string, _ int) {
				if v, ok := d.number(n, path); ok {
					t.Thresholds = append(t.Thresholds, v)
				} else if isNull(d.resolve(n)) {
					d.errorf(n, path, "must be a number, not null")
				}
			}) {
				t.Thresholds = nil
			}
		},
	}) {
		d.requireMapping(n, path, "a task")
	}
	if t.Thresholds == nil { // absent or null; an explicit [] means none
		t.Thresholds = append([]float64(nil), DefaultThresholds...)
	}
	if t.BlockGroup == "" {
		t.BlockGroup = t.Key
	}
	return t
}

// number decodes an integer or float scalar.
func (d *decoder) number(n *yaml.Node, path string) (float64, bool) {
	s, ok := d.scalar(n, path, "a number")
	if !ok {
		return 0, false
	}
	if t := s.ShortTag(); t != "!!int" && t != "!!float" {
		d.errorf(s, path, "must be a number, not %s", kindOf(s))
		return 0, false
	}
	var v float64
	if err := s.Decode(&v); err != nil {
		d.errorf(s, path, "%q is not a number", s.Value)
		return 0, false
	}
	return v, true
}

// key decodes keys[i].
func (d *decoder) key(n *yaml.Node, path string) Key {
	var k Key
	if !d.mapping(n, path, map[string]field{
		"name":          d.str(&k.Name),
		"secret":        d.str(&k.Secret),
		"secret_sha256": d.str(&k.SecretSHA256),
		"tasks":         d.strs(&k.Tasks),
		"user":          d.str(&k.User),
		"source":        d.str(&k.Source),
	}) {
		d.requireMapping(n, path, "a key")
	}
	k.SecretSHA256 = strings.ToLower(k.SecretSHA256)
	return k
}

// limits decodes the shape of a task's limits.
func (d *decoder) limits(n *yaml.Node, path string) Limits {
	var l Limits
	scope := func(sl *ScopeLimits) field {
		return func(n *yaml.Node, path string) {
			d.mapping(n, path, map[string]field{
				UnitRequests: d.periods(&sl.Requests, d.countf),
				UnitTokens:   d.periods(&sl.Tokens, d.countf),
				UnitMoney:    d.periods(&sl.Money, d.moneyf),
			})
		}
	}
	d.mapping(n, path, map[string]field{
		ScopeTask: scope(&l.Task),
		ScopeUser: scope(&l.User),
	})
	return l
}

func (d *decoder) periods(p *Periods, value func(**int64) field) field {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, map[string]field{
			PeriodMinute: value(&p.Minute),
			PeriodHour:   value(&p.Hour),
			PeriodDay:    value(&p.Day),
			PeriodMonth:  value(&p.Month),
		})
	}
}
