// Package redistest starts real redis-server processes for tests: each on a
// free loopback port, without persistence, stopped when the test ends. Tests
// that must stop or corrupt Redis use their own server from Start; others may
// share one from URL, which honours REDIS_URL.
package redistest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Server is a redis-server process owned by a test.
type Server struct {
	Addr string // host:port
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start starts a redis-server on a free loopback port and stops it in
// t.Cleanup. The test is skipped (not failed) only when no redis-server
// binary exists and CI is not set; under CI a missing binary fails.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("redis-server not found on PATH: %v", err)
		}
		tb.Skipf("redis-server not found on PATH: %v", err)
	}
	_ = bin
	s := &Server{dir: tb.TempDir()}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("free port: %v", err)
		}
		s.Addr = "127.0.0.1:" + strconv.Itoa(port)
		if lastErr = s.start(); lastErr == nil {
			tb.Cleanup(s.Stop)
			return s
		}
	}
	tb.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command("redis-server",
		"--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ping(s.Addr) == nil {
			s.cmd = cmd
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return fmt.Errorf("redis-server on %s did not answer PING within 5s", s.Addr)
}

// Stop kills the server and waits for it to exit. Stopping twice is fine.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a stopped server again on the same address (empty: it keeps
// nothing on disk).
func (s *Server) Restart() error {
	s.Stop()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

var (
	sharedOnce sync.Once
	sharedURL  string
)

// URL returns a Redis URL for tests that neither stop nor corrupt Redis:
// REDIS_URL when set, else a server started for this test. Tests sharing a
// server must use a key prefix of their own (Prefix).
func URL(tb testing.TB) string {
	tb.Helper()
	if u := os.Getenv("REDIS_URL"); u != "" {
		sharedOnce.Do(func() { sharedURL = u })
		return sharedURL
	}
	return Start(tb).URL()
}

// Prefix returns a key prefix unique to this call, ending in ":".
func Prefix(tb testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "tgtest:" + hex.EncodeToString(b[:]) + ":"
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends a RESP PING and waits for +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}
