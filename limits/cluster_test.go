package limits

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startCluster starts a one-node Redis Cluster (all 16384 slots on one
// redis-server) and returns its redis-cluster:// URL. Scripts in cluster
// mode refuse keys outside the slot of their declared keys, so this checks
// the hash-tag layout for real.
func startCluster(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("redis-server not found: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cluster node: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("cluster node did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	for {
		info, _ := c.ClusterInfo(ctx).Result()
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ok: %s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "redis-cluster://" + addr
}

// TestConformanceCluster runs the conformance suite on Redis Cluster.
func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	k := redisKind(startCluster(t))
	for _, c := range conformanceCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, k.open(t)) })
	}
}
