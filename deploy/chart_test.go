package deploy

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "helm/taskgate"
	fullValues  = "helm/taskgate/ci/full-values.yaml"
	release     = "tg"
	namespace   = "taskgate"
	kubeVersion = "1.34.0" // helm built with `go install` assumes 1.20 otherwise
	configKey   = "taskgate.yaml"
	configDir   = "/etc/taskgate"
)

// helmBin returns the helm binary (env HELM, else helm on PATH) or skips.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm not found: set HELM or put helm on PATH (deploy/README.md shows how CI installs it)")
	}
	return h
}

// helmTemplate renders the chart with the given extra arguments (-f, --set).
func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	full := append([]string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}, args...)
	cmd := exec.Command(helmBin(t), full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(full, " "), err, stderr.String())
	}
	return out, nil
}

// rendered is one rendering of the chart, decoded.
type rendered struct {
	all []manifest
}

// render renders and strictly decodes the chart or fails the test.
func render(t *testing.T, args ...string) rendered {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := decodeAll(out)
	if err != nil {
		t.Fatalf("strict decode of the rendered chart:\n%v", err)
	}
	return rendered{all: ms}
}

// kinds counts the objects of each kind.
func (r rendered) kinds() map[string]int {
	k := map[string]int{}
	for _, m := range r.all {
		k[m.Kind]++
	}
	return k
}

// find returns the objects of one kind, typed.
func find[T any](r rendered) []T {
	var out []T
	for _, m := range r.all {
		if v, ok := m.Obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// gateway returns the gateway Deployment (component=gateway) and its container.
func (r rendered) gateway(t *testing.T) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	for _, d := range find[*appsv1.Deployment](r) {
		if d.Spec.Template.Labels["app.kubernetes.io/component"] == "gateway" {
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Name == "gateway" {
					return d, c
				}
			}
			t.Fatalf("Deployment %s has no container named gateway", d.Name)
		}
	}
	t.Fatal("no gateway Deployment rendered")
	return nil, corev1.Container{}
}

// configMap returns the ConfigMap that holds taskgate.yaml.
func (r rendered) configMap(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	for _, c := range find[*corev1.ConfigMap](r) {
		if _, ok := c.Data[configKey]; ok {
			return c
		}
	}
	t.Fatalf("no ConfigMap with %s rendered", configKey)
	return nil
}

// service returns the Service with the given name.
func (r rendered) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	for _, s := range find[*corev1.Service](r) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q rendered", name)
	return nil
}

// gatewayConfig is the part of taskgate.yaml the chart owns.
type gatewayConfig struct {
	Listen        string `json:"listen"`
	AdminListen   string `json:"admin_listen"`
	ShutdownGrace string `json:"shutdown_grace"`
	Store         struct {
		Redis string `json:"redis"`
	} `json:"store"`
}

// valueSet is one set of chart values under test and what it must render.
type valueSet struct {
	name       string
	args       []string
	fullname   string
	kinds      map[string]int
	secret     string            // envFrom Secret
	keyRefs    map[string]string // env var -> "secret/key"
	redisURL   string            // REDIS_URL literal value ("" also when from a Secret)
	clientPort int32             // client Service port
	replicas   bool              // Deployment sets replicas (no HPA)
}

var valueSets = []valueSet{
	{
		name:     "default",
		fullname: "tg-taskgate",
		kinds: map[string]int{
			"ServiceAccount": 1, "ConfigMap": 1, "Service": 2, "Deployment": 1,
		},
		secret:     "taskgate",
		keyRefs:    map[string]string{},
		redisURL:   "",
		clientPort: 8080,
		replicas:   true,
	},
	{
		name:     "full",
		args:     []string{"-f", fullValues},
		fullname: "taskgate-full",
		kinds: map[string]int{
			"ServiceAccount": 1, "ConfigMap": 1, "Service": 3, "Deployment": 2,
			"HorizontalPodAutoscaler": 1, "PodDisruptionBudget": 1, "ServiceMonitor": 1,
			"PrometheusRule": 1, "NetworkPolicy": 2,
		},
		secret:     "taskgate-secrets",
		keyRefs:    map[string]string{"OPENAI_API_KEY": "openai/api-key", "SUPPORT_DESK_KEY": "taskgate-secrets/support-desk"},
		redisURL:   "redis://taskgate-full-redis:6379/0",
		clientPort: 80,
		replicas:   false,
	},
}

