package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"taskgate/config"
	"taskgate/guard"
	"taskgate/limits"
	"taskgate/tasks"
)

// AdminApp builds the admin app: /metrics, /healthz and /readyz open;
// every /admin/* path behind the admin bearer token.
func (s *Server) AdminApp() *fiber.App {
	app := fiber.New(fiberConfig(s.state.Load().cfg, "taskgate-admin", s.errorHandler))
	app.Use(func(fc *fiber.Ctx) error {
		fc.Set("x-request-id", s.newRequestID())
		return fc.Next()
	})
	app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(s.m.Registry, promhttp.HandlerOpts{})))
	app.Get("/healthz", func(fc *fiber.Ctx) error { return fc.JSON(fiber.Map{"status": "ok"}) })
	app.Get("/readyz", s.readyz)
	admin := app.Group("/admin", s.adminAuth)
	admin.Get("/usage", s.adminUsage)
	admin.Get("/limits/:task", s.adminGetLimits)
	admin.Put("/limits/:task", s.adminPutLimits)
	admin.Delete("/limits/:task", s.adminDeleteLimits)
	admin.Post("/blocks", s.adminPostBlock)
	admin.Delete("/blocks", s.adminDeleteBlock)
	admin.Get("/blocks", s.adminGetBlocks)
	admin.Get("/events", s.adminEvents)
	admin.Get("/tasks", s.adminTasks)
	admin.Post("/reload", s.adminReload)
	app.Use(func(fc *fiber.Ctx) error {
		return newError(404, "not_found", "no such path: "+fc.Method()+" "+quote(fc.Path())).write(fc)
	})
	return app
}

