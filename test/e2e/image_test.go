//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/pelletier/go-toml/v2"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// The plain DaemonSet manifest, rendered from the Helm chart (the chart's
// test keeps the two equal), and the image build.
var (
	daemonSetManifest = filepath.Join(moduleRoot(), "packaging/daemonset/daemonset.yaml")
	imageBuild        = filepath.Join(moduleRoot(), "packaging/image/build.sh")
)

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "../..")
}

// manifest is what the test takes from the DaemonSet manifest: the pod's
// privileges and the container with its mounts, and the ConfigMap's config.
type manifest struct {
	pod struct {
		HostPID     bool `yaml:"hostPID"`
		HostNetwork bool `yaml:"hostNetwork"`
		Containers  []struct {
			Name            string
			Image           string
			Command, Args   []string
			SecurityContext struct {
				Privileged             bool
				ReadOnlyRootFilesystem bool   `yaml:"readOnlyRootFilesystem"`
				RunAsUser              *int64 `yaml:"runAsUser"`
			} `yaml:"securityContext"`
			VolumeMounts []struct {
				Name             string
				MountPath        string `yaml:"mountPath"`
				ReadOnly         bool   `yaml:"readOnly"`
				MountPropagation string `yaml:"mountPropagation"`
			} `yaml:"volumeMounts"`
		}
		Volumes []struct {
			Name     string
			HostPath *struct{ Path, Type string } `yaml:"hostPath"`
			// ConfigMap volumes: the config dir.
			ConfigMap *struct{ Name string } `yaml:"configMap"`
		}
	}
	config string // config.toml of the ConfigMap
}

func readManifest(t *testing.T) manifest {
	t.Helper()
	b, err := os.ReadFile(daemonSetManifest)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc struct {
			Kind string
			Data map[string]string
			Spec struct {
				Template struct {
					Spec yaml.Node
				}
			}
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", daemonSetManifest, err)
		}
		switch doc.Kind {
		case "DaemonSet":
			if err := doc.Spec.Template.Spec.Decode(&m.pod); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			m.config = doc.Data["config.toml"]
		}
	}
	if len(m.pod.Containers) != 1 || m.config == "" {
		t.Fatalf("%s: want a DaemonSet with one container and a ConfigMap with config.toml", daemonSetManifest)
	}
	return m
}

// labConfig is the manifest's config.toml with the lab's timings, cgroup
// root and a free metrics address, and the lab's CNI dirs as the chart
// writes network.* values into it; every other path stays as the manifest
// has it: the container sees the lab's directories there.
func labConfig(t *testing.T, text, cgroupRoot, metricsAddr string, cni lab.CNIPaths) []byte {
	t.Helper()
	var cfg map[string]any
	if err := toml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("the manifest's config.toml: %v", err)
	}
	set := func(section, key string, v any) {
		s, _ := cfg[section].(map[string]any)
		if s == nil {
			s = map[string]any{}
			cfg[section] = s
		}
		s[key] = v
	}
	set("housekeeping", "period", testPeriod.String())
	set("housekeeping", "leak_grace", testGrace.String())
	set("housekeeping", "startup_delay", "0s")
	set("cgroups", "root", strings.TrimPrefix(cgroupRoot, "/"))
	// The lab's pods share the node's network: the manifest's ":9560" could
	// collide with another run.
	set("metrics", "address", metricsAddr)
	set("log", "level", "debug")
	// Its network leaks are made a moment before they are waited for.
	set("network", "min_age", testGrace.String())
	set("network", "cache_dir", cni.CacheDir)
	set("network", "bin_dir", cni.BinDir)
	set("network", "conf_dir", cni.ConfDir)
	set("network", "netns_dir", cni.NetnsDir)
	// The node's root, through a node process's /proc entry as the
	// manifest's /proc/1/root: on these machines PID 1 is a sandbox's agent
	// whose /proc/1/root even the node's root cannot open (EACCES), so the
	// test's own process, which runs in the node's root, stands in for it.
	if n, _ := cfg["network"].(map[string]any); n["exec_root"] != "/proc/1/root" {
		t.Fatalf("the manifest's network.exec_root is %v, want /proc/1/root", n["exec_root"])
	}
	set("network", "exec_root", fmt.Sprintf("/proc/%d/root", os.Getpid()))
	b, err := toml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pluginImage returns the image tarball to test: $NRIHK_IMAGE_TAR (built in
// CI by make image), or one built now by packaging/image/build.sh and named
// as the manifest's image.
func pluginImage(t *testing.T, ref string) string {
	t.Helper()
	if tarball := os.Getenv("NRIHK_IMAGE_TAR"); tarball != "" {
		return tarball
	}
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok || strings.Contains(tag, "/") {
		t.Fatalf("manifest image %q has no tag", ref)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	cmd := exec.Command(imageBuild, out)
	cmd.Env = append(os.Environ(), "IMAGE_REPO="+repo, "IMAGE_TAG="+tag, "IMAGE_LOCAL=localhost/nri-housekeeper:e2e")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", imageBuild, err, b)
	}
	st, _ := os.Stat(out)
	t.Logf("built the image with %s in %v (%d KiB)", imageBuild, time.Since(start).Round(time.Millisecond), st.Size()/1024)
	return out
}

var propagations = map[string]runtimeapi.MountPropagation{
	"":                runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
	"None":            runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
	"HostToContainer": runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER,
	"Bidirectional":   runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL,
}

// containerizedPlugin is the plugin running from its image in a lab pod.
type containerizedPlugin struct {
	pod       lab.Pod
	sandbox   string
	container string
	name      string
	lab       *lab.Lab
}

func (c *containerizedPlugin) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(c.lab.ContainerLog(c.pod, c.name, 0))
	if err != nil {
		t.Logf("container log: %v", err)
	}
	return string(b)
}