// TestChart renders the chart for each value set, decodes every object
// strictly into its Kubernetes type, and checks the gateway's wiring.
func TestChart(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			r := render(t, vs.args...)
			if got := r.kinds(); !maps.Equal(got, vs.kinds) {
				t.Errorf("rendered kinds %v, want %v", got, vs.kinds)
			}
			dep, c := r.gateway(t)
			cm := r.configMap(t)
			var cfg gatewayConfig
			if err := yaml.Unmarshal([]byte(cm.Data[configKey]), &cfg); err != nil {
				t.Fatalf("parse %s from ConfigMap %s: %v", configKey, cm.Name, err)
			}
			ports := containerPorts(c)

			t.Run("names", func(t *testing.T) {
				if dep.Name != vs.fullname || cm.Name != vs.fullname {
					t.Errorf("Deployment %q, ConfigMap %q, want both %q", dep.Name, cm.Name, vs.fullname)
				}
				if (dep.Spec.Replicas != nil) != vs.replicas {
					t.Errorf("Deployment replicas set = %v, want %v", dep.Spec.Replicas != nil, vs.replicas)
				}
				if !matches(dep.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
					t.Errorf("Deployment selector %v does not match its pod labels %v", dep.Spec.Selector.MatchLabels, dep.Spec.Template.Labels)
				}
			})

			t.Run("config", func(t *testing.T) {
				if want := fmt.Sprintf(":%d", ports["http"]); cfg.Listen != want {
					t.Errorf("listen %q, want %q (the http container port)", cfg.Listen, want)
				}
				if want := fmt.Sprintf(":%d", ports["admin"]); cfg.AdminListen != want {
					t.Errorf("admin_listen %q, want %q (the admin container port, on every interface)", cfg.AdminListen, want)
				}
				if cfg.Store.Redis != "${REDIS_URL}" {
					t.Errorf("store.redis %q, want ${REDIS_URL}", cfg.Store.Redis)
				}
				if !slices.Equal(c.Args, []string{"-config", configDir + "/" + configKey}) {
					t.Errorf("args %q, want -config %s/%s", c.Args, configDir, configKey)
				}
				mounted := false
				for _, m := range c.VolumeMounts {
					if m.MountPath != configDir {
						continue
					}
					if m.SubPath != "" {
						t.Errorf("config mounted with subPath %q: edits would never reach the pod", m.SubPath)
					}
					for _, v := range dep.Spec.Template.Spec.Volumes {
						if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
							mounted = true
						}
					}
				}
				if !mounted {
					t.Errorf("ConfigMap %s is not mounted at %s", cm.Name, configDir)
				}
				sum := dep.Spec.Template.Annotations["checksum/config"]
				if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(sum) {
					t.Errorf("checksum/config annotation %q, want a sha256", sum)
				}
			})

			t.Run("probes", func(t *testing.T) {
				admin, ok := ports["admin"]
				if !ok {
					t.Fatalf("no container port named admin in %v", ports)
				}
				for _, p := range []struct {
					name  string
					probe *corev1.Probe
					path  string
				}{
					{"liveness", c.LivenessProbe, "/healthz"},
					{"readiness", c.ReadinessProbe, "/readyz"},
					{"startup", c.StartupProbe, "/healthz"},
				} {
					if p.probe == nil || p.probe.HTTPGet == nil {
						t.Errorf("%s probe: want an httpGet probe", p.name)
						continue
					}
					if p.probe.HTTPGet.Path != p.path {
						t.Errorf("%s probe path %q, want %q", p.name, p.probe.HTTPGet.Path, p.path)
					}
					if got := resolvePort(p.probe.HTTPGet.Port, ports); got != admin {
						t.Errorf("%s probe port %s resolves to %d, want the admin port %d", p.name, p.probe.HTTPGet.Port.String(), got, admin)
					}
				}
			})

			t.Run("security", func(t *testing.T) {
				checkSecurity(t, dep.Spec.Template.Spec, c)
				if len(c.Resources.Requests) == 0 || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("resources %v: want requests and a memory limit", c.Resources)
				}
				if dep.Spec.Template.Spec.AutomountServiceAccountToken == nil || *dep.Spec.Template.Spec.AutomountServiceAccountToken {
					t.Error("automountServiceAccountToken: want false (the gateway never calls the API server)")
				}
			})

			t.Run("termination", func(t *testing.T) {
				grace, err := time.ParseDuration(cfg.ShutdownGrace)
				if err != nil {
					t.Fatalf("shutdown_grace %q: %v", cfg.ShutdownGrace, err)
				}
				var preStop time.Duration
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
					preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
				}
				tg := dep.Spec.Template.Spec.TerminationGracePeriodSeconds
				if tg == nil || time.Duration(*tg)*time.Second <= grace+preStop {
					t.Errorf("terminationGracePeriodSeconds %v, want more than shutdown_grace %v + preStop %v", deref(tg), grace, preStop)
				}
			})

			t.Run("env", func(t *testing.T) {
				var from []string
				for _, e := range c.EnvFrom {
					if e.SecretRef != nil {
						from = append(from, e.SecretRef.Name)
					}
				}
				if !slices.Equal(from, []string{vs.secret}) {
					t.Errorf("envFrom Secrets %q, want [%q]", from, vs.secret)
				}
				refs := map[string]string{}
				var redis *corev1.EnvVar
				for i, e := range c.Env {
					if e.Name == "REDIS_URL" {
						redis = &c.Env[i]
						continue
					}
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
					}
				}
				if !maps.Equal(refs, vs.keyRefs) {
					t.Errorf("secretKeyRef env %v, want %v", refs, vs.keyRefs)
				}
				if redis == nil {
					t.Fatal("no REDIS_URL env var: ${REDIS_URL} in the config would be unset")
				}
				if redis.Value != vs.redisURL {
					t.Errorf("REDIS_URL %q, want %q", redis.Value, vs.redisURL)
				}
				if host, ok := strings.CutPrefix(vs.redisURL, "redis://"); ok {
					name, _, _ := strings.Cut(host, ":")
					r.service(t, name) // the bundled Redis Service exists
				}
			})

			t.Run("services", func(t *testing.T) {
				client := r.service(t, vs.fullname)
				admin := r.service(t, vs.fullname+"-admin")
				for _, s := range []struct {
					svc  *corev1.Service
					port string
					num  int32
				}{{client, "http", vs.clientPort}, {admin, "admin", 9090}} {
					if !matches(s.svc.Spec.Selector, dep.Spec.Template.Labels) {
						t.Errorf("Service %s selector %v does not select the gateway pods", s.svc.Name, s.svc.Spec.Selector)
					}
					if len(s.svc.Spec.Ports) != 1 {
						t.Fatalf("Service %s: %d ports, want 1", s.svc.Name, len(s.svc.Spec.Ports))
					}
					p := s.svc.Spec.Ports[0]
					if p.Name != s.port || p.Port != s.num || resolvePort(p.TargetPort, ports) != ports[s.port] {
						t.Errorf("Service %s port %s %d -> %s, want %s %d -> the %s container port", s.svc.Name, p.Name, p.Port, p.TargetPort.String(), s.port, s.num, s.port)
					}
				}
			})

			t.Run("optional", func(t *testing.T) {
				podLabels := dep.Spec.Template.Labels
				for _, h := range find[*autoscalingv2.HorizontalPodAutoscaler](r) {
					ref := h.Spec.ScaleTargetRef
					if ref.Kind != "Deployment" || ref.Name != dep.Name || ref.APIVersion != "apps/v1" {
						t.Errorf("HPA %s targets %+v, want Deployment %s", h.Name, ref, dep.Name)
					}
					if len(h.Spec.Metrics) == 0 {
						t.Errorf("HPA %s has no metrics", h.Name)
					}
				}
				for _, p := range find[*policyv1.PodDisruptionBudget](r) {
					if !matches(p.Spec.Selector.MatchLabels, podLabels) {
						t.Errorf("PDB %s selector %v does not select the gateway pods", p.Name, p.Spec.Selector.MatchLabels)
					}
				}
				for _, n := range find[*networkingv1.NetworkPolicy](r) {
					if n.Name != dep.Name {
						continue
					}
					if !matches(n.Spec.PodSelector.MatchLabels, podLabels) {
						t.Errorf("NetworkPolicy %s does not select the gateway pods", n.Name)
					}
					var open []string
					for _, in := range n.Spec.Ingress {
						for _, p := range in.Ports {
							open = append(open, p.Port.String())
						}
					}
					if !slices.Contains(open, "http") || !slices.Contains(open, "admin") {
						t.Errorf("NetworkPolicy %s opens ports %v, want http and admin", n.Name, open)
					}
				}
				admin := r.service(t, vs.fullname+"-admin")
				client := r.service(t, vs.fullname)
				for _, sm := range find[*serviceMonitor](r) {
					sel := sm.Spec.Selector.MatchLabels
					if !matches(sel, admin.Labels) || matches(sel, client.Labels) {
						t.Errorf("ServiceMonitor %s selector %v: want the admin Service only", sm.Name, sel)
					}
					if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
						t.Errorf("ServiceMonitor %s endpoints %+v, want port admin path /metrics", sm.Name, sm.Spec.Endpoints)
					}
				}
				for _, pr := range find[*prometheusRule](r) {
					checkRules(t, pr)
				}
			})

			t.Run("gateway check", func(t *testing.T) {
				out, err := gatewayCheck(t, []byte(cm.Data[configKey]), c)
				if err != nil {
					t.Fatalf("%v\nconfig:\n%s", err, cm.Data[configKey])
				}
				t.Logf("gateway check:\n%s", out)
			})
		})
	}
}

