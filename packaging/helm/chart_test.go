// Tests of the Helm chart in nri-housekeeper/: it is rendered exactly as
// `helm template` renders it (Helm's own install action in client-only
// dry-run mode, the code behind the command), every object is checked
// against the Kubernetes API schema (the Prometheus Operator's objects
// against its CRDs, monitoring_test.go), and the DaemonSet against what a
// node agent of this plugin needs. packaging/daemonset/daemonset.yaml must be the
// render with the default values (go test -run Manifest -update rewrites it).
package helm_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nri-housekeeper/nri-housekeeper/config"
)

var update = flag.Bool("update", false, "rewrite "+manifestPath+" from the chart")

const (
	chartDir     = "nri-housekeeper"
	manifestPath = "../daemonset/daemonset.yaml"
	releaseName  = "nri-housekeeper"
	namespace    = "kube-system"
	configFile   = "/etc/nri-housekeeper/config.toml"
	metricsPort  = 9560
)

// manifestHeader starts packaging/daemonset/daemonset.yaml; the render follows.
const manifestHeader = `# nri-housekeeper as a plain DaemonSet: kubectl apply -f daemonset.yaml
#
# Generated from the Helm chart packaging/helm/nri-housekeeper with its default
# values, exactly as
#   helm template nri-housekeeper packaging/helm/nri-housekeeper --namespace kube-system
# renders it. Do not edit: change the chart and run
#   cd packaging/helm && go test -run Manifest -update
# (packaging/helm/chart_test.go fails when this file and the chart differ).
`

// render renders the chart like `helm template nri-housekeeper <chart>
// --namespace kube-system` with vals as the --set/-f values.
func render(t *testing.T, vals map[string]any) (string, error) {
	t.Helper()
	rel, err := install(t, vals)
	if err != nil {
		return "", err
	}
	// What `helm template` prints (cmd/helm/template.go); the chart has no hooks.
	if len(rel.Hooks) > 0 {
		t.Fatalf("the chart has hooks, which helm template prints after the manifest: %v", rel.Hooks)
	}
	return strings.TrimSpace(rel.Manifest) + "\n", nil
}

// install is Helm's install action as `helm template` runs it: client
// only, dry run, no cluster.
func install(t *testing.T, vals map[string]any) (*release.Release, error) {
	t.Helper()
	return installChart(t, loadChart(t), vals)
}

// installChart is install with a chart loaded from elsewhere (an archive).
func installChart(t *testing.T, chrt *chart.Chart, vals map[string]any) (*release.Release, error) {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.DryRunOption = true, "true"
	inst.ClientOnly = true
	inst.Replace = true
	inst.ReleaseName = releaseName
	inst.Namespace = namespace
	if vals == nil {
		vals = map[string]any{}
	}
	return inst.Run(chrt, vals)
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return chrt
}

func mustRender(t *testing.T, vals map[string]any) string {
	t.Helper()
	out, err := render(t, vals)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return out
}

// objects are the rendered objects, decoded strictly into the API types.
type objects struct {
	sa         *corev1.ServiceAccount
	cm         *corev1.ConfigMap
	ds         *appsv1.DaemonSet
	podMonitor *monitoringv1.PodMonitor     // monitoring.podMonitor.enabled
	rule       *monitoringv1.PrometheusRule // monitoring.prometheusRule.enabled
	raw        map[string][]byte            // kind -> JSON
}

// decode splits a render into its documents and checks each one against the
// Kubernetes API twice: strictly decoded into the typed structs of k8s.io/api
// (unknown, duplicate or wrongly cased fields and wrong types fail), and validated against
// the OpenAPI-derived structural schema the API server uses for server-side
// apply (client-go's applyconfigurations type converter). The Prometheus
// Operator's kinds are decoded into its Go types and checked against its CRDs.
func decode(t *testing.T, manifest string) objects {
	t.Helper()
	docs, err := splitYAML(manifest)
	if err != nil {
		t.Fatal(err)
	}
	o := objects{raw: map[string][]byte{}}
	for _, doc := range docs {
		kind, j, err := checkSchema(doc)
		if err != nil {
			t.Fatalf("schema check:\n%v\n--- document:\n%s", err, doc)
		}
		if _, dup := o.raw[kind]; dup {
			t.Fatalf("two %s objects rendered", kind)
		}
		o.raw[kind] = j
		var target any
		switch kind {
		case "ServiceAccount":
			o.sa = &corev1.ServiceAccount{}
			target = o.sa
		case "ConfigMap":
			o.cm = &corev1.ConfigMap{}
			target = o.cm
		case "DaemonSet":
			o.ds = &appsv1.DaemonSet{}
			target = o.ds
		case "PodMonitor":
			o.podMonitor = &monitoringv1.PodMonitor{}
			target = o.podMonitor
		case "PrometheusRule":
			o.rule = &monitoringv1.PrometheusRule{}
			target = o.rule
		default:
			t.Fatalf("unexpected %s rendered", kind)
		}
		if err := yaml.UnmarshalStrict(doc, target); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	if o.cm == nil || o.ds == nil {
		t.Fatalf("the render lacks the ConfigMap or the DaemonSet:\n%s", manifest)
	}
	return o
}

// splitYAML returns the non-empty documents of a YAML stream.
func splitYAML(s string) ([][]byte, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if len(m) > 0 {
			docs = append(docs, doc)
		}
	}
}

// checkSchema checks one object with both checks (typedCheck and
// structuralCheck). It returns the kind and the JSON.
func checkSchema(doc []byte) (string, []byte, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return "", nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		return "", nil, err
	}
	if err := typedCheck(u, j); err != nil {
		return "", nil, err
	}
	if err := structuralCheck(u); err != nil {
		return "", nil, err
	}
	return u.GetKind(), j, nil
}

// apiTypes are the Go types objects are decoded into: the built-in kinds of
// k8s.io/api and the Prometheus Operator's monitoring.coreos.com/v1.
var apiTypes = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(s))
	utilruntime.Must(monitoringv1.AddToScheme(s))
	return s
}()

