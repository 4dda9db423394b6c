//go:build e2e

package e2e

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

const cgroupMount = "/sys/fs/cgroup"

// cgroupRoot is the lab's pod cgroup root without its slash: the plugin
// looks at the running lab pods' cgroups too, and must leave them alone.
func cgroupRoot() string { return strings.TrimPrefix(node.CgroupRoot, "/") }

// hierarchies are this machine's cgroup mounts (v1 controllers and cgroup2).
func hierarchies(t testing.TB) []string {
	t.Helper()
	var out []string
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(cgroupMount, e.Name())
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue // cpu -> cpu,cpuacct aliases
		}
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatal("no cgroup hierarchies under " + cgroupMount)
	}
	return out
}

// fakeOrphanCgroup makes the cgroup of a pod kubelet no longer has, with a
// live process in its container cgroup in every hierarchy, the way a leaked
// pod cgroup looks. It returns the process and the pod cgroup dirs.
func fakeOrphanCgroup(t testing.TB, uid string) (*exec.Cmd, []string) {
	t.Helper()
	proc := exec.Command("sleep", "600")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = proc.Wait(); close(exited) }()
	rel := filepath.Join(cgroupRoot(), "besteffort", "pod"+uid)
	var paths []string
	// One cleanup, in order: a cgroup with the process still in it cannot
	// be removed (two cleanups run last-registered first, and left every
	// cgroup behind for the benchmarks that run next on the same node).
	t.Cleanup(func() {
		_ = proc.Process.Kill()
		<-exited
		for _, p := range paths {
			_ = syscall.Rmdir(filepath.Join(p, "0123456789abcdef"))
			_ = syscall.Rmdir(p)
		}
	})
	for _, h := range hierarchies(t) {
		ctr := mkdirCgroup(t, h, filepath.Join(rel, "0123456789abcdef"))
		paths = append(paths, filepath.Join(h, rel))
		if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(strconv.Itoa(proc.Process.Pid)), 0); err != nil {
			t.Fatalf("moving %d into %s: %v", proc.Process.Pid, ctr, err)
		}
	}
	return proc, paths
}

// mkdirCgroup makes h/rel level by level; a new cpuset cgroup gets its
// parent's CPUs and memory nodes, or no process could join it.
func mkdirCgroup(t testing.TB, h, rel string) string {
	t.Helper()
	p := h
	for _, c := range strings.Split(rel, "/") {
		parent := p
		p = filepath.Join(p, c)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			t.Fatal(err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(p, f))
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue
			}
			val, _ := os.ReadFile(filepath.Join(parent, f))
			_ = os.WriteFile(filepath.Join(p, f), []byte(strings.TrimSpace(string(val))), 0)
		}
	}
	return p
}

func withCgroups(o *housekeeping.Options, _ *executor.Options) {
	o.Cgroups = &podcgroups.Options{Mountpoint: cgroupMount, Root: cgroupRoot(), Driver: "cgroupfs"}
}

func alive(cmd *exec.Cmd) bool {
	return syscall.Kill(cmd.Process.Pid, 0) == nil && !zombie(cmd.Process.Pid)
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	return strings.HasPrefix(s[strings.LastIndexByte(s, ')')+2:], "Z")
}

// TestOrphanPodCgroupIsKilledAndRemoved: a pod cgroup whose pod is gone and
// has no sandbox, with a live process, on the real v1 controllers and the
// cgroup2 mount → process killed, cgroups removed; a running lab pod's
// cgroups untouched.
func TestOrphanPodCgroupIsKilledAndRemoved(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	live := newPod(t, "cgroup-owner")
	k.admit(t, live)
	runPod(t, node, live, 1)
	livePaths := podCgroupPaths(t, live)
	if len(livePaths) == 0 {
		t.Fatal("the running lab pod has no pod cgroup to protect")
	}
	uid := lab.NewUID()
	proc, paths := fakeOrphanCgroup(t, uid)
	h := startHousekeeper(t, node, k, withCgroups)
	took := waitFor(t, "the orphan's process is killed and its cgroups are removed", testGrace+testPeriod+5*time.Second, func() bool {
		if alive(proc) {
			return false
		}
		for _, p := range paths {
			if exists(p) {
				return false
			}
		}
		return true
	})
	t.Logf("orphan pod cgroup (%d hierarchies) destroyed %v after the plugin started (grace %v, period %v)", len(paths), took.Round(time.Millisecond), testGrace, testPeriod)
	for _, p := range livePaths {
		if !exists(p) {
			t.Errorf("the running pod's cgroup %s was removed", p)
		}
	}
	if !strings.Contains(h.logs.String(), "action=remove-pod-cgroup") || !strings.Contains(h.logs.String(), "pod_uid="+uid) {
		t.Error("the destroy is not logged with its pod")
	}
}