// logOnceItHas is the container log once it has every one of wants (each
// on a line of its own, or all on one line with oneLine), or as it is after
// 10 s: the runtime writes a line to the log after the plugin wrote it, so
// a line may trail the effect it reports (a test that read the log as soon
// as the namespace was gone missed the line saying so, about one run in
// twenty).
func (c *containerizedPlugin) logOnceItHas(t *testing.T, oneLine bool, wants ...string) string {
	t.Helper()
	var log string
	has := func() bool {
		log = c.log(t)
		if oneLine {
			return logLine(log, wants...) != ""
		}
		for _, w := range wants {
			if !strings.Contains(log, w) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !has() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	return log
}

// TestImageRunsAsTheDaemonSetAndReclaimsALeak is acceptance point 3: the
// image, built without a container engine, is imported into a lab containerd
// and run as a CRI container the way the DaemonSet manifest says (hostPID,
// privileged, read-only root, its command, every mount with its read-only
// flag and propagation, the ConfigMap's config with only timings, cgroup
// root and metrics address changed), each node path mapped onto the lab's.
// It connects to NRI through the mounted socket directory, reclaims the
// #107730 leak, reconnects after containerd restarts (a new socket in the
// same directory) and reclaims another one.
func TestImageRunsAsTheDaemonSetAndReclaimsALeak(t *testing.T) {
	ctx := context.Background()
	m := readManifest(t)
	spec := m.pod.Containers[0]
	if !m.pod.HostNetwork {
		t.Fatal("the lab has no CNI and runs hostNetwork pods only; the manifest's pod is not one")
	}

	// A lab of its own, so that the plugin sees no other test's pods.
	name := "nrihk-e2e"
	if v := os.Getenv("NRIHK_E2E_LAB"); v != "" {
		name = v
	}
	name += "-img"
	start := time.Now()
	l, err := lab.Start(ctx, lab.Options{Dir: "/tmp/" + name, CgroupRoot: "/" + name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	t.Logf("lab %s up in %v", l.Dir, time.Since(start).Round(time.Millisecond))
	// HostToContainer mounts need a shared (or slave) host mount, as / is on
	// a systemd node; the lab's Dir is both the NRI and the containerd
	// socket dir. lab.sh down unmounts it.
	if _, err := lab.ShareMount(l.Dir); err != nil {
		t.Fatal(err)
	}

	tarball := pluginImage(t, spec.Image)
	start = time.Now()
	names, err := l.ImportImage(ctx, tarball)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("imported %v in %v", names, time.Since(start).Round(time.Millisecond))
	image := spec.Image
	if !slices.Contains(names, image) {
		image = names[0] // $NRIHK_IMAGE_TAR with another tag
	}

	k := newKubelet(t, l)
	podsDir := filepath.Join(k.root, "pods")
	// The pods dir and the log links dir are mounted HostToContainer too
	// (the pod log root is in the lab's Dir, shared above).
	for _, dir := range []string{podsDir, k.linksDir} {
		undo, err := lab.ShareMount(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = undo() })
	}
	confDir := t.TempDir()
	metricsAddr := freePort(t)
	if err := os.WriteFile(filepath.Join(confDir, "config.toml"), labConfig(t, m.config, l.CgroupRoot, metricsAddr, l.CNI()), 0o644); err != nil {
		t.Fatal(err)
	}

	// The manifest's node paths, and where the lab has them.
	stateDir := t.TempDir()
	nodePaths := map[string]string{
		"/var/lib/nri-housekeeper": stateDir, // housekeeping.state_file
		"/var/run/nri":             l.Dir,    // nri.sock
		"/run/containerd":          l.Dir,    // containerd.sock
		"/var/lib/kubelet/pods":    podsDir,
		"/var/log/pods":            l.LogRoot,
		"/var/log/containers":      k.linksDir,
		"/sys/fs/cgroup":           "/sys/fs/cgroup",
		// systemdRunDir: this machine runs no systemd; the chart's
		// DirectoryOrCreate makes an empty dir on such a node.
		"/run/systemd": t.TempDir(),
		// The network side: libcni's cache dir is the node's own (containerd
		// cannot move it); the lab's plugins, conf dir and netns dir.
		"/var/lib/cni":   l.CNI().CacheDir,
		"/opt/cni/bin":   l.CNI().BinDir,
		"/etc/cni/net.d": l.CNI().ConfDir,
		"/var/run/netns": l.CNI().NetnsDir,
	}
	// The network side's dirs are mounted at the node's own paths, which
	// the chart does with network.*Dir set to the lab's (labConfig sets the
	// config the same way): the plugin dirs and the namespaces containerd
	// reports are node paths, and the plugins run in the node's root
	// (network.exec_root) must be the same files there.
	atNodePath := map[string]bool{"/var/lib/cni": true, "/opt/cni/bin": true, "/etc/cni/net.d": true, "/var/run/netns": true}
	var mounts []lab.Mount
	for _, vm := range spec.VolumeMounts {
		var host string
		for _, v := range m.pod.Volumes {
			switch {
			case v.Name != vm.Name:
			case v.HostPath != nil:
				if host = nodePaths[v.HostPath.Path]; host == "" {
					t.Fatalf("the manifest mounts %s, which the lab does not map", v.HostPath.Path)
				}
				if strings.HasSuffix(v.HostPath.Path, ".sock") || v.HostPath.Type == "Socket" {
					t.Fatalf("the manifest mounts the socket file %s", v.HostPath.Path)
				}
			case v.ConfigMap != nil:
				host = confDir
			}
		}
		prop, ok := propagations[vm.MountPropagation]
		if host == "" || !ok {
			t.Fatalf("volumeMount %s (%s, propagation %q): no hostPath or ConfigMap volume", vm.Name, vm.MountPath, vm.MountPropagation)
		}
		at := vm.MountPath
		if atNodePath[vm.MountPath] {
			at = host
		}
		mounts = append(mounts, lab.Mount{HostPath: host, ContainerPath: at, ReadOnly: vm.ReadOnly, Propagation: prop})
		t.Logf("mount %s -> %s (read-only %v, %s)", host, at, vm.ReadOnly, prop)
	}
	// host-local's dataDir is outside the cache dir in the lab: mounted
	// too, read-write, as the chart README asks of such a node.
	mounts = append(mounts, lab.Mount{HostPath: l.CNI().DataDir, ContainerPath: l.CNI().DataDir})

	// The plugin's own pod, admitted by the kubelet stand-in like any pod.
	opts := lab.PodOptions{HostPID: m.pod.HostPID, Privileged: spec.SecurityContext.Privileged}
	p := &containerizedPlugin{
		pod:  lab.Pod{Name: "nri-housekeeper-" + lab.NewUID()[:5], Namespace: "kube-system", UID: lab.NewUID()},
		name: spec.Name, lab: l,
	}
	k.admit(t, p.pod)
	if p.sandbox, err = l.RunPodWith(ctx, p.pod, opts); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	p.container, err = l.RunContainerSpec(ctx, p.pod, p.sandbox, opts, lab.ContainerSpec{
		Name: spec.Name, Image: image, Command: spec.Command, Args: spec.Args, Mounts: mounts,
		Privileged: spec.SecurityContext.Privileged, ReadOnlyRootfs: spec.SecurityContext.ReadOnlyRootFilesystem,
		RunAsUser: spec.SecurityContext.RunAsUser,
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("container log of the plugin:\n%s", p.log(t))
		}
		_ = l.StopPod(context.Background(), p.sandbox)
		_ = l.RemovePod(context.Background(), p.sandbox)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the containerized plugin is ready (/readyz 200: NRI connected, sources ready)", 20*time.Second, func() bool {
		code, _ := get("http://" + metricsAddr + "/readyz")
		return code == 200
	})
	t.Logf("plugin container ready %v after start", time.Since(start).Round(time.Millisecond))
	if code, body := get("http://" + metricsAddr + "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	for _, want := range []string{`msg="nri-housekeeper starting"`, "mode=external", "config=/etc/nri-housekeeper/config.toml"} {
		if !strings.Contains(p.log(t), want) {
			t.Errorf("the container log has no %q", want)
		}
	}
	if !sandboxReady(t, l, p.sandbox) {
		t.Fatal("the plugin's sandbox is not ready")
	}

	reclaimLeak(t, l, k, p, "deleted")
	killOrphanCgroup(t, l, p)
	reclaimHostPortAttachment(t, l, p)

	// What the chart's NOTES suggest: kubectl exec <pod> -- /nri-housekeeper
	// report --config ... (no shell in the image).
	cmd := append([]string{spec.Command[0], "report"}, spec.Args[1:]...)
	r, err := l.Runtime().ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: p.container, Cmd: cmd, Timeout: 30})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "nri-housekeeper report") || !strings.Contains(string(r.Stdout), "runtime: ") {
		t.Fatalf("exec %q: exit %d\n%s\n%s", cmd, r.ExitCode, r.Stdout, r.Stderr)
	}
	t.Logf("exec %q in the container:\n%s", cmd, r.Stdout)

	// containerd restarts: it removes and recreates nri.sock, in the same
	// directory. The plugin reconnects through the mounted directory (a
	// mounted socket file would still be the old, dead socket).
	before, _ := scrapeMetrics(t, metricsAddr)
	reconnects := before.value("nri_housekeeper_nri_reconnects_total", nil)
	registered := strings.Count(p.log(t), "registered with the runtime over NRI")
	if _, err := l.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitFor(t, "the plugin reconnects to the new NRI socket", 15*time.Second, func() bool {
		s, _ := scrapeMetrics(t, metricsAddr)
		code, _ := get("http://" + metricsAddr + "/readyz")
		return s.value("nri_housekeeper_nri_reconnects_total", nil) > reconnects && s.value("nri_housekeeper_nri_connected", nil) == 1 &&
			code == 200 && strings.Count(p.log(t), "registered with the runtime over NRI") > registered
	})
	t.Logf("plugin registered again over NRI %v after containerd was ready again", time.Since(restarted).Round(time.Millisecond))
	if !strings.Contains(p.log(t), "NRI connection lost, reconnecting") {
		t.Error("the container log does not show the lost NRI connection")
	}
	reclaimLeak(t, l, k, p, "deleted-after-restart")

	s, _ := scrapeMetrics(t, metricsAddr)
	if v := s.sum("nri_housekeeper_actions_total", map[string]string{"result": "error"}); v != 0 {
		t.Errorf("%v actions failed", v)
	}
	// The budgeted steps taken (the log dirs, the cgroup kill) are kept on
	// the node, through the manifest's mount, across the pod's restarts.
	if fi, err := os.Stat(filepath.Join(stateDir, "state.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the state file on the node: %v (mode %v); want it written, 0600", err, fi)
	}
	if strings.Contains(p.log(t), "cannot write the state file") {
		t.Error("the plugin in the container cannot write its state file")
	}
	if pid, err := l.ContainerPID(ctx, p.container); err == nil {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "VmRSS:") || strings.HasPrefix(line, "VmHWM:") {
					t.Logf("plugin process %d: %s", pid, strings.Join(strings.Fields(line), " "))
				}
			}
		}
	}
	if !runtimeHas(t, l, p.container) || !sandboxReady(t, l, p.sandbox) || !exists(l.PodLogDir(p.pod)) {
		t.Fatal("the plugin's own pod was touched")
	}
}

