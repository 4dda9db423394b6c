package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A real kubelet beside the lab's containerd (kubelet.sh next to this file):
// standalone, without an API server, so every pod is a static pod from a
// manifest in its manifests dir, and a hostNetwork pod (AddPod writes nothing
// else).
//
//	l, _ := lab.Start(ctx, lab.Options{Dir: "/tmp/x", CgroupRoot: "/x"})
//	k, _ := lab.StartKubelet(ctx, l, lab.KubeletOptions{})
//	defer l.Down(context.Background())
//	defer k.Down(context.Background())
//	_ = k.AddPod(lab.StaticPod{Name: "web", Containers: []lab.StaticContainer{{Name: "app"}}})
//	p, _ := k.WaitPod(ctx, "web", "running", func(p *lab.KubeletPod) bool { return p.Running("app") })

// KubeletVersion is the kubelet kubelet.sh builds (KUBE_VERSION).
const KubeletVersion = "v1.37.2"

// DefaultNodeName is the kubelet's node name (KUBELET_NODE): static pods are
// named <name>-<node>.
const DefaultNodeName = "labnode"

// ContainerLogsDir is where kubelet links container logs; hard-coded in
// kubelet, shared by every kubelet of the node.
const ContainerLogsDir = "/var/log/containers"

// KubeletScript is the path of kubelet.sh.
func KubeletScript() string { return filepath.Join(filepath.Dir(Script()), "kubelet.sh") }

// InstallKubelet builds kubelet KubeletVersion into $LAB_TOOLS/bin/kubelet
// from the Go module proxy (kubelet.sh install): about 5 minutes and 2.5 GB of
// RAM on 2 cores the first time, instant once built. Concurrent calls build once.
func InstallKubelet(ctx context.Context) error {
	_, err := runKubeletScript(ctx, []string{"KUBE_VERSION=" + KubeletVersion}, "install")
	return err
}

// KubeletOptions for StartKubelet. Empty fields get kubelet.sh's defaults.
// kubelet's cgroupRoot is always the lab's CgroupRoot (pods go to
// <CgroupRoot>/kubepods/<qos>/pod<uid>), so that lab.sh down finds and
// removes what is left of them.
type KubeletOptions struct {
	Dir       string // KUBELET_DIR: config, manifests, root dir, pod logs, log; default <lab>/kubelet
	NodeName  string // default DefaultNodeName
	Verbosity int    // --v; default 2
}