// requireUntouched fails unless proc lives and every cgroup dir in paths
// is still there.
func requireUntouched(t *testing.T, proc *exec.Cmd, paths []string, whose string) {
	t.Helper()
	if !alive(proc) {
		t.Fatalf("the process of %s was killed", whose)
	}
	for _, p := range paths {
		if !exists(p) {
			t.Fatalf("pod cgroup %s of %s was removed", p, whose)
		}
	}
}

// podCgroupPaths finds a lab pod's cgroup dirs.
func podCgroupPaths(t *testing.T, p lab.Pod) []string {
	var out []string
	for _, h := range hierarchies(t) {
		dir := filepath.Join(h, node.PodCgroupParent(p))
		if exists(dir) {
			out = append(out, dir)
		}
	}
	return out
}

// tearDownKeepingDir runs a pod and tears it down the way kubelet does a
// deleted pod whose volumes it could not clean: sandbox stopped and removed
// while the plugin watches, pod dir left behind. prepare (may be nil) fills
// the pod dir before the sandbox runs, as kubelet sets up volumes: what a
// pod dir gains after its teardown is kubelet adding a pod of that UID again.
func tearDownKeepingDir(t *testing.T, h *housekeeper, k *kubelet, name string, prepare func(dir string)) lab.Pod {
	t.Helper()
	p := newPod(t, name)
	k.admit(t, p)
	if prepare != nil {
		prepare(k.podDir(p))
	}
	// With a container, as kubelet's pods have: a sandbox never seen in
	// containerd's store (listed, or a container made in it) is a start
	// rolled back, no teardown.
	sb, _ := runPod(t, node, p, 1)
	waitFor(t, "the plugin tracks pod "+name, 10*time.Second, func() bool { _, ok := h.state.Pod(p.UID); return ok })
	if err := node.StopPod(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	if err := node.RemovePod(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin sees pod "+name+" torn down", 10*time.Second, func() bool {
		v, ok := h.state.Pod(p.UID)
		return ok && v.Phase == podstate.PhaseRemoved
	})
	return p
}

func mkdirAll(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// cpuShares is the cpu.shares file among a pod cgroup's dirs.
func cpuShares(t *testing.T, paths []string) string {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(p, "cpu.shares")); err == nil {
			return filepath.Join(p, "cpu.shares")
		}
	}
	t.Fatal("no cpu.shares in any hierarchy")
	return ""
}

// TestOrphanPodCgroupWithVolumesLeftOnlyLosesCPU: a pod the plugin saw torn
// down left its pod dir with a volume dir (kubelet could not clean it): its
// cgroup gets the minimum CPU, kubelet's ReduceCPULimits, and is not
// destroyed. A pod kubelet has not started yet (pod dir, volume dir and pod
// cgroup, but never a sandbox: waiting for a volume attach) looks the same
// on disk and is not touched at all.
func TestOrphanPodCgroupWithVolumesLeftOnlyLosesCPU(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	h := startHousekeeper(t, node, k, withCgroups)
	pending := lab.NewUID()
	mkdirAll(t, filepath.Join(k.root, "pods", pending, "volumes", "kubernetes.io~csi", "pvc-1"))
	pendingProc, pendingPaths := fakeOrphanCgroup(t, pending)
	pendingShares := cpuShares(t, pendingPaths)
	before, err := os.ReadFile(pendingShares)
	if err != nil {
		t.Fatal(err)
	}

	torn := tearDownKeepingDir(t, h, k, "volume-left", func(dir string) {
		mkdirAll(t, filepath.Join(dir, "volumes", "kubernetes.io~empty-dir", "cache"))
	})
	proc, paths := fakeOrphanCgroup(t, torn.UID)
	shares := cpuShares(t, paths)
	// The pod dir must first be an orphan for leak_grace; the cgroup's
	// condition has held as long, so it is due with the dir, not a grace
	// later.
	took := waitFor(t, "cpu.shares drops to 2", testGrace+2*testPeriod+5*time.Second, func() bool {
		b, _ := os.ReadFile(shares)
		return strings.TrimSpace(string(b)) == "2"
	})
	t.Logf("the torn-down pod's cgroup got the minimum CPU %v after its teardown", took.Round(time.Millisecond))
	time.Sleep(2 * testPeriod)
	requireUntouched(t, proc, paths, "a pod whose volumes remain")
	if after, _ := os.ReadFile(pendingShares); string(after) != string(before) {
		t.Fatalf("the pending pod's cpu.shares changed from %q to %q", before, after)
	}
	if !alive(pendingProc) {
		t.Fatal("the pending pod's process was killed")
	}
	for _, p := range pendingPaths {
		if !exists(p) {
			t.Fatalf("the pending pod's cgroup %s was removed", p)
		}
	}
	if strings.Contains(h.logs.String(), "pod_uid="+pending) {
		t.Fatalf("an action names the pending pod:\n%s", h.logs.String())
	}
}

