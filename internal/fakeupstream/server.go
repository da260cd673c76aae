package fakeupstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
)

// maxBody is the largest request body read; larger ones get 413.
const maxBody = 64 << 20

// Options configures a Server. The zero value serves on 127.0.0.1:0 with no
// key, no latency and full recording.
type Options struct {
	// APIKey, if set, makes requests without "Authorization: Bearer <APIKey>"
	// get 401 invalid_api_key (recorded, but consuming no Behavior).
	APIKey string
	// Latency is added before every answer's first byte.
	Latency time.Duration
	// Addr is the listen address; "" = 127.0.0.1:0.
	Addr string
	// Models are the ids GET /v1/models lists before any model seen in a
	// request; nil = "fake-mini", "fake-large".
	Models []string
	// NoRecord keeps no Recorded copies (for load benchmarks); Count still counts.
	NoRecord bool
	// MaxStoredResponses bounds the Responses API objects kept for
	// GET /v1/responses/{id} (oldest dropped first); 0 = 1024.
	MaxStoredResponses int
}

// Recorded is one request as the server received it.
type Recorded struct {
	Method, Path string      // e.g. "POST", "/v1/chat/completions"
	Header       http.Header // the request headers
	Body         []byte      // the request body as received
	Time         time.Time   // when the request arrived
}

// Server is a running fake upstream. Its methods are safe for concurrent use.
type Server struct {
	opts Options
	ln   net.Listener
	srv  *http.Server
	url  string

	seq   atomic.Uint64
	count atomic.Int64
	hook  atomic.Pointer[func(Recorded) *Behavior]

	mu        sync.Mutex
	queue     []Behavior
	def       Behavior
	records   []Recorded
	usage     Usage
	models    []string
	modelSeen map[string]struct{}

	store responseStore
}

// New starts a Server listening on opts.Addr and serving in the background.
func New(opts Options) (*Server, error) {
	s := newServer(opts)
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakeupstream: listen on %s: %w", addr, err)
	}
	s.ln = ln
	s.url = "http://" + ln.Addr().String() + "/v1"
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func newServer(opts Options) *Server {
	s := &Server{opts: opts, modelSeen: map[string]struct{}{}}
	models := opts.Models
	if models == nil {
		models = []string{"fake-mini", "fake-large"}
	}
	for _, m := range models {
		if _, ok := s.modelSeen[m]; !ok {
			s.modelSeen[m] = struct{}{}
			s.models = append(s.models, m)
		}
	}
	s.store.max = opts.MaxStoredResponses
	if s.store.max <= 0 {
		s.store.max = 1024
	}
	return s
}

// URL is the base URL, ending in "/v1" (http://127.0.0.1:PORT/v1).
func (s *Server) URL() string { return s.url }

// Close stops the listener and closes every connection, releasing held calls.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	if err := s.srv.Close(); err != nil {
		return fmt.Errorf("fakeupstream: close: %w", err)
	}
	return nil
}

// Handler is the server's http.Handler, for serving it on another listener.
func (s *Server) Handler() http.Handler { return s }

// Push queues behaviours; each request on a known route consumes the oldest.
func (s *Server) Push(b ...Behavior) {
	s.mu.Lock()
	s.queue = append(s.queue, b...)
	s.mu.Unlock()
}

// SetDefault sets the behaviour used when the queue is empty.
func (s *Server) SetDefault(b Behavior) {
	s.mu.Lock()
	s.def = b
	s.mu.Unlock()
}

// SetHandlerHook sets a function asked first for every request on a known
// route; a non-nil Behavior it returns is used and the queue is left alone.
// nil removes the hook. It runs once per request, concurrently, so it must be
// safe for concurrent use.
func (s *Server) SetHandlerHook(h func(r Recorded) *Behavior) {
	if h == nil {
		s.hook.Store(nil)
		return
	}
	s.hook.Store(&h)
}

// Pending is the number of queued behaviours not yet consumed.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns copies of the recorded requests, in arrival order.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Recorded, len(s.records))
	for i, r := range s.records {
		r.Header = r.Header.Clone()
		r.Body = bytes.Clone(r.Body)
		out[i] = r
	}
	return out
}

// Count is the number of requests received (any path, also unauthorised).
func (s *Server) Count() int { return int(s.count.Load()) }

// Reset clears the records, the count, the queue and the usage total; the
// default behaviour and the hook stay.
func (s *Server) Reset() {
	s.mu.Lock()
	s.records = nil
	s.queue = nil
	s.usage = Usage{}
	s.count.Store(0)
	s.mu.Unlock()
}

// UsageTotal is the sum of the usage actually reported to clients: the last
// usage object of every answer that sent one (also of streams cut after it),
// and the number of images generated. Usage is counted just before it is
// written, so a client that has read it finds it here.
func (s *Server) UsageTotal() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

func (s *Server) addUsage(u Usage) {
	s.mu.Lock()
	s.usage = s.usage.Add(u)
	s.mu.Unlock()
}

