package deploy

import (
	"strings"
	"testing"
)

// TestDecodeStrict shows that the strict decoder the chart tests rely on
// refuses a misspelled or misplaced field in every kind the chart renders.
func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr string // "" : decodes
	}{
		{
			name: "deployment ok",
			doc: `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  replicas: 2
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: c, image: i}]`,
		},
		{
			name: "deployment misspelled replicas",
			doc: `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  replica: 2`,
			wantErr: `unknown field "spec.replica"`,
		},
		{
			name: "container field in the pod spec",
			doc: `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      readinessProbe: {httpGet: {path: /readyz, port: admin}}`,
			wantErr: "readinessProbe",
		},
		{
			name: "duplicate field",
			doc: `apiVersion: v1
kind: Service
metadata: {name: s}
spec:
  type: ClusterIP
  type: NodePort`,
			wantErr: `"type" already set`,
		},
		{
			name:    "wrong case",
			doc:     "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  Replicas: 2\n",
			wantErr: `unknown field "spec.Replicas"`,
		},
		{
			name:    "service port at the wrong level",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n  port: 80\n",
			wantErr: `unknown field "spec.port"`,
		},
		{
			name:    "configmap ok",
			doc:     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n",
			wantErr: "",
		},
		{
			name:    "hpa v1 field in v2",
			doc:     "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\nspec:\n  targetCPUUtilizationPercentage: 70\n",
			wantErr: "targetCPUUtilizationPercentage",
		},
		{
			name:    "pdb misspelled",
			doc:     "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p}\nspec:\n  minAvailble: 1\n",
			wantErr: "minAvailble",
		},
		{
			name:    "networkpolicy misspelled",
			doc:     "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: np}\nspec:\n  podSelectors: {}\n",
			wantErr: "podSelectors",
		},
		{
			name:    "servicemonitor misspelled",
			doc:     "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: m}\nspec:\n  endpoint: [{port: admin}]\n",
			wantErr: `unknown field "spec.endpoint"`,
		},
		{
			name:    "prometheusrule misspelled",
			doc:     "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: r}\nspec:\n  groups: [{name: g, rules: [{alert: A, expression: up}]}]\n",
			wantErr: "expression",
		},
		{
			name:    "unknown kind",
			doc:     "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
			wantErr: "no type for",
		},
		{
			name:    "wrong apiVersion for kind",
			doc:     "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n",
			wantErr: "no type for",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeStrict([]byte(tt.doc))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("decodeStrict: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("decodeStrict: no error, want one containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("decodeStrict: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestSplitManifests checks that documents are cut at "---" lines only and
// that comment-only documents are dropped.
func TestSplitManifests(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int
		sources []string
	}{
		{name: "empty", in: "", want: 0},
		{name: "comments only", in: "---\n# Source: x\n---\n", want: 0},
		{
			name:    "two",
			in:      "---\n# Source: c/templates/a.yaml\nkind: A\n---\n# Source: c/templates/b.yaml\nkind: B\ntext: \"a --- b\"\n",
			want:    2,
			sources: []string{"c/templates/a.yaml", "c/templates/b.yaml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs := splitManifests([]byte(tt.in))
			if len(docs) != tt.want {
				t.Fatalf("got %d documents, want %d: %q", len(docs), tt.want, docs)
			}
			for i, s := range tt.sources {
				if got := sourceOf(docs[i]); got != s {
					t.Errorf("document %d: source %q, want %q", i, got, s)
				}
			}
		})
	}
}

// TestEnvRefs checks the ${VAR} scan used to give `gateway check` its variables.
func TestEnvRefs(t *testing.T) {
	got := strings.Join(envRefs([]byte("a: ${A}\nb: x${B_2}y ${A}\nc: $$notvar\nd: ${1X}\n")), ",")
	if want := "A,B_2"; got != want {
		t.Fatalf("envRefs = %q, want %q", got, want)
	}
}
