package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"taskgate/config"
	"taskgate/proxy"
	"taskgate/tasks"
)

// check validates a config file and prints the resolved tasks with the price
// of a typical call on each endpoint; exit 0, or every error and exit 1.
func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", os.Getenv("TASKGATE_CONFIG"), "config file to check")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "gateway check: give -config FILE")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: invalid\n%s\n", *path, err)
		return 1
	}
	reg, err := tasks.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: invalid\n%s\n", *path, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d endpoints, %d tasks, %d keys)\n", *path, len(cfg.Endpoints), len(cfg.Tasks), len(cfg.Keys))
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	for _, t := range proxy.Summaries(reg) {
		state := ""
		if !t.Enabled {
			state = " (disabled)"
		}
		fmt.Fprintf(stdout, "\ntask %s%s\n", t.Key, state)
		if len(t.Needs) > 0 {
			fmt.Fprintf(stdout, "  needs: %s\n", strings.Join(t.Needs, ", "))
		}
		for _, l := range t.Limits {
			fmt.Fprintf(stdout, "  limit: %s %s per %s = %v\n", l.Scope, l.Unit, l.Period, l.Limit)
		}
		for _, e := range t.Endpoints {
			fmt.Fprintf(stdout, "  endpoint %s (model %s, window %d): typical call (%d in, %d out) costs $%s\n",
				e.Name, e.Model, e.ContextWindow, e.TypicalInput, e.TypicalOutput, e.TypicalCallCost)
		}
	}
	return 0
}
