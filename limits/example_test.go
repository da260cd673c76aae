package limits_test

import (
	"context"
	"fmt"
	"time"

	"taskgate/config"
	"taskgate/limits"
	"taskgate/tasks"
)

// A call is reserved before it is forwarded and settled after.
func Example() {
	ctx := context.Background()
	l := limits.New(limits.Options{Store: limits.NewMemoryStore()})
	defer l.Close()
	task := &tasks.Task{Task: config.Task{Key: "warehouse.inventory_photo", UserLimits: true}}
	task.Limits = []config.Limit{{Scope: config.ScopeUser, Unit: config.UnitRequests, Period: config.PeriodHour, Value: 1}}
	now := time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)

	d, _ := l.Reserve(ctx, limits.Call{RequestID: "r1", Task: task, User: "alice", Now: now,
		Estimate: limits.Usage{InputTokens: 1500, OutputTokens: 300, Money: 405}})
	fmt.Println("allowed:", d.Hold != nil, "remaining requests:", d.Requests.Remaining)
	_, _ = l.Settle(ctx, d.Hold, limits.Outcome{Actual: limits.Usage{InputTokens: 1500, OutputTokens: 120, Money: 297}})

	d, _ = l.Reserve(ctx, limits.Call{RequestID: "r2", Task: task, User: "alice", Now: now.Add(time.Minute)})
	r := d.Refusal
	fmt.Println("refused:", r.Window.Scope, r.Window.Unit, r.Window.Period, "retry after", r.Window.End.Sub(now.Add(time.Minute)))
	// Output:
	// allowed: true remaining requests: 0
	// refused: user requests hour retry after 59m0s
}
