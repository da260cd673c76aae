package proxy

import (
	"context"
	"net"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"taskgate/internal/jsonstr"
)

// ClientApp builds the client API app (DESIGN §3). It serves no admin path.
func (s *Server) ClientApp() *fiber.App {
	app := fiber.New(fiberConfig(s.state.Load().cfg, "taskgate", s.errorHandler))
	// A stream's connection is taken over by its relay (relay.go) and
	// handed back with ServeConn afterwards: fasthttp must not close it.
	app.Server().KeepHijackedConns = true
	s.clientSrv = app.Server()
	s.clientSrv.ConnState = func(c net.Conn, st fasthttp.ConnState) {
		if st != fasthttp.StateIdle {
			s.handedBack.Delete(c) // a request began: fasthttp tracks it again
		}
	}
	for _, r := range routes {
		app.Post(r.path, s.handler(r.rt))
	}
	app.Get("/v1/models", s.models)
	app.Get("/v1/responses/:id", s.getResponse)
	app.Get("/v1/responses/:id/input_items", s.getResponse)
	app.Use(func(fc *fiber.Ctx) error {
		fc.Set("x-request-id", s.newRequestID())
		return newError(404, "not_found", "no such path: "+fc.Method()+" "+quote(fc.Path())).write(fc)
	})
	return app
}

// errorHandler answers fiber's own errors (body too large, bad requests
// fasthttp refused, panics turned errors) in the OpenAI shape.
func (s *Server) errorHandler(fc *fiber.Ctx, err error) error {
	if len(fc.Response().Header.Peek("x-request-id")) == 0 {
		fc.Set("x-request-id", s.newRequestID())
	}
	if e, ok := err.(*apiError); ok {
		return e.write(fc)
	}
	status := fiber.StatusInternalServerError
	if fe, ok := err.(*fiber.Error); ok {
		status = fe.Code
	}
	switch status {
	case fiber.StatusRequestEntityTooLarge:
		return newError(413, "request_too_large", "the request body is larger than the gateway's body_limit").write(fc)
	case fiber.StatusNotFound:
		return newError(404, "not_found", "no such path").write(fc)
	case fiber.StatusMethodNotAllowed:
		return newError(405, "method_not_allowed", "method not allowed on this path").write(fc)
	case fiber.StatusRequestTimeout:
		return newError(408, "request_timeout", "the request was not received in time (client_timeout)").write(fc)
	case fiber.StatusRequestHeaderFieldsTooLarge:
		return newError(431, "headers_too_large", "request headers are too large").write(fc)
	}
	if status >= 500 {
		s.log.Error("internal error", "err", err)
		return newError(500, "internal_error", "internal error").write(fc)
	}
	return invalidRequest("", err.Error()).write(fc)
}

// models answers GET /v1/models: the tasks this key may call, as model ids.
func (s *Server) models(fc *fiber.Ctx) error {
	fc.Set("x-request-id", s.newRequestID())
	st := s.state.Load()
	key := st.reg.Authenticate(bearer(fc))
	if key == nil {
		return newError(401, "invalid_api_key", "missing or invalid API key: send Authorization: Bearer <key>").write(fc)
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"object":"list","data":[`...)
	created := s.started.Unix()
	for i, t := range st.reg.Callable(key) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = jsonstr.Append(b, t.Key)
		b = append(b, `,"object":"model","created":`...)
		b = append(b, itoa(created)...)
		b = append(b, `,"owned_by":"taskgate"}`...)
	}
	b = append(b, "]}"...)
	fc.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return fc.Send(b)
}

// getResponse passes GET /v1/responses/{id}[/input_items] through to the
// endpoint that created the response (or, unknown to this replica, the
// task's endpoints in order), without charging again.
func (s *Server) getResponse(fc *fiber.Ctx) error {
	id := s.newRequestID()
	fc.Set("x-request-id", id)
	st := s.state.Load()
	c := &call{s: s, st: st, rt: routeResponses, id: id, start: time.Now()}
	c.hdr.read(&fc.Request().Header)
	c.key = st.reg.Authenticate(bearerToken(c.hdr.auth))
	if c.key == nil {
		return newError(401, "invalid_api_key", "missing or invalid API key: send Authorization: Bearer <key>").write(fc)
	}
	if e := c.identifyTask(); e != nil {
		return e.write(fc)
	}
	path := strings.TrimPrefix(string(fc.Request().URI().Path()), "/v1")
	var ups []*upstream
	if name := s.responseEndpoint(fc.Params("id")); name != "" {
		if up := st.upstreams[name]; up != nil {
			ups = append(ups, up)
		}
	}
	for _, ep := range c.task.Endpoints {
		if up := st.upstreams[ep.Name]; up != nil && (len(ups) == 0 || ups[0] != up) {
			ups = append(ups, up)
		}
	}
	for i, up := range ups {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		req.Header.SetMethod(fasthttp.MethodGet)
		req.SetRequestURI(up.uri(path))
		if q := fc.Request().URI().QueryString(); len(q) > 0 {
			req.URI().SetQueryStringBytes(q)
		}
		if up.auth != "" {
			req.Header.Set(fasthttp.HeaderAuthorization, up.auth)
		}
		for k, v := range up.ep.Headers {
			req.Header.Set(k, v)
		}
		err := up.client.DoTimeout(req, resp, up.ep.Timeout)
		fasthttp.ReleaseRequest(req)
		if err != nil || (resp.StatusCode() == 404 && i < len(ups)-1) {
			fasthttp.ReleaseResponse(resp)
			continue
		}
		fc.Set("X-Taskgate-Task", c.task.Key)
		fc.Set("X-Taskgate-Endpoint", up.ep.Name)
		fc.Set(fiber.HeaderContentType, contentType(resp, "application/json"))
		fc.Status(resp.StatusCode())
		fc.Response().SetBody(resp.Body())
		fasthttp.ReleaseResponse(resp)
		return nil
	}
	return newError(502, "upstream_error", "no endpoint of task "+c.task.Key+" answered").write(fc)
}

// Shutdown helpers for cmd/gateway.

// Drain marks the server not ready, stops the apps from accepting and waits
// until in-flight calls, streams and settlements finish or ctx ends.
func (s *Server) Drain(ctx context.Context, apps ...*fiber.App) error {
	s.SetDraining()
	s.closeHandedBack()
	for _, a := range apps {
		if a == nil {
			continue
		}
		dl, ok := ctx.Deadline()
		timeout := 30 * time.Second
		if ok {
			timeout = time.Until(dl)
		}
		_ = a.ShutdownWithTimeout(timeout)
	}
	return s.Wait(ctx)
}