// next picks the behaviour for a request: the hook's, else the queue's
// oldest, else the default.
func (s *Server) next(rec Recorded) *Behavior {
	if h := s.hook.Load(); h != nil {
		if b := (*h)(rec); b != nil {
			return b
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		b := s.queue[0]
		s.queue[0] = Behavior{}
		s.queue = s.queue[1:]
		return &b
	}
	b := s.def
	return &b
}

func (s *Server) seeModel(m string) {
	if m == "" {
		return
	}
	s.mu.Lock()
	if _, ok := s.modelSeen[m]; !ok {
		s.modelSeen[m] = struct{}{}
		s.models = append(s.models, m)
	}
	s.mu.Unlock()
}

// route is one served endpoint.
type route int

const (
	routeNone route = iota
	routeChat
	routeCompletions
	routeEmbeddings
	routeModels
	routeModel
	routeResponses
	routeResponseGet
	routeResponseDelete
	routeResponseItems
	routeImages
)

// match maps a method and path to a route, and the id in the path if any.
func match(method, path string) (route, string) {
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return routeNone, ""
	}
	post, get := method == http.MethodPost, method == http.MethodGet
	switch rest {
	case "chat/completions":
		if post {
			return routeChat, ""
		}
	case "completions":
		if post {
			return routeCompletions, ""
		}
	case "embeddings":
		if post {
			return routeEmbeddings, ""
		}
	case "models":
		if get {
			return routeModels, ""
		}
	case "responses":
		if post {
			return routeResponses, ""
		}
	case "images/generations":
		if post {
			return routeImages, ""
		}
	}
	if id, ok := strings.CutPrefix(rest, "models/"); ok && get && id != "" {
		return routeModel, id
	}
	if id, ok := strings.CutPrefix(rest, "responses/"); ok && id != "" {
		if id, ok := strings.CutSuffix(id, "/input_items"); ok && get && id != "" && !strings.Contains(id, "/") {
			return routeResponseItems, id
		}
		if !strings.Contains(id, "/") {
			switch method {
			case http.MethodGet:
				return routeResponseGet, id
			case http.MethodDelete:
				return routeResponseDelete, id
			}
		}
	}
	return routeNone, ""
}

// ServeHTTP records the request, checks the key, picks a behaviour and answers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	seq := s.seq.Add(1)
	s.count.Add(1)
	rec := Recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header, Body: body, Time: time.Now()}
	if !s.opts.NoRecord {
		stored := rec
		stored.Header = r.Header.Clone()
		s.mu.Lock()
		s.records = append(s.records, stored)
		s.mu.Unlock()
	}
	if s.opts.Latency > 0 && !sleep(r.Context(), s.opts.Latency) {
		return
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "Request body too large.", "")
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "Could not read the request body: "+err.Error(), "")
		return
	}
	if s.opts.APIKey != "" && !validKey(r.Header.Get("Authorization"), s.opts.APIKey) {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.", "")
		return
	}
	rt, id := match(r.Method, r.URL.Path)
	if rt == routeNone {
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "Invalid URL ("+r.Method+" "+r.URL.Path+")", "")
		return
	}
	b := s.next(rec)
	if !s.prepare(w, r, b) {
		return
	}
	h := w.Header()
	for k, v := range b.Header {
		h.Set(k, v)
	}
	h.Set("X-Request-Id", "req_fake"+seqString(seq))
	if b.Status != 0 && b.Status != http.StatusOK {
		writeBehaviorError(w, b, b.Status)
		return
	}
	c := &call{s: s, w: w, r: r, b: b, body: body, seq: seq, id: id}
	switch rt {
	case routeModels:
		c.models()
		return
	case routeModel:
		c.model()
		return
	case routeResponseGet, routeResponseDelete, routeResponseItems:
		c.storedResponse(rt)
		return
	}
	if len(body) == 0 || !gjson.ValidBytes(body) || firstNonSpace(body) != '{' {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "",
			"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)", "")
		return
	}
	c.reqModel = gjson.GetBytes(body, "model").String()
	s.seeModel(c.reqModel)
	if c.reqModel == "" {
		c.reqModel = DefaultModel
	}
	switch rt {
	case routeChat:
		c.chat()
	case routeCompletions:
		c.completions()
	case routeEmbeddings:
		c.embeddings()
	case routeResponses:
		c.responses()
	case routeImages:
		c.images()
	}
}

// prepare applies the behaviour's waits (Hold, then FirstByteDelay) and
// connection faults; false means the request is finished (cancelled or
// dropped).
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, b *Behavior) bool {
	ctx := r.Context()
	if b.Hold != nil {
		select {
		case <-b.Hold:
		case <-ctx.Done():
			return false
		}
	}
	if d := b.FirstByteDelay; d > 0 && !sleep(ctx, d) {
		return false
	}
	if b.DropConnection {
		cut(w)
		return false
	}
	return true
}

// cut closes the client connection without finishing the answer.
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// No hijacking (HTTP/2, some embeddings): let net/http abort it.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func validKey(auth, key string) bool {
	v, ok := strings.CutPrefix(auth, "Bearer ")
	return ok && v == key
}

func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	rd := http.MaxBytesReader(nil, r.Body, maxBody)
	if r.ContentLength > 0 && r.ContentLength <= maxBody {
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		return buf, nil
	}
	buf, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return buf, nil
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		if !isSpace(c) {
			return c
		}
	}
	return 0
}

func seqString(n uint64) string { return strconv.FormatUint(n, 10) }

// call is one request being answered.
type call struct {
	s        *Server
	w        http.ResponseWriter
	r        *http.Request
	b        *Behavior
	body     []byte
	seq      uint64
	id       string // id from the path
	reqModel string // the request's model, or DefaultModel
}

// answer resolves the behaviour for this call, with self-flag detection.
func (c *call) answer(kind route) *answer {
	return resolve(c.b, c.body, c.reqModel, selfFlag(c.body, kind), c.seq)
}

// writeJSON writes a 200 JSON answer.
func writeJSON(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