// TestChartChecksumFollowsConfig shows that editing the config changes the
// pods' checksum/config annotation (so `helm upgrade` rolls them) and that
// other edits do not.
func TestChartChecksumFollowsConfig(t *testing.T) {
	sum := func(args ...string) string {
		d, _ := render(t, args...).gateway(t)
		return d.Spec.Template.Annotations["checksum/config"]
	}
	base := sum()
	tests := []struct {
		name    string
		set     string
		changes bool
	}{
		{"timezone", "config.timezone=Europe/Paris", true},
		{"shutdown grace", "shutdownGraceSeconds=40", true},
		{"admin port", "ports.admin=9191", true},
		{"image tag", "image.tag=9.9.9", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sum("--set", tt.set); (got != base) != tt.changes {
				t.Errorf("--set %s: checksum changed = %v, want %v", tt.set, got != base, tt.changes)
			}
		})
	}
}

// TestChartRefuses shows the chart refusing values that would break the
// gateway: too many replicas without a shared store, a termination grace
// shorter than the drain, money as a number, and fields the chart owns.
func TestChartRefuses(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"replicas without redis", []string{"--set", "replicaCount=2"}, "needs a shared Redis"},
		{"hpa without redis", []string{"--set", "autoscaling.enabled=true"}, "needs a shared Redis"},
		{"short termination grace", []string{"--set", "terminationGracePeriodSeconds=30"}, "must exceed"},
		{"money as a number", []string{"--set", "config.tasks[0].key=a,config.tasks[0].endpoints[0]=e,config.tasks[0].limits.task.money.day=20"}, "want string"},
		{"listen is the chart's", []string{"--set", "config.listen=:1"}, "listen"},
		{"misspelled value", []string{"--set", "replicaCont=2"}, "replicaCont"},
		{"bad redis url", []string{"--set", "redis.url=localhost:6379"}, "redis/url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := helmTemplate(t, tt.args...)
			if err == nil {
				t.Fatalf("helm template %v: rendered, want an error containing %q", tt.args, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("helm template %v: %v\nwant an error containing %q", tt.args, err, tt.wantErr)
			}
		})
	}
}