// typedCheck decodes the object into its registered Go type, case-sensitive
// and strict, as the API server decodes built-in kinds (encoding/json alone
// would take hostPid for hostPID); the Operator's kinds into the Go types the
// Operator reads them with.
func typedCheck(u *unstructured.Unstructured, j []byte) error {
	gvk := u.GroupVersionKind()
	typed, err := apiTypes.New(gvk)
	if err != nil {
		return fmt.Errorf("%s: not a known API type: %w", gvk, err)
	}
	strict, err := sjson.UnmarshalStrict(j, typed)
	if err != nil {
		return fmt.Errorf("%s: %w", gvk, err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("%s: %w", gvk, errors.Join(strict...))
	}
	return nil
}

// structuralCheck validates the object against the OpenAPI-derived schema
// the API server uses for server-side apply; the Prometheus Operator's kinds,
// which that schema does not know, against their CRDs (crdCheck).
func structuralCheck(u *unstructured.Unstructured) error {
	if u.GroupVersionKind().GroupVersion() == monitoringv1.SchemeGroupVersion {
		return crdCheck(u)
	}
	if _, err := applyconfigurations.NewTypeConverter(scheme.Scheme).ObjectToTyped(u); err != nil {
		return fmt.Errorf("%s: %w", u.GroupVersionKind(), err)
	}
	return nil
}

// parseConfig parses the rendered config.toml with the plugin's own parser.
func parseConfig(t *testing.T, o objects) config.Config {
	t.Helper()
	text, ok := o.cm.Data["config.toml"]
	if !ok {
		t.Fatalf("the ConfigMap has no config.toml: %v", o.cm.Data)
	}
	cfg, err := config.Parse([]byte(text), "the chart's ConfigMap")
	if err != nil {
		t.Fatalf("the rendered config does not parse:\n%v\n--- config.toml:\n%s", err, text)
	}
	if cfg.Notices != nil {
		t.Fatalf("the rendered config uses deprecated keys: %q\n--- config.toml:\n%s", cfg.Notices, text)
	}
	return cfg
}

func container(t *testing.T, ds *appsv1.DaemonSet) corev1.Container {
	t.Helper()
	if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	return ds.Spec.Template.Spec.Containers[0]
}

// hostMount is a hostPath volume and where it is mounted.
type hostMount struct {
	volume corev1.Volume
	mount  corev1.VolumeMount
}

// hostMounts maps each hostPath volume's path to the volume and its mount,
// and fails on a hostPath volume that is not mounted exactly once.
func hostMounts(t *testing.T, ds *appsv1.DaemonSet) map[string]hostMount {
	t.Helper()
	c := container(t, ds)
	out := map[string]hostMount{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		var found []corev1.VolumeMount
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				found = append(found, m)
			}
		}
		if len(found) != 1 {
			t.Fatalf("hostPath volume %s (%s) is mounted %d times, want once", v.Name, v.HostPath.Path, len(found))
		}
		out[v.HostPath.Path] = hostMount{v, found[0]}
	}
	return out
}

