package main

import (
	"bufio"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// storeWatch reads redis-server's command counters. A nil *storeWatch
// (targets without Redis) reads zeros.
type storeWatch struct {
	c   *redis.Client
	pid int // redis-server's process id, for its CPU time
}

// storeCounters are redis-server's cumulative counters at one moment.
type storeCounters struct {
	reads    int64            // total_reads_processed: read events, about one per round trip
	commands int64            // total_commands_processed: also counts commands run inside scripts
	calls    map[string]int64 // commandstats calls by command ("evalsha", "hincrby", …)
	cpu      float64          // redis-server's CPU seconds (user + system)
}

// storeDelta is the difference of two storeCounters, less the INFO calls
// of the benchmark itself.
type storeDelta storeCounters

// infoCallsPerSnapshot is how many commands (and read events) one snapshot
// issues; they land in the next delta.
const infoCallsPerSnapshot = 2

// snapshot reads the counters.
func (w *storeWatch) snapshot() (storeCounters, error) {
	if w == nil {
		return storeCounters{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := w.c.Info(ctx, "stats").Result()
	if err != nil {
		return storeCounters{}, fmt.Errorf("redis INFO stats: %w", err)
	}
	cmds, err := w.c.Info(ctx, "commandstats").Result()
	if err != nil {
		return storeCounters{}, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	c, err := parseInfo(stats + "\n" + cmds)
	if err != nil {
		return c, err
	}
	if c.cpu, err = cpuSeconds(w.pid); err != nil {
		return c, err
	}
	return c, nil
}

// parseInfo reads the counters from INFO stats and commandstats text.
func parseInfo(info string) (storeCounters, error) {
	c := storeCounters{calls: map[string]int64{}}
	var seen int
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch {
		case k == "total_reads_processed" || k == "total_commands_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return c, fmt.Errorf("parse redis INFO %s: %w", k, err)
			}
			if k == "total_reads_processed" {
				c.reads = n
			} else {
				c.commands = n
			}
			seen++
		case strings.HasPrefix(k, "cmdstat_"):
			calls, _, _ := strings.Cut(v, ",")
			n, err := strconv.ParseInt(strings.TrimPrefix(calls, "calls="), 10, 64)
			if err != nil {
				return c, fmt.Errorf("parse redis INFO %s: %w", k, err)
			}
			c.calls[strings.TrimPrefix(k, "cmdstat_")] = n
		}
	}
	if seen < 2 {
		return c, fmt.Errorf("parse redis INFO: total_reads_processed or total_commands_processed missing")
	}
	return c, nil
}

// sub is c − before, less the snapshot's own INFO commands.
func (c storeCounters) sub(before storeCounters) storeDelta {
	if c.calls == nil {
		return storeDelta{}
	}
	d := storeDelta{
		reads:    c.reads - before.reads - infoCallsPerSnapshot,
		commands: c.commands - before.commands - infoCallsPerSnapshot,
		calls:    map[string]int64{},
		cpu:      c.cpu - before.cpu,
	}
	for k, n := range c.calls {
		if k == "info" {
			continue
		}
		if n -= before.calls[k]; n != 0 {
			d.calls[k] = n
		}
	}
	return d
}

// scripts is the number of EVALSHA and EVAL calls: the scripted round trips.
func (d storeDelta) scripts() int64 { return d.calls["evalsha"] + d.calls["eval"] }

// perCall formats the commands per call, most frequent first, e.g.
// "evalsha 2.00, hincrby 6.00".
func (d storeDelta) perCall(calls int64) string {
	if calls == 0 || len(d.calls) == 0 {
		return "none"
	}
	type kv struct {
		k string
		n int64
	}
	var all []kv
	for k, n := range d.calls {
		all = append(all, kv{k, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].k < all[j].k
	})
	var parts []string
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.n)/float64(calls)))
	}
	return strings.Join(parts, ", ")
}
