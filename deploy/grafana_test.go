package deploy

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "grafana/taskgate.json"

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

// panel is one dashboard panel.
type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Datasource datasource `json:"datasource"`
		Expr       string     `json:"expr"`
		RefID      string     `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// loadDashboard reads and decodes the fields of the dashboard the tests
// check (Grafana's schema is too large to decode strictly).
func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("decode %s: %v", dashboardFile, err)
	}
	return d
}

// TestDashboard checks the dashboard's variables, that every query uses the
// datasource variable and only DESIGN.md §8 metric names, that metrics with a
// task label honour the task variable, and that the topics the dashboard
// promises are all there.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["task"] != "query" {
		t.Errorf("template variables %v: want datasource (datasource) and task (query)", vars)
	}

	used := map[string]bool{}
	ids := map[int]bool{}
	var all []panel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	for _, p := range all {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v out of the 24-column grid", p.Title, p.GridPos)
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q query %s: datasource %+v, want uid ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q query %s uses no taskgate metric: %s", p.Title, tg.RefID, tg.Expr)
			}
			for _, n := range names {
				if !knownMetric(n) {
					t.Errorf("panel %q query %s uses %s, which DESIGN.md §8 does not name (histograms need _bucket/_sum/_count)", p.Title, tg.RefID, n)
				}
				used[baseMetric(n)] = true
				if slices.Contains(taskLabelled, baseMetric(n)) && !strings.Contains(tg.Expr, `task=~"$task"`) {
					t.Errorf("panel %q query %s: %s has a task label but the query ignores $task", p.Title, tg.RefID, n)
				}
			}
		}
	}
	for _, v := range d.Templating.List {
		if q, _ := json.Marshal(v.Query); v.Type == "query" {
			for _, n := range metricNames(string(q)) {
				if !knownMetric(n) {
					t.Errorf("variable %s queries %s, which DESIGN.md §8 does not name", v.Name, n)
				}
			}
		}
	}
	// The dashboard shows every metric of §8.
	for n := range designMetrics {
		if !used[n] {
			t.Errorf("no panel shows %s", n)
		}
	}
}