// RealKubelet is a kubelet process StartKubelet started (it is this
// process's child, so a killed kubelet does not linger as a zombie).
type RealKubelet struct {
	Lab              *Lab
	Dir              string // KUBELET_DIR
	Config           string // its KubeletConfiguration
	Manifests        string // staticPodPath
	RootDir          string // --root-dir: pod dirs are RootDir/pods/<uid>
	PodLogsDir       string // podLogsDir: <PodLogsDir>/<ns>_<name>_<uid>/<ctr>/<n>.log
	ContainerLogsDir string // ContainerLogsDir (hard-coded in kubelet)
	CgroupRoot       string // cgroupRoot, the lab's, e.g. /nrihk-x
	PodsCgroup       string // <CgroupRoot>/kubepods: the plugin's cgroups.root (without the slash)
	NodeName         string
	LogFile          string // kubelet's stdout and stderr (klog)

	env []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartKubelet builds kubelet if needed, cleans up what an earlier run left
// in opts.Dir (kubelet.sh down), prepares the node (cgroup root, config; the
// sysctls kubelet changes are saved for Down) and starts kubelet. It returns
// once kubelet's sync loop runs.
func StartKubelet(ctx context.Context, l *Lab, opts KubeletOptions) (*RealKubelet, error) {
	if err := InstallKubelet(ctx); err != nil {
		return nil, err
	}
	k := &RealKubelet{
		Lab:              l,
		Dir:              filepath.Clean(firstOf(opts.Dir, filepath.Join(l.Dir, "kubelet"))),
		NodeName:         firstOf(opts.NodeName, DefaultNodeName),
		ContainerLogsDir: ContainerLogsDir,
		CgroupRoot:       l.CgroupRoot,
	}
	k.Config = filepath.Join(k.Dir, "config.yaml")
	k.Manifests = filepath.Join(k.Dir, "manifests")
	k.RootDir = filepath.Join(k.Dir, "root")
	k.PodLogsDir = filepath.Join(k.Dir, "log/pods")
	k.LogFile = filepath.Join(k.Dir, "kubelet.log")
	k.PodsCgroup = strings.TrimPrefix(filepath.Join(k.CgroupRoot, "kubepods"), "/")
	v := opts.Verbosity
	if v == 0 {
		v = 2
	}
	k.env = append(l.env(), "KUBE_VERSION="+KubeletVersion, "KUBELET_DIR="+k.Dir, "KUBELET_NODE="+k.NodeName, fmt.Sprintf("KUBELET_V=%d", v))
	if _, err := runKubeletScript(ctx, k.env, "down"); err != nil {
		return nil, fmt.Errorf("cleaning up %s: %w", k.Dir, err)
	}
	if _, err := runKubeletScript(ctx, k.env, "prepare"); err != nil {
		_, _ = runKubeletScript(context.WithoutCancel(ctx), k.env, "down")
		return nil, err
	}
	if err := k.Start(ctx); err != nil {
		_ = k.Down(context.WithoutCancel(ctx))
		return nil, err
	}
	return k, nil
}

// Start starts kubelet again after Kill or Stop, on the same root dir and
// manifests, and returns once its sync loop runs.
func (k *RealKubelet) Start(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd != nil {
		select {
		case <-k.exited: // it exited by itself
			k.cmd = nil
		default:
			return fmt.Errorf("kubelet of %s already runs (pid %d)", k.Dir, k.cmd.Process.Pid)
		}
	}
	started := k.syncLoops()
	logf, err := os.OpenFile(k.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(KubeletScript(), "exec") // execs kubelet: the child is kubelet itself
	cmd.Env = append(os.Environ(), k.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a ^C of the test does not reach it, Down does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kubelet: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	k.cmd, k.exited = cmd, exited
	for deadline := time.Now().Add(2 * time.Minute); k.syncLoops() <= started; time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			k.cmd = nil
			return fmt.Errorf("kubelet exited at start:\n%s", tail(k.logTail(), 20))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubelet's sync loop did not start within 2m:\n%s", tail(k.logTail(), 20))
		}
	}
	return nil
}

// syncLoops counts kubelet starts in its log.
func (k *RealKubelet) syncLoops() int {
	b, _ := os.ReadFile(k.LogFile)
	return bytes.Count(b, []byte("Starting kubelet main sync loop"))
}

func (k *RealKubelet) logTail() string {
	b, _ := os.ReadFile(k.LogFile)
	return string(b)
}

// PID is kubelet's pid, 0 when it does not run (also when it exited by itself).
func (k *RealKubelet) PID() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		return 0
	}
	select {
	case <-k.exited:
		return 0
	default:
		return k.cmd.Process.Pid
	}
}

// Running reports whether kubelet runs.
func (k *RealKubelet) Running() bool { return k.PID() != 0 }

// Kill sends SIGKILL to kubelet (its pods keep running) and waits until it is
// gone. It is not restarted: Start does that.
func (k *RealKubelet) Kill() error { return k.signal(syscall.SIGKILL, 0) }

// Stop sends SIGTERM to kubelet, SIGKILL after 10 s, and waits until it is gone.
func (k *RealKubelet) Stop() error { return k.signal(syscall.SIGTERM, 10*time.Second) }

// Restart stops kubelet and starts it again.
func (k *RealKubelet) Restart(ctx context.Context) error {
	if err := k.Stop(); err != nil {
		return err
	}
	return k.Start(ctx)
}

func (k *RealKubelet) signal(sig syscall.Signal, grace time.Duration) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		return fmt.Errorf("kubelet of %s does not run", k.Dir)
	}
	_ = k.cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-k.exited:
		case <-time.After(grace):
			_ = k.cmd.Process.Kill()
		}
	}
	select {
	case <-k.exited:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("kubelet %d still there 30s after %v", k.cmd.Process.Pid, sig)
	}
	k.cmd = nil
	return nil
}