// TestHelmLint runs `helm lint --strict` on both value sets.
func TestHelmLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			args := append([]string{"lint", chartDir, "--strict", "--kube-version", kubeVersion}, vs.args...)
			out, err := exec.Command(helmBin(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}

// TestGatewayCheckRefuses shows that the `gateway check` step catches a
// rendered config the gateway would refuse, which the chart's schema lets
// through.
func TestGatewayCheckRefuses(t *testing.T) {
	tests := []struct {
		name    string
		set     string
		wantOut string
	}{
		{"unknown timezone", "config.timezone=Mars/Olympus", "timezone"},
		{"unknown endpoint of a task", "config.tasks[0].key=a,config.tasks[0].endpoints[0]=nowhere", "nowhere"},
		{"unknown field", "config.endpoints[0].name=e,config.endpoints[0].base_url=http://x,config.endpoints[0].colour=red", "colour"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, "--set", tt.set)
			_, c := r.gateway(t)
			out, err := gatewayCheck(t, []byte(r.configMap(t).Data[configKey]), c)
			if err == nil {
				t.Fatalf("gateway check passed, want it to refuse; output:\n%s", out)
			}
			if !strings.Contains(string(out), tt.wantOut) {
				t.Fatalf("gateway check output does not mention %q:\n%s", tt.wantOut, out)
			}
		})
	}
}

// checkSecurity checks the pod and container security contexts.
func checkSecurity(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatalf("pod securityContext %v, container securityContext %v: want both", psc, sc)
	}
	if !isTrue(psc.RunAsNonRoot) || !isTrue(sc.RunAsNonRoot) {
		t.Error("runAsNonRoot: want true on the pod and the container")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("container runAsUser %v: want a non-zero uid", deref(sc.RunAsUser))
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem: want true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation: want false")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: want false")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v: want drop [ALL] and no add", sc.Capabilities)
	}
	for _, s := range []*corev1.SeccompProfile{psc.SeccompProfile, sc.SeccompProfile} {
		if s == nil || s.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("seccompProfile %+v: want RuntimeDefault on the pod and the container", s)
		}
	}
}