// wantDir checks that hostPath is mounted as a directory at the same path,
// with the given read-only flag and propagation.
func wantDir(t *testing.T, mounts map[string]hostMount, hostPath string, readOnly bool, propagation corev1.MountPropagationMode) hostMount {
	t.Helper()
	hm, ok := mounts[hostPath]
	if !ok {
		t.Errorf("no hostPath volume for %s; have %v", hostPath, keys(mounts))
		return hm
	}
	if ty := hm.volume.HostPath.Type; ty == nil || (*ty != corev1.HostPathDirectory && *ty != corev1.HostPathDirectoryOrCreate) {
		t.Errorf("hostPath %s: type %v, want Directory or DirectoryOrCreate", hostPath, ty)
	}
	if hm.mount.MountPath != hostPath {
		t.Errorf("hostPath %s is mounted at %s, want the same path (log links and the config use node paths)", hostPath, hm.mount.MountPath)
	}
	if hm.mount.ReadOnly != readOnly {
		t.Errorf("hostPath %s: readOnly %v, want %v", hostPath, hm.mount.ReadOnly, readOnly)
	}
	got := corev1.MountPropagationNone
	if hm.mount.MountPropagation != nil {
		got = *hm.mount.MountPropagation
	}
	if got != propagation {
		t.Errorf("hostPath %s: mountPropagation %s, want %s", hostPath, got, propagation)
	}
	return hm
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// under reports whether file is inside dir.
func under(file, dir string) bool {
	return strings.HasPrefix(path.Clean(file), strings.TrimSuffix(path.Clean(dir), "/")+"/")
}

// checkDaemonSet checks the points every render must satisfy, whatever the
// values: the mounts agree with the configuration the plugin reads.
func checkDaemonSet(t *testing.T, o objects) {
	t.Helper()
	ds, pod := o.ds, o.ds.Spec.Template.Spec
	c := container(t, ds)
	cfg := parseConfig(t, o)

	// Selector and labels.
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
	for _, name := range []string{ds.Name, o.cm.Name} {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("name %q: %v", name, errs)
		}
	}
	for _, obj := range []string{ds.Namespace, o.cm.Namespace} {
		if obj != namespace {
			t.Errorf("object in namespace %q, want the release namespace %q", obj, namespace)
		}
	}

	// Command and configuration file.
	if got := append(slices.Clone(c.Command), c.Args...); !slices.Equal(got, []string{"/nri-housekeeper", "run", "--config", configFile}) {
		t.Errorf("command %q, want /nri-housekeeper run --config %s", got, configFile)
	}
	var cfgMount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == path.Dir(configFile) {
			cfgMount = &c.VolumeMounts[i]
		}
	}
	if cfgMount == nil || !cfgMount.ReadOnly {
		t.Fatalf("%s is not mounted read-only: %+v", path.Dir(configFile), c.VolumeMounts)
	}
	var cfgVol *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == cfgMount.Name {
			cfgVol = &pod.Volumes[i]
		}
	}
	if cfgVol == nil || cfgVol.ConfigMap == nil || cfgVol.ConfigMap.Name != o.cm.Name {
		t.Errorf("%s is not the ConfigMap %s: %+v", path.Dir(configFile), o.cm.Name, cfgVol)
	}

	// Volume names: DNS labels, unique; every mount has its volume.
	names := map[string]bool{}
	for _, v := range pod.Volumes {
		if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 || names[v.Name] {
			t.Errorf("volume name %q: invalid or duplicate %v", v.Name, errs)
		}
		names[v.Name] = true
	}
	mountPaths := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if !names[m.Name] {
			t.Errorf("volumeMount %s has no volume", m.Name)
		}
		if mountPaths[m.MountPath] {
			t.Errorf("two mounts at %s", m.MountPath)
		}
		mountPaths[m.MountPath] = true
	}

	mounts := hostMounts(t, ds)
	// No socket file is mounted: containerd removes and recreates its sockets
	// when it restarts, and a bind-mounted socket file would then be stale.
	for p, hm := range mounts {
		if ty := hm.volume.HostPath.Type; ty != nil && *ty == corev1.HostPathSocket || strings.HasSuffix(p, ".sock") {
			t.Errorf("hostPath %s is a socket file; mount its directory", p)
		}
	}
	// The NRI socket's directory, and the configured socket is inside it.
	nri := wantDir(t, mounts, path.Dir(cfg.NRI.Socket), true, corev1.MountPropagationNone)
	if !under(cfg.NRI.Socket, nri.mount.MountPath) {
		t.Errorf("nri.socket %s is not inside the mounted NRI socket dir %s", cfg.NRI.Socket, nri.mount.MountPath)
	}
	// containerd's socket directory: HostToContainer, so that container
	// rootfs mounts below it are not pinned in this pod.
	endpoint := strings.TrimPrefix(cfg.Runtime.Endpoint, "unix://")
	ctrd := wantDir(t, mounts, path.Dir(endpoint), true, corev1.MountPropagationHostToContainer)
	if !under(endpoint, ctrd.mount.MountPath) {
		t.Errorf("runtime.endpoint %s is not inside the mounted dir %s", cfg.Runtime.Endpoint, ctrd.mount.MountPath)
	}
	// kubelet's pods dir: read-only unless orphaned pod dirs are removed,
	// HostToContainer so that volume mounts made later are seen (and none is
	// pinned).
	wantDir(t, mounts, path.Join(cfg.Pods.KubeletRoot, "pods"), !cfg.PodDirs.RemoveOrphaned, corev1.MountPropagationHostToContainer)
	// The log dirs: HostToContainer too, so that a mount made below them
	// later is in the plugin's mount table and no removal crosses it.
	wantDir(t, mounts, cfg.Logs.PodLogsDir, false, corev1.MountPropagationHostToContainer)
	wantDir(t, mounts, cfg.Logs.ContainerLogsDir, false, corev1.MountPropagationHostToContainer)
	wantDir(t, mounts, cfg.Cgroups.Mountpoint, false, corev1.MountPropagationNone)
	want := 6
	// systemd's runtime dir, read-only, when the plugin may stop a pod's
	// slice through systemd (the systemd driver, or auto); never otherwise.
	for p, hm := range mounts {
		if hm.volume.Name != "systemd-run" {
			continue
		}
		if !cfg.Cgroups.Enabled || cfg.Cgroups.Driver == config.DriverCgroupfs {
			t.Errorf("systemd's runtime dir %s is mounted, but the plugin never asks systemd (cgroups.enabled %v, driver %q)", p, cfg.Cgroups.Enabled, cfg.Cgroups.Driver)
		}
		wantDir(t, mounts, p, true, corev1.MountPropagationNone)
		want++
	}
	if cfg.Housekeeping.StateFile != "" {
		// The state file outlives the pod: its dir is the node's, read-write,
		// and created on a node that never ran the plugin.
		hm := wantDir(t, mounts, path.Dir(cfg.Housekeeping.StateFile), false, corev1.MountPropagationNone)
		if hm.volume.HostPath != nil && (hm.volume.HostPath.Type == nil || *hm.volume.HostPath.Type != corev1.HostPathDirectoryOrCreate) {
			t.Errorf("the state dir %s: hostPath type %v, want DirectoryOrCreate", path.Dir(cfg.Housekeeping.StateFile), hm.volume.HostPath.Type)
		}
		want++
	}
	if cfg.Network.Enabled {
		checkNetwork(t, o, cfg, mounts)
		want += 4
	}
	if len(mounts) != want {
		t.Errorf("hostPath volumes %v, want exactly the %d the plugin uses (network.enabled %v, state_file %q)", keys(mounts), want, cfg.Network.Enabled, cfg.Housekeeping.StateFile)
	}
	// The API server refuses Bidirectional propagation in a container that
	// is not privileged.
	privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
	for _, m := range c.VolumeMounts {
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional && !privileged {
			t.Errorf("%s is mounted Bidirectional in a container that is not privileged", m.MountPath)
		}
	}
	if cfg.Log.Target != config.TargetStderr {
		t.Errorf("log.target %q, want stderr: the container log", cfg.Log.Target)
	}

	// Metrics port, probes and the address the plugin listens on.
	var port *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "metrics" {
			port = &c.Ports[i]
		}
	}
	if port == nil {
		t.Fatalf("no metrics port: %+v", c.Ports)
	}
	if errs := validation.IsValidPortName(port.Name); len(errs) > 0 {
		t.Errorf("port name %q: %v", port.Name, errs)
	}
	if want := fmt.Sprintf(":%d", port.ContainerPort); cfg.Metrics.Address != want {
		t.Errorf("metrics.address %q, want %q (all addresses, the port of the container)", cfg.Metrics.Address, want)
	}
	for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		switch {
		case probe == nil || probe.HTTPGet == nil:
			t.Errorf("no HTTP probe for %s", want)
		case probe.HTTPGet.Path != want:
			t.Errorf("probe path %s, want %s", probe.HTTPGet.Path, want)
		case probe.HTTPGet.Port != intstr.FromString(port.Name) && probe.HTTPGet.Port != intstr.FromInt32(port.ContainerPort):
			t.Errorf("probe %s on port %s, want the metrics port", want, probe.HTTPGet.Port.String())
		}
	}

	// A node agent: critical priority, every node whatever its taints,
	// resources, rolling updates, no API token.
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", pod.PriorityClassName)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "" && tol.Operator == corev1.TolerationOpExists && tol.Effect == ""
	}) {
		t.Errorf("tolerations %+v do not tolerate every taint", pod.Tolerations)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("no %s request", r)
		}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || q.Cmp(c.Resources.Requests[corev1.ResourceMemory]) < 0 {
		t.Errorf("memory limit %v missing or below the request", q.String())
	}
	if s := ds.Spec.UpdateStrategy; s.Type != appsv1.RollingUpdateDaemonSetStrategyType || s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable == nil {
		t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable", s)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted; the plugin talks to no API server")
	}
	if o.sa != nil && pod.ServiceAccountName != o.sa.Name {
		t.Errorf("serviceAccountName %q, but the chart creates %q", pod.ServiceAccountName, o.sa.Name)
	}
}

