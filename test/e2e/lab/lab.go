// Package lab drives the project's real-containerd lab (lab.sh next to this
// file) for end-to-end tests: a containerd v2 with CRI and NRI, runc and a CNI
// network (bridge, host-local, portmap), in its own directory, plus a kubelet
// stand-in that creates pods through CRI.
//
// Everything needs root. Typical use:
//
//	if err := lab.Install(ctx); err != nil { ... }
//	l, err := lab.Start(ctx, lab.Options{Dir: "/tmp/nrihk-mytest"})
//	defer l.Down(context.Background())
//	pod := lab.Pod{Name: "p", Namespace: "default", UID: lab.NewUID()}
//	sb, err := l.RunPod(ctx, pod)
//	ctr, err := l.RunContainer(ctx, pod, sb, "app", 0)
//
// Pods are hostNetwork unless Pod.Network is set: then the sandbox gets its own
// netns on the lab's CNI network (see CNI, SandboxNetwork, SetCNIRange and
// WipeRuntimeState for leaking attachments on purpose).
package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Defaults of lab.sh.
const (
	DefaultDir        = "/tmp/nrihk-lab"
	DefaultTools      = "/tmp/nrihk-tools"
	DefaultCgroupRoot = "/kubepods"
)

// Lab is a running (or stopped) lab in Dir.
type Lab struct {
	Dir              string // LAB_DIR: containerd root, state, sockets, logs
	Tools            string // LAB_TOOLS: binaries and images
	CRISocket        string // containerd's gRPC (CRI) socket path
	NRISocket        string // NRI socket for external plugins
	PluginPath       string // pre-registered NRI plugins (NN-name executables)
	PluginConfigPath string // their configs
	LogRoot          string // kubelet pod log root (<LogRoot>/<ns>_<name>_<uid>)
	CgroupRoot       string // cgroupfs root of the pods, e.g. /kubepods
	ContainerdLog    string // containerd's stdout/stderr

	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
	opts Options  // the CNI knobs for lab.sh
	cni  CNIPaths // from lab.sh env after up
}

// Options for Start. Empty fields get lab.sh's defaults: Dir DefaultDir (or
// $LAB_DIR), PluginPath Dir/nri/plugins, PluginConfigPath Dir/nri/conf.d,
// CgroupRoot DefaultCgroupRoot. The tools dir is $LAB_TOOLS or DefaultTools.
// Labs that run side by side need different Dirs and should use different
// CgroupRoots.
type Options struct {
	Dir                          string
	PluginPath, PluginConfigPath string
	CgroupRoot                   string

	// The CNI network of pods with a Pod.Network. Empty: lab.sh's defaults,
	// derived from Dir (different for every Dir). CNIBridge is at most 15
	// characters; CNISubnet an IPv4 CIDR (the gateway, on the bridge, is its
	// first address).
	CNINetwork, CNIBridge, CNISubnet string
	// host-local's range: addresses of CNISubnet, inclusive; empty: the
	// subnet's bound. A few addresses let a test exhaust it (RunPodSandbox
	// then fails with "no IP addresses available"). SetCNIRange changes it.
	CNIRangeStart, CNIRangeEnd string
}

// Script is the path of lab.sh.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "lab.sh")
}

// Install runs lab.sh install: runc, containerd and the lab tools into
// $LAB_TOOLS. Idempotent and fast when everything is there; concurrent calls
// are serialized by lab.sh.
func Install(ctx context.Context) error {
	_, err := run(ctx, nil, "install")
	return err
}

