package proxy

import (
	"strconv"
	"taskgate/internal/jsonstr"

	"github.com/gofiber/fiber/v2"
)

// apiError is an error answered in the OpenAI error shape:
// {"error":{"message","type","param","code"}}.
type apiError struct {
	Status  int
	Code    string
	Message string
	Param   string // "" is sent as null
	// NoRetry adds x-should-retry: false (a retry cannot cure it).
	NoRetry bool
	// RetryAfter, when > 0, adds retry-after (seconds, rounded up) and
	// retry-after-ms.
	RetryAfterMs int64
	// RetryAfterRaw, when set, is sent as retry-after as is (an upstream's).
	RetryAfterRaw string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// errorType maps a status to OpenAI's error type names.
func errorType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 409:
		return "conflict_error"
	case status == 413:
		return "invalid_request_error"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

func newError(status int, code, msg string) *apiError {
	return &apiError{Status: status, Code: code, Message: msg}
}

func invalidRequest(param, msg string) *apiError {
	return &apiError{Status: 400, Code: "invalid_request", Message: msg, Param: param}
}

// body renders the error JSON.
func (e *apiError) body() []byte {
	b := make([]byte, 0, 128+len(e.Message))
	b = append(b, `{"error":{"message":`...)
	b = jsonstr.Append(b, e.Message)
	b = append(b, `,"type":`...)
	b = jsonstr.Append(b, errorType(e.Status))
	b = append(b, `,"param":`...)
	if e.Param == "" {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, e.Param)
	}
	b = append(b, `,"code":`...)
	if e.Code == "" {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, e.Code)
	}
	return append(b, "}}"...)
}

// event renders the error as a last SSE event, for errors after a stream began.
func (e *apiError) event() []byte {
	b := append([]byte("data: "), e.body()...)
	return append(b, "\n\n"...)
}

// write sends the error on c.
func (e *apiError) write(c *fiber.Ctx) error {
	if e.NoRetry {
		c.Set("x-should-retry", "false")
	}
	if e.RetryAfterRaw != "" {
		c.Set("retry-after", e.RetryAfterRaw)
	} else if e.RetryAfterMs > 0 {
		c.Set("retry-after", strconv.FormatInt((e.RetryAfterMs+999)/1000, 10))
		c.Set("retry-after-ms", strconv.FormatInt(e.RetryAfterMs, 10))
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(e.Status).Send(e.body())
}