// checkNetwork checks what the network side needs ([network] on): the CNI
// dirs of the rendered config mounted at the same paths (libcni's cache
// read-write: entries and host-local's reservations are removed; the plugins
// and the conf dir read-only; containerd's netns dir read-write and
// Bidirectional, so that the plugin's unmount reaches the node), the node's
// network namespace (CNI DEL of bridge and portmap), the node's PID
// namespace (/proc shows every thread in a namespace) and privileges.
func checkNetwork(t *testing.T, o objects, cfg config.Config, mounts map[string]hostMount) {
	t.Helper()
	pod, c := o.ds.Spec.Template.Spec, container(t, o.ds)
	n := cfg.Network
	wantDir(t, mounts, n.CacheDir, false, corev1.MountPropagationNone)
	wantDir(t, mounts, n.BinDir, true, corev1.MountPropagationNone)
	wantDir(t, mounts, n.ConfDir, true, corev1.MountPropagationNone)
	if n.NetnsDir == "" {
		t.Error("network.netns_dir is empty: the plugin would use whatever dir containerd reports, mounted or not")
	} else {
		wantDir(t, mounts, n.NetnsDir, false, corev1.MountPropagationBidirectional)
		// A private copy of the namespace mounts (a mount without
		// propagation that contains the netns dir) would keep them busy:
		// the plugin's unmount does not reach it and the unlink fails.
		for p, hm := range mounts {
			if under(n.NetnsDir, p) && hm.mount.MountPropagation == nil {
				t.Errorf("the netns dir %s is inside %s, mounted without propagation", n.NetnsDir, p)
			}
		}
	}
	if !pod.HostNetwork {
		t.Error("network.enabled without hostNetwork: CNI DEL would run in the pod's network namespace")
	}
	if !pod.HostPID {
		t.Error("network.enabled without hostPID: no namespace can be told unused")
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("network.enabled in a container that is not privileged")
	}
}