// Start starts a fresh lab: whatever a previous run left in opts.Dir is torn
// down first, then lab.sh up runs. It returns once CRI is ready and the images
// are imported.
func Start(ctx context.Context, opts Options) (*Lab, error) {
	l := &Lab{
		Dir:              firstOf(opts.Dir, os.Getenv("LAB_DIR"), DefaultDir),
		Tools:            firstOf(os.Getenv("LAB_TOOLS"), DefaultTools),
		PluginPath:       opts.PluginPath,
		PluginConfigPath: opts.PluginConfigPath,
		CgroupRoot:       firstOf(opts.CgroupRoot, DefaultCgroupRoot),
		opts:             opts,
	}
	l.Dir = filepath.Clean(l.Dir)
	l.PluginPath = firstOf(l.PluginPath, filepath.Join(l.Dir, "nri/plugins"))
	l.PluginConfigPath = firstOf(l.PluginConfigPath, filepath.Join(l.Dir, "nri/conf.d"))
	l.CRISocket = filepath.Join(l.Dir, "containerd.sock")
	l.NRISocket = filepath.Join(l.Dir, "nri.sock")
	l.LogRoot = filepath.Join(l.Dir, "log/pods")
	l.ContainerdLog = filepath.Join(l.Dir, "containerd.log")

	if _, err := run(ctx, l.env(), "down"); err != nil {
		return nil, fmt.Errorf("cleaning up %s: %w", l.Dir, err)
	}
	if _, err := run(ctx, l.env(), "up"); err != nil {
		_, _ = run(context.WithoutCancel(ctx), l.env(), "down") // leave nothing running
		return nil, err
	}
	if err := l.loadCNI(ctx); err != nil {
		_, _ = run(context.WithoutCancel(ctx), l.env(), "down")
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+l.CRISocket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
		// containerd restarts are part of the tests: reconnect quickly.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
	if err != nil {
		return nil, err
	}
	l.conn, l.rt = conn, runtimeapi.NewRuntimeServiceClient(conn)
	return l, nil
}

// Down runs lab.sh down: removes all pods, stops containerd, shims and launched
// plugins, unmounts, removes the cgroups, the network's leftovers on the node
// (bridge, veths, its /var/lib/cni/results entries, portmap chains) and Dir.
// It fails if a process, mount or network leftover of the lab is left.
func (l *Lab) Down(ctx context.Context) error {
	if l.conn != nil {
		_ = l.conn.Close()
		l.conn = nil
	}
	_, err := run(ctx, l.env(), "down")
	return err
}

// Runtime is a CRI runtime client connected to CRISocket. It survives
// containerd restarts.
func (l *Lab) Runtime() runtimeapi.RuntimeServiceClient { return l.rt }

// ContainerdPID is the pid in the lab's pidfile (0 if there is none).
func (l *Lab) ContainerdPID() int {
	b, err := os.ReadFile(filepath.Join(l.Dir, "containerd.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// KillContainerd sends SIGKILL to containerd only (shims, containers and
// external plugins survive) and waits until the process is gone.
func (l *Lab) KillContainerd() error {
	pid := l.ContainerdPID()
	if pid <= 0 || !running(pid) {
		return fmt.Errorf("containerd of %s is not running", l.Dir)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill containerd %d: %w", pid, err)
	}
	for deadline := time.Now().Add(30 * time.Second); running(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd %d still there 30s after SIGKILL", pid)
		}
	}
	return nil
}

// RestartContainerd runs lab.sh restart: containerd starts again on the same
// state (after KillContainerd, or gracefully stopped first if it runs). It
// returns the moment CRI reported RuntimeReady, and also waits until Runtime()
// is connected again.
func (l *Lab) RestartContainerd(ctx context.Context) (time.Time, error) {
	if _, err := run(ctx, l.env(), "restart"); err != nil {
		return time.Time{}, err
	}
	b, err := os.ReadFile(filepath.Join(l.Dir, "ready-at"))
	if err != nil {
		return time.Time{}, err
	}
	us, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("ready-at: %w", err)
	}
	l.conn.ResetConnectBackoff()
	if _, err := l.rt.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true)); err != nil {
		return time.Time{}, fmt.Errorf("CRI client did not reconnect: %w", err)
	}
	return time.UnixMicro(us), nil
}

