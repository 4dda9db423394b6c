package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	// The fake plugin's framework. go mod tidy does not look into testdata:
	// importing it here keeps its dependencies in go.mod.
	_ "github.com/containernetworking/cni/pkg/skel"
)

// pluginDir holds the fake CNI plugin (testdata/fakeplugin) under the names
// the tests' networks use as plugin types. TestMain builds it once.
var pluginDir string

// Plugin types of the tests' networks: one binary under two names.
const (
	fakeVeth    = "fake-veth"
	fakePortmap = "fake-portmap"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv(openat2BlockedEnv) != "" {
		return m.Run() // a child of TestWhereSeccompBlocksOpenat2NoNamespaceIsTakenForGone: it runs no plugin
	}
	dir, err := os.MkdirTemp("", "podnet-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildFakePlugin(dir); err != nil {
		fmt.Fprintln(os.Stderr, "building the fake CNI plugin:", err)
		return 1
	}
	pluginDir = dir
	return m.Run()
}

// buildFakePlugin builds testdata/fakeplugin into dir as fakeVeth and links
// it as fakePortmap.
func buildFakePlugin(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build it: %w", err)
	}
	// Static, so that it also runs chrooted into a root that has nothing
	// else (network.exec_root).
	build := exec.Command(goBin, "build", "-o", filepath.Join(dir, fakeVeth), "./testdata/fakeplugin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return os.Link(filepath.Join(dir, fakeVeth), filepath.Join(dir, fakePortmap))
}

func mkdirAll(t testing.TB, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(t testing.TB, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// wantRefused checks that err is a refusal naming path whose reason
// contains want, and that the executor takes it for a change since the
// plan decided (an abort, not a failure to back off from: see
// RefusedError.Changed) exactly when changed.
func wantRefused(t *testing.T, err error, path, want string, changed bool) {
	t.Helper()
	var r *RefusedError
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a RefusedError", err)
	}
	if r.Path != path || !strings.Contains(r.Reason, want) {
		t.Fatalf("err = %v, want a refusal of %s saying %q", err, path, want)
	}
	if got := changedSinceDecided(err); got != changed {
		t.Fatalf("err = %v: changed since decided %v, want %v", err, got, changed)
	}
	t.Logf("refused as wanted: %v", err)
}

// changedSinceDecided is how the executor tells an abort from a failure
// (executor.changedSinceDecided).
func changedSinceDecided(err error) bool {
	var c interface{ ChangedSinceDecided() bool }
	return errors.As(err, &c) && c.ChangedSinceDecided()
}

// node is a test node's directories.
type node struct {
	root     string
	confDir  string // CNI conf dir
	cacheDir string // libcni's cache dir
	dataDir  string // host-local's dataDir
	netnsDir string
	log      string // the fake plugin's log
}

func newNode(t testing.TB) node {
	root := t.TempDir()
	n := node{
		root:     root,
		confDir:  filepath.Join(root, "net.d"),
		cacheDir: filepath.Join(root, "cni"),
		dataDir:  filepath.Join(root, "ipam"),
		netnsDir: filepath.Join(root, "netns"),
		log:      filepath.Join(root, "plugin.log"),
	}
	mkdirAll(t, n.confDir)
	return n
}

// netConfList is a conflist of the fake plugins: an interface plugin with
// host-local IPAM, then a port mapper, both with the portMappings capability.
// extra is added to the list's top level.
func (n node) netConfList(name string, extra map[string]any) string {
	list := map[string]any{
		"cniVersion": "1.0.0",
		"name":       name,
		"plugins": []any{
			map[string]any{
				"type":         fakeVeth,
				"log":          n.log,
				"capabilities": map[string]bool{"portMappings": true},
				"ipam":         map[string]any{"type": "host-local", "dataDir": n.dataDir, "subnet": "10.22.0.0/16"},
			},
			map[string]any{
				"type":         fakePortmap,
				"log":          n.log,
				"capabilities": map[string]bool{"portMappings": true},
			},
		},
	}
	for k, v := range extra {
		list[k] = v
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// config writes the given conflists (name → content) into the conf dir and
// loads them as containerd would.
func (n node) config(t testing.TB, lists map[string]string) Config {
	t.Helper()
	for file, content := range lists {
		writeFile(t, filepath.Join(n.confDir, file), content)
	}
	cfg, err := FromConfDir(n.confDir, []string{pluginDir}, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// podArgs and podCaps are what containerd passes for a pod.
func podArgs(id string) [][2]string {
	return [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", "default"},
		{"K8S_POD_NAME", "web-" + id[:6]},
		{"K8S_POD_INFRA_CONTAINER_ID", id},
		{"K8S_POD_UID", "0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a3b"},
	}
}

func podCaps() map[string]any {
	return map[string]any{
		"portMappings":                      []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}},
		"io.kubernetes.cri.pod-annotations": map[string]string{"a": "b"},
	}
}

// add runs CNI ADD for id through network of cfg with libcni, as containerd
// does: libcni writes the cache entry in its own format.
func (n node) add(t testing.TB, cfg Config, network, id, netnsPath string) {
	t.Helper()
	net, ok := cfg.Network(network)
	if !ok {
		t.Fatalf("no network %q in the config", network)
	}
	c := libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, n.cacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netnsPath, IfName: net.IfName, Args: podArgs(id), CapabilityArgs: podCaps()}
	if _, err := c.AddNetworkList(context.Background(), net.List, rt); err != nil {
		t.Fatalf("CNI ADD of %s on %s: %v", id, network, err)
	}
}

// pluginCalls returns the fake plugins' log lines.
func (n node) pluginCalls(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(n.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// containerID makes a containerd-like sandbox ID: 64 hex digits.
func containerID(i int) string {
	return fmt.Sprintf("%064x", 0xabc000+i)
}