// Logs is kubelet's log (all its runs, each after a "=== kubelet.sh exec" line).
func (k *RealKubelet) Logs() (string, error) {
	b, err := os.ReadFile(k.LogFile)
	return string(b), err
}

// Down stops kubelet (if it runs) and removes what it made outside the lab's containerd:
// its dir (root dir unmounted first, pod logs), the /var/log/containers links
// to its pod logs and its (empty) QoS and pod cgroups; the last kubelet lab of
// the node also restores the sysctls kubelet changed and removes what it made
// in /var/lib/kubelet and /var/log/containers. Its pods stay in containerd
// until Lab.Down, which also removes their cgroups.
func (k *RealKubelet) Down(ctx context.Context) error {
	var errs []error
	k.mu.Lock()
	started := k.cmd != nil
	k.mu.Unlock()
	if started {
		if err := k.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := runKubeletScript(ctx, k.env, "down"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StaticPod is a pod manifest for the kubelet's static pod dir: hostNetwork,
// every container runs localhost/sleeper:lab.
type StaticPod struct {
	Name      string // the pod is <Name>-<node> in kubelet and the runtime
	Namespace string // default "default"
	// RestartPolicy: "Always" (default), "OnFailure" or "Never".
	RestartPolicy string
	// TerminationGracePeriodSeconds; nil: kubelet's default (30).
	TerminationGracePeriodSeconds *int64
	InitContainers                []StaticContainer
	Containers                    []StaticContainer
	// Labels change the manifest, and with it the pod's UID (a hash of the
	// manifest, node name and file).
	Labels map[string]string
}

// StaticContainer is a sleeper container: it runs until stopped, or exits by
// itself after ExitAfter with ExitCode.
type StaticContainer struct {
	Name      string
	ExitAfter time.Duration
	ExitCode  int
	// PreStopSleep is a lifecycle.preStop sleep action (run by kubelet, whole seconds).
	PreStopSleep time.Duration
	// Requests and Limits ("cpu", "memory" to quantities) make the pod's
	// QoS class: none on any container BestEffort, limits equal to requests
	// for both on every container Guaranteed, else Burstable.
	Requests, Limits map[string]string
}

// manifest types: the subset of a v1 Pod the lab writes, as JSON (a YAML
// subset kubelet's file source reads).
type (
	manifest struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Metadata   manifestMetadata `json:"metadata"`
		Spec       manifestSpec     `json:"spec"`
	}
	manifestMetadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace,omitempty"`
		Labels    map[string]string `json:"labels,omitempty"`
	}
	manifestSpec struct {
		HostNetwork                   bool                `json:"hostNetwork"`
		RestartPolicy                 string              `json:"restartPolicy,omitempty"`
		TerminationGracePeriodSeconds *int64              `json:"terminationGracePeriodSeconds,omitempty"`
		InitContainers                []manifestContainer `json:"initContainers,omitempty"`
		Containers                    []manifestContainer `json:"containers"`
	}
	manifestContainer struct {
		Name            string     `json:"name"`
		Image           string     `json:"image"`
		ImagePullPolicy string     `json:"imagePullPolicy"`
		Command         []string   `json:"command"`
		Lifecycle       *lifecycle `json:"lifecycle,omitempty"`
		Resources       *resources `json:"resources,omitempty"`
	}
	resources struct {
		Requests map[string]string `json:"requests,omitempty"`
		Limits   map[string]string `json:"limits,omitempty"`
	}
	lifecycle struct {
		PreStop struct {
			Sleep struct {
				Seconds int64 `json:"seconds"`
			} `json:"sleep"`
		} `json:"preStop"`
	}
)

func (c StaticContainer) manifest() manifestContainer {
	cmd := []string{"/sleeper", "-name", c.Name, "-interval", "5s"}
	if c.ExitAfter > 0 {
		cmd = append(cmd, "-exit-after", c.ExitAfter.String(), "-exit-code", fmt.Sprint(c.ExitCode))
	}
	m := manifestContainer{Name: c.Name, Image: SleeperImage, ImagePullPolicy: "Never", Command: cmd}
	if c.PreStopSleep > 0 {
		m.Lifecycle = &lifecycle{}
		m.Lifecycle.PreStop.Sleep.Seconds = int64(c.PreStopSleep / time.Second)
	}
	if len(c.Requests) > 0 || len(c.Limits) > 0 {
		m.Resources = &resources{Requests: c.Requests, Limits: c.Limits}
	}
	return m
}

// ManifestPath is the static pod manifest file of the pod named name.
func (k *RealKubelet) ManifestPath(name string) string {
	return filepath.Join(k.Manifests, name+".json")
}

// AddPod writes the pod's manifest (atomically: kubelet never reads half a
// file); kubelet picks it up within a second (fileCheckFrequency) or at once
// (inotify).
func (k *RealKubelet) AddPod(p StaticPod) error {
	m := manifest{APIVersion: "v1", Kind: "Pod",
		Metadata: manifestMetadata{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels},
		Spec: manifestSpec{HostNetwork: true, RestartPolicy: p.RestartPolicy,
			TerminationGracePeriodSeconds: p.TerminationGracePeriodSeconds}}
	for _, c := range p.InitContainers {
		m.Spec.InitContainers = append(m.Spec.InitContainers, c.manifest())
	}
	for _, c := range p.Containers {
		m.Spec.Containers = append(m.Spec.Containers, c.manifest())
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(k.Manifests, "."+p.Name+".tmp") // hidden: kubelet skips dot files
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, k.ManifestPath(p.Name))
}

// RemovePod removes the pod's manifest: kubelet deletes the pod (kills it,
// then removes its pod dir, containers, sandbox and logs with its own rules).
func (k *RealKubelet) RemovePod(name string) error {
	return os.Remove(k.ManifestPath(name))
}

// KubeletPod is one pod (one UID) of this kubelet as the runtime lists it.
type KubeletPod struct {
	Name, Namespace, UID string
	Sandboxes            []*runtimeapi.PodSandbox // oldest first
	Containers           []*runtimeapi.Container  // oldest first
}

// Ready reports whether the pod's newest sandbox is Ready.
func (p *KubeletPod) Ready() bool {
	return p != nil && len(p.Sandboxes) > 0 &&
		p.Sandboxes[len(p.Sandboxes)-1].State == runtimeapi.PodSandboxState_SANDBOX_READY
}

// Container is the newest instance of the named container, nil if none.
func (p *KubeletPod) Container(name string) *runtimeapi.Container {
	if p == nil {
		return nil
	}
	var newest *runtimeapi.Container
	for _, c := range p.Containers {
		if c.Metadata.Name == name && (newest == nil || c.Metadata.Attempt >= newest.Metadata.Attempt) {
			newest = c
		}
	}
	return newest
}

// Running reports whether the newest instance of the named container runs.
func (p *KubeletPod) Running(name string) bool {
	c := p.Container(name)
	return c != nil && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING
}

// Exited reports whether the newest instance of the named container exited.
func (p *KubeletPod) Exited(name string) bool {
	c := p.Container(name)
	return c != nil && c.State == runtimeapi.ContainerState_CONTAINER_EXITED
}

// Attempt is the newest instance's attempt (kubelet's restart count), -1 if none.
func (p *KubeletPod) Attempt(name string) int {
	if c := p.Container(name); c != nil {
		return int(c.Metadata.Attempt)
	}
	return -1
}

// FullName is kubelet's name of the static pod name: <name>-<node>.
func (k *RealKubelet) FullName(name string) string { return name + "-" + k.NodeName }

// Pods lists this kubelet's pods (sandboxes of static pods from its node),
// by UID, with their containers.
func (k *RealKubelet) Pods(ctx context.Context) (map[string]*KubeletPod, error) {
	rt := k.Lab.Runtime()
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	ctrs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListContainers: %w", err)
	}
	pods := map[string]*KubeletPod{}
	for _, s := range sbs.Items {
		if s.Annotations["kubernetes.io/config.source"] != "file" || !strings.HasSuffix(s.Metadata.Name, "-"+k.NodeName) {
			continue
		}
		p := pods[s.Metadata.Uid]
		if p == nil {
			p = &KubeletPod{Name: s.Metadata.Name, Namespace: s.Metadata.Namespace, UID: s.Metadata.Uid}
			pods[p.UID] = p
		}
		p.Sandboxes = append(p.Sandboxes, s)
	}
	for _, c := range ctrs.Containers {
		if p := pods[c.Labels["io.kubernetes.pod.uid"]]; p != nil {
			p.Containers = append(p.Containers, c)
		}
	}
	for _, p := range pods {
		sort.Slice(p.Sandboxes, func(i, j int) bool { return p.Sandboxes[i].CreatedAt < p.Sandboxes[j].CreatedAt })
		sort.Slice(p.Containers, func(i, j int) bool { return p.Containers[i].CreatedAt < p.Containers[j].CreatedAt })
	}
	return pods, nil
}

