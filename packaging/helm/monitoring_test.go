// Tests of the chart's Prometheus Operator objects (monitoring.*): a
// PodMonitor and a PrometheusRule, both off by default. They are checked
// against the Operator's own CRDs the way the API server checks a custom
// resource, and decoded strictly into the Operator's Go types.
package helm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// The CRDs come from the Prometheus Operator's Go module (its
// example/prometheus-operator-crd/), never from the web: the go command
// fetches the module from the module proxy and checks it against the
// checksum database, and the tests check its hash against operatorModuleSum.
// Its version is the one of the Operator's API types module in go.mod, so the
// CRD schemas and the Go types the objects are decoded into are one release.
const (
	operatorModule      = "github.com/prometheus-operator/prometheus-operator"
	operatorTypesModule = operatorModule + "/pkg/apis/monitoring"
	operatorVersion     = "v0.85.0"
	operatorModuleSum   = "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
	operatorCRDDir      = "example/prometheus-operator-crd"

	alertsFile       = chartDir + "/files/alerts.yaml"
	observabilityDir = "../observability"
)

// The CRDs of the kinds the chart renders.
var operatorCRDFiles = map[string]string{
	"PodMonitor":     "monitoring.coreos.com_podmonitors.yaml",
	"PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}

// crdSchema is what the API server builds from a CRD version to check a
// custom resource: the structural schema (pruning, defaulting, list types)
// and the OpenAPI v3 validator.
type crdSchema struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
}

// operatorSchemas loads the CRDs once for all tests.
var operatorSchemas = sync.OnceValues(loadOperatorSchemas)

func loadOperatorSchemas() (map[schema.GroupVersionKind]crdSchema, error) {
	dir, err := operatorModuleDir()
	if err != nil {
		return nil, err
	}
	out := map[schema.GroupVersionKind]crdSchema{}
	for kind, file := range operatorCRDFiles {
		data, err := os.ReadFile(filepath.Join(dir, operatorCRDDir, file))
		if err != nil {
			return nil, fmt.Errorf("the %s CRD: %w", kind, err)
		}
		gvk, s, err := newCRDSchema(data)
		if err != nil {
			return nil, fmt.Errorf("the %s CRD %s: %w", kind, file, err)
		}
		if gvk.Kind != kind {
			return nil, fmt.Errorf("%s defines %s, want %s", file, gvk, kind)
		}
		out[gvk] = s
	}
	return out, nil
}

// operatorModuleDir returns the Operator module's directory in the module
// cache, downloading it if needed.
func operatorModuleDir() (string, error) {
	// go list -m reads go.mod (and changes nothing).
	types, err := goCommand("list", "-m", "-f", "{{.Version}}", operatorTypesModule)
	if err != nil {
		return "", err
	}
	if v := strings.TrimSpace(string(types)); v != operatorVersion {
		return "", fmt.Errorf("go.mod requires %s %s but the CRDs are pinned at %s: bump operatorVersion and operatorModuleSum with it", operatorTypesModule, v, operatorVersion)
	}
	// go mod download exits non-zero on failure but still prints the JSON,
	// whose Error says why.
	out, runErr := goCommand("mod", "download", "-json", operatorModule+"@"+operatorVersion)
	var mod struct{ Dir, Sum, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", operatorModule, operatorVersion, errors.Join(runErr, err))
	}
	if mod.Error != "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", operatorModule, operatorVersion, mod.Error)
	}
	if mod.Sum != operatorModuleSum {
		return "", fmt.Errorf("%s@%s has hash %s, want %s", operatorModule, operatorVersion, mod.Sum, operatorModuleSum)
	}
	return mod.Dir, nil
}

// goCommand runs the go command in this module (go test puts the go that
// runs the tests first in PATH).
func goCommand(args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, err
}

