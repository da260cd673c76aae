package fakeupstream

import (
	"net/http"
	"strconv"
	"taskgate/internal/jsonstr"
)

// errorDefaults gives the OpenAI error type, code and message for a status.
func errorDefaults(status int) (typ, code, msg string) {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error", "", "Invalid request."
	case http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key", "Incorrect API key provided."
	case http.StatusForbidden:
		return "permission_error", "permission_denied", "You are not allowed to make this request."
	case http.StatusNotFound:
		return "invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."
	case http.StatusRequestTimeout:
		return "timeout_error", "timeout", "Request timed out."
	case http.StatusConflict:
		return "invalid_request_error", "conflict", "Conflict."
	case http.StatusRequestEntityTooLarge:
		return "invalid_request_error", "request_too_large", "Request too large."
	case http.StatusUnprocessableEntity:
		return "invalid_request_error", "unprocessable_entity", "Unprocessable entity."
	case http.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded", "Rate limit reached. Please try again later."
	case http.StatusBadGateway:
		return "server_error", "bad_gateway", "Bad gateway."
	case http.StatusServiceUnavailable:
		return "server_error", "service_unavailable", "The engine is currently overloaded, please try again later."
	case http.StatusGatewayTimeout:
		return "server_error", "timeout", "Gateway timeout."
	}
	if status >= 500 {
		return "server_error", "server_error", "The server had an error while processing your request."
	}
	return "invalid_request_error", "", "Request failed with status " + strconv.Itoa(status) + "."
}

// appendErrorBody appends {"error":{"message","type","param","code"}}; an
// empty code or param is null.
func appendErrorBody(b []byte, typ, code, msg, param string) []byte {
	b = append(b, `{"error":{`...)
	b = appendKV(b, "message", msg)
	b = append(b, ',')
	b = appendKV(b, "type", typ)
	b = append(b, `,"param":`...)
	if param == "" {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, param)
	}
	b = append(b, `,"code":`...)
	if code == "" {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, code)
	}
	return append(b, "}}"...)
}

// writeError answers status with an OpenAI error body.
func writeError(w http.ResponseWriter, status int, typ, code, msg, param string) {
	body := appendErrorBody(make([]byte, 0, 160), typ, code, msg, param)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// behaviorError is the error a behaviour describes for status.
func behaviorError(b *Behavior, status int) (typ, code, msg string) {
	typ, code, msg = errorDefaults(status)
	if b.ErrorType != "" {
		typ = b.ErrorType
	}
	if b.ErrorCode != "" {
		code = b.ErrorCode
	}
	if b.ErrorMessage != "" {
		msg = b.ErrorMessage
	}
	return typ, code, msg
}

// writeBehaviorError answers the behaviour's error status.
func writeBehaviorError(w http.ResponseWriter, b *Behavior, status int) {
	if b.RetryAfter != "" {
		w.Header().Set("Retry-After", b.RetryAfter)
	}
	typ, code, msg := behaviorError(b, status)
	writeError(w, status, typ, code, msg, "")
}
