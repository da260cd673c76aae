package guard

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"time"
)

// AllGroups is the block group that blocks a user in every task.
const AllGroups = "*"

// BlockRequest is the body of POST /admin/blocks: block User in the block
// group Group (a task's block_group, or AllGroups), for Reason, until Expires
// (nil: until the block is deleted).
type BlockRequest struct {
	User    string     `json:"user"`
	Group   string     `json:"group"`
	Reason  string     `json:"reason"`
	Expires *time.Time `json:"expires"`
}

// FieldError is a problem with one field of an admin request body. Field is
// the JSON field's name ("" for the body as a whole), suitable for the
// OpenAI error shape's "param".
type FieldError struct {
	Field   string
	Message string
}

// Error renders "field: message", or the message alone when Field is "".
func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// blockFields are the fields a block request may carry.
var blockFields = map[string]bool{"user": true, "group": true, "reason": true, "expires": true}

// ParseBlockRequest decodes and checks a block request body:
// {"user","group","reason","expires"}. user and group are required non-empty
// strings (group a block group name or "*"); reason is an optional string;
// expires is optional (absent or null: never), an RFC 3339 time after now.
// Unknown fields are refused. Every error is a *FieldError naming the field.
func ParseBlockRequest(body []byte, now time.Time) (BlockRequest, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return BlockRequest{}, &FieldError{Message: "body must be a JSON object {\"user\",\"group\",\"reason\",\"expires\"}"}
	}
	var unknown []string
	for k := range fields {
		if !blockFields[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return BlockRequest{}, &FieldError{Field: unknown[0], Message: "unknown field"}
	}
	var req BlockRequest
	var err error
	if req.User, err = stringField(fields, "user", true); err != nil {
		return BlockRequest{}, err
	}
	if req.Group, err = stringField(fields, "group", true); err != nil {
		return BlockRequest{}, err
	}
	if req.Reason, err = stringField(fields, "reason", false); err != nil {
		return BlockRequest{}, err
	}
	exp, err := stringField(fields, "expires", false)
	if err != nil {
		return BlockRequest{}, err
	}
	if exp != "" {
		t, err := time.Parse(time.RFC3339, exp)
		if err != nil {
			return BlockRequest{}, &FieldError{Field: "expires", Message: "must be an RFC 3339 time like \"2026-12-01T00:00:00Z\""}
		}
		if !t.After(now) {
			return BlockRequest{}, &FieldError{Field: "expires", Message: "must be in the future"}
		}
		req.Expires = &t
	}
	return req, nil
}

// stringField reads a string field; absent and null read as "". A required
// field must be a string with more than whitespace in it.
func stringField(fields map[string]json.RawMessage, name string, required bool) (string, error) {
	raw, ok := fields[name]
	if !ok || bytes.Equal(raw, []byte("null")) {
		if required {
			return "", &FieldError{Field: name, Message: "is required"}
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", &FieldError{Field: name, Message: "must be a string"}
	}
	if required && strings.TrimSpace(s) == "" {
		return "", &FieldError{Field: name, Message: "is required"}
	}
	return s, nil
}

var _ error = (*FieldError)(nil)

// BlockMessage is the message of the 403 "blocked" answer:
// "you are blocked from this task: <reason>", or
// "you are blocked from this task" when the task is private or no reason
// was given.
func BlockMessage(reason string, private bool) string {
	const msg = "you are blocked from this task"
	if private || strings.TrimSpace(reason) == "" {
		return msg
	}
	return msg + ": " + reason
}