// newCRDSchema builds the schema of a CRD's single served version the way
// the API server's CRD handler does: v1 converted to the internal type, the
// structural schema (which must be valid, or the server refuses the CRD) and
// the OpenAPI validator.
func newCRDSchema(data []byte) (schema.GroupVersionKind, crdSchema, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return schema.GroupVersionKind{}, crdSchema{}, err
	}
	// CEL rules are evaluated by the server after the schema checks; this
	// check does not run them, so it must not silently skip any.
	if bytes.Contains(data, []byte("x-kubernetes-validations")) {
		return schema.GroupVersionKind{}, crdSchema{}, errors.New("has x-kubernetes-validations (CEL rules), which crdCheck does not evaluate")
	}
	var served []apiextensionsv1.CustomResourceDefinitionVersion
	for _, v := range crd.Spec.Versions {
		if v.Served {
			served = append(served, v)
		}
	}
	if len(served) != 1 || served[0].Schema == nil {
		return schema.GroupVersionKind{}, crdSchema{}, fmt.Errorf("%d served versions, want one with a schema", len(served))
	}
	gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: served[0].Name, Kind: crd.Spec.Names.Kind}
	internal := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(served[0].Schema, internal, nil); err != nil {
		return gvk, crdSchema{}, err
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return gvk, crdSchema{}, fmt.Errorf("not a structural schema: %w", err)
	}
	if errs := structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), s); len(errs) > 0 {
		return gvk, crdSchema{}, fmt.Errorf("not a structural schema: %w", errs.ToAggregate())
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return gvk, crdSchema{}, err
	}
	return gvk, crdSchema{structural: s, validator: validator}, nil
}

// crdCheck checks a custom resource as the API server does on create with
// fieldValidation=Strict (kubectl's default): unknown fields in metadata and
// those pruning would drop are errors; then the CRD's defaults are applied
// and the object is validated against the OpenAPI v3 schema, the embedded
// objects' metadata and the list types.
func crdCheck(u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	schemas, err := operatorSchemas()
	if err != nil {
		return fmt.Errorf("loading the Prometheus Operator's CRDs: %w", err)
	}
	s, ok := schemas[gvk]
	if !ok {
		return fmt.Errorf("%s: no CRD of the Prometheus Operator is loaded for it", gvk)
	}
	obj := u.DeepCopy().Object // pruning and defaulting change it
	_, _, unknownMeta, err := objectmeta.GetObjectMetaWithOptions(obj, objectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return fmt.Errorf("%s: metadata: %w", gvk, err)
	}
	unknown := append(unknownMeta, pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	if len(unknown) > 0 {
		return fmt.Errorf("%s: unknown fields (the server would refuse them, or prune them without strict validation): %q", gvk, unknown)
	}
	defaulting.PruneNonNullableNullsWithoutDefaults(obj, s.structural)
	defaulting.Default(obj, s.structural)
	var errs field.ErrorList
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, s.validator)...)
	errs = append(errs, objectmeta.Validate(context.Background(), nil, obj, s.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w", gvk, errs.ToAggregate())
	}
	return nil
}

