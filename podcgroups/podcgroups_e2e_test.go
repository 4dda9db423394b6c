//go:build e2e

// End-to-end tests on this machine's real cgroup hierarchies (every v1
// controller mount and the cgroup2 mount under /sys/fs/cgroup). They need
// root. Every cgroup they make is under a root of their own,
// nrihk-cgtest-<pid>-<time>, in every hierarchy; nothing else is touched,
// and everything made is removed in t.Cleanup.
//
//	go test -tags e2e -count=1 -v ./podcgroups/
package podcgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const realMountpoint = "/sys/fs/cgroup"

// lab is one test's own cgroup tree: top (a directory name made only by
// this test) in every hierarchy.
type lab struct {
	t           *testing.T
	hierarchies []Hierarchy
	top         string
}

func newLab(t *testing.T, top string) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	hs, err := findHierarchies(context.Background(), realMountpoint)
	if err != nil {
		t.Skipf("no cgroup hierarchies here: %v", err)
	}
	for _, h := range hs {
		v, err := cgroupVersion(h.Path, h.Path)
		if err != nil || v != h.Version {
			t.Fatalf("hierarchy %s: found as v%d, statfs says v%d (%v)", h.Path, h.Version, v, err)
		}
		if exists(filepath.Join(h.Path, top)) {
			t.Fatalf("%s already exists; refusing to use it", filepath.Join(h.Path, top))
		}
	}
	l := &lab{t: t, hierarchies: hs, top: top}
	t.Cleanup(l.cleanup)
	return l
}

// uniqueName is a name nobody else uses.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%x", prefix, os.Getpid(), time.Now().UnixNano()&0xffffffff)
}

// mkdir makes <h>/<rel> level by level. In the cpuset hierarchy a new
// cgroup has no CPUs or memory nodes, and no process can join it until it
// gets its parent's.
func (l *lab) mkdir(h Hierarchy, rel string) string {
	l.t.Helper()
	if !strings.HasPrefix(rel, l.top+"/") {
		l.t.Fatalf("%s is not under the lab's own %s", rel, l.top)
	}
	p := h.Path
	for _, c := range strings.Split(rel, "/") {
		parent := p
		p = filepath.Join(p, c)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			l.t.Fatal(err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if ok, _ := isFile(filepath.Join(p, f)); !ok {
				continue
			}
			if cur, _ := os.ReadFile(filepath.Join(p, f)); strings.TrimSpace(string(cur)) != "" {
				continue
			}
			val, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				l.t.Fatal(err)
			}
			if err := writeExisting(filepath.Join(p, f), strings.TrimSpace(string(val))); err != nil {
				l.t.Fatal(err)
			}
		}
	}
	return p
}

// pod makes <rel>/<container> in the given hierarchies (all when nil), puts
// proc in the container cgroup in each, and returns the pod dirs.
func (l *lab) pod(rel, container string, proc *sleeper, only func(Hierarchy) bool) []string {
	l.t.Helper()
	var paths []string
	for _, h := range l.hierarchies {
		if only != nil && !only(h) {
			continue
		}
		l.mkdir(h, rel+"/"+container)
		paths = append(paths, filepath.Join(h.Path, rel))
		if err := writeExisting(filepath.Join(h.Path, rel, container, procsFile), strconv.Itoa(proc.cmd.Process.Pid)); err != nil {
			l.t.Fatalf("moving PID %d into %s: %v", proc.cmd.Process.Pid, filepath.Join(h.Path, rel, container), err)
		}
	}
	return paths
}