// reclaimLeak makes the #107730 leak of a pod with two containers and
// container log links, next to a live bystander, and waits until the
// containerized plugin has reclaimed it all: containers, sandbox, pod log
// dir, links and pod cgroup.
func reclaimLeak(t *testing.T, l *lab.Lab, k *kubelet, plugin *containerizedPlugin, name string) {
	t.Helper()
	p := newPod(t, name)
	k.admit(t, p)
	sb, ctrs := runPod(t, l, p, 2)
	// Links as kubelet makes them, pointing at /var/log/pods: the path the
	// plugin sees (from the host they dangle; in the container they do not).
	var links []string
	for i, id := range ctrs {
		c := fmt.Sprintf("app%d", i)
		link := filepath.Join(k.linksDir, fmt.Sprintf("%s_%s_%s-%s.log", p.Name, p.Namespace, c, id))
		if err := os.Symlink(path.Join("/var/log/pods", filepath.Base(l.PodLogDir(p)), c, "0.log"), link); err != nil {
			t.Fatal(err)
		}
		links = append(links, link)
	}
	bystander := newPod(t, name+"-bystander")
	k.admit(t, bystander)
	bsb, bctrs := runPod(t, l, bystander, 1)
	cgroups := podCgroups(t, l, p)
	if len(cgroups) == 0 {
		t.Fatalf("pod %s has no pod cgroup under %s", p.UID, l.CgroupRoot)
	}

	leakLike107730(t, l, k, p, sb, ctrs)
	took := waitGone(t, l, "the containerized plugin reclaims containers, sandbox and pod log dir", testGrace+testPeriod+10*time.Second,
		append([]string{sb}, ctrs...), []string{l.PodLogDir(p)})
	t.Logf("%s: #107730 leak reclaimed %v after the pod dir was removed (grace %v, period %v)", name, took.Round(time.Millisecond), testGrace, testPeriod)
	waitGone(t, l, "the dangling log links and the pod cgroups are removed", testGrace+2*testPeriod+10*time.Second, nil, append(links, cgroups...))
	if !runtimeHas(t, l, bsb) || !runtimeHas(t, l, bctrs[0]) || !sandboxReady(t, l, bsb) || !exists(l.PodLogDir(bystander)) {
		t.Fatal("the live bystander pod was touched")
	}
	wants := []string{
		"action=remove-container", "action=remove-sandbox", "action=remove-pod-log-dir", "action=remove-log-link", "action=remove-pod-cgroup",
		"rule=containers.pod-gone", "rule=sandboxes.pod-gone", "pod_uid=" + p.UID, "pod_name=" + name,
	}
	log := plugin.logOnceItHas(t, false, wants...)
	for _, want := range wants {
		if !strings.Contains(log, want) {
			t.Errorf("the plugin's container log has no %q", want)
		}
	}
}

