package main

// What config check accepts, the plugin can use: each test here failed
// before its fix (an independent review's proof tests).

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/metrics"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
)

// TestConfigCheckAcceptsOnlyWhatTheRuntimeAccepts: a value that
// `config check` calls OK must not make `once` / `run` refuse to start.
// logs.pod_logs_dir and logs.container_logs_dir pass config.validate's
// absPath, but nodefs.NewRemover (serve.go newExecutor) refuses "/" and any
// path with "..": the plugin exits 2 at start, with no line or key.
func TestConfigCheckAcceptsOnlyWhatTheRuntimeAccepts(t *testing.T) {
	for _, tc := range []struct{ name, key, value string }{
		{"pod_logs_dir with ..", "pod_logs_dir", "/var/log/../log/pods"},
		{"pod_logs_dir is /", "pod_logs_dir", "/"},
		{"container_logs_dir with ..", "container_logs_dir", "/var/log/x/../containers"},
		{"container_logs_dir is /", "container_logs_dir", "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := "[logs]\n" + tc.key + " = \"" + tc.value + "\"\n"
			cfg, err := config.Parse([]byte(text), "test.toml")
			if err != nil {
				rejectedNaming(t, err, "test.toml:2: logs."+tc.key)
				return
			}
			if _, err := newExecutor(cfg, nil, nil, nil); err != nil {
				t.Errorf("config check says OK for logs.%s = %q, but the plugin refuses to start: %v", tc.key, tc.value, err)
			}
		})
	}
}

// TestHelpCommandPrintsTheFlags: 'nri-housekeeper help report' is
// advertised as the same help as 'report --help' ("also: nri-housekeeper
// COMMAND --help"), but it prints "Flags:" followed by nothing.
func TestHelpCommandPrintsTheFlags(t *testing.T) {
	for _, tc := range []struct {
		cmd   string
		flags []string
	}{
		// The flags' own descriptions, as 'report --help' prints them.
		{"report", []string{"--json", "print JSON instead of tables", "--leak-grace D", "--config FILE", "the TOML configuration FILE"}},
		{"once", []string{"--dry-run", "--leak-grace D", "--config FILE", "the TOML configuration FILE"}},
	} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"help", tc.cmd}, &stdout, &stderr); code != 0 {
			t.Fatalf("help %s: exit %d", tc.cmd, code)
		}
		for _, f := range tc.flags {
			if !strings.Contains(stdout.String(), f) {
				t.Errorf("'help %s' does not list flag %s; output ends:\n...%s", tc.cmd, f, tail(stdout.String(), 120))
			}
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// exitedRuntime is a CRI runtime with no sandbox and one exited container,
// whose status (log path) can be asked.
type exitedRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (exitedRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v2.4.2", RuntimeApiVersion: "v1"}, nil
}

func (exitedRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

func (exitedRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_EXITED}}}, nil
}

func (exitedRuntime) ContainerStatus(context.Context, *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: "c1", LogPath: "/var/log/pods/a/b/0.log"}}, nil
}