// cleanup kills whatever is still in the lab's cgroups (only processes
// this test put there, and their children) and removes them bottom-up.
func (l *lab) cleanup() {
	ctx := context.Background()
	for _, h := range l.hierarchies {
		top := filepath.Join(h.Path, l.top)
		for attempt := 0; attempt < 20; attempt++ {
			dirs, err := cgroupDirs(ctx, top, nil)
			if err != nil {
				l.t.Errorf("cleanup: %v", err)
				break
			}
			if len(dirs) == 0 {
				break
			}
			for _, d := range dirs {
				pids, _ := readPids(d)
				for _, pid := range pids {
					if pid > 0 {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			for i := len(dirs) - 1; i >= 0; i-- {
				syscall.Rmdir(dirs[i])
			}
			time.Sleep(50 * time.Millisecond)
		}
		if exists(top) {
			l.t.Errorf("cleanup: %s could not be removed", top)
		}
	}
}

func discover(t *testing.T, root string) Listing {
	t.Helper()
	l := Discover(context.Background(), Options{Mountpoint: realMountpoint, Root: root, Driver: "auto"}, nil)
	if !l.Ready {
		t.Fatalf("not ready: %v", l.Err)
	}
	return l
}

func allExist(paths []string) bool {
	for _, p := range paths {
		if !exists(p) {
			return false
		}
	}
	return true
}

func noneExists(t *testing.T, paths []string) {
	t.Helper()
	for _, p := range paths {
		if exists(p) {
			t.Errorf("%s still exists", p)
		}
	}
}

func TestE2ECgroupfs(t *testing.T) {
	root := uniqueName("nrihk-cgtest")
	l := newLab(t, root)
	for _, h := range l.hierarchies {
		t.Logf("hierarchy %s (v%d)", h.Path, h.Version)
	}

	// Pod A (to destroy): a shell that, once inside the pod cgroup, forks
	// two sleeps, so Destroy meets processes that are not its children.
	flag := filepath.Join(t.TempDir(), "go")
	a := startSleeper(t, "sh", "-c", "while [ ! -e "+flag+" ]; do sleep 0.05; done; sleep 600 & sleep 600 & wait")
	pathsA := l.pod(root+"/besteffort/pod"+uidA, ctrID, a, nil)
	writeFile(t, flag, "")
	// Pod B (running, same shape) and pod C (guaranteed, volumes left).
	b := startSleeper(t)
	pathsB := l.pod(root+"/besteffort/pod"+uidB, ctrID, b, nil)
	c := startSleeper(t)
	pathsC := l.pod(root+"/pod"+uidStatic, ctrID, c, nil)

	var listing Listing
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		listing = discover(t, root)
		if listing.Pods[uidA].Procs == 3 || time.Now().After(deadline) {
			break
		}
	}
	if listing.Driver != DriverCgroupfs {
		t.Errorf("driver %s, want cgroupfs", listing.Driver)
	}
	if len(listing.Pods) != 3 || len(listing.Skipped) != 0 {
		t.Fatalf("pods %+v skipped %+v, want A, B, C and nothing skipped", listing.Pods, listing.Skipped)
	}
	podA := listing.Pods[uidA]
	if podA.QOS != QOSBestEffort || podA.Procs != 3 || strings.Join(podA.Paths, " ") != strings.Join(pathsA, " ") || len(podA.Containers) != 1 || podA.Containers[0] != ctrID {
		t.Fatalf("pod A %+v; want besteffort, 3 processes, paths %q, container %s", podA, pathsA, ctrID)
	}
	if listing.Pods[uidB].Procs != 1 || listing.Pods[uidStatic].QOS != QOSGuaranteed {
		t.Fatalf("pods B %+v, C %+v", listing.Pods[uidB], listing.Pods[uidStatic])
	}
	for _, p := range pathsA {
		if ok, _ := isFile(filepath.Join(p, "cgroup.kill")); ok {
			t.Logf("cgroup.kill available in %s", p)
		}
	}

	start := time.Now()
	if _, err := Destroy(context.Background(), podA); err != nil {
		t.Fatalf("Destroy A: %v", err)
	}
	t.Logf("Destroy A took %v", time.Since(start))
	if !a.killedWithin(5 * time.Second) {
		t.Errorf("pod A's process was not killed by SIGKILL (exit: %v)", a.err)
	}
	noneExists(t, pathsA)
	for _, h := range l.hierarchies {
		if !exists(filepath.Join(h.Path, root, "besteffort")) {
			t.Errorf("the besteffort QoS cgroup in %s was removed", h.Path)
		}
	}
	if !b.alive() || !allExist(pathsB) {
		t.Errorf("pod B was touched: alive %v, cgroups there %v", b.alive(), allExist(pathsB))
	}
	if pids, _ := readPids(filepath.Join(pathsB[0], ctrID)); len(pids) != 1 || pids[0] != b.cmd.Process.Pid {
		t.Errorf("pod B's process left its cgroup: %v", pids)
	}

	podC := listing.Pods[uidStatic]
	if err := ReduceCPU(context.Background(), podC); err != nil {
		t.Fatalf("ReduceCPU C: %v", err)
	}
	reduced := 0
	for _, p := range podC.Paths {
		if data, err := os.ReadFile(filepath.Join(p, "cpu.shares")); err == nil {
			if strings.TrimSpace(string(data)) != "2" {
				t.Errorf("%s/cpu.shares = %q, want 2", p, data)
			}
			reduced++
		}
		if data, err := os.ReadFile(filepath.Join(p, "cpu.weight")); err == nil {
			t.Logf("%s/cpu.weight = %s", p, strings.TrimSpace(string(data)))
			reduced++
		}
	}
	if reduced == 0 {
		t.Error("no cpu.shares or cpu.weight in any of pod C's cgroups")
	}
	if !c.alive() || !allExist(pathsC) {
		t.Errorf("pod C was destroyed: alive %v, cgroups there %v", c.alive(), allExist(pathsC))
	}

	after := discover(t, root)
	if _, ok := after.Pods[uidA]; ok || len(after.Pods) != 2 {
		t.Errorf("after Destroy A: pods %+v, want B and C", after.Pods)
	}
}

// TestE2EV1OnlySIGKILL: a pod cgroup without a cgroup2 part has no
// cgroup.kill; Destroy kills by SIGKILL over cgroup.procs.
func TestE2EV1OnlySIGKILL(t *testing.T) {
	root := uniqueName("nrihk-cgtest")
	l := newLab(t, root)
	d := startSleeper(t)
	paths := l.pod(root+"/burstable/pod"+uidA, ctrID, d, func(h Hierarchy) bool { return h.Version == V1 })
	if len(paths) == 0 {
		t.Skip("no cgroup v1 hierarchy here")
	}
	pod, ok := discover(t, root).Pods[uidA]
	if !ok || pod.Procs != 1 || len(pod.Paths) != len(paths) {
		t.Fatalf("pod %+v, want 1 process in %d hierarchies", pod, len(paths))
	}
	if _, err := Destroy(context.Background(), pod); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if !d.killedWithin(5 * time.Second) {
		t.Errorf("process not killed by SIGKILL (exit: %v)", d.err)
	}
	noneExists(t, paths)
}

// TestE2ESystemdFallback: the systemd driver's layout, made by mkdir (no
// systemd here), found with driver auto and destroyed through the file
// system after systemd is found unreachable.
func TestE2ESystemdFallback(t *testing.T) {
	root := uniqueName("nrihk-cgtest-sd")
	esc := strings.ReplaceAll(root, "-", "_") // kubelet's ToSystemd escape
	l := newLab(t, esc+".slice")
	scope := "cri-containerd-" + ctrID + ".scope"

	e := startSleeper(t)
	pathsE := l.pod(esc+".slice/"+esc+"-besteffort.slice/"+esc+"-besteffort-pod"+under(uidA)+".slice", scope, e, nil)
	g := startSleeper(t)
	pathsG := l.pod(esc+".slice/"+esc+"-pod"+under(uidB)+".slice", scope, g, nil)

	listing := discover(t, root)
	if listing.Driver != DriverSystemd {
		t.Fatalf("driver %s, want systemd", listing.Driver)
	}
	podE, ok := listing.Pods[uidA]
	if !ok || podE.QOS != QOSBestEffort || podE.Procs != 1 || strings.Join(podE.Paths, " ") != strings.Join(pathsE, " ") || len(podE.Containers) != 1 || podE.Containers[0] != scope {
		t.Fatalf("pod E %+v; want besteffort, 1 process, paths %q, container %s", podE, pathsE, scope)
	}
	if podG := listing.Pods[uidB]; podG.QOS != QOSGuaranteed || podG.Procs != 1 {
		t.Fatalf("pod G %+v", podG)
	}

	unit := filepath.Base(pathsE[0])
	if err := stopUnit(context.Background(), unit); err == nil {
		t.Logf("systemd is reachable here and stopped %s", unit)
	} else {
		t.Logf("systemd not used: %v", err)
	}
	d, err := Destroy(context.Background(), podE)
	if err != nil {
		t.Fatalf("Destroy E: %v", err)
	}
	if _, sdErr := os.Lstat(systemdRunDir); sdErr != nil && (d != Destroyed{}) {
		t.Errorf("systemd is not running here, yet Destroy says it asked it: %+v (there is no unit to leave)", d)
	}
	if !e.killedWithin(5 * time.Second) {
		t.Errorf("pod E's process not killed by SIGKILL (exit: %v)", e.err)
	}
	noneExists(t, pathsE)
	if !g.alive() || !allExist(pathsG) {
		t.Errorf("pod G was touched")
	}
}

// TestE2ERefusesBelowAnotherCgroup: a kubelet-shaped pod cgroup that is not
// directly under a hierarchy's mount (here nested in the lab's own tree) is
// refused on the real file system, and its process left alone.
func TestE2ERefusesBelowAnotherCgroup(t *testing.T) {
	top := uniqueName("nrihk-cgtest")
	l := newLab(t, top)
	p := startSleeper(t)
	paths := l.pod(top+"/nested/kubepods/besteffort/pod"+uidA, ctrID, p, nil)
	pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBestEffort, Driver: DriverCgroupfs, Root: "kubepods", Paths: paths})
	for name, act := range map[string]func(context.Context, PodCgroup) error{"Destroy": destroyErr(realHost()), "ReduceCPU": ReduceCPU} {
		err := act(context.Background(), pod)
		var refused *RefusedError
		if !errors.As(err, &refused) {
			t.Errorf("%s: %v, want a RefusedError", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if !p.alive() || !allExist(paths) {
		t.Error("the nested pod cgroup was acted on")
	}
	// The same pod with its lab root as the root is accepted.
	pod.Root = top + "/nested/kubepods"
	if _, err := Destroy(context.Background(), pod); err != nil {
		t.Fatalf("Destroy with the full root: %v", err)
	}
	if !p.killedWithin(5 * time.Second) {
		t.Error("process not killed")
	}
	noneExists(t, paths)
}

// TestE2EACgroupMadeAgainIsRefused: on the real cgroup file systems a pod
// cgroup removed and made again under the same path has another inode
// number (kernfs numbers a directory when it makes it), so a Destroy of
// the one inspected refuses the new one and leaves its process alone.
func TestE2EACgroupMadeAgainIsRefused(t *testing.T) {
	root := uniqueName("nrihk-cgtest")
	l := newLab(t, root)
	rel := root + "/besteffort/pod" + uidA
	for _, h := range l.hierarchies {
		l.mkdir(h, rel)
	}
	seen, ok := discover(t, root).Pods[uidA]
	if !ok || len(seen.Inodes) != len(l.hierarchies) {
		t.Fatalf("pod %+v, want it inspected in %d hierarchies", seen, len(l.hierarchies))
	}
	// kubelet's teardown and its setup of a pod of the same UID again.
	for _, p := range seen.Paths {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	p := startSleeper(t)
	paths := l.pod(rel, ctrID, p, nil)
	_, err := Destroy(context.Background(), seen)
	var refused *RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "made again since it was inspected") {
		t.Fatalf("Destroy of the cgroup as inspected before it was made again: %v, want a refusal", err)
	}
	t.Log(err)
	if !p.alive() || !allExist(paths) {
		t.Fatal("the cgroup made again was acted on")
	}
	// As inspected now, it is the one destroyed.
	if _, err := Destroy(context.Background(), discover(t, root).Pods[uidA]); err != nil {
		t.Fatalf("Destroy as inspected now: %v", err)
	}
	if !p.killedWithin(5 * time.Second) {
		t.Error("process not killed")
	}
	noneExists(t, paths)
}