// killOrphanCgroup: a pod cgroup of a pod that is gone, with no sandbox
// and a live process in it (in the v1 hierarchies where there are any). The
// containerized plugin must see the process by its node PID (hostPID), kill
// it and remove the cgroups (privileged, /sys/fs/cgroup mounted).
func killOrphanCgroup(t *testing.T, l *lab.Lab, plugin *containerizedPlugin) {
	t.Helper()
	uid := lab.NewUID()
	proc := exec.Command("sleep", "600")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = proc.Wait(); close(exited) }()
	t.Cleanup(func() { _ = proc.Process.Kill(); <-exited })
	rel := l.PodCgroupParent(lab.Pod{UID: uid})
	var paths []string
	for _, h := range v1First(t) {
		ctr := mkdirCgroup(t, h, strings.TrimPrefix(filepath.Join(rel, "0123456789abcdef"), "/"))
		paths = append(paths, filepath.Join(h, rel))
		if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(fmt.Sprint(proc.Process.Pid)), 0); err != nil {
			t.Fatalf("moving %d into %s: %v", proc.Process.Pid, ctr, err)
		}
	}
	t.Cleanup(func() {
		for _, p := range paths {
			_ = os.Remove(filepath.Join(p, "0123456789abcdef"))
			_ = os.Remove(p)
		}
	})
	took := waitFor(t, "the containerized plugin kills the orphan pod cgroup's process and removes its cgroups", testGrace+testPeriod+10*time.Second, func() bool {
		select {
		case <-exited:
		default:
			return false
		}
		for _, p := range paths {
			if exists(p) {
				return false
			}
		}
		return true
	})
	t.Logf("orphan pod cgroup with a live process (%d hierarchies) destroyed in %v", len(paths), took.Round(time.Millisecond))
	if log := plugin.logOnceItHas(t, true, "action=remove-pod-cgroup", "pod_uid="+uid); logLine(log, "action=remove-pod-cgroup", "pod_uid="+uid) == "" {
		t.Error("the destroy is not in the plugin's container log")
	}
}

