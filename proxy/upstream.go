package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"taskgate/tasks"
)

// upstream is one endpoint's client: a fasthttp host client whose
// connections enforce the endpoint's connect, first-byte and idle timeouts,
// and the endpoint's circuit breaker.
type upstream struct {
	ep         *tasks.Endpoint
	client     *fasthttp.HostClient // plain calls
	streams    *streamClient        // streamed calls
	breaker    *breaker
	pathPrefix string // the base URL's path, e.g. "/v1"
	host       string
	scheme     string
	auth       string              // "Bearer <endpoint key>", or ""
	ttfb       prometheus.Observer // taskgate_upstream_ttfb_seconds of the endpoint
	routeURIs  map[string]string   // uri of each route's path, worked out once
	// parsedURIs are routeURIs parsed, copied into each request (a copy
	// costs less than a parse).
	parsedURIs map[string]*fasthttp.URI
}

func newUpstream(ep *tasks.Endpoint, onState func(name string, open float64)) (*upstream, error) {
	u, err := url.Parse(ep.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: base_url: %w", ep.Name, err)
	}
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	timeouts := connTimeouts{firstByte: ep.FirstByteTimeout, idle: ep.IdleTimeout}
	connect := ep.ConnectTimeout
	up := &upstream{
		ep:         ep,
		pathPrefix: strings.TrimRight(u.Path, "/"),
		host:       u.Host,
		scheme:     u.Scheme,
	}
	if ep.APIKey != "" {
		up.auth = "Bearer " + ep.APIKey
	}
	up.routeURIs = make(map[string]string, len(routes))
	up.parsedURIs = make(map[string]*fasthttp.URI, len(routes))
	for _, r := range routes {
		s := up.scheme + "://" + up.host + up.pathPrefix + r.rt.path
		up.routeURIs[r.rt.path] = s
		parsed := &fasthttp.URI{}
		if err := parsed.Parse(nil, []byte(s)); err != nil {
			return nil, fmt.Errorf("endpoint %s: base_url: %w", ep.Name, err)
		}
		up.parsedURIs[r.rt.path] = parsed
	}
	up.client = &fasthttp.HostClient{
		Addr:                          addr,
		Name:                          "taskgate",
		IsTLS:                         u.Scheme == "https",
		MaxConns:                      4096,
		MaxIdleConnDuration:           30 * time.Second,
		DisableHeaderNamesNormalizing: false,
		NoDefaultUserAgentHeader:      false,
		RetryIfErr:                    func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		Dial: func(a string) (net.Conn, error) {
			c, err := net.DialTimeout("tcp", a, connect)
			if err != nil {
				return nil, &connectError{err: err}
			}
			return &timeoutConn{Conn: c, t: timeouts}, nil
		},
	}
	up.streams = newStreamClient(addr, u.Host, u.Scheme == "https", connect, ep.FirstByteTimeout)
	failures := ep.Breaker.Failures
	if failures <= 0 {
		failures = 5
	}
	name := ep.Name
	up.breaker = newBreaker(failures, ep.Breaker.Cooldown, func(v float64) {
		if onState != nil {
			onState(name, v)
		}
	})
	return up, nil
}

// uri is the full upstream URI for an API path such as "/chat/completions".
// setURI sets req's URI to the endpoint's URL of a route's path.
func (u *upstream) setURI(req *fasthttp.Request, path string) {
	if p := u.parsedURIs[path]; p != nil {
		req.SetURI(p)
		return
	}
	req.SetRequestURI(u.uri(path))
}

func (u *upstream) uri(path string) string {
	if s, ok := u.routeURIs[path]; ok {
		return s
	}
	return u.scheme + "://" + u.host + u.pathPrefix + path
}

// connectError marks a failure to connect.
type connectError struct{ err error }

func (e *connectError) Error() string { return "connect: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// connTimeouts are the per-read limits of an endpoint's connections.
type connTimeouts struct {
	firstByte time.Duration // from a request's write to its first response byte
	idle      time.Duration // between reads once the response has begun
}

// timeoutConn enforces first-byte and idle timeouts on top of the absolute
// deadline fasthttp sets for the whole call: each Read gets the earlier of
// the call's deadline and now + (first-byte timeout until the response has
// begun, idle timeout after).
type timeoutConn struct {
	net.Conn
	t        connTimeouts
	mu       sync.Mutex
	hard     time.Time // fasthttp's deadline
	begun    bool      // a byte of the current response was read
	armed    bool      // the first-byte deadline of the current request is set
	timedOut bool      // the last read failed on our own (not fasthttp's) limit
}

// SetReadDeadline is called by fasthttp once the request is written: the
// connection gets the earlier of t and the first-byte limit at once, so
// that the response's first read sets no deadline of its own.
func (c *timeoutConn) SetReadDeadline(t time.Time) error {
	d := c.soft(t, c.t.firstByte)
	c.mu.Lock()
	c.hard = t
	c.armed = !c.begun
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(d)
}

// soft is the earlier of hard and now + limit (limit 0: hard).
func (c *timeoutConn) soft(hard time.Time, limit time.Duration) time.Time {
	if limit > 0 {
		if s := time.Now().Add(limit); hard.IsZero() || s.Before(hard) {
			return s
		}
	}
	return hard
}

func (c *timeoutConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.hard = t
	c.armed = false
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *timeoutConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.begun, c.armed = false, false
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *timeoutConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	limit := c.t.idle
	if !c.begun {
		limit = c.t.firstByte
	}
	hard, armed := c.hard, c.armed && !c.begun
	c.mu.Unlock()
	if !armed {
		_ = c.Conn.SetReadDeadline(c.soft(hard, limit))
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.begun = true
		c.mu.Unlock()
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, &timeoutError{err: err}
	}
	return n, err
}

// timeoutError is a read that passed the first-byte, idle or total limit.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string   { return "upstream timeout: " + e.err.Error() }
func (e *timeoutError) Unwrap() error   { return e.err }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return false }

// failure kinds, used in metrics and to pick the final error.
const (
	kindConnect   = "connect"
	kindTimeout   = "timeout"
	kindStatus5xx = "status_5xx"
	kindStatus429 = "status_429"
	kindStatus408 = "status_408"
	kindAuth      = "auth"
	kindOpen      = "breaker_open"
)

// classifyErr names the kind of a transport error.
func classifyErr(err error) string {
	var ce *connectError
	if errors.As(err, &ce) {
		var ne net.Error
		if errors.As(ce.err, &ne) && ne.Timeout() {
			return kindTimeout
		}
		return kindConnect
	}
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) {
		return kindTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return kindTimeout
	}
	if errors.Is(err, fasthttp.ErrDialTimeout) {
		return kindTimeout
	}
	return kindConnect
}