// TestEveryCRICallTheClientMakesHasItsOwnMethodLabel: README says
// cri_call_duration_seconds / cri_errors_total are by method for "CRI and
// containerd calls". The executor asks CRI ContainerStatus (one per
// container, cri.ContainerLogPaths) before removing a dead container's log
// files, but "ContainerStatus" is not in metrics' fixed set, so those calls
// (and their failures, which keep containers from being removed) are
// recorded as method="other".
func TestEveryCRICallTheClientMakesHasItsOwnMethodLabel(t *testing.T) {
	m := metrics.New(metrics.BuildInfo{Version: "test"})
	c, err := cri.Dial(serveRuntime(t, exitedRuntime{}), time.Second, cri.WithObserver(m.ObserveCRICall))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ContainerLogPaths(context.Background(), "uid-1"); err != nil {
		t.Fatal(err)
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "nri_housekeeper_cri_call_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "method" && s.GetHistogram().GetSampleCount() > 0 {
					methods[l.GetValue()] = s.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if methods["ContainerStatus"] == 0 {
		t.Errorf("a ContainerStatus call is not recorded as method=\"ContainerStatus\"; observed methods: %v", methods)
	}
}

// TestOnceThatCannotActDoesNotExitZero: 'once' whose pass was
// blocked (here: kubelet's pods dir cannot be read, so the oracle is not
// ready and no plan is made) executes nothing, prints "NOT ACTING" and
// exits 0, the code for "every step taken succeeded (or none was due)". A
// cron job or operator script cannot tell a pass that found nothing from
// one that could not look.
func TestOnceThatCannotActDoesNotExitZero(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"kubelet", "pods-logs", "containers"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// kubelet_root has no pods/ dir: kubelet_root is wrong.
	path := writeOnceConfig(t, dir, serveRuntime(t, exitedRuntime{}), "")
	var stdout, stderr bytes.Buffer
	code := run([]string{"once", "--config", path, "--leak-grace", "0s"}, &stdout, &stderr)
	if code == 0 {
		t.Errorf("once exited 0 although its pass could not act; stdout:\n%s", stdout.String())
	}
}

// writeOnceConfig writes dir/c.toml for a once against endpoint: the node's
// dirs under dir (kubelet, pods-logs, containers), no state file, only the
// CRI side on, housekeeping the rest of its section.
func writeOnceConfig(t *testing.T, dir, endpoint, housekeeping string) string {
	t.Helper()
	text := "[runtime]\nendpoint = \"" + endpoint + "\"\n" +
		"[housekeeping]\nstate_file = \"\"\n" + housekeeping +
		"[pods]\nkubelet_root = \"" + filepath.Join(dir, "kubelet") + "\"\n" +
		"[logs]\npod_logs_dir = \"" + filepath.Join(dir, "pods-logs") + "\"\ncontainer_logs_dir = \"" + filepath.Join(dir, "containers") + "\"\n" +
		"[cgroups]\nenabled = false\n[network]\nenabled = false\n[log]\ntarget = \"stderr\"\n"
	path := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestACgroupRootConfigCheckAcceptsIsOneTheAutoDriverCanFind:
// cgroups.root = "kubepods.slice" is rejected by config check with
// driver = "systemd" ("give the root's names without .slice"), but accepted
// with the default driver = "auto". On a systemd-driver node auto then
// cannot name the root for systemd and falls back to cgroupfs, which finds
// no pod cgroup at all: leaked pod cgroups are never reclaimed, and the only
// trace is an info line per QoS slice, "left alone: not a name kubelet
// writes".
func TestACgroupRootConfigCheckAcceptsIsOneTheAutoDriverCanFind(t *testing.T) {
	mnt := t.TempDir()
	if err := os.WriteFile(filepath.Join(mnt, "cgroup.controllers"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pod := filepath.Join(mnt, "kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-pod0b1e5e54_5b2b_4b0e_9f3a_1c2d3e4f5a6b.slice")
	if err := os.MkdirAll(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte("[cgroups]\nmountpoint = \""+mnt+"\"\nroot = \"kubepods.slice\"\n"), "test.toml")
	if err != nil {
		rejectedNaming(t, err, "test.toml:3: cgroups.root") // as with driver = "systemd"
		return
	}
	l := podcgroups.Discover(context.Background(), podcgroups.Options{Mountpoint: cfg.Cgroups.Mountpoint, Root: cfg.Cgroups.Root, Driver: cfg.Cgroups.Driver}, nil)
	if l.Ready && len(l.Pods) == 0 {
		t.Errorf("config check accepts cgroups.root = %q with driver = %q, but on a systemd node the pod cgroup under it is not found (driver picked: %s, skipped: %v)",
			cfg.Cgroups.Root, cfg.Cgroups.Driver, l.Driver, l.Skipped)
	}
}

// TestACgroupsMountpointConfigCheckAcceptsIsUsable: config check
// accepts cgroups.mountpoint = "/sys/fs/cgroup/" (absPath only), but
// podcgroups refuses a mountpoint that is not filepath.Clean'ed: every pass
// then says "pod cgroups are not cleaned this pass" once, and pod cgroups
// are never cleaned, with no metric saying so.
func TestACgroupsMountpointConfigCheckAcceptsIsUsable(t *testing.T) {
	mnt := t.TempDir()
	if err := os.WriteFile(filepath.Join(mnt, "cgroup.controllers"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte("[cgroups]\nmountpoint = \""+mnt+"/\"\n"), "test.toml")
	if err != nil {
		rejectedNaming(t, err, "test.toml:2: cgroups.mountpoint")
		return
	}
	l := podcgroups.Discover(context.Background(), podcgroups.Options{Mountpoint: cfg.Cgroups.Mountpoint, Root: cfg.Cgroups.Root, Driver: cfg.Cgroups.Driver}, nil)
	if !l.Ready {
		t.Errorf("config check accepts cgroups.mountpoint = %q, but every pass's cgroup listing fails: %v", cfg.Cgroups.Mountpoint, l.Err)
	}
}

// rejectedNaming fails unless err names where, the file, line and key.
func rejectedNaming(t *testing.T, err error, where string) {
	t.Helper()
	if !strings.Contains(err.Error(), where) {
		t.Errorf("rejected, but the error does not name %q: %v", where, err)
	}
}