// Env is the lab's environment for tools and plugins: CONTAINER_RUNTIME_ENDPOINT,
// CONTAINERD_ADDRESS, CONTAINERD_NAMESPACE, NRI_SOCKET and the LAB_* variables
// of `lab.sh env`.
func (l *Lab) Env() []string {
	return append(l.env(),
		"LAB_BIN="+filepath.Join(l.Tools, "bin"),
		"CONTAINER_RUNTIME_ENDPOINT=unix://"+l.CRISocket,
		"CONTAINERD_ADDRESS="+l.CRISocket,
		"CONTAINERD_NAMESPACE=k8s.io",
		"LAB_CRI_SOCK="+l.CRISocket,
		"NRI_SOCKET="+l.NRISocket,
		"LAB_NRI_SOCK="+l.NRISocket,
		"LAB_LOG_ROOT="+l.LogRoot,
		"LAB_CONTAINERD_LOG="+l.ContainerdLog,
		"LAB_PAUSE_IMAGE="+PauseImage,
		"LAB_SLEEPER_IMAGE="+SleeperImage,
		"LAB_CNI_GATEWAY="+l.cni.Gateway,
		"LAB_CNI_CONF="+l.cni.ConfFile,
		"LAB_CNI_CONF_DIR="+l.cni.ConfDir,
		"LAB_CNI_BIN="+l.cni.BinDir,
		"LAB_CNI_CACHE_DIR="+l.cni.CacheDir,
		"LAB_CNI_DATA_DIR="+l.cni.DataDir,
		"LAB_NETNS_DIR="+l.cni.NetnsDir,
	)
}

// PodLogDir is the pod's log directory in this lab.
func (l *Lab) PodLogDir(p Pod) string { return PodLogDir(l.LogRoot, p) }

// PodCgroupParent is the pod's cgroup parent in this lab, e.g. /kubepods/besteffort/pod<uid>.
func (l *Lab) PodCgroupParent(p Pod) string { return PodCgroupParent(l.CgroupRoot, p) }

// env are the knobs lab.sh needs to find this lab. The CNI network is the
// one lab.sh reported after up, before that the options (empty: lab.sh's
// defaults, not the caller's environment). lab.sh itself prefers the network
// it recorded in Dir at the first up.
func (l *Lab) env() []string {
	c := l.cni
	if c.Network == "" {
		c = CNIPaths{Network: l.opts.CNINetwork, Bridge: l.opts.CNIBridge, Subnet: l.opts.CNISubnet,
			RangeStart: l.opts.CNIRangeStart, RangeEnd: l.opts.CNIRangeEnd}
	}
	return []string{
		"LAB_DIR=" + l.Dir,
		"LAB_TOOLS=" + l.Tools,
		"LAB_NRI_PLUGIN_PATH=" + l.PluginPath,
		"LAB_NRI_PLUGIN_CONFIG_PATH=" + l.PluginConfigPath,
		"LAB_CGROUP_ROOT=" + l.CgroupRoot,
		"LAB_CNI_NAME=" + c.Network,
		"LAB_CNI_BRIDGE=" + c.Bridge,
		"LAB_CNI_SUBNET=" + c.Subnet,
		"LAB_CNI_RANGE_START=" + c.RangeStart,
		"LAB_CNI_RANGE_END=" + c.RangeEnd,
	}
}

// run runs lab.sh with args and extra environment; the error carries the tail
// of its stderr.
func run(ctx context.Context, env []string, args ...string) (string, error) {
	return runScript(ctx, Script(), env, args...)
}

// runScript runs one of the lab's scripts with args and extra environment;
// the error carries the tail of its stderr.
func runScript(ctx context.Context, script string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Own process group, so that a cancelled ctx also stops go install & co.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(script), strings.Join(args, " "), err, tail(stderr.String(), 20))
	}
	return stdout.String(), nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// running reports whether pid exists and is not a zombie (nobody might reap a
// killed containerd).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