// v1First returns the cgroup v1 hierarchies if the machine has any, else
// the cgroup2 mount. A process only in v1 cgroups can only be killed by its
// PID, which the plugin sees only with hostPID; cgroup2's cgroup.kill needs
// none.
func v1First(t *testing.T) []string {
	t.Helper()
	var v1, v2 []string
	for _, h := range hierarchies(t) {
		if exists(filepath.Join(h, "cgroup.controllers")) {
			v2 = append(v2, h)
		} else {
			v1 = append(v1, h)
		}
	}
	if len(v1) > 0 {
		return v1
	}
	return v2
}

// podCgroups are a lab pod's pod cgroup dirs, in every hierarchy.
func podCgroups(t *testing.T, l *lab.Lab, p lab.Pod) []string {
	t.Helper()
	var out []string
	for _, h := range hierarchies(t) {
		if dir := filepath.Join(h, l.PodCgroupParent(p)); exists(dir) {
			out = append(out, dir)
		}
	}
	return out
}

// reclaimHostPortAttachment: a CNI attachment with a host port whose
// sandbox containerd never recorded (containerd died right after the CNI
// ADD of a pod), made by running the lab network's ADD with libcni as
// containerd does, in a namespace made as containerd makes one. Its DEL
// needs iptables (portmap removes the pod's NAT rules), which the image
// does not have: the containerized plugin must run the plugins in the
// node's root (network.exec_root = /proc/1/root), and the rules, the
// reservation, the cache entry and the namespace must all go.
func reclaimHostPortAttachment(t *testing.T, l *lab.Lab, plugin *containerizedPlugin) {
	t.Helper()
	ctx := context.Background()
	cni := l.CNI()
	id := strings.ReplaceAll(lab.NewUID()+lab.NewUID(), "-", "")
	netns := filepath.Join(cni.NetnsDir, "cni-"+lab.NewUID())
	if err := os.MkdirAll(cni.NetnsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(netns, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unshare", "--net="+netns, "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare --net=%s: %v\n%s", netns, err, out)
	}
	list, err := libcni.ConfListFromFile(cni.ConfFile)
	if err != nil {
		t.Fatal(err)
	}
	const hostPort = 31999
	cc := libcni.NewCNIConfigWithCacheDir([]string{cni.BinDir}, cni.CacheDir, nil)
	rt := &libcni.RuntimeConf{
		ContainerID: id, NetNS: netns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "hostport-" + id[:6]},
			{"K8S_POD_INFRA_CONTAINER_ID", id}, {"K8S_POD_UID", lab.NewUID()}},
		CapabilityArgs: map[string]any{"portMappings": []map[string]any{{"hostPort": hostPort, "containerPort": 8080, "protocol": "tcp"}}},
	}
	t.Cleanup(func() {
		// Whatever the plugin left: nothing of it may outlive the test.
		_ = cc.DelNetworkList(context.Background(), list, rt)
		_ = unix.Unmount(netns, unix.MNT_DETACH)
		_ = os.Remove(netns)
	})
	if _, err := cc.AddNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("CNI ADD of %s: %v", id, err)
	}
	entry := cni.ResultFile(id, "eth0")
	if !exists(entry) || len(natRules(t, hostPort)) == 0 || len(reservedBy(t, l, id)) != 1 || !mounted(t, netns) {
		t.Fatalf("the ADD left no cache entry, NAT rule for port %d, reservation or namespace mount", hostPort)
	}
	took := waitFor(t, "the containerized plugin deletes the host-port attachment with the node's iptables, and removes its namespace", testGrace+2*testPeriod+20*time.Second, func() bool {
		return !exists(entry) && len(natRules(t, hostPort)) == 0 && len(reservedBy(t, l, id)) == 0 && !mounted(t, netns) && !exists(netns)
	})
	t.Logf("host-port attachment %s and its namespace reclaimed %v after the ADD", id[:12], took.Round(time.Millisecond))
	mustLog(t, plugin.logOnceItHas(t, true, `msg="deleted CNI attachment"`, "container_id="+id), `msg="deleted CNI attachment"`, "container_id="+id)
	log := plugin.logOnceItHas(t, true, `msg="removed network namespace"`, "path="+netns)
	mustLog(t, log, `msg="removed network namespace"`, "path="+netns)
	if strings.Contains(log, "without the node's iptables") {
		t.Error("the plugin says its CNI plugins run without the node's iptables")
	}
}