func (s *Server) readyz(fc *fiber.Ctx) error {
	if s.draining.Load() {
		return fc.Status(503).JSON(fiber.Map{"status": "draining"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.lim.Ping(ctx)
	degraded := s.lim.Degraded()
	s.m.StoreDegraded.Set(boolFloat(degraded))
	if err != nil {
		if s.state.Load().cfg.Store.OnError == config.FailOpen {
			// fail_open serves on local counts: taking every replica out of
			// the load balancer would defeat it.
			return fc.JSON(fiber.Map{"status": "degraded", "error": err.Error()})
		}
		return fc.Status(503).JSON(fiber.Map{"status": "store unavailable", "error": err.Error()})
	}
	return fc.JSON(fiber.Map{"status": "ready", "degraded": degraded})
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// adminAuth checks the admin bearer token in constant time.
func (s *Server) adminAuth(fc *fiber.Ctx) error {
	token := s.state.Load().cfg.AdminToken
	got := bearer(fc)
	if token == "" || got == nil {
		return newError(401, "invalid_admin_token", "missing or invalid admin token").write(fc)
	}
	a, b := sha256.Sum256(got), sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return newError(401, "invalid_admin_token", "missing or invalid admin token").write(fc)
	}
	return fc.Next()
}

func (s *Server) adminTask(fc *fiber.Ctx, key string) (*tasks.Task, *apiError) {
	if key == "" {
		return nil, invalidRequest("task", "task is required")
	}
	if k, err := url.PathUnescape(key); err == nil {
		key = k
	}
	t := s.state.Load().reg.Task(key)
	if t == nil {
		return nil, newError(404, "unknown_task", "unknown task "+quote(key))
	}
	return t, nil
}

func adminCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func storeError(err error) *apiError {
	return &apiError{Status: 503, Code: "store_unavailable", Message: "store: " + err.Error(), RetryAfterRaw: "1"}
}

type windowJSON struct {
	Scope    string `json:"scope"`
	Unit     string `json:"unit"`
	Period   string `json:"period"`
	Used     any    `json:"used"`
	Reserved any    `json:"reserved"`
	Limit    any    `json:"limit"`
	Reset    string `json:"reset"`
}

// amount renders a count as an integer and money as a dollar string.
func amount(unit string, v int64) any {
	if unit == config.UnitMoney {
		return config.FormatMicros(v)
	}
	return v
}

func (s *Server) adminUsage(fc *fiber.Ctx) error {
	t, e := s.adminTask(fc, fc.Query("task"))
	if e != nil {
		return e.write(fc)
	}
	user := fc.Query("user")
	ctx, cancel := adminCtx()
	defer cancel()
	ws, err := s.lim.Usage(ctx, t, user)
	if err != nil {
		return storeError(err).write(fc)
	}
	out := make([]windowJSON, 0, len(ws))
	for _, w := range ws {
		out = append(out, windowJSON{Scope: w.Scope, Unit: w.Unit, Period: w.Period,
			Used: amount(w.Unit, w.Used), Reserved: amount(w.Unit, w.Reserved), Limit: amount(w.Unit, w.Limit),
			Reset: w.Reset.UTC().Format(time.RFC3339)})
	}
	var u any
	if user != "" {
		u = user
	}
	return fc.JSON(fiber.Map{"task": t.Key, "user": u, "windows": out})
}

func (s *Server) limitsJSON(ctx context.Context, t *tasks.Task) (fiber.Map, error) {
	eff, err := s.lim.EffectiveLimits(ctx, t)
	if err != nil {
		return nil, err
	}
	out := make([]fiber.Map, 0, len(eff))
	for _, l := range eff {
		out = append(out, fiber.Map{"scope": l.Scope, "unit": l.Unit, "period": l.Period, "limit": amount(l.Unit, l.Value), "source": l.Source})
	}
	return fiber.Map{"task": t.Key, "user_limits": t.UserLimits, "limits": out}, nil
}

func (s *Server) adminGetLimits(fc *fiber.Ctx) error {
	t, e := s.adminTask(fc, fc.Params("task"))
	if e != nil {
		return e.write(fc)
	}
	ctx, cancel := adminCtx()
	defer cancel()
	m, err := s.limitsJSON(ctx, t)
	if err != nil {
		return storeError(err).write(fc)
	}
	return fc.JSON(m)
}

func (s *Server) adminPutLimits(fc *fiber.Ctx) error {
	t, e := s.adminTask(fc, fc.Params("task"))
	if e != nil {
		return e.write(fc)
	}
	lim, err := config.ParseLimits(fc.Body())
	if err != nil {
		return invalidRequest("", err.Error()).write(fc)
	}
	ctx, cancel := adminCtx()
	defer cancel()
	if err := s.lim.SetOverrides(ctx, t, lim); err != nil {
		if errors.Is(err, limits.ErrUserLimitsOff) {
			return newError(409, "user_limits_off", "task "+t.Key+" has user_limits: false; user limits cannot be set").write(fc)
		}
		return storeError(err).write(fc)
	}
	m, err := s.limitsJSON(ctx, t)
	if err != nil {
		return storeError(err).write(fc)
	}
	return fc.JSON(m)
}

func (s *Server) adminDeleteLimits(fc *fiber.Ctx) error {
	t, e := s.adminTask(fc, fc.Params("task"))
	if e != nil {
		return e.write(fc)
	}
	ctx, cancel := adminCtx()
	defer cancel()
	if err := s.lim.ClearOverrides(ctx, t.Key); err != nil {
		return storeError(err).write(fc)
	}
	return fc.SendStatus(204)
}

func (s *Server) adminPostBlock(fc *fiber.Ctx) error {
	now := time.Now()
	br, err := guard.ParseBlockRequest(fc.Body(), now)
	if err != nil {
		param := ""
		var fe *guard.FieldError
		if errors.As(err, &fe) {
			param = fe.Field
		}
		return invalidRequest(param, err.Error()).write(fc)
	}
	b := limits.Block{User: br.User, Group: br.Group, Reason: br.Reason, Expires: br.Expires, Created: now.UTC().Truncate(time.Second)}
	ctx, cancel := adminCtx()
	defer cancel()
	if err := s.lim.PutBlock(ctx, b); err != nil {
		return storeError(err).write(fc)
	}
	// A block event in every task the block applies to.
	var evs []limits.Event
	for _, t := range s.state.Load().reg.Tasks() {
		if b.Group == "*" || t.BlockGroup == b.Group {
			evs = append(evs, limits.Event{Time: now, Kind: "block", Task: t.Key, User: b.User,
				Detail: map[string]any{"group": b.Group, "reason": b.Reason, "expires": b.Expires}})
		}
	}
	if len(evs) > 0 {
		_ = s.lim.AddEvents(ctx, evs...)
	}
	s.log.Warn("block", "user", b.User, "group", b.Group, "reason", b.Reason)
	return fc.Status(201).JSON(b)
}

func (s *Server) adminDeleteBlock(fc *fiber.Ctx) error {
	user, group := fc.Query("user"), fc.Query("group")
	if user == "" || group == "" {
		return invalidRequest("", "user and group are required query parameters").write(fc)
	}
	ctx, cancel := adminCtx()
	defer cancel()
	ok, err := s.lim.DeleteBlock(ctx, user, group)
	if err != nil {
		return storeError(err).write(fc)
	}
	if !ok {
		return newError(404, "not_found", "no block for that user and group").write(fc)
	}
	return fc.SendStatus(204)
}

func (s *Server) adminGetBlocks(fc *fiber.Ctx) error {
	ctx, cancel := adminCtx()
	defer cancel()
	bs, err := s.lim.Blocks(ctx)
	if err != nil {
		return storeError(err).write(fc)
	}
	if bs == nil {
		bs = []limits.Block{}
	}
	return fc.JSON(fiber.Map{"blocks": bs})
}

func (s *Server) adminEvents(fc *fiber.Ctx) error {
	f := limits.EventFilter{Kind: fc.Query("kind"), Limit: fc.QueryInt("limit", 100)}
	if task := fc.Query("task"); task != "" {
		if _, e := s.adminTask(fc, task); e != nil {
			return e.write(fc)
		}
		f.Tasks = []string{task}
	} else {
		for _, t := range s.state.Load().reg.Tasks() {
			f.Tasks = append(f.Tasks, t.Key)
		}
	}
	if since := fc.Query("since"); since != "" {
		t, err := time.Parse(time.RFC3339, since)
		if err != nil {
			return invalidRequest("since", "since must be an RFC 3339 time").write(fc)
		}
		f.Since = t
	}
	ctx, cancel := adminCtx()
	defer cancel()
	evs, err := s.lim.Events(ctx, f)
	if err != nil {
		return storeError(err).write(fc)
	}
	if evs == nil {
		evs = []limits.Event{}
	}
	return fc.JSON(fiber.Map{"events": evs})
}

// TaskSummary is a resolved task as GET /admin/tasks and `gateway check` show it.
type TaskSummary struct {
	Key         string            `json:"key"`
	Label       string            `json:"label,omitempty"`
	Enabled     bool              `json:"enabled"`
	Needs       []string          `json:"needs"`
	UserLimits  bool              `json:"user_limits"`
	RequireUser bool              `json:"require_user"`
	BlockGroup  string            `json:"block_group"`
	Limits      []LimitSummary    `json:"limits"`
	Endpoints   []EndpointSummary `json:"endpoints"`
}

// LimitSummary is one configured limit.
type LimitSummary struct {
	Scope  string `json:"scope"`
	Unit   string `json:"unit"`
	Period string `json:"period"`
	Limit  any    `json:"limit"`
}

// EndpointSummary is one endpoint of a task with the price of a typical call.
type EndpointSummary struct {
	Name            string `json:"name"`
	Model           string `json:"model"`
	ContextWindow   int    `json:"context_window"`
	TypicalCallCost string `json:"typical_call_cost"` // dollars, for typical_tokens (or the fallback)
	TypicalInput    int64  `json:"typical_input_tokens"`
	TypicalOutput   int64  `json:"typical_output_tokens"`
}

// Summaries describes every task of a registry, with typical call prices.
// A task without typical_tokens is priced at 1,000 input tokens and its
// estimated output (the endpoint's max_output_tokens).
func Summaries(reg *tasks.Registry) []TaskSummary {
	var out []TaskSummary
	for _, t := range reg.Tasks() {
		ts := TaskSummary{Key: t.Key, Label: t.Label, Enabled: t.Enabled, Needs: t.Declared.Names(), UserLimits: t.UserLimits,
			RequireUser: t.RequireUser, BlockGroup: t.BlockGroup, Limits: []LimitSummary{}}
		if ts.Needs == nil {
			ts.Needs = []string{}
		}
		for _, l := range t.Limits {
			ts.Limits = append(ts.Limits, LimitSummary{Scope: l.Scope, Unit: l.Unit, Period: l.Period, Limit: amount(l.Unit, l.Value)})
		}
		for _, ep := range t.Endpoints {
			in, outTok := int64(1000), t.EstimateOutput(ep)
			if typIn, _, ok := t.Typical(); ok {
				in = typIn
			}
			ts.Endpoints = append(ts.Endpoints, EndpointSummary{Name: ep.Name, Model: ep.Model, ContextWindow: ep.ContextWindow,
				TypicalCallCost: config.FormatMicros(ep.Price.CostMicros(in, outTok)), TypicalInput: in, TypicalOutput: outTok})
		}
		out = append(out, ts)
	}
	return out
}

func (s *Server) adminTasks(fc *fiber.Ctx) error {
	return fc.JSON(fiber.Map{"tasks": Summaries(s.state.Load().reg)})
}

func (s *Server) adminReload(fc *fiber.Ctx) error {
	if s.reload == nil {
		return newError(404, "not_found", "reload is not available (no config file)").write(fc)
	}
	if err := s.reload(); err != nil {
		msgs := strings.Split(strings.TrimSpace(err.Error()), "\n")
		fc.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "config not reloaded: " + msgs[0], "type": "invalid_request_error", "param": nil, "code": "invalid_config"}, "errors": msgs})
		return fc.Status(400).Send(b)
	}
	return fc.JSON(fiber.Map{"status": "reloaded"})
}