// monitoringValues turns both Operator objects on with every value set, as
// a kube-prometheus-stack user would (its Prometheus selects by release).
func monitoringValues() map[string]any {
	return map[string]any{"monitoring": map[string]any{
		"podMonitor": map[string]any{
			"enabled":       true,
			"labels":        map[string]any{"release": "kube-prometheus-stack"},
			"interval":      "30s",
			"scrapeTimeout": "10s",
			// The example of values.yaml.
			"relabelings": []any{map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_node_name"}, "targetLabel": "instance"}},
			"metricRelabelings": []any{map[string]any{
				"action": "drop", "sourceLabels": []any{"__name__"}, "regex": "go_gc_.*",
			}},
		},
		"prometheusRule": map[string]any{
			"enabled":              true,
			"labels":               map[string]any{"release": "kube-prometheus-stack"},
			"additionalRuleLabels": map[string]any{"team": "platform", "severity": "page"},
		},
	}}
}

// minimalMonitoringValues turns both on and sets nothing else.
func minimalMonitoringValues() map[string]any {
	return map[string]any{"monitoring": map[string]any{
		"podMonitor":     map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
	}}
}

// alertGroups parses an alert rules file strictly into the Operator's type.
func alertGroups(t *testing.T, file string) []monitoringv1.RuleGroup {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(rules.Groups) == 0 {
		t.Fatalf("%s has no rule groups", file)
	}
	return rules.Groups
}

// TestMonitoringIsOffByDefault: the default render has no Operator object
// (a cluster without the Operator's CRDs would refuse it), and turning them
// on adds the two objects and changes nothing else.
func TestMonitoringIsOffByDefault(t *testing.T) {
	def := mustRender(t, nil)
	o := decode(t, def)
	if o.podMonitor != nil || o.rule != nil {
		t.Errorf("the default render has a PodMonitor or a PrometheusRule:\n%s", def)
	}
	docs, err := splitYAML(mustRender(t, monitoringValues()))
	if err != nil {
		t.Fatal(err)
	}
	defDocs, err := splitYAML(def)
	if err != nil {
		t.Fatal(err)
	}
	var rest [][]byte
	for _, d := range docs {
		if kind := kindOf(t, d); kind != "PodMonitor" && kind != "PrometheusRule" {
			rest = append(rest, d)
		}
	}
	if !reflect.DeepEqual(rest, defDocs) {
		t.Errorf("turning monitoring on changes the other objects")
	}
}

// TestMonitoringObjectsPassTheOperatorsSchemas: with monitoring on, both
// objects pass the CRD checks and strict decoding (decode runs both), in
// the release namespace or in their own.
func TestMonitoringObjectsPassTheOperatorsSchemas(t *testing.T) {
	inMonitoringNS := merge(monitoringValues(), map[string]any{"monitoring": map[string]any{
		"podMonitor":     map[string]any{"namespace": "monitoring"},
		"prometheusRule": map[string]any{"namespace": "monitoring"},
	}})
	for name, tc := range map[string]struct {
		vals      map[string]any
		namespace string
		release   string // the extra label the Prometheus selects by
	}{
		"every value":         {monitoringValues(), namespace, "kube-prometheus-stack"},
		"only enabled":        {minimalMonitoringValues(), namespace, ""},
		"their own namespace": {inMonitoringNS, "monitoring", "kube-prometheus-stack"},
	} {
		t.Run(name, func(t *testing.T) {
			o := decode(t, mustRender(t, tc.vals))
			checkDaemonSet(t, o)
			if o.podMonitor == nil || o.rule == nil {
				t.Fatalf("PodMonitor %v, PrometheusRule %v: want both", o.podMonitor != nil, o.rule != nil)
			}
			for _, m := range []metav1.ObjectMeta{o.podMonitor.ObjectMeta, o.rule.ObjectMeta} {
				if m.Name != o.ds.Name || m.Namespace != tc.namespace {
					t.Errorf("%s/%s, want %s/%s", m.Namespace, m.Name, tc.namespace, o.ds.Name)
				}
				if m.Labels["release"] != tc.release || m.Labels["app.kubernetes.io/instance"] != releaseName {
					t.Errorf("%s labels %v, want the chart's and release=%q", m.Name, m.Labels, tc.release)
				}
			}
		})
	}
}

// TestPodMonitorScrapesTheDaemonSetsMetricsPort: the PodMonitor selects the
// DaemonSet's pods (labels and namespace) and scrapes /metrics on the named
// container port the plugin's metrics.address listens on.
func TestPodMonitorScrapesTheDaemonSetsMetricsPort(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults":          minimalMonitoringValues(),
		"every value":       monitoringValues(),
		"another port":      merge(minimalMonitoringValues(), map[string]any{"metrics": map[string]any{"port": 19560}}),
		"another name":      merge(minimalMonitoringValues(), map[string]any{"fullnameOverride": "housekeeper", "podLabels": map[string]any{"team": "x"}}),
		"its own namespace": merge(minimalMonitoringValues(), map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true, "namespace": "monitoring"}}}),
	} {
		t.Run(name, func(t *testing.T) {
			o := decode(t, mustRender(t, vals))
			pm, ds := o.podMonitor, o.ds
			sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
				t.Errorf("selector %s does not select the pods (labels %v)", sel, ds.Spec.Template.Labels)
			}
			// The DaemonSet's own selector is the narrowest that is stable:
			// the PodMonitor must not select other releases' pods.
			if !reflect.DeepEqual(pm.Spec.Selector.MatchLabels, ds.Spec.Selector.MatchLabels) || len(pm.Spec.Selector.MatchExpressions) > 0 {
				t.Errorf("selector %v, want the DaemonSet's %v", pm.Spec.Selector, ds.Spec.Selector)
			}
			// Named even when the PodMonitor is in the same namespace: an
			// empty namespaceSelector means the PodMonitor's namespace.
			if ns := pm.Spec.NamespaceSelector; ns.Any || !reflect.DeepEqual(ns.MatchNames, []string{ds.Namespace}) {
				t.Errorf("namespaceSelector %+v does not select namespace %s only (the PodMonitor is in %s)", ns, ds.Namespace, pm.Namespace)
			}
			if len(pm.Spec.PodMetricsEndpoints) != 1 {
				t.Fatalf("%d endpoints, want 1", len(pm.Spec.PodMetricsEndpoints))
			}
			ep := pm.Spec.PodMetricsEndpoints[0]
			//lint:ignore SA1019 checks that the deprecated targetPort stays unset
			if ep.Port == nil || ep.PortNumber != nil || ep.TargetPort != nil {
				t.Fatalf("endpoint %+v: want the port by name", ep)
			}
			// The named port is the one the plugin serves /metrics on.
			cfg := parseConfig(t, o)
			var found bool
			for _, p := range container(t, ds).Ports {
				if p.Name == *ep.Port {
					found = true
					if want := fmt.Sprintf(":%d", p.ContainerPort); cfg.Metrics.Address != want {
						t.Errorf("port %s is %d, but the plugin listens on %q", p.Name, p.ContainerPort, cfg.Metrics.Address)
					}
				}
			}
			if !found {
				t.Errorf("port %q is not a port of the container: %+v", *ep.Port, container(t, ds).Ports)
			}
			if ep.Path != "/metrics" || ep.Scheme != "" && ep.Scheme != "http" {
				t.Errorf("endpoint scrapes %s://...%s, want http and /metrics", ep.Scheme, ep.Path)
			}
		})
	}
}

