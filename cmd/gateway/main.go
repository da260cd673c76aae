// Command gateway runs taskgate, the OpenAI-compatible gateway with a guard.
//
//	gateway -config taskgate.yaml   serve (or TASKGATE_CONFIG)
//	gateway check -config FILE      validate and print the resolved tasks
//	gateway -demo                   serve a built-in demo upstream and config
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"taskgate/config"
	"taskgate/guard"
	"taskgate/internal/fakeupstream"
	"taskgate/limits"
	"taskgate/proxy"
	"taskgate/tasks"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check" {
		os.Exit(check(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(serve(os.Args[1:], os.Stdout, os.Stderr))
}

// serve runs the gateway until SIGTERM or SIGINT; it returns the exit code.
func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", os.Getenv("TASKGATE_CONFIG"), "config file (or TASKGATE_CONFIG)")
	demo := fs.Bool("demo", false, "serve a built-in demo upstream and config on 127.0.0.1:8080 (admin 127.0.0.1:9090), in-process store")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logOut := newLogWriter(stderr) // the journal line never waits on a write(2)
	defer logOut.Close()
	log := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)
	redis.SetLogger(redisLogger{log}) // go-redis's own lines (dial retries) as structured debug logs

	var (
		cfg  *config.Config
		err  error
		fake *fakeupstream.Server
	)
	switch {
	case *demo:
		fake, err = fakeupstream.New(fakeupstream.Options{Latency: 20 * time.Millisecond})
		if err != nil {
			fmt.Fprintln(stderr, "demo upstream:", err)
			return 1
		}
		defer fake.Close()
		fake.SetDefault(fakeupstream.Behavior{EventDelay: 20 * time.Millisecond}) // streams visibly
		cfg, err = config.Parse([]byte(demoConfig(fake.URL())), func(string) (string, bool) { return "", false })
	case *path == "":
		fmt.Fprintln(stderr, "gateway: give -config FILE (or TASKGATE_CONFIG), or -demo to try it")
		return 2
	default:
		cfg, err = config.Load(*path)
	}
	if err != nil {
		fmt.Fprintln(stderr, "config:")
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, w := range cfg.Warnings {
		log.Warn("config", "warning", w)
	}
	g, err := start(cfg, log, logOut)
	if err != nil {
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}
	if *demo {
		fmt.Fprint(stdout, demoBanner(g.clientAddr(), g.adminAddr()))
	}
	if *path != "" && !*demo {
		g.watch(*path)
	}

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for s := range sig {
		if s == syscall.SIGHUP {
			if *path != "" {
				_ = g.reload(*path)
			}
			continue
		}
		break
	}
	log.Info("shutting down", "grace", cfg.ShutdownGrace.String())
	g.shutdown(cfg.ShutdownGrace)
	return 0
}

// redisLogger sends go-redis's internal log lines to slog at debug level;
// store failures are logged and counted by the gateway itself.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis", "msg", fmt.Sprintf(format, v...))
}

// gateway is one running gateway: its store, server and listeners.
type gateway struct {
	log      *slog.Logger
	lim      *limits.Limiter
	metrics  *proxy.Metrics
	notifier *guard.Notifier
	srv      *proxy.Server
	client   *fiber.App
	admin    *fiber.App
	clientLn net.Listener
	adminLn  net.Listener
	reloadMu sync.Mutex
	watcher  *fsnotify.Watcher
}