// TestOrphanedPodDirsAreRemovedWithKubeletsRules: with
// pod_dirs.remove_orphaned = true the clean dir of a pod the plugin saw torn
// down goes; one with a mount point inside stays, untouched; a symlink
// escaping the root is removed as a link, its target survives; the dir of a
// pod with a sandbox, and that of a pod never seen with one (kubelet may not
// have started it yet), are never touched.
func TestOrphanedPodDirsAreRemovedWithKubeletsRules(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	h := startHousekeeper(t, node, k, func(o *housekeeping.Options, _ *executor.Options) {
		o.Policy.RemoveOrphanedPodDirs = true
	})
	outside := t.TempDir()
	precious := filepath.Join(outside, "precious")
	if err := os.WriteFile(precious, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	podDir := func(uid string) string { return filepath.Join(k.root, "pods", uid) }
	pending := lab.NewUID()
	mkdirAll(t, filepath.Join(podDir(pending), "plugins", "kubernetes.io~csi"))

	live := newPod(t, "has-a-sandbox")
	k.admit(t, live)
	sb, err := node.RunPod(t.Context(), live)
	if err != nil {
		t.Fatal(err)
	}
	_ = node.StopPod(t.Context(), sb) // a NotReady sandbox is still a sandbox

	clean := tearDownKeepingDir(t, h, k, "clean", func(dir string) {
		mkdirAll(t, filepath.Join(dir, "volumes", "kubernetes.io~empty-dir", "cache"))
		mkdirAll(t, filepath.Join(dir, "containers", "app"))
		if err := os.WriteFile(filepath.Join(dir, "etc-hosts"), []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}).UID
	var mountPoint string
	mounted := tearDownKeepingDir(t, h, k, "mounted", func(dir string) {
		mountPoint = filepath.Join(dir, "volumes", "kubernetes.io~empty-dir", "data")
		mkdirAll(t, mountPoint)
		if err := unix.Mount(outside, mountPoint, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(mountPoint, unix.MNT_DETACH) })
	}).UID
	escaping := tearDownKeepingDir(t, h, k, "escaping", func(dir string) {
		mkdirAll(t, filepath.Join(dir, "plugins"))
		if err := os.Symlink(outside, filepath.Join(dir, "plugins", "escape")); err != nil {
			t.Fatal(err)
		}
	}).UID
	symlinked := tearDownKeepingDir(t, h, k, "symlinked", nil).UID
	// A pod dir that is itself a symlink escaping the root: refused, never followed.
	if err := os.RemoveAll(podDir(symlinked)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, podDir(symlinked)); err != nil {
		t.Fatal(err)
	}

	took := waitFor(t, "the clean orphan and the escaping one are removed", testGrace+2*testPeriod+5*time.Second, func() bool {
		return !exists(podDir(clean)) && !exists(podDir(escaping))
	})
	t.Logf("orphaned pod dirs removed %v after the last teardown", took.Round(time.Millisecond))
	time.Sleep(2 * testPeriod)
	if !exists(mountPoint) || !exists(filepath.Join(mountPoint, "precious")) {
		t.Fatal("the pod dir with a mount point inside was touched")
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "keep me" {
		t.Fatal("the symlink's target outside the root was touched")
	}
	if fi, err := os.Lstat(podDir(symlinked)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the pod dir that is a symlink escaping the root was touched")
	}
	if !exists(k.podDir(live)) {
		t.Fatal("the dir of a pod with a sandbox was removed")
	}
	if !exists(filepath.Join(podDir(pending), "plugins", "kubernetes.io~csi")) {
		t.Fatal("the dir of a pod never seen with a sandbox was touched")
	}
	if logLine(h.logs.String(), "orphaned pod dir that kubelet could not remove", "pod_uid="+mounted) == "" {
		t.Error("the refusal is not explained in the log")
	}
	// The pod dir is named by UID only; the plugin saw the pod torn down
	// and names it as an SRE looks for it.
	removal := logLine(h.logs.String(), "action=remove-pod-dir", "pod_uid="+clean)
	if !strings.Contains(removal, "pod_name=clean") || !strings.Contains(removal, "pod_namespace=e2e") {
		t.Errorf("the removal does not name the pod e2e/clean: %q", removal)
	}
}

// logLine is the first line of logs that has every one of parts ("" if none).
func logLine(logs string, parts ...string) string {
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return line
		}
	}
	return ""
}
