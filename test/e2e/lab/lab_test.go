//go:build e2e

package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

const (
	testDir    = "/tmp/nrihk-labtest"
	testDir2   = "/tmp/nrihk-labtest2"
	cgroupRoot = "/nrihk-labtest" // shared by both labs of this test
)

// TestLab exercises the harness: pods through CRI, kill -9 and restart of
// containerd, a dying pause process, a second lab side by side, and a down
// that leaves nothing behind.
func TestLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	t0 := time.Now()
	if err := lab.Install(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("install: %v", time.Since(t0).Round(time.Millisecond))

	pluginDir := t.TempDir() // overrides the default $LAB_DIR/nri/plugins
	t0 = time.Now()
	l, err := lab.Start(ctx, lab.Options{Dir: testDir, CgroupRoot: cgroupRoot, PluginPath: pluginDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start (down + up): %v", time.Since(t0).Round(time.Millisecond))
	downed := false
	t.Cleanup(func() {
		if !downed {
			_ = l.Down(context.Background())
		}
	})
	cfg, err := os.ReadFile(filepath.Join(l.Dir, "containerd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cfg, []byte(`plugin_path = "`+pluginDir+`"`)) ||
		!bytes.Contains(cfg, []byte(`plugin_config_path = "`+testDir+`/nri/conf.d"`)) {
		t.Fatalf("NRI plugin paths not in the config:\n%s", cfg)
	}

	rt := l.Runtime()
	pod := lab.Pod{Name: "labtest", Namespace: "e2e", UID: lab.NewUID()}
	sb, err := l.RunPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := l.RunContainer(ctx, pod, sb, "app", 0)
	if err != nil {
		t.Fatal(err)
	}
	wantPod(ctx, t, rt, sb, runtimeapi.PodSandboxState_SANDBOX_READY)
	wantCtr(ctx, t, rt, ctr, runtimeapi.ContainerState_CONTAINER_RUNNING)

	// Shaped like the kubelet's: labels, log path, cgroup.
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Status.Labels["io.kubernetes.pod.uid"]; got != pod.UID {
		t.Errorf("pod uid label = %q, want %q", got, pod.UID)
	}
	cst, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(l.PodLogDir(pod), "app/0.log"); cst.Status.LogPath != want {
		t.Errorf("log path = %q, want %q", cst.Status.LogPath, want)
	}
	if got := cst.Status.Labels["io.kubernetes.container.name"]; got != "app" {
		t.Errorf("container name label = %q", got)
	}
	cg := filepath.Join("/sys/fs/cgroup/memory", l.PodCgroupParent(pod), ctr)
	if _, err := os.Stat(cg); err != nil {
		t.Errorf("container cgroup: %v", err)
	}
	sbPID, err := l.SandboxPID(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	ctrPID, err := l.ContainerPID(ctx, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(readFile(fmt.Sprintf("/proc/%d/cgroup", ctrPID)), ctr) {
		t.Errorf("container pid %d is not in a cgroup named after %s", ctrPID, ctr)
	}

	t.Run("second lab side by side", func(t *testing.T) {
		l2, err := lab.Start(ctx, lab.Options{Dir: testDir2, CgroupRoot: cgroupRoot})
		if err != nil {
			t.Fatal(err)
		}
		pod2 := lab.Pod{Name: "other", Namespace: "e2e", UID: lab.NewUID()}
		sb2, err := l2.RunPod(ctx, pod2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l2.RunContainer(ctx, pod2, sb2, "app", 0); err != nil {
			t.Fatal(err)
		}
		if err := l2.Down(ctx); err != nil {
			t.Fatal(err)
		}
		// The first lab is untouched.
		wantPod(ctx, t, rt, sb, runtimeapi.PodSandboxState_SANDBOX_READY)
		wantCtr(ctx, t, rt, ctr, runtimeapi.ContainerState_CONTAINER_RUNNING)
		if !alive(sbPID) || !alive(ctrPID) {
			t.Fatal("down of the second lab killed processes of the first")
		}
		assertGone(t, testDir2)
	})

	// kill -9 containerd: shims and containers survive, CRI is gone.
	oldPID := l.ContainerdPID()
	if err := l.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	if !alive(sbPID) || !alive(ctrPID) {
		t.Fatal("pod processes died with containerd")
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	if _, err := rt.Version(short, &runtimeapi.VersionRequest{}); err == nil {
		t.Error("CRI answers after containerd was killed")
	}
	cancelShort()

	t0 = time.Now()
	readyAt, err := l.RestartContainerd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart: CRI ready after %v, RestartContainerd returned after %v",
		readyAt.Sub(t0).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if pid := l.ContainerdPID(); pid == oldPID || !alive(pid) {
		t.Fatalf("containerd pid %d after restart (was %d)", pid, oldPID)
	}
	wantPod(ctx, t, rt, sb, runtimeapi.PodSandboxState_SANDBOX_READY)
	wantCtr(ctx, t, rt, ctr, runtimeapi.ContainerState_CONTAINER_RUNNING)
	if pid, err := l.ContainerPID(ctx, ctr); err != nil || pid != ctrPID {
		t.Fatalf("container pid after restart = %d, %v; want %d", pid, err, ctrPID)
	}

	// The pause process dies: the sandbox turns NOTREADY.
	if err := syscall.Kill(sbPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	for podState(ctx, t, rt, sb) != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		if time.Since(t0) > 30*time.Second {
			t.Fatalf("sandbox still %v 30s after its pause process was killed", podState(ctx, t, rt, sb))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("sandbox NOTREADY %v after kill -9 of pause", time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	downed = true
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("down: %v", time.Since(t0).Round(time.Millisecond))
	assertGone(t, testDir)
	if alive(ctrPID) {
		t.Errorf("container process %d survived down", ctrPID)
	}
	for _, m := range []string{"memory", "cpu", "pids", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", m, cgroupRoot)); err == nil {
			t.Errorf("cgroup %s%s survived down", m, cgroupRoot)
		}
	}
}

func podState(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, id string) runtimeapi.PodSandboxState {
	t.Helper()
	r, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 1 {
		t.Fatalf("sandbox %s: %d in the CRI listing", id, len(r.Items))
	}
	return r.Items[0].State
}

func wantPod(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, id string, want runtimeapi.PodSandboxState) {
	t.Helper()
	if got := podState(ctx, t, rt, id); got != want {
		t.Fatalf("sandbox %s: %v, want %v", id, got, want)
	}
}

func wantCtr(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, id string, want runtimeapi.ContainerState) {
	t.Helper()
	r, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Containers) != 1 || r.Containers[0].State != want {
		t.Fatalf("container %s: %v, want one %v", id, r.Containers, want)
	}
}

// assertGone checks that no process mentions dir in its cmdline, nothing is
// mounted under it and it is removed.
func assertGone(t *testing.T, dir string) {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		if strings.Contains(strings.ReplaceAll(readFile(f), "\x00", " "), dir+"/") {
			t.Errorf("process left: %s: %q", f, readFile(f))
		}
	}
	for _, line := range strings.Split(readFile("/proc/self/mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			t.Errorf("mount left: %s", line)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists (%v)", dir, err)
	}
}

func alive(pid int) bool {
	s := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