// start wires the gateway for a config and starts both listeners; journal
// is the writer behind log's JSON handler, which takes the call journal's
// lines directly.
func start(cfg *config.Config, log *slog.Logger, journal io.Writer) (*gateway, error) {
	g := &gateway{log: log, metrics: proxy.NewMetrics()}
	var store limits.Store
	if cfg.Store.Redis == "" {
		store = limits.NewMemoryStore()
	} else {
		rs, err := limits.NewRedisStore(limits.RedisOptions{URL: cfg.Store.Redis, Prefix: cfg.Store.KeyPrefix, Timeout: cfg.Store.Timeout})
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		store = rs
	}
	g.lim = limits.New(limits.Options{Store: store, Location: cfg.Location, OnError: cfg.Store.OnError, NoLeases: !cfg.Store.Leases})
	g.notifier = guard.NewNotifier(guard.NotifierOptions{
		Logger:   log,
		OnResult: func(result string) { g.metrics.WatcherDeliveries.WithLabelValues(result).Inc() },
	})
	reg, err := tasks.New(cfg)
	if err != nil {
		return nil, err
	}
	g.srv, err = proxy.New(proxy.Options{Registry: reg, Limiter: g.lim, Metrics: g.metrics, Logger: log, Journal: journal, Notifier: g.notifier,
		Reload: func() error {
			if cfg.Path == "" {
				return errors.New("no config file to reload")
			}
			return g.reload(cfg.Path)
		}})
	if err != nil {
		return nil, err
	}
	g.client = g.srv.ClientApp()
	g.admin = g.srv.AdminApp()
	if g.clientLn, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if g.adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
		g.clientLn.Close()
		return nil, fmt.Errorf("admin_listen %s: %w", cfg.AdminListen, err)
	}
	go func() { _ = g.client.Listener(g.clientLn) }()
	go func() { _ = g.admin.Listener(g.adminLn) }()
	log.Info("serving", "listen", g.clientLn.Addr().String(), "admin_listen", g.adminLn.Addr().String(),
		"tasks", len(cfg.Tasks), "store", storeKind(cfg))
	return g, nil
}

func storeKind(cfg *config.Config) string {
	if cfg.Store.Redis == "" {
		return "memory"
	}
	return "redis"
}

func (g *gateway) clientAddr() string { return g.clientLn.Addr().String() }
func (g *gateway) adminAddr() string  { return g.adminLn.Addr().String() }

// reload loads the file and swaps the registry; a bad file keeps the old
// config, is logged with every error and counted.
func (g *gateway) reload(path string) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	cfg, err := config.Load(path)
	if err == nil {
		var reg *tasks.Registry
		if reg, err = tasks.New(cfg); err == nil {
			err = g.srv.Swap(reg)
		}
	}
	if err != nil {
		g.metrics.ConfigReloads.WithLabelValues("error").Inc()
		g.log.Error("config reload failed; keeping the running config", "path", path, "errors", err.Error())
		return err
	}
	g.metrics.ConfigReloads.WithLabelValues("success").Inc()
	g.log.Info("config reloaded", "path", path, "tasks", len(cfg.Tasks))
	return nil
}

// watch reloads when the config file changes (editors and Kubernetes
// replace files, so the directory is watched).
func (g *gateway) watch(path string) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		g.log.Warn("cannot watch the config file", "err", err)
		return
	}
	abs, _ := filepath.Abs(path)
	if err := w.Add(filepath.Dir(abs)); err != nil {
		g.log.Warn("cannot watch the config file", "err", err)
		w.Close()
		return
	}
	g.watcher = w
	go func() {
		var timer *time.Timer
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				name := filepath.Base(ev.Name)
				if ev.Name != abs && name != filepath.Base(abs) && name != "..data" {
					continue
				}
				if timer != nil {
					timer.Stop()
				}
				// Debounce: editors write a file in several steps.
				timer = time.AfterFunc(200*time.Millisecond, func() { _ = g.reload(path) })
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
}

// shutdown drains: readiness fails, the client listener stops accepting,
// in-flight calls and streams finish within grace, their reservations are
// settled, then the rest closes.
func (g *gateway) shutdown(grace time.Duration) {
	if g.watcher != nil {
		g.watcher.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := g.srv.Drain(ctx, g.client); err != nil {
		g.log.Warn("drain ended before every call finished", "err", err)
	}
	_ = g.admin.ShutdownWithTimeout(time.Second)
	_ = g.notifier.Close(ctx)
	_ = g.lim.Flush(ctx) // counts made in process during a store outage (fail_open)
	_ = g.lim.Close()
	g.log.Info("stopped")
}