// TestDefaultRender is acceptance point 4: the chart renders, the objects
// pass the schema checks, and the DaemonSet has what the plugin needs.
func TestDefaultRender(t *testing.T) {
	o := decode(t, mustRender(t, nil))
	checkDaemonSet(t, o)
	ds, pod, c := o.ds, o.ds.Spec.Template.Spec, container(t, o.ds)
	cfg := parseConfig(t, o)

	if !pod.HostPID {
		t.Error("hostPID is off: the processes of a leaked pod cgroup cannot be killed")
	}
	if !pod.HostNetwork {
		t.Error("hostNetwork is off")
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("the container is not privileged")
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the root file system is writable")
	}
	if want := "ghcr.io/nri-housekeeper/nri-housekeeper:" + loadChart(t).Metadata.AppVersion; c.Image != want {
		t.Errorf("image %s, want %s", c.Image, want)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != metricsPort {
		t.Errorf("ports %+v, want metrics %d", c.Ports, metricsPort)
	}
	// The node paths of a default kubelet and containerd.
	for got, want := range map[string]string{
		cfg.NRI.Socket:               "/var/run/nri/nri.sock",
		cfg.Runtime.Endpoint:         "unix:///run/containerd/containerd.sock",
		cfg.Pods.KubeletRoot:         "/var/lib/kubelet",
		cfg.Logs.PodLogsDir:          "/var/log/pods",
		cfg.Logs.ContainerLogsDir:    "/var/log/containers",
		cfg.Cgroups.Mountpoint:       "/sys/fs/cgroup",
		cfg.Network.CacheDir:         "/var/lib/cni",
		cfg.Network.BinDir:           "/opt/cni/bin",
		cfg.Network.ConfDir:          "/etc/cni/net.d",
		cfg.Network.NetnsDir:         "/var/run/netns",
		cfg.Network.ExecRoot:         "/proc/1/root",
		cfg.Housekeeping.StateFile:   "/var/lib/nri-housekeeper/state.json",
		cfg.Metrics.Address:          ":9560",
		c.LivenessProbe.HTTPGet.Path: "/healthz",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	mounts := hostMounts(t, ds)
	if m := mounts["/var/lib/kubelet/pods"].mount; !m.ReadOnly {
		t.Error("/var/lib/kubelet/pods is writable by default")
	}
	if !cfg.Network.Enabled {
		t.Error("the network side is off by default")
	}
	// The defaults of the plugin stay the defaults.
	def := config.Default()
	if cfg.PodDirs.RemoveOrphaned || cfg.DryRun || cfg.Orphans.Action != def.Orphans.Action || cfg.Budget != def.Budget ||
		cfg.Housekeeping.LeakGrace != def.Housekeeping.LeakGrace || cfg.Housekeeping.Period != def.Housekeeping.Period ||
		cfg.Housekeeping.StateFile != def.Housekeeping.StateFile {
		t.Errorf("the chart changes the plugin's defaults: %+v", cfg)
	}
}

// TestValues: the mounts and the configuration follow the values together.
func TestValues(t *testing.T) {
	t.Run("a probe set to null is left out; one set to {} keeps the chart's settings (Helm merges maps)", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{"livenessProbe": nil, "readinessProbe": map[string]any{}}))
		c := container(t, o.ds)
		if c.LivenessProbe != nil {
			t.Errorf("livenessProbe: null rendered a probe: %+v", c.LivenessProbe)
		}
		if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.PeriodSeconds != 10 {
			t.Errorf("readinessProbe: {} rendered %+v, want the /readyz probe with the chart's settings", p)
		}
	})
	t.Run("remove orphaned pod dirs mounts the pods dir read-write", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{"config": map[string]any{"pod_dirs": map[string]any{"remove_orphaned": true}}}))
		checkDaemonSet(t, o)
		if !parseConfig(t, o).PodDirs.RemoveOrphaned {
			t.Error("pod_dirs.remove_orphaned is not set")
		}
	})
	t.Run("other node paths and port", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{
			"kubelet":          map[string]any{"rootDir": "/var/lib/k0s/kubelet", "podLogsDir": "/data/log/pods", "containerLogsDir": "/data/log/containers"},
			"containerd":       map[string]any{"socketDir": "/run/k3s/containerd"},
			"nri":              map[string]any{"socketDir": "/run/nri", "socketName": "nri-k3s.sock"},
			"cgroupMountpoint": "/host/cgroup",
			"metrics":          map[string]any{"port": 19560},
		}))
		checkDaemonSet(t, o)
		cfg := parseConfig(t, o)
		if cfg.NRI.Socket != "/run/nri/nri-k3s.sock" || cfg.Runtime.Endpoint != "unix:///run/k3s/containerd/containerd.sock" ||
			cfg.Pods.KubeletRoot != "/var/lib/k0s/kubelet" || cfg.Metrics.Address != ":19560" || cfg.Cgroups.Mountpoint != "/host/cgroup" {
			t.Errorf("config does not follow the values: %+v", cfg)
		}
	})
	t.Run("no hostPID with the network and cgroups off", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{"hostPID": false, "network": map[string]any{"enabled": false},
			"config": map[string]any{"cgroups": map[string]any{"enabled": false}}}))
		checkDaemonSet(t, o)
		if o.ds.Spec.Template.Spec.HostPID || parseConfig(t, o).Cgroups.Enabled {
			t.Errorf("hostPID %v, cgroups.enabled %v: want both off", o.ds.Spec.Template.Spec.HostPID, parseConfig(t, o).Cgroups.Enabled)
		}
	})
	t.Run("network off: no CNI dir mounted", func(t *testing.T) {
		for _, vals := range []map[string]any{
			{"network": map[string]any{"enabled": false}},
			// Either switch off wins.
			{"config": map[string]any{"network": map[string]any{"enabled": false}}},
			{"network": map[string]any{"enabled": false}, "config": map[string]any{"network": map[string]any{"enabled": true}}},
			// The capability-only variant of values.yaml.
			{"network": map[string]any{"enabled": false}, "securityContext": map[string]any{
				"privileged": false, "readOnlyRootFilesystem": true,
				"capabilities": map[string]any{"drop": []any{"ALL"}, "add": []any{"KILL", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER"}}}},
		} {
			o := decode(t, mustRender(t, vals))
			checkDaemonSet(t, o)
			if parseConfig(t, o).Network.Enabled {
				t.Errorf("%v: network.enabled is on", vals)
			}
			for _, p := range []string{"/var/lib/cni", "/opt/cni/bin", "/etc/cni/net.d", "/var/run/netns"} {
				if _, ok := hostMounts(t, o.ds)[p]; ok {
					t.Errorf("%v: %s is mounted", vals, p)
				}
			}
		}
	})
	t.Run("state dir", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			vals      map[string]any
			stateFile string // "": no state dir mounted
		}{
			{"default", nil, "/var/lib/nri-housekeeper/state.json"},
			{"other dir", map[string]any{"stateDir": "/data/nri-housekeeper/"}, "/data/nri-housekeeper/state.json"},
			// The chart's state_file wins, like the other keys that must
			// match a mount.
			{"config state_file", map[string]any{"config": map[string]any{"housekeeping": map[string]any{"state_file": "/tmp/state.json"}}},
				"/var/lib/nri-housekeeper/state.json"},
			{"no [housekeeping] in config", map[string]any{"config": map[string]any{"housekeeping": nil}}, "/var/lib/nri-housekeeper/state.json"},
			{"network off", map[string]any{"network": map[string]any{"enabled": false}}, "/var/lib/nri-housekeeper/state.json"},
			// Nothing kept: no volume, and not the plugin's default path
			// (in the read-only root file system).
			{"empty", map[string]any{"stateDir": ""}, ""},
			{"empty, config state_file", map[string]any{"stateDir": "", "config": map[string]any{"housekeeping": map[string]any{"state_file": "/var/lib/nri-housekeeper/state.json"}}}, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o := decode(t, mustRender(t, tc.vals))
				checkDaemonSet(t, o)
				if got := parseConfig(t, o).Housekeeping.StateFile; got != tc.stateFile {
					t.Errorf("housekeeping.state_file %q, want %q", got, tc.stateFile)
				}
				if want := fmt.Sprintf("state_file = %q\n", tc.stateFile); !strings.Contains(o.cm.Data["config.toml"], want) {
					t.Errorf("config.toml lacks %q:\n%s", want, o.cm.Data["config.toml"])
				}
				var stateVolumes []string
				for _, v := range o.ds.Spec.Template.Spec.Volumes {
					if v.Name == "state" || v.HostPath != nil && strings.Contains(v.HostPath.Path, "nri-housekeeper") {
						stateVolumes = append(stateVolumes, v.Name)
					}
				}
				for _, m := range container(t, o.ds).VolumeMounts {
					if m.Name == "state" || strings.Contains(m.MountPath, "nri-housekeeper") && m.MountPath != path.Dir(configFile) {
						stateVolumes = append(stateVolumes, m.MountPath)
					}
				}
				if want := map[bool]int{true: 0, false: 2}[tc.stateFile == ""]; len(stateVolumes) != want {
					t.Errorf("state volumes and mounts %v, want %d", stateVolumes, want)
				}
			})
		}
	})
	t.Run("k3s CNI paths", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{"network": map[string]any{
			"binDir":  "/var/lib/rancher/k3s/data/current/bin",
			"confDir": "/var/lib/rancher/k3s/agent/etc/cni/net.d",
		}}))
		checkDaemonSet(t, o)
		n := parseConfig(t, o).Network
		if !n.Enabled || n.BinDir != "/var/lib/rancher/k3s/data/current/bin" || n.ConfDir != "/var/lib/rancher/k3s/agent/etc/cni/net.d" ||
			n.CacheDir != "/var/lib/cni" || n.NetnsDir != "/var/run/netns" {
			t.Errorf("network config does not follow the values: %+v", n)
		}
	})
	t.Run("plugins run in this image", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{"network": map[string]any{"execRoot": ""}}))
		checkDaemonSet(t, o)
		if n := parseConfig(t, o).Network; !n.Enabled || n.ExecRoot != "" {
			t.Errorf("network config does not follow the values: %+v", n)
		}
	})
	t.Run("netns under containerd's state dir", func(t *testing.T) {
		// netns_mounts_under_state_dir: the netns dir is inside the
		// read-only, HostToContainer containerd dir, and mounted on its
		// own over it.
		netns := "/run/containerd/io.containerd.grpc.v1.cri/netns"
		o := decode(t, mustRender(t, map[string]any{"network": map[string]any{"netnsDir": netns, "cacheDir": "/data/cni"}}))
		checkDaemonSet(t, o)
		n := parseConfig(t, o).Network
		if n.NetnsDir != netns || n.CacheDir != "/data/cni" {
			t.Errorf("network config does not follow the values: %+v", n)
		}
	})
	t.Run("config numbers, strings and booleans", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{"config": map[string]any{
			"dry_run":      true,
			"housekeeping": map[string]any{"max_parallel": 8, "leak_grace": "10m"},
			"orphans":      map[string]any{"action": "stop"},
			"budget":       map[string]any{"max_fraction": 0.25, "max_per_pass": 1, "min_per_pass": 0, "max_per_hour": 50},
			"containers":   map[string]any{"max_containers": -1},
			"log":          map[string]any{"level": "debug", "target": "journald"}, // target is the chart's
			"metrics":      map[string]any{"address": "127.0.0.1:1"},               // so is the address
			"nri":          map[string]any{"plugin_index": "20"},
		}}))
		checkDaemonSet(t, o)
		cfg := parseConfig(t, o)
		budget := config.Budget{MaxPerPass: 1, MaxFraction: 0.25, MinPerPass: 0, MaxPerHour: 50}
		if !cfg.DryRun || cfg.Housekeeping.MaxParallel != 8 || cfg.Budget != budget ||
			cfg.Orphans.Action != "stop" || cfg.Log.Level != "debug" || cfg.NRI.PluginIndex != "20" || cfg.Containers.MaxContainers != -1 {
			t.Errorf("config does not follow the values: %+v", cfg)
		}
	})
	t.Run("every key of the example config", func(t *testing.T) {
		// `nri-housekeeper config example` as values: each key keeps its
		// value and type, except those the chart sets to match the pod.
		var example map[string]any
		if err := toml.Unmarshal([]byte(config.Example()), &example); err != nil {
			t.Fatal(err)
		}
		o := decode(t, mustRender(t, map[string]any{"config": example}))
		checkDaemonSet(t, o)
		got := parseConfig(t, o)
		want, err := config.Parse([]byte(config.Example()), "example")
		if err != nil {
			t.Fatal(err)
		}
		want.NRI.Socket, want.Runtime.Endpoint, want.Pods.KubeletRoot = got.NRI.Socket, got.Runtime.Endpoint, got.Pods.KubeletRoot
		want.Logs, want.Cgroups.Mountpoint, want.Metrics, want.Log.Target = got.Logs, got.Cgroups.Mountpoint, got.Metrics, got.Log.Target
		want.Network.CacheDir, want.Network.ConfDir, want.Network.BinDir, want.Network.NetnsDir = got.Network.CacheDir, got.Network.ConfDir, got.Network.BinDir, got.Network.NetnsDir
		want.Network.ExecRoot = got.Network.ExecRoot
		want.Housekeeping.StateFile = got.Housekeeping.StateFile
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the example config changed on its way through the chart:\n got %+v\nwant %+v", got, want)
		}
	})
	t.Run("helm --set types", func(t *testing.T) {
		// --set makes 0.25 a string and 20 a number; the plugin wants the
		// opposite for these two keys.
		vals := map[string]any{}
		err := strvals.ParseInto("config.budget.max_fraction=0.25,config.nri.plugin_index=20,config.housekeeping.max_parallel=8,"+
			"config.dry_run=true,config.housekeeping.leak_grace=10m,config.containers.max_containers=-1,config.budget.max_per_hour=50", vals)
		if err != nil {
			t.Fatal(err)
		}
		cfg := parseConfig(t, decode(t, mustRender(t, vals)))
		if cfg.Budget.MaxFraction != 0.25 || cfg.Budget.MaxPerHour != 50 || cfg.NRI.PluginIndex != "20" || cfg.Housekeeping.MaxParallel != 8 || !cfg.DryRun ||
			cfg.Housekeeping.LeakGrace != 10*time.Minute || cfg.Containers.MaxContainers != -1 {
			t.Errorf("config does not follow --set: %+v", cfg)
		}
	})
	t.Run("image digest", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{"image": map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)}}))
		if c := container(t, o.ds); c.Image != "ghcr.io/nri-housekeeper/nri-housekeeper@sha256:"+strings.Repeat("ab", 32) {
			t.Errorf("image %s", c.Image)
		}
	})
	t.Run("no service account created", func(t *testing.T) {
		o := decode(t, mustRender(t, map[string]any{"serviceAccount": map[string]any{"create": false}}))
		if o.sa != nil || o.ds.Spec.Template.Spec.ServiceAccountName != "default" {
			t.Errorf("service account %v, %q", o.sa, o.ds.Spec.Template.Spec.ServiceAccountName)
		}
	})
	for name, vals := range map[string]map[string]any{
		"nested config table": {"config": map[string]any{"housekeeping": map[string]any{"x": map[string]any{"y": 1}}}},
		"list in config":      {"config": map[string]any{"log": map[string]any{"level": []any{"info"}}}},
		"unknown top value":   {"tolerationz": []any{}},
		"port out of range":   {"metrics": map[string]any{"port": 70000}},
		// orphans.max_per_pass and orphans.max_fraction are deprecated
		// aliases in the plugin; the chart renders only the current keys.
		"deprecated orphans.max_per_pass":    {"config": map[string]any{"orphans": map[string]any{"max_per_pass": 1}}},
		"deprecated orphans.max_fraction":    {"config": map[string]any{"orphans": map[string]any{"max_fraction": 0.2}}},
		"unknown budget key":                 {"config": map[string]any{"budget": map[string]any{"max_per_day": 1}}},
		"budget fraction above one":          {"config": map[string]any{"budget": map[string]any{"max_fraction": 1.5}}},
		"budget fraction string above one":   {"config": map[string]any{"budget": map[string]any{"max_fraction": "1.5"}}},
		"negative budget count":              {"config": map[string]any{"budget": map[string]any{"min_per_pass": -1}}},
		"unknown podMonitor key":             {"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true, "intervall": "30s"}}},
		"podMonitor interval not a duration": {"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true, "interval": "30 seconds"}}},
		"podMonitor namespace not a name":    {"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true, "namespace": "Monitoring"}}},
		"rule label not a string":            {"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true, "additionalRuleLabels": map[string]any{"tier": 1}}}},
		"unknown monitoring object":          {"monitoring": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}},
		// The network side needs the node's network and PID namespaces and
		// a privileged container (Bidirectional propagation).
		"network without hostNetwork": {"hostNetwork": false},
		"network without hostPID":     {"hostPID": false},
		// Pod cgroups' processes are seen and killed by their node PIDs.
		"cgroups without hostPID":             {"hostPID": false, "network": map[string]any{"enabled": false}},
		"cgroups as a string without hostPID": {"hostPID": false, "network": map[string]any{"enabled": false}, "config": map[string]any{"cgroups": map[string]any{"enabled": "true"}}},
		"pod dirs removed without hostPID": {"hostPID": false, "network": map[string]any{"enabled": false},
			"config": map[string]any{"cgroups": map[string]any{"enabled": false}, "pod_dirs": map[string]any{"remove_orphaned": true}}},
		"network not privileged":          {"securityContext": map[string]any{"privileged": false}},
		"network without securityContext": {"securityContext": nil},
		"relative netns dir":              {"network": map[string]any{"netnsDir": "run/netns"}},
		"relative exec root":              {"network": map[string]any{"execRoot": "proc/1/root"}},
		"unknown network key":             {"network": map[string]any{"dataDir": "/var/lib/cni/networks"}},
		"network enabled not a boolean":   {"network": map[string]any{"enabled": "yes"}},
		"two mounts at one path":          {"network": map[string]any{"binDir": "/etc/cni/net.d"}},
		"netns dir is the containerd dir": {"network": map[string]any{"netnsDir": "/run/containerd/"}},
		"cache dir is the pod logs dir":   {"network": map[string]any{"cacheDir": "/var/log/pods"}},
		"netns dir in the cache dir":      {"network": map[string]any{"netnsDir": "/var/lib/cni/netns"}},
		"netns dir in the NRI dir":        {"network": map[string]any{"netnsDir": "/var/run/nri/netns/"}},
		"relative state dir":              {"stateDir": "var/lib/nri-housekeeper"},
		"state dir is the node's root":    {"stateDir": "/"},
		"state dir not a string":          {"stateDir": false},
		"state dir is the pod logs dir":   {"stateDir": "/var/log/pods/"},
		"state dir is the config dir":     {"stateDir": "/etc/nri-housekeeper"},
		"netns dir in the state dir":      {"network": map[string]any{"netnsDir": "/var/lib/nri-housekeeper/netns"}},
		"a chart section not a map":       {"config": map[string]any{"housekeeping": "30s"}},
	} {
		t.Run("refused: "+name, func(t *testing.T) {
			if out, err := render(t, vals); err == nil {
				t.Errorf("rendered:\n%s", out)
			} else {
				t.Log(err)
			}
		})
	}
}

// unstructuredOf decodes one YAML document, strictly, as an object and its JSON.
func unstructuredOf(t *testing.T, doc string) (*unstructured.Unstructured, []byte) {
	t.Helper()
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u, j
}

// TestSchemaCheckCatchesMistakes makes sure the schema checks are not
// vacuous: an unknown field, a wrong type and a misplaced field all fail.
func TestSchemaCheckCatchesMistakes(t *testing.T) {
	good, err := splitYAML(mustRender(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	var ds string
	for _, d := range good {
		if strings.Contains(string(d), "kind: DaemonSet") {
			ds = string(d)
		}
	}
	for name, edit := range map[string][2]string{
		"unknown field":   {"      hostPID: true", "      hostPid: true"},
		"wrong type":      {"      hostPID: true", "      hostPID: \"yes\""},
		"misplaced field": {"              readOnly: true\n              mountPropagation: HostToContainer", "              readOnly: true\n              propagation: HostToContainer"},
		"bad quantity":    {"cpu: 10m", "cpu: ten"}, // a string to the structural schema
	} {
		t.Run(name, func(t *testing.T) {
			bad := strings.Replace(ds, edit[0], edit[1], 1)
			if bad == ds {
				t.Fatalf("%q not found in the DaemonSet", edit[0])
			}
			u, j := unstructuredOf(t, bad)
			// Each check on its own catches these (quantities: the typed one).
			for check, err := range map[string]error{"typed": typedCheck(u, j), "structural": structuralCheck(u)} {
				if err == nil && name == "bad quantity" && check == "structural" {
					continue
				}
				if err == nil {
					t.Errorf("the %s check accepted it", check)
				} else {
					t.Logf("%s: %v", check, err)
				}
			}
		})
	}
}

// TestNotes: the notes printed after helm install render, with every value.
func TestNotes(t *testing.T) {
	for _, vals := range []map[string]any{nil, {"config": map[string]any{"dry_run": true}}} {
		rel, err := install(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		notes := rel.Info.Notes
		for _, want := range []string{"kube-system/nri-housekeeper", "/var/run/nri/nri.sock", "/nri-housekeeper report --config /etc/nri-housekeeper/config.toml", "port 9560 on each node"} {
			if !strings.Contains(notes, want) {
				t.Errorf("notes lack %q:\n%s", want, notes)
			}
		}
		if strings.Contains(notes, "<no value>") || (vals != nil) != strings.Contains(notes, "dry_run is on") {
			t.Errorf("notes:\n%s", notes)
		}
	}
}

// TestNotesNetwork: the notes say whether the network side is on, and with
// which CNI dirs.
func TestNotesNetwork(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{nil, "network.binDir\n(/opt/cni/bin) and network.netnsDir (/var/run/netns)"},
		{map[string]any{"network": map[string]any{"binDir": "/var/lib/rancher/k3s/data/cni"}}, "(/var/lib/rancher/k3s/data/cni)"},
		{map[string]any{"network": map[string]any{"enabled": false}}, "The network side is off"},
		{map[string]any{"config": map[string]any{"network": map[string]any{"enabled": false}}}, "The network side is off"},
	} {
		rel, err := install(t, tc.vals)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(rel.Info.Notes, tc.want) || strings.Contains(rel.Info.Notes, "<no value>") {
			t.Errorf("%v: notes lack %q:\n%s", tc.vals, tc.want, rel.Info.Notes)
		}
	}
}

// TestLint runs helm lint (strict: warnings fail too), with the default
// values and with the Prometheus Operator's objects on.
func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": {}, "monitoring": monitoringValues()} {
		t.Run(name, func(t *testing.T) {
			linter := lint.All(chartDir, vals, namespace, false)
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestManifestIsTheChartRendered: packaging/daemonset/daemonset.yaml is the
// render with the default values, so the two cannot drift.
func TestManifestIsTheChartRendered(t *testing.T) {
	want := manifestHeader + mustRender(t, nil)
	if *update {
		if err := os.WriteFile(manifestPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", manifestPath)
	}
	got, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("%s differs from the chart's render with default values; run: cd packaging/helm && go test -run Manifest -update\n%s",
			manifestPath, firstDiff(string(got), want))
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  file:  %q\n  chart: %q", i+1, x, y)
		}
	}
	return ""
}

// TestTheSystemdDriverCanReachSystemd: with kubelet's systemd cgroup driver
// (what driver = "auto" picks when kubepods.slice exists) the plugin stops a
// leaked pod's slice through systemd before it removes the cgroups, as
// kubelet does (podcgroups.stopUnit: /run/systemd/system, then D-Bus on
// /run/systemd/private). Without that mount it silently falls back to
// killing and rmdir, and the slice unit stays loaded in systemd.
func TestTheSystemdDriverCanReachSystemd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   bool
	}{
		{"the defaults (driver auto)", nil, true},
		{"driver systemd", map[string]any{"config": map[string]any{"cgroups": map[string]any{"driver": "systemd"}}}, true},
		{"driver cgroupfs", map[string]any{"config": map[string]any{"cgroups": map[string]any{"driver": "cgroupfs"}}}, false},
		{"cgroups disabled", map[string]any{"config": map[string]any{"cgroups": map[string]any{"enabled": false}}}, false},
		{"systemdRunDir empty", map[string]any{"systemdRunDir": ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := decode(t, mustRender(t, tc.values))
			mounts := hostMounts(t, o.ds)
			hm, ok := mounts["/run/systemd"]
			if ok != tc.want {
				t.Fatalf("/run/systemd mounted %v, want %v; mounts %v", ok, tc.want, keys(mounts))
			}
			if ok && (!hm.mount.ReadOnly || !under("/run/systemd/private", hm.mount.MountPath)) {
				t.Errorf("/run/systemd mounted at %s, readOnly %v: want read-only, with systemd's private socket inside", hm.mount.MountPath, hm.mount.ReadOnly)
			}
		})
	}
}

// TestAnEmptyConfigBlockRendersTheDefaults: a values file with "config:"
// and nothing under it (or only comments) makes config null; the chart
// renders and installs with the defaults rather than failing in a helper.
func TestAnEmptyConfigBlockRendersTheDefaults(t *testing.T) {
	out, err := render(t, map[string]any{"config": nil})
	if err != nil {
		t.Fatalf("config: null: %v", err)
	}
	checkDaemonSet(t, decode(t, out))
	if _, err := install(t, map[string]any{"config": nil}); err != nil {
		t.Fatalf("install with config: null: %v", err)
	}
}