// wantAlerts are the alerts of the PrometheusRule and a metric each must use.
var wantAlerts = map[string]string{
	"TaskgateLimitNearlyUsed":    "taskgate_limit_usage_ratio",
	"TaskgateAnomalyBurst":       "taskgate_anomalies_total",
	"TaskgateUpstreamErrorRate":  "taskgate_upstream_errors_total",
	"TaskgateStoreErrors":        "taskgate_store_errors_total",
	"TaskgateConfigReloadFailed": `taskgate_config_reloads_total{`,
	"TaskgateBreakerOpen":        "taskgate_breaker_open",
}

// checkRules checks the alert names, that each uses its metric, that every
// metric name is one the gateway registers (DESIGN.md §8), and that the
// Prometheus templates in annotations survived Helm.
func checkRules(t *testing.T, pr *prometheusRule) {
	t.Helper()
	got := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			got[r.Alert] = r.Expr
			for _, name := range metricNames(r.Expr) {
				if !knownMetric(name) {
					t.Errorf("alert %s uses %s, which DESIGN.md §8 does not name", r.Alert, name)
				}
			}
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity label", r.Alert)
			}
			if !strings.Contains(r.Annotations["summary"], "{{ $labels.") {
				t.Errorf("alert %s summary %q: want a Prometheus template naming its labels", r.Alert, r.Annotations["summary"])
			}
		}
	}
	for alert, metric := range wantAlerts {
		expr, ok := got[alert]
		if !ok {
			t.Errorf("PrometheusRule %s has no alert %s", pr.Name, alert)
			continue
		}
		if !strings.Contains(expr, metric) {
			t.Errorf("alert %s: expr %q does not use %s", alert, expr, metric)
		}
	}
	if expr := got["TaskgateConfigReloadFailed"]; !strings.Contains(expr, `result="error"`) {
		t.Errorf("TaskgateConfigReloadFailed: expr %q, want result=\"error\"", expr)
	}
}

// TestMain removes the gateway binary built for `gateway check`.
func TestMain(m *testing.M) {
	code := m.Run()
	if gatewayP != "" {
		os.RemoveAll(filepath.Dir(gatewayP))
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	gatewayP  string
	buildErr  error
)

// gatewayBinary builds ../cmd/gateway once per test run, or skips when the
// gateway's main package is not there yet.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	srcs, _ := filepath.Glob(filepath.Join(root, "cmd", "gateway", "*.go"))
	if len(srcs) == 0 {
		t.Skip("../cmd/gateway has no Go files yet: cannot run `gateway check` on the rendered config")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "taskgate-deploy-test")
		if err != nil {
			buildErr = err
			return
		}
		gatewayP = filepath.Join(dir, "gateway")
		cmd := exec.Command("go", "build", "-o", gatewayP, "./cmd/gateway")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/gateway in %s: %w\n%s", root, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return gatewayP
}

// gatewayCheck runs `gateway check -config FILE` on the rendered config,
// with the container's literal env values and a dummy for each variable
// that would come from a Secret, and returns its output.
func gatewayCheck(t *testing.T, cfg []byte, c corev1.Container) ([]byte, error) {
	t.Helper()
	bin := gatewayBinary(t)
	file := filepath.Join(t.TempDir(), configKey)
	if err := os.WriteFile(file, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	literal := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			literal[e.Name] = e.Value
		}
	}
	for _, name := range envRefs(cfg) {
		v, ok := literal[name]
		if !ok {
			v = "dummy-" + strings.ToLower(name) // from a Secret at run time
		}
		env = append(env, name+"="+v)
	}
	cmd := exec.Command(bin, "check", "-config", file)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("gateway check -config %s: %w\n%s", file, err, out)
	}
	return out, nil
}

// containerPorts maps a container's port names to numbers.
func containerPorts(c corev1.Container) map[string]int32 {
	p := map[string]int32{}
	for _, cp := range c.Ports {
		p[cp.Name] = cp.ContainerPort
	}
	return p
}

// resolvePort turns a named or numbered port into its number (0: unknown name).
func resolvePort(p intstr.IntOrString, ports map[string]int32) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return int32(n)
	}
	return ports[p.StrVal]
}

func isTrue(b *bool) bool { return b != nil && *b }

// deref prints a pointer's value, or nil.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
