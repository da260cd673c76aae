package tasks

import (
	"strings"

	"taskgate/config"
)

// Needs is a set of needs (or capabilities) as bits.
type Needs uint8

// The needs. Hard ones must be met by an endpoint; JSON is soft.
const (
	Vision Needs = 1 << iota
	FileInput
	ImageOutput
	Tools
	JSONSchema
	JSON
)

// Hard is the set of hard needs.
const Hard = Vision | FileInput | ImageOutput | Tools | JSONSchema

var needNames = []struct {
	bit  Needs
	name string
}{
	{Vision, config.NeedVision},
	{FileInput, config.NeedFileInput},
	{ImageOutput, config.NeedImageOutput},
	{Tools, config.NeedTools},
	{JSONSchema, config.NeedJSONSchema},
	{JSON, config.NeedJSON},
}

// ParseNeeds turns config names into a set; unknown names are ignored
// (config validation has refused them already).
func ParseNeeds(names []string) Needs {
	var n Needs
	for _, s := range names {
		for _, nn := range needNames {
			if nn.name == s {
				n |= nn.bit
			}
		}
	}
	return n
}

// Names lists the needs of the set in canonical order.
func (n Needs) Names() []string {
	var out []string
	for _, nn := range needNames {
		if n&nn.bit != 0 {
			out = append(out, nn.name)
		}
	}
	return out
}

// String is the names joined by ", ".
func (n Needs) String() string { return strings.Join(n.Names(), ", ") }

// Qualifying returns the task's endpoints, in order, whose capabilities hold
// every hard need of n. When none does, missing names the hard needs to
// report: those no endpoint has at all, or, when each is met by some endpoint
// but none meets all together, every hard need of the call.
func (t *Task) Qualifying(n Needs) (endpoints []*Endpoint, missing Needs) {
	hard := n & Hard
	if hard == 0 {
		return t.Endpoints, 0
	}
	var union Needs
	for _, e := range t.Endpoints {
		union |= e.Capabilities
		if e.Capabilities&hard == hard {
			endpoints = append(endpoints, e)
		}
	}
	if len(endpoints) > 0 {
		return endpoints, 0
	}
	missing = hard &^ union
	if missing == 0 {
		missing = hard
	}
	return nil, missing
}