// kindOf returns the kind of a rendered document.
func kindOf(t *testing.T, doc []byte) string {
	t.Helper()
	var obj struct{ Kind string }
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		t.Fatal(err)
	}
	return obj.Kind
}

// merge returns a with b merged in (b wins; maps are merged recursively).
func merge(a, b map[string]any) map[string]any {
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := a[k].(map[string]any); ok {
				a[k] = merge(am, bm)
				continue
			}
		}
		a[k] = v
	}
	return a
}

// TestPrometheusRuleIsAlertsYAML: the PrometheusRule's groups are the rules
// of packaging/observability/alerts.yaml, which is a symlink to the chart's
// files/alerts.yaml (one file, for rule_files and for the chart); extra
// labels are added to every alert without replacing its own.
func TestPrometheusRuleIsAlertsYAML(t *testing.T) {
	// One source: the observability file is the chart's file.
	// A relative symlink, so that it holds in every clone.
	link := filepath.Join(observabilityDir, "alerts.yaml")
	if dest, err := os.Readlink(link); err != nil || filepath.IsAbs(dest) {
		t.Errorf("%s is not a relative symlink to %s: %q, %v", link, alertsFile, dest, err)
	}
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		t.Fatal(err)
	}
	if mustAbs(t, target) != mustAbs(t, alertsFile) {
		t.Errorf("%s resolves to %s, want %s", link, target, alertsFile)
	}
	want := alertGroups(t, link)
	if !reflect.DeepEqual(want, alertGroups(t, alertsFile)) {
		t.Fatal("the two alerts files differ")
	}

	t.Run("as they are", func(t *testing.T) {
		o := decode(t, mustRender(t, minimalMonitoringValues()))
		if !reflect.DeepEqual(o.rule.Spec.Groups, want) {
			t.Errorf("the PrometheusRule's groups differ from %s:\n got %+v\nwant %+v", link, o.rule.Spec.Groups, want)
		}
	})
	t.Run("with additionalRuleLabels", func(t *testing.T) {
		o := decode(t, mustRender(t, monitoringValues()))
		got := o.rule.Spec.Groups
		if len(got) != len(want) {
			t.Fatalf("%d groups, want %d", len(got), len(want))
		}
		for i := range want {
			if len(got[i].Rules) != len(want[i].Rules) {
				t.Fatalf("group %s: %d rules, want %d", want[i].Name, len(got[i].Rules), len(want[i].Rules))
			}
			for j, w := range want[i].Rules {
				g := got[i].Rules[j]
				if g.Labels["team"] != "platform" || g.Labels["severity"] != w.Labels["severity"] || w.Labels["severity"] == "" {
					t.Errorf("alert %s: labels %v, want team=platform and its own severity %q", w.Alert, g.Labels, w.Labels["severity"])
				}
				g.Labels, w.Labels = nil, nil
				if !reflect.DeepEqual(g, w) {
					t.Errorf("alert %s changed beyond its labels:\n got %+v\nwant %+v", w.Alert, g, w)
				}
			}
		}
	})
	t.Run("from the packaged chart", func(t *testing.T) {
		// helm package writes the archive with chartutil.Save; a file left
		// out of it (.helmignore) would fail the render.
		archive, err := chartutil.Save(loadChart(t), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		chrt, err := loader.Load(archive)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := installChart(t, chrt, minimalMonitoringValues())
		if err != nil {
			t.Fatal(err)
		}
		o := decode(t, rel.Manifest)
		if !reflect.DeepEqual(o.rule.Spec.Groups, want) {
			t.Errorf("the packaged chart's PrometheusRule differs from %s", link)
		}
	})
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// TestOperatorSchemaChecksCatchMistakes makes sure the checks of the
// Operator's objects are not vacuous: each mistake fails the checks named,
// and the CRD check catches what the Go types cannot (patterns, required
// fields).
func TestOperatorSchemaChecksCatchMistakes(t *testing.T) {
	docs, err := splitYAML(mustRender(t, monitoringValues()))
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]string{}
	for _, d := range docs {
		byKind[kindOf(t, d)] = string(d)
	}
	type checks struct{ typed, crd bool } // which checks must fail
	for name, tc := range map[string]struct {
		kind     string
		from, to string
		want     checks
	}{
		"misspelled PodMonitor field":  {"PodMonitor", "  podMetricsEndpoints:", "  podMetricEndpoints:", checks{typed: true, crd: true}},
		"misspelled endpoint field":    {"PodMonitor", "      scrapeTimeout: 10s", "      scrape_timeout: 10s", checks{typed: true, crd: true}},
		"misspelled metadata field":    {"PodMonitor", "  labels:", "  label:", checks{typed: true, crd: true}},
		"wrong type":                   {"PodMonitor", "      path: /metrics", "      path: [/metrics]", checks{typed: true, crd: true}},
		"interval not a duration":      {"PodMonitor", "      interval: 30s", "      interval: 30 seconds", checks{crd: true}},
		"relabel action not an action": {"PodMonitor", "action: drop", "action: delete", checks{crd: true}},
		"rule group without a name":    {"PrometheusRule", "    - name: nri-housekeeper", "    - title: nri-housekeeper", checks{typed: true, crd: true}},
		"misspelled rule field":        {"PrometheusRule", "      - alert: NriHousekeeperLeaksPersisting", "      - alertname: NriHousekeeperLeaksPersisting", checks{typed: true, crd: true}},
		"alert without its expr":       {"PrometheusRule", "expr: nri_housekeeper_oldest_leak_seconds > 3600", "keep_firing_for: 5m", checks{crd: true}},
		"rule for not a duration":      {"PrometheusRule", "for: 1h", "for: 1 hour", checks{crd: true}},
	} {
		t.Run(name, func(t *testing.T) {
			doc := byKind[tc.kind]
			bad := strings.Replace(doc, tc.from, tc.to, 1)
			if bad == doc {
				t.Fatalf("%q not found in the %s:\n%s", tc.from, tc.kind, doc)
			}
			u, j := unstructuredOf(t, bad)
			for check, c := range map[string]struct {
				err  error
				want bool
			}{"typed": {typedCheck(u, j), tc.want.typed}, "crd": {crdCheck(u), tc.want.crd}} {
				switch {
				case c.err == nil && c.want:
					t.Errorf("the %s check accepted it", check)
				case c.err != nil && !c.want:
					t.Errorf("the %s check refused it, which this case does not expect: %v", check, c.err)
				case c.err != nil:
					t.Logf("%s: %v", check, c.err)
				}
			}
			if _, _, err := checkSchema([]byte(bad)); err == nil {
				t.Error("checkSchema, which decode runs, accepted it")
			}
		})
	}
}

// TestNotesNameTheMonitoringObjects: helm install's notes say which
// Operator objects were created, and only those.
func TestNotesNameTheMonitoringObjects(t *testing.T) {
	for name, tc := range map[string]struct {
		vals map[string]any
		want []string // in the notes
		not  []string // not in the notes
	}{
		"defaults": {nil, nil, []string{"PodMonitor", "PrometheusRule"}},
		"both":     {minimalMonitoringValues(), []string{"PodMonitor kube-system/nri-housekeeper", "PrometheusRule kube-system/nri-housekeeper"}, nil},
		"PodMonitor elsewhere": {
			map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true, "namespace": "monitoring"}}},
			[]string{"PodMonitor monitoring/nri-housekeeper"}, []string{"PrometheusRule"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			rel, err := install(t, tc.vals)
			if err != nil {
				t.Fatal(err)
			}
			notes := rel.Info.Notes
			for _, s := range tc.want {
				if !strings.Contains(notes, s) {
					t.Errorf("notes lack %q:\n%s", s, notes)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(notes, s) {
					t.Errorf("notes mention %q:\n%s", s, notes)
				}
			}
		})
	}
}