// PodsNamed are the pods of the static pod name (several UIDs when its
// manifest changed), newest sandbox last.
func (k *RealKubelet) PodsNamed(ctx context.Context, name string) ([]*KubeletPod, error) {
	all, err := k.Pods(ctx)
	if err != nil {
		return nil, err
	}
	var out []*KubeletPod
	for _, p := range all {
		if p.Name == k.FullName(name) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Sandboxes[len(out[i].Sandboxes)-1].CreatedAt < out[j].Sandboxes[len(out[j].Sandboxes)-1].CreatedAt
	})
	return out, nil
}

// WaitPod polls the runtime (every 100 ms) until cond holds for the newest
// pod named name (nil: there is none) and returns that pod.
func (k *RealKubelet) WaitPod(ctx context.Context, name, what string, cond func(*KubeletPod) bool) (*KubeletPod, error) {
	var last *KubeletPod
	for {
		pods, err := k.PodsNamed(ctx, name)
		if err == nil {
			last = nil
			if len(pods) > 0 {
				last = pods[len(pods)-1]
			}
			if cond(last) {
				return last, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("pod %s: %s: %w (last error: %v)", k.FullName(name), what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PodDir is kubelet's pod dir <root>/pods/<uid>.
func (k *RealKubelet) PodDir(uid string) string { return filepath.Join(k.RootDir, "pods", uid) }

// PodLogDir is kubelet's pod log dir <podLogsDir>/<ns>_<name>_<uid>.
func (k *RealKubelet) PodLogDir(p *KubeletPod) string {
	return filepath.Join(k.PodLogsDir, p.Namespace+"_"+p.Name+"_"+p.UID)
}

// ContainerLogLinks are the /var/log/containers links pointing into this
// kubelet's pod logs dir.
func (k *RealKubelet) ContainerLogLinks() ([]string, error) {
	entries, err := os.ReadDir(k.ContainerLogsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		path := filepath.Join(k.ContainerLogsDir, e.Name())
		if target, err := os.Readlink(path); err == nil && strings.HasPrefix(target, k.PodLogsDir+"/") {
			out = append(out, path)
		}
	}
	return out, nil
}

// PodCgroups are the pod's cgroup dirs (<cgroup mount>/<hierarchy><CgroupRoot>/kubepods[/<qos>]/pod<uid>)
// in every hierarchy where they exist.
func (k *RealKubelet) PodCgroups(uid string) []string {
	var out []string
	for _, pattern := range []string{"/sys/fs/cgroup/*", "/sys/fs/cgroup"} {
		for _, qos := range []string{"", "besteffort", "burstable"} {
			m, _ := filepath.Glob(filepath.Join(pattern, k.CgroupRoot, "kubepods", qos, "pod"+uid))
			out = append(out, m...)
		}
	}
	sort.Strings(out)
	return out
}

// runKubeletScript runs kubelet.sh with args and extra environment; the
// error carries the tail of its stderr.
func runKubeletScript(ctx context.Context, env []string, args ...string) (string, error) {
	return runScript(ctx, KubeletScript(), env, args...)
}
