package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"taskgate/config"
	"taskgate/guard"
	"taskgate/limits"
	"taskgate/tasks"
)

// Limiter is what the proxy needs of the limits package.
type Limiter interface {
	Reserve(ctx context.Context, c limits.Call) (limits.Decision, error)
	Settle(ctx context.Context, h *limits.Hold, o limits.Outcome) (limits.SettleResult, error)
	Usage(ctx context.Context, t *tasks.Task, user string) ([]limits.WindowUsage, error)
	EffectiveLimits(ctx context.Context, t *tasks.Task) ([]limits.EffectiveLimit, error)
	SetOverrides(ctx context.Context, t *tasks.Task, lim config.Limits) error
	ClearOverrides(ctx context.Context, task string) error
	PutBlock(ctx context.Context, b limits.Block) error
	DeleteBlock(ctx context.Context, user, group string) (bool, error)
	Blocks(ctx context.Context) ([]limits.Block, error)
	AddEvents(ctx context.Context, evs ...limits.Event) error
	Events(ctx context.Context, f limits.EventFilter) ([]limits.Event, error)
	Ping(ctx context.Context) error
	Degraded() bool
	InProcess() bool
	SetSettleHook(h limits.SettleHook)
}

var _ Limiter = (*limits.Limiter)(nil)

// Options configure a Server. Registry, Limiter and Metrics are required.
type Options struct {
	Registry *tasks.Registry
	Limiter  Limiter
	Metrics  *Metrics
	Logger   *slog.Logger // nil: slog.Default()
	// Journal, when set, takes each call's journal line directly: the JSON
	// line Logger's JSON handler would write for it, encoded by hand (one
	// Write per line). It must be the writer behind Logger's JSON handler
	// at level info or below. nil: the line goes through Logger.
	Journal  io.Writer
	Notifier *guard.Notifier // nil: watchers are not told
	// Reload reloads the config file (POST /admin/reload); it returns every
	// error of a bad file. nil: reload is not offered.
	Reload func() error
}

// Server serves the client API and the admin API over one shared state.
type Server struct {
	state    atomic.Pointer[state]
	lim      Limiter
	m        *Metrics
	log      *slog.Logger
	journal  io.Writer // nil: journal lines go through log
	notifier *guard.Notifier
	reload   func() error

	draining atomic.Bool
	pending  sync.WaitGroup // settlements and streams not yet finished
	workers  *workerPool    // runs settlements after the answer
	mc       *childCache    // metric children of the hot path
	// clientSrv serves the client API; a stream's connection returns to it
	// after the stream (keep-alive).
	clientSrv *fasthttp.Server
	// handedBack holds the connections streams gave back that wait for
	// their next request (see serveAgain).
	handedBack sync.Map

	upMu      sync.Mutex
	upstreams map[string]*upstream // by endpoint name, kept across reloads while unchanged

	started  time.Time
	idPrefix string
	idSeq    atomic.Uint64

	respMu    sync.Mutex
	responses map[string]string // Responses API id → endpoint name (bounded)
	respOrder []string
}

// state is what one config compiles to; swapped whole on reload.
type state struct {
	reg       *tasks.Registry
	cfg       *config.Config
	upstreams map[string]*upstream
}

// New builds a server for the registry.
func New(o Options) (*Server, error) {
	s := &Server{
		lim:       o.Limiter,
		m:         o.Metrics,
		log:       o.Logger,
		journal:   o.Journal,
		workers:   newWorkerPool(workerIdle),
		mc:        newChildCache(o.Metrics),
		notifier:  o.Notifier,
		reload:    o.Reload,
		upstreams: map[string]*upstream{},
		responses: map[string]string{},
		started:   time.Now(),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	s.idPrefix = "req_" + hex.EncodeToString(b[:])
	if err := s.Swap(o.Registry); err != nil {
		return nil, err
	}
	// Settlements the Limiter runs on its own (a lease that ended with no
	// call in flight) are signalled like the calls' own.
	s.lim.SetSettleHook(func(t *tasks.Task, user string, res limits.SettleResult, err error) {
		if err != nil {
			s.m.StoreErrors.WithLabelValues("settle").Inc()
			s.log.Error("settle failed", "task", t.Key, "err", err)
			return
		}
		s.signalSettlement(t.Key, user, t.Watchers, res)
	})
	return s, nil
}

// Swap installs a new registry atomically. Calls in flight finish on the
// state they started with. An endpoint whose config is unchanged keeps its
// connections and its breaker.
func (s *Server) Swap(reg *tasks.Registry) error {
	s.upMu.Lock()
	defer s.upMu.Unlock()
	ups := make(map[string]*upstream, len(reg.Config().Endpoints))
	for _, t := range reg.Tasks() {
		for _, ep := range t.Endpoints {
			if _, ok := ups[ep.Name]; ok {
				continue
			}
			if old, ok := s.upstreams[ep.Name]; ok && reflect.DeepEqual(old.ep.Endpoint, ep.Endpoint) {
				ups[ep.Name] = old
				continue
			}
			up, err := newUpstream(ep, func(name string, v float64) { s.m.BreakerOpen.WithLabelValues(name).Set(v) })
			if err != nil {
				return err
			}
			s.m.BreakerOpen.WithLabelValues(ep.Name).Set(0)
			up.ttfb = s.m.UpstreamTTFB.WithLabelValues(ep.Name)
			ups[ep.Name] = up
		}
	}
	for name, old := range s.upstreams {
		if ups[name] != old {
			old.streams.closeIdle()
		}
	}
	s.upstreams = ups
	s.state.Store(&state{reg: reg, cfg: reg.Config(), upstreams: ups})
	return nil
}

// SetDraining makes /readyz fail, first step of a graceful shutdown.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Wait blocks until every stream and settlement begun has finished, or ctx ends.
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newRequestID returns a process-unique request id.
func (s *Server) newRequestID() string {
	var buf [40]byte
	return string(s.appendRequestID(buf[:0]))
}

// appendRequestID appends a new process-unique request id to dst.
func (s *Server) appendRequestID(dst []byte) []byte {
	return strconv.AppendUint(append(dst, s.idPrefix...), s.idSeq.Add(1), 36)
}

// fiberConfig is the config shared by both apps.
func fiberConfig(cfg *config.Config, name string, eh fiber.ErrorHandler) fiber.Config {
	bodyLimit := int(cfg.BodyLimit)
	if bodyLimit <= 0 {
		bodyLimit = 32 << 20
	}
	readTimeout := cfg.ClientTimeout
	if readTimeout <= 0 {
		readTimeout = 60 * time.Second
	}
	return fiber.Config{
		AppName:               name,
		BodyLimit:             bodyLimit,
		ReadBufferSize:        8 << 10,     // also the request header limit
		ReadTimeout:           readTimeout, // a slow client gets 408 request_timeout
		WriteTimeout:          0,           // streams may run long; idle clients are cut by IdleTimeout
		IdleTimeout:           120 * time.Second,
		DisableStartupMessage: true,
		ErrorHandler:          eh,
		StrictRouting:         false,
		CaseSensitive:         true,
		UnescapePath:          false,
	}
}
