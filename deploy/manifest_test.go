package deploy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// chart uses; decoding strictly into it rejects any other field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames,omitempty"`
			Any        bool     `json:"any,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule is the part of monitoring.coreos.com/v1 PrometheusRule the
// chart uses.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// manifest is one rendered object: where it came from, its kind, name and
// the typed value it decoded into.
type manifest struct {
	Source string // the "# Source:" template path
	Kind   string
	Name   string
	Obj    any
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitManifests cuts helm template output into its YAML documents, dropping
// empty ones, and remembers each one's "# Source:" line.
func splitManifests(out []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSep.Split(string(out), -1) {
		if strings.TrimSpace(stripComments(d)) == "" {
			continue
		}
		docs = append(docs, []byte(d))
	}
	return docs
}

// stripComments drops whole-line comments.
func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// sourceOf returns the template path of a "# Source: taskgate/templates/x.yaml" line.
func sourceOf(doc []byte) string {
	for _, l := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "# Source: "); ok {
			return s
		}
	}
	return ""
}

// newObject returns a pointer to the typed value for an apiVersion and kind,
// or an error for a kind the tests do not know (a new template must be
// added here, with its checks).
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &serviceMonitor{}, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &prometheusRule{}, nil
	}
	return nil, fmt.Errorf("no type for apiVersion %q kind %q", apiVersion, kind)
}

// decodeStrict decodes one YAML document into the Kubernetes type of its
// kind, refusing unknown, duplicate and wrongly cased fields, as the API
// server's strict field validation does (encoding/json alone would accept
// "Replicas" for "replicas"). Errors name the field's path.
func decodeStrict(doc []byte) (manifest, error) {
	var tm struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return manifest{}, fmt.Errorf("read apiVersion and kind: %w", err)
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return manifest{}, err
	}
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return manifest{}, fmt.Errorf("decode %s %q: %w", tm.Kind, tm.Metadata.Name, err)
	}
	strictErrs, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return manifest{}, fmt.Errorf("decode %s %q: %w", tm.Kind, tm.Metadata.Name, err)
	}
	if len(strictErrs) > 0 {
		return manifest{}, fmt.Errorf("decode %s %q strictly: %w", tm.Kind, tm.Metadata.Name, errors.Join(strictErrs...))
	}
	return manifest{Source: sourceOf(doc), Kind: tm.Kind, Name: tm.Metadata.Name, Obj: obj}, nil
}

// decodeAll decodes every document of helm template output.
func decodeAll(out []byte) ([]manifest, error) {
	var ms []manifest
	var errs []string
	for _, d := range splitManifests(out) {
		m, err := decodeStrict(d)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", sourceOf(d), err))
			continue
		}
		ms = append(ms, m)
	}
	if len(errs) > 0 {
		return ms, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return ms, nil
}

// envRef matches a ${VAR} reference of taskgate.yaml.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// envRefs lists the distinct variables a config names, in order.
func envRefs(cfg []byte) []string {
	seen := map[string]bool{}
	var names []string
	for _, m := range envRef.FindAllSubmatch(cfg, -1) {
		n := string(m[1])
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return names
}

// matches reports whether labels satisfy every matchLabels entry of sel (and
// sel selects something).
func matches(sel map[string]string, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
