package proxy_test

import (
	"testing"
	"time"
)

func TestAdminTasksShowsTypicalCallPrices(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	var out struct {
		Tasks []struct {
			Key       string `json:"key"`
			Endpoints []struct {
				Name            string `json:"name"`
				TypicalCallCost string `json:"typical_call_cost"`
			} `json:"endpoints"`
		} `json:"tasks"`
	}
	if st := e.admin("GET", "/admin/tasks", "", &out); st != 200 {
		t.Fatalf("status %d", st)
	}
	found := false
	for _, task := range out.Tasks {
		if task.Key == "app.chat" {
			found = true
			// typical_tokens [100, 50] on primary: 100×0.15 + 50×0.60 = 45 micro-dollars.
			if len(task.Endpoints) != 1 || task.Endpoints[0].TypicalCallCost != "0.000045" {
				t.Errorf("app.chat endpoints: %+v", task.Endpoints)
			}
		}
	}
	if !found || len(out.Tasks) != 4 {
		t.Errorf("tasks: %+v", out.Tasks)
	}
}

func TestAdminEventsSinceAndBadInput(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	r := e.post("/v1/chat/completions", testKey, `{"model":"app.chat","messages":[{"role":"user","content":"x"}]}`)
	r.Body.Close()
	e.settleAll()
	var evs eventsJSON
	e.admin("GET", "/admin/events?kind=call", "", &evs)
	if len(evs.Events) != 1 || evs.Events[0].Task != "app.chat" || evs.Events[0].RequestID == "" {
		t.Fatalf("call events: %+v", evs.Events)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	evs.Events = nil
	e.admin("GET", "/admin/events?since="+future, "", &evs)
	if len(evs.Events) != 0 {
		t.Errorf("events since the future: %d", len(evs.Events))
	}
	var bad apiErr
	if st := e.admin("GET", "/admin/events?since=yesterday", "", &bad); st != 400 {
		t.Errorf("bad since: %d", st)
	}
	if st := e.admin("GET", "/admin/usage?task=app.nope", "", &bad); st != 404 || code(bad) != "unknown_task" {
		t.Errorf("unknown task usage: %d %s", st, code(bad))
	}
	if st := e.admin("POST", "/admin/blocks", `{"user":"x"}`, &bad); st != 400 {
		t.Errorf("block without group: %d", st)
	}
}
