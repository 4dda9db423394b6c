package podcgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeHost acts on plain directories: every path is "on a cgroup file
// system", v2 under a hierarchy named unified, v1 elsewhere. It records the
// systemd units it is asked to stop and fails like an unreachable systemd.
type fakeHost struct {
	units []string
}

func (f *fakeHost) host() host {
	return host{
		cgroupVersion: func(hierarchy, path string) (Version, error) {
			if strings.Contains(path, "/unified/") {
				return V2, nil
			}
			return V1, nil
		},
		stopUnit: func(ctx context.Context, unit string) error {
			f.units = append(f.units, unit)
			return fmt.Errorf("%w (fake)", errNoSystemd)
		},
		selfPid: os.Getpid(),
	}
}

// dirs makes empty directories (a fake cgroup with no control files, so
// rmdir can remove it as it would a real one).
func dirs(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// inspected is pod as an inspection leaves it: with the inode number of
// each of its paths (0 for one that does not exist, which Destroy skips),
// the number of processes in their trees, and the names of their child
// cgroups as Containers, unless given.
func inspected(t *testing.T, pod PodCgroup) PodCgroup {
	t.Helper()
	pod.Inodes = nil
	pids := map[int]bool{}
	var children []string
	for _, p := range pod.Paths {
		var ino uint64
		if fi, err := os.Lstat(p); err == nil {
			if ino, err = inode(fi); err != nil {
				t.Fatal(err)
			}
		}
		pod.Inodes = append(pod.Inodes, ino)
		tree, _ := cgroupDirs(context.Background(), p, nil) // none for a path a test made odd (a symlink)
		for _, d := range tree {
			ps, err := readPids(d)
			if err != nil {
				t.Fatal(err)
			}
			for _, pid := range ps {
				pids[pid] = true
			}
		}
		// The children, as Discover names them, unless the test gave them.
		if entries, err := os.ReadDir(p); err == nil && pod.Containers == nil {
			for _, e := range entries {
				if e.IsDir() && !slices.Contains(children, e.Name()) {
					children = append(children, e.Name())
				}
			}
		}
	}
	if pod.Containers == nil {
		slices.Sort(children)
		pod.Containers = children
	}
	pod.Procs = len(pids)
	return pod
}

// destroyErr is h.destroy for the tests that look at its error alone.
func destroyErr(h host) func(context.Context, PodCgroup) error {
	return func(ctx context.Context, pod PodCgroup) error {
		_, err := h.destroy(ctx, pod)
		return err
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestDestroyRemovesBottomUpInEveryHierarchy(t *testing.T) {
	for _, driver := range []Driver{DriverCgroupfs, DriverSystemd} {
		t.Run(string(driver), func(t *testing.T) {
			mp := t.TempDir()
			rel, err := podRel(driver, "kubepods", QOSBestEffort, uidA)
			if err != nil {
				t.Fatal(err)
			}
			sibling, err := podRel(driver, "kubepods", QOSBestEffort, uidB)
			if err != nil {
				t.Fatal(err)
			}
			pod := PodCgroup{UID: uidA, QOS: QOSBestEffort, Driver: driver, Root: "kubepods"}
			for _, h := range []string{"cpu", "memory", "unified"} {
				p := filepath.Join(mp, h, rel)
				dirs(t, filepath.Join(p, ctrID, "deeper"), filepath.Join(p, "other"), filepath.Join(mp, h, sibling, ctrID))
				pod.Paths = append(pod.Paths, p)
			}
			// Listed but already gone: nothing to do there.
			pod.Paths = append(pod.Paths, filepath.Join(mp, "pids", rel))

			f := &fakeHost{}
			if _, err := f.host().destroy(context.Background(), inspected(t, pod)); err != nil {
				t.Fatal(err)
			}
			for _, p := range pod.Paths {
				if exists(p) {
					t.Errorf("%s still exists", p)
				}
			}
			for _, h := range []string{"cpu", "memory", "unified"} {
				if qos := filepath.Dir(filepath.Join(mp, h, rel)); !exists(qos) {
					t.Errorf("the QoS cgroup %s was removed", qos)
				}
				if !exists(filepath.Join(mp, h, sibling, ctrID)) {
					t.Errorf("sibling pod's cgroup in %s was touched", h)
				}
			}
			wantUnits := 0
			if driver == DriverSystemd {
				wantUnits = 1
				if f.units[0] != "kubepods-besteffort-pod"+under(uidA)+".slice" {
					t.Errorf("stopped unit %q", f.units[0])
				}
			}
			if len(f.units) != wantUnits {
				t.Errorf("systemd asked to stop %q, want %d unit(s)", f.units, wantUnits)
			}
		})
	}
}

// TestASliceUnitSystemdCouldNotStopIsSaid: the file system steps remove the
// cgroups whatever systemd did, so a success must still say when systemd
// holds the pod's slice unit (unreachable, or its stop job failed): the
// operator has a unit to stop. When systemd is not PID 1 or has no such
// unit, there is no unit to leave and nothing is said.
func TestASliceUnitSystemdCouldNotStopIsSaid(t *testing.T) {
	unit := "kubepods-burstable-pod" + under(uidA) + ".slice"
	for _, c := range []struct {
		name    string
		stop    error
		want    string // Destroyed.Unit
		wantErr string // in Destroyed.UnitErr, "" for none
	}{
		{"stopped by systemd", nil, unit, ""},
		{"systemd not PID 1", fmt.Errorf("%w (stat /run/systemd/system: no such file)", errNoSystemd), "", ""},
		{"no such unit loaded", fmt.Errorf("systemd StopUnit %s: %w: Unit not loaded.", unit, errNoSuchUnit), "", ""},
		{"systemd unreachable", errors.New("systemd is not reachable over D-Bus: dial unix /run/systemd/private: no such file"), unit, "not reachable"},
		{"stop job failed", errors.New("systemd StopUnit " + unit + ": job failed"), unit, "job failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mp := t.TempDir()
			rel, err := podRel(DriverSystemd, "kubepods", QOSBurstable, uidA)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(mp, "memory", rel)
			dirs(t, filepath.Join(p, "cri-containerd-"+ctrID+".scope"))
			h := (&fakeHost{}).host()
			var asked []string
			h.stopUnit = func(_ context.Context, u string) error { asked = append(asked, u); return c.stop }
			d, err := h.destroy(context.Background(), inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverSystemd, Root: "kubepods", Paths: []string{p}}))
			if err != nil || exists(p) {
				t.Fatalf("destroy = %v, still there: %v; want the cgroups removed whatever systemd did", err, exists(p))
			}
			if len(asked) != 1 || asked[0] != unit {
				t.Fatalf("systemd asked to stop %q, want [%s]", asked, unit)
			}
			if d.Unit != c.want {
				t.Errorf("Destroyed.Unit = %q, want %q", d.Unit, c.want)
			}
			switch {
			case c.wantErr == "" && d.UnitErr != nil:
				t.Errorf("Destroyed.UnitErr = %v, want none: systemd holds no unit here", d.UnitErr)
			case c.wantErr != "" && (d.UnitErr == nil || !strings.Contains(d.UnitErr.Error(), c.wantErr)):
				t.Errorf("Destroyed.UnitErr = %v, want one with %q: the unit systemd still holds is dropped unsaid", d.UnitErr, c.wantErr)
			}
		})
	}
}

func TestDestroyAlreadyGoneIsDone(t *testing.T) {
	mp := t.TempDir()
	pod := PodCgroup{UID: uidA, QOS: QOSGuaranteed, Driver: DriverCgroupfs, Root: "kubepods",
		Paths: []string{filepath.Join(mp, "memory", "kubepods", "pod"+uidA)}}
	f := &fakeHost{}
	if _, err := f.host().destroy(context.Background(), inspected(t, pod)); err != nil {
		t.Fatal(err)
	}
	if err := f.host().reduceCPU(context.Background(), inspected(t, pod)); err != nil {
		t.Fatal(err)
	}
}

// TestDestroyNamesWhatIsLeft: a directory that cannot be removed is named,
// and the other hierarchies are still cleaned.
func TestDestroyNamesWhatIsLeft(t *testing.T) {
	mp := t.TempDir()
	stuck := filepath.Join(mp, "cpu", "kubepods", "pod"+uidA, ctrID)
	writeFile(t, filepath.Join(stuck, "a-regular-file"), "rmdir never removes files")
	dirs(t, filepath.Join(mp, "memory", "kubepods", "pod"+uidA, ctrID))
	pod := PodCgroup{UID: uidA, QOS: QOSGuaranteed, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{
		filepath.Join(mp, "cpu", "kubepods", "pod"+uidA),
		filepath.Join(mp, "memory", "kubepods", "pod"+uidA),
	}}
	_, err := (&fakeHost{}).host().destroy(context.Background(), inspected(t, pod))
	if err == nil || !strings.Contains(err.Error(), stuck) {
		t.Fatalf("error %v does not name %s", err, stuck)
	}
	if !exists(filepath.Join(stuck, "a-regular-file")) {
		t.Error("a file was removed")
	}
	if exists(pod.Paths[1]) {
		t.Errorf("%s was not removed", pod.Paths[1])
	}
}

// TestDestroyRefuses: a pod cgroup that is not exactly where kubelet puts
// it, or not on a cgroup file system, or that holds this process, is
// refused, and nothing at all is done, even to its valid paths.
func TestDestroyRefuses(t *testing.T) {
	valid := func(mp string) PodCgroup {
		return PodCgroup{UID: uidA, QOS: QOSBestEffort, Driver: DriverCgroupfs, Root: "kubepods",
			Paths: []string{filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uidA)}}
	}
	for _, tc := range []struct {
		rule   string
		change func(t *testing.T, mp string, p *PodCgroup)
		real   bool // use the real host (statfs) instead of the fake
		// destroyOnly: ReduceCPU does not look at processes.
		destroyOnly bool
	}{
		{"other_uid_in_path", func(t *testing.T, mp string, p *PodCgroup) {
			p.Paths = append(p.Paths, filepath.Join(mp, "cpu", "kubepods", "besteffort", "pod"+uidB))
		}, false, false},
		{"other_qos_in_path", func(t *testing.T, mp string, p *PodCgroup) {
			p.Paths = append(p.Paths, filepath.Join(mp, "cpu", "kubepods", "burstable", "pod"+uidA))
		}, false, false},
		{"other_root_in_path", func(t *testing.T, mp string, p *PodCgroup) {
			p.Paths = append(p.Paths, filepath.Join(mp, "cpu", "other", "besteffort", "pod"+uidA))
		}, false, false},
		{"below_the_pod", func(t *testing.T, mp string, p *PodCgroup) {
			p.Paths = append(p.Paths, filepath.Join(mp, "cpu", "kubepods", "besteffort", "pod"+uidA, ctrID))
		}, false, false},
		{"dot_dot", func(t *testing.T, mp string, p *PodCgroup) {
			p.Paths = append(p.Paths, mp+"/cpu/x/../kubepods/besteffort/pod"+uidA)
		}, false, false},
		{"relative", func(t *testing.T, mp string, p *PodCgroup) {
			p.Paths = append(p.Paths, "cpu/kubepods/besteffort/pod"+uidA)
		}, false, false},
		{"no_hierarchy", func(t *testing.T, mp string, p *PodCgroup) {
			p.Paths = append(p.Paths, "/kubepods/besteffort/pod"+uidA)
		}, false, false},
		{"systemd_name_with_cgroupfs_driver", func(t *testing.T, mp string, p *PodCgroup) {
			p.Paths = append(p.Paths, filepath.Join(mp, "cpu", "kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-pod"+under(uidA)+".slice"))
		}, false, false},
		{"bad_uid", func(t *testing.T, mp string, p *PodCgroup) {
			p.UID = strings.ToUpper(uidA)
		}, false, false},
		{"bad_driver", func(t *testing.T, mp string, p *PodCgroup) { p.Driver = "auto" }, false, false},
		{"bad_qos", func(t *testing.T, mp string, p *PodCgroup) { p.QOS = "" }, false, false},
		{"bad_root", func(t *testing.T, mp string, p *PodCgroup) { p.Root = "../kubepods" }, false, false},
		{"no_paths", func(t *testing.T, mp string, p *PodCgroup) { p.Paths = nil }, false, false},
		{"pod_dir_is_a_symlink", func(t *testing.T, mp string, p *PodCgroup) {
			link := filepath.Join(mp, "cpu", "kubepods", "besteffort", "pod"+uidA)
			dirs(t, filepath.Dir(link), filepath.Join(mp, "elsewhere"))
			if err := os.Symlink(filepath.Join(mp, "elsewhere"), link); err != nil {
				t.Fatal(err)
			}
			p.Paths = append(p.Paths, link)
		}, false, false},
		{"this_process_inside", func(t *testing.T, mp string, p *PodCgroup) {
			cgroup(t, filepath.Join(p.Paths[0], ctrID), os.Getpid())
		}, false, true},
		{"not_a_cgroup_file_system", func(t *testing.T, mp string, p *PodCgroup) {}, true, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			mp := t.TempDir()
			pod := valid(mp)
			dirs(t, filepath.Join(pod.Paths[0], "child"))
			tc.change(t, mp, &pod)
			// As an inspection leaves it: else every case is refused for
			// its missing inode numbers, whatever the rule it names.
			pod = inspected(t, pod)
			h := (&fakeHost{}).host()
			if tc.real {
				h = realHost()
			}
			for name, act := range map[string]func(context.Context, PodCgroup) error{"destroy": destroyErr(h), "reduceCPU": h.reduceCPU} {
				if tc.destroyOnly && name != "destroy" {
					continue
				}
				err := act(context.Background(), pod)
				var refused *RefusedError
				if !errors.As(err, &refused) {
					t.Fatalf("%s: error %v, want a RefusedError", name, err)
				}
				if !exists(filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uidA, "child")) {
					t.Fatalf("%s acted before refusing", name)
				}
			}
		})
	}
}

func TestReduceCPU(t *testing.T) {
	mp := t.TempDir()
	rel := filepath.Join("kubepods", "burstable", "pod"+uidA)
	pod := PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods"}
	for _, h := range []string{"cpu", "memory", "unified"} {
		pod.Paths = append(pod.Paths, filepath.Join(mp, h, rel))
	}
	writeFile(t, filepath.Join(mp, "cpu", rel, "cpu.shares"), "1024\n")
	writeFile(t, filepath.Join(mp, "cpu", rel, ctrID, "cpu.shares"), "512\n")
	writeFile(t, filepath.Join(mp, "memory", rel, "memory.limit_in_bytes"), "100\n")
	writeFile(t, filepath.Join(mp, "unified", rel, "cpu.weight"), "100\n")

	if err := (&fakeHost{}).host().reduceCPU(context.Background(), inspected(t, pod)); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		filepath.Join(mp, "cpu", rel, "cpu.shares"):               "2",
		filepath.Join(mp, "unified", rel, "cpu.weight"):           "1",
		filepath.Join(mp, "cpu", rel, ctrID, "cpu.shares"):        "512\n", // containers as they are, like kubelet
		filepath.Join(mp, "memory", rel, "memory.limit_in_bytes"): "100\n",
	} {
		got, err := os.ReadFile(file)
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}
	for _, p := range pod.Paths {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	if exists(filepath.Join(mp, "memory", rel, "cpu.shares")) || exists(filepath.Join(mp, "memory", rel, "cpu.weight")) {
		t.Error("a control file was created")
	}
}

func TestReduceCPUWithoutCPUControllerFails(t *testing.T) {
	mp := t.TempDir()
	p := filepath.Join(mp, "memory", "kubepods", "pod"+uidA)
	dirs(t, p)
	pod := PodCgroup{UID: uidA, QOS: QOSGuaranteed, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{p}}
	err := (&fakeHost{}).host().reduceCPU(context.Background(), inspected(t, pod))
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("error %v, want one naming %s", err, p)
	}
}

func TestLeftErrorIsBounded(t *testing.T) {
	var left []cgroupProcs
	for i := 1; i <= 30; i++ {
		left = append(left, cgroupProcs{dir: fmt.Sprintf("/cg/%d", i), pids: []int{i}})
	}
	msg := leftError(left, nil).Error()
	if !strings.Contains(msg, "PID 1 in /cg/1") || strings.Contains(msg, "PID 30 ") || !strings.Contains(msg, "and 20 more") {
		t.Errorf("message %q", msg)
	}
}

// TestDestroyChecksSelfBeforeSystemd: systemd is not asked to stop a slice
// that holds this process.
func TestDestroyChecksSelfBeforeSystemd(t *testing.T) {
	mp := t.TempDir()
	rel, err := podRel(DriverSystemd, "kubepods", QOSGuaranteed, uidA)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mp, "memory", rel)
	cgroup(t, filepath.Join(p, "cri-containerd-"+ctrID+".scope"), os.Getpid())
	f := &fakeHost{}
	_, err = f.host().destroy(context.Background(), inspected(t, PodCgroup{UID: uidA, QOS: QOSGuaranteed, Driver: DriverSystemd, Root: "kubepods", Paths: []string{p}}))
	var refused *RefusedError
	if !errors.As(err, &refused) || len(f.units) != 0 {
		t.Fatalf("error %v, units stopped %q; want a refusal and no unit stopped", err, f.units)
	}
}

// TestSignalKillsThroughAPidfdOnlyThePIDsStillListed: signal pins every
// listed PID with a pidfd, reads cgroup.procs again and kills only the PIDs
// still listed, so one that left the cgroup in between (and may since belong
// to an unrelated process) is never signalled. Every pidfd is closed.
func TestSignalKillsThroughAPidfdOnlyThePIDsStillListed(t *testing.T) {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Skipf("pidfd_open is not available here (%v), so signal would fall back to kill(2)", err)
	}
	unix.Close(fd)
	listed, left := startSleeper(t), startSleeper(t)
	dir := filepath.Join(t.TempDir(), "pod", ctrID)
	// The first listing (cp.pids) has both; the file signal reads again has
	// only one.
	cgroup(t, dir, listed.cmd.Process.Pid)
	cp := cgroupProcs{dir: dir, pids: []int{left.cmd.Process.Pid, listed.cmd.Process.Pid}}

	fdsBefore := openFDs(t)
	if sent, errs := signal(cp); len(errs) != 0 || sent != 1 {
		t.Fatalf("signal: %d sent, %v; want the one still listed", sent, errs)
	}
	// The killed child's own pidfd (held by os.Process) may close meanwhile
	// when it is reaped, so fewer is fine; more is a leaked pidfd.
	if fdsAfter := openFDs(t); fdsAfter > fdsBefore {
		t.Errorf("%d open file descriptors after signal, %d before: a pidfd was not closed", fdsAfter, fdsBefore)
	}
	if !listed.killedWithin(5 * time.Second) {
		t.Errorf("listed PID %d was not killed by SIGKILL (exit: %v)", listed.cmd.Process.Pid, listed.err)
	}
	if left.killedWithin(300*time.Millisecond) || !left.alive() {
		t.Errorf("PID %d, no longer listed when signal read cgroup.procs again, was signalled", left.cmd.Process.Pid)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestDestroyRefusesACgroupMadeAgainSinceItWasInspected: kubelet makes a
// pod's cgroup first when it sets up a pod of that UID again (a static pod
// back in its manifest dir); the cgroup at the same path is then another
// directory, and neither Destroy nor ReduceCPU may touch it.
func TestDestroyRefusesACgroupMadeAgainSinceItWasInspected(t *testing.T) {
	mp := t.TempDir()
	rel := filepath.Join("kubepods", "burstable", "pod"+uidA)
	pod := PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods"}
	for _, h := range []string{"cpu", "memory"} {
		pod.Paths = append(pod.Paths, filepath.Join(mp, h, rel))
	}
	dirs(t, pod.Paths...)
	writeFile(t, filepath.Join(mp, "cpu", rel, "cpu.shares"), "1024\n")
	seen := inspected(t, pod)
	// The memory one made again: a new directory renamed into place, so
	// that it has another inode whatever the file system reuses.
	again := pod.Paths[1] + ".new"
	dirs(t, again)
	if err := os.Remove(pod.Paths[1]); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(again, pod.Paths[1]); err != nil {
		t.Fatal(err)
	}
	for name, act := range map[string]func(host) func(context.Context, PodCgroup) error{"destroy": destroyErr, "reduceCPU": func(h host) func(context.Context, PodCgroup) error { return h.reduceCPU }} {
		err := act((&fakeHost{}).host())(context.Background(), seen)
		var refused *RefusedError
		if !errors.As(err, &refused) || refused.Path != pod.Paths[1] || !strings.Contains(err.Error(), "made again since it was inspected") {
			t.Errorf("%s: %v, want a refusal naming %s as made again", name, err, pod.Paths[1])
		}
	}
	if got, err := os.ReadFile(filepath.Join(mp, "cpu", rel, "cpu.shares")); err != nil || string(got) != "1024\n" || !exists(pod.Paths[1]) {
		t.Errorf("acted on: cpu.shares %q (%v), memory cgroup there: %v", got, err, exists(pod.Paths[1]))
	}
	// As inspected now, it may be acted on.
	if err := (&fakeHost{}).host().reduceCPU(context.Background(), inspected(t, pod)); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(mp, "cpu", rel, "cpu.shares")); string(got) != "2" {
		t.Errorf("cpu.shares %q after a reduction of the cgroups as inspected now, want 2", got)
	}
}

// TestDestroyChecksAgainAfterSystemdsStop: systemd's stop job can take
// seconds (up to systemdStopTimeout), and kubelet may make a pod of that UID
// again meanwhile (a static pod put back): its new cgroup at the same path
// is not the one inspected, and nothing is killed or removed by path in it.
func TestDestroyChecksAgainAfterSystemdsStop(t *testing.T) {
	mp := t.TempDir()
	rel, err := podRel(DriverSystemd, "kubepods", QOSBurstable, uidA)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mp, "memory", rel)
	dirs(t, p)
	pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverSystemd, Root: "kubepods", Paths: []string{p}})
	h := (&fakeHost{}).host()
	h.stopUnit = func(context.Context, string) error {
		// systemd removes the slice; kubelet makes the pod's cgroup again
		// (made before the removal, so that its inode differs).
		again := p + ".new"
		dirs(t, again)
		if err := os.Remove(p); err != nil {
			return err
		}
		return os.Rename(again, p)
	}
	_, err = h.destroy(context.Background(), pod)
	wantStoppedPartway(t, err, "made again since it was inspected", p)
	if !exists(p) {
		t.Fatalf("the pod cgroup made again during systemd's stop was removed")
	}
	// systemd removed every path: done.
	h.stopUnit = func(context.Context, string) error { return os.Remove(p) }
	if _, err := h.destroy(context.Background(), inspected(t, pod)); err != nil || exists(p) {
		t.Fatalf("destroy = %v, %s there: %v; want nil and gone", err, p, exists(p))
	}
}

// TestDestroyRefusesAPodCgroupNotAsInspected: without an inode number for
// every path nothing could tell a cgroup made again from the one inspected.
func TestDestroyRefusesAPodCgroupNotAsInspected(t *testing.T) {
	mp := t.TempDir()
	p := filepath.Join(mp, "memory", "kubepods", "pod"+uidA)
	dirs(t, p)
	pod := PodCgroup{UID: uidA, QOS: QOSGuaranteed, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{p}}
	_, err := (&fakeHost{}).host().destroy(context.Background(), pod)
	var refused *RefusedError
	if !errors.As(err, &refused) || !exists(p) {
		t.Fatalf("destroy without inode numbers: %v (still there: %v), want a refusal", err, exists(p))
	}
}

// madeAgainWith replaces the directory p by a new one (another inode) whose
// container cgroup lists pid: kubelet making the pod's cgroup again, and a
// process of the new pod in it. It returns errors rather than take a
// testing.T: it runs on another goroutine too, where t.Fatal may not be
// called.
func madeAgainWith(p string, pid int) error {
	again := p + ".new"
	ctr := filepath.Join(again, ctrID)
	if err := os.MkdirAll(ctr, 0o755); err != nil {
		return fmt.Errorf("making the pod cgroup again: %w", err)
	}
	if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("putting PID %d in it: %w", pid, err)
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("removing the old pod cgroup: %w", err)
	}
	if err := os.Rename(again, p); err != nil {
		return fmt.Errorf("moving the new pod cgroup in place: %w", err)
	}
	return nil
}

// TestDestroyKillsNothingInACgroupMadeAgainDuringSystemdsStop: the check
// after systemd's stop comes before the first kill, not only before the
// removal: a process of a pod of that UID made again meanwhile lives.
func TestDestroyKillsNothingInACgroupMadeAgainDuringSystemdsStop(t *testing.T) {
	mp := t.TempDir()
	rel, err := podRel(DriverSystemd, "kubepods", QOSBurstable, uidA)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mp, "memory", rel)
	dirs(t, p)
	pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverSystemd, Root: "kubepods", Paths: []string{p}})
	live := startSleeper(t)
	h := (&fakeHost{}).host()
	var madeAgain error
	h.stopUnit = func(context.Context, string) error {
		madeAgain = madeAgainWith(p, live.cmd.Process.Pid)
		return madeAgain
	}
	_, err = h.destroy(context.Background(), pod)
	if madeAgain != nil {
		t.Fatal(madeAgain) // or destroy's outcome would be blamed on it
	}
	wantStoppedPartway(t, err, "made again since it was inspected", p)
	if live.killedWithin(300*time.Millisecond) || !live.alive() {
		t.Fatalf("PID %d, in the pod cgroup made again during systemd's stop, was killed", live.cmd.Process.Pid)
	}
}

// TestDestroyKillsNothingInACgroupMadeAgainBetweenKillPasses: every kill
// pass after the first checks the paths again: kubelet may make a pod of
// that UID again while the last pass's processes exit.
func TestDestroyKillsNothingInACgroupMadeAgainBetweenKillPasses(t *testing.T) {
	mp := t.TempDir()
	p := filepath.Join(mp, "memory", "kubepods", "burstable", "pod"+uidA)
	leaked, live := startSleeper(t), startSleeper(t)
	cgroup(t, filepath.Join(p, ctrID), leaked.cmd.Process.Pid)
	pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{p}})
	madeAgain := make(chan error, 1)
	go func() {
		// The first pass killed the leaked process; the next comes
		// killPassDelay later.
		<-leaked.exited
		madeAgain <- madeAgainWith(p, live.cmd.Process.Pid)
	}()
	_, err := (&fakeHost{}).host().destroy(context.Background(), pod)
	if err := <-madeAgain; err != nil {
		t.Fatal(err)
	}
	wantStoppedPartway(t, err, "made again since it was inspected", p)
	if live.killedWithin(300*time.Millisecond) || !live.alive() {
		t.Fatalf("PID %d, in the pod cgroup made again between kill passes, was killed", live.cmd.Process.Pid)
	}
}

// TestOnlyACgroupHierarchysMountIsAHierarchy: on the real host, every cgroup
// hierarchy mounted (as /proc/self/mountinfo, read here, says) is one, with
// the version of its file system type, and a cgroup under it is on it; a path
// on another file system (/proc) is no pod cgroup, and a directory above a
// hierarchy's mount, or inside a hierarchy, is not a hierarchy: a pod cgroup
// nested there (another agent's tree) is not where kubelet puts one. The
// mounts come from mountinfo, not from the code under test, so a regression
// that refused every hierarchy fails here instead of skipping. An empty child
// cgroup is made for the nested cases, and removed.
func TestOnlyACgroupHierarchysMountIsAHierarchy(t *testing.T) {
	mounts, err := cgroupMounts("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) == 0 {
		t.Skip("/proc/self/mountinfo lists no cgroup hierarchy")
	}
	// An empty child cgroup of the first hierarchy that lets us make one,
	// removed again (rmdir).
	var parent cgroupMount
	nested, nestedErr := "", errors.New("no hierarchy mounted")
	for _, m := range mounts {
		p := filepath.Join(m.path, fmt.Sprintf("nrihk-unit-%d", os.Getpid()))
		if nestedErr = os.Mkdir(p, 0o755); nestedErr == nil {
			parent, nested = m, p
			t.Cleanup(func() { _ = os.Remove(p) })
			break
		}
	}
	type check struct {
		name            string
		hierarchy, path string
		version         Version // want this version, or
		refused         string  // a refusal that says this
		nested          bool    // needs the child cgroup
	}
	var checks []check
	for _, m := range mounts {
		checks = append(checks,
			check{name: "the hierarchy mounted at " + m.path, hierarchy: m.path, path: m.path, version: m.version},
			check{name: "the directory " + m.path + " is mounted on", hierarchy: filepath.Dir(m.path), path: m.path,
				refused: "not a cgroup hierarchy's mount point"})
	}
	// Two mounts of one hierarchy (cgroup2 mounted twice, as Cilium does at
	// /run/cilium/cgroupv2) are the same file system: only mounts on other
	// devices are other hierarchies.
	for _, other := range mounts[1:] {
		if other.dev != mounts[0].dev {
			checks = append(checks, check{name: "a path in another hierarchy", hierarchy: mounts[0].path, path: other.path,
				refused: "not a cgroup hierarchy's mount point"})
			break
		}
	}
	checks = append(checks,
		check{name: "a path on another file system", hierarchy: "/proc", path: "/proc/self", refused: "not on a cgroup file system"},
		check{name: "a cgroup under a hierarchy's mount", hierarchy: parent.path, path: nested, version: parent.version, nested: true},
		check{name: "a cgroup inside a hierarchy, taken for one", hierarchy: nested, path: nested,
			refused: "not a cgroup hierarchy's mount point", nested: true},
	)
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.nested && nested == "" {
				t.Skipf("cannot make a child cgroup in any hierarchy (not root?): %v", nestedErr)
			}
			v, err := cgroupVersion(c.hierarchy, c.path)
			switch {
			case c.refused == "" && (err != nil || v != c.version):
				t.Errorf("cgroupVersion(%s, %s) = %v, %v; want cgroup v%d", c.hierarchy, c.path, v, err, c.version)
			case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("cgroupVersion(%s, %s) = v%d, %v; want a refusal: %s", c.hierarchy, c.path, v, err, c.refused)
			}
		})
	}
}

// cgroupMount is a cgroup hierarchy's mount point, as mountinfo lists it.
type cgroupMount struct {
	path    string
	version Version
	dev     uint64 // the file system's device, as mountinfo gives it
}

// cgroupMounts lists the cgroup hierarchies in a mountinfo file (file system
// type cgroup or cgroup2; proc_pid_mountinfo(5)) whose mount point is that
// mount still, not hidden by a later mount over it (when the kernel tells
// the mount ID of a path).
func cgroupMounts(mountinfo string) ([]cgroupMount, error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	var out []cgroupMount
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// ID parent major:minor root mount-point options [optional...] - type source super-options
		pre, post, ok := strings.Cut(line, " - ")
		fields, fsFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(fsFields) < 1 {
			return nil, fmt.Errorf("%s: malformed line %q", mountinfo, line)
		}
		var version Version
		switch fsFields[0] {
		case "cgroup":
			version = V1
		case "cgroup2":
			version = V2
		default:
			continue
		}
		id, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: mount ID of %q: %w", mountinfo, line, err)
		}
		major, minor, ok := strings.Cut(fields[2], ":")
		maj, errMaj := strconv.ParseUint(major, 10, 32)
		min, errMin := strconv.ParseUint(minor, 10, 32)
		if !ok || errMaj != nil || errMin != nil {
			return nil, fmt.Errorf("%s: device %q of %q", mountinfo, fields[2], line)
		}
		path := unescapeMountinfo(fields[4])
		var stx unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID, &stx); err != nil {
			continue // not reachable by its path (a mount point since deleted, or below one)
		}
		if stx.Mask&unix.STATX_MNT_ID != 0 && stx.Mnt_id != id {
			continue // mounted over since
		}
		out = append(out, cgroupMount{path: path, version: version, dev: unix.Mkdev(uint32(maj), uint32(min))})
	}
	return out, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in a mountinfo path.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// TestDestroyRemovesNothingMadeAgainAfterTheKill: the paths are checked
// again right before the rmdirs, after the kill: a pod cgroup kubelet made
// again there since (still empty: it makes the cgroup before anything runs
// in it) is not the one inspected, and is left.
func TestDestroyRemovesNothingMadeAgainAfterTheKill(t *testing.T) {
	mp := t.TempDir()
	rel := filepath.Join("kubepods", "burstable", "pod"+uidA)
	p1, p2 := filepath.Join(mp, "cpu", rel), filepath.Join(mp, "memory", rel)
	dirs(t, p1, p2)
	pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{p1, p2}})
	h := (&fakeHost{}).host()
	version, calls := h.cgroupVersion, 0
	h.cgroupVersion = func(hierarchy, path string) (Version, error) {
		// The first look is 2 calls; no process, so one kill pass with no
		// look of its own; the third call is the look before the rmdirs,
		// at p1, before p2 is checked.
		if calls++; calls == 3 {
			again := p2 + ".new"
			dirs(t, again)
			if err := os.Remove(p2); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(again, p2); err != nil {
				t.Fatal(err)
			}
		}
		return version(hierarchy, path)
	}
	_, err := h.destroy(context.Background(), pod)
	if calls < 3 {
		t.Fatalf("cgroupVersion called %d times: the paths (%s among them) were not looked at again before the rmdirs", calls, p2)
	}
	var refused *RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "made again since it was inspected") {
		t.Fatalf("destroy = %v; want a refusal: the cgroup at %s is not the one inspected", err, p2)
	}
	if !exists(p2) {
		t.Fatalf("the pod cgroup made again at %s after the kill was removed", p2)
	}
}

// kubelet reuses a pod cgroup that exists (EnsureExists), so a pod of that
// UID set up again (a static pod put back) keeps the inode number Destroy
// and ReduceCPU check, and containerd starts its pause in a new child
// cgroup before the sandbox is listed or NRI reports it. A child cgroup the
// inspection did not find refuses the step, and nothing in it is touched.

// TestDestroyKillsNothingInAChildMadeSinceTheInspection: the child is made,
// with a process in it, while the leaked processes die between kill passes.
func TestDestroyKillsNothingInAChildMadeSinceTheInspection(t *testing.T) {
	mp := t.TempDir()
	p := filepath.Join(mp, "memory", "kubepods", "burstable", "pod"+uidA)
	leaked, live := startSleeper(t), startSleeper(t)
	cgroup(t, filepath.Join(p, ctrID), leaked.cmd.Process.Pid)
	pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{p}})
	if !slices.Equal(pod.Containers, []string{ctrID}) {
		t.Fatalf("inspected Containers %q, want [%s]", pod.Containers, ctrID)
	}
	sandbox := filepath.Join(p, "a-new-sandbox")
	made := make(chan error, 1)
	go func() {
		<-leaked.exited // killed by the first pass; the next comes killPassDelay later
		if err := os.MkdirAll(sandbox, 0o755); err != nil {
			made <- err
			return
		}
		made <- os.WriteFile(filepath.Join(sandbox, "cgroup.procs"), []byte(strconv.Itoa(live.cmd.Process.Pid)+"\n"), 0o644)
	}()
	_, err := (&fakeHost{}).host().destroy(context.Background(), pod)
	if err := <-made; err != nil {
		t.Fatal(err)
	}
	wantStoppedPartway(t, err, "made since the pod cgroup was inspected", sandbox)
	if live.killedWithin(300*time.Millisecond) || !live.alive() {
		t.Fatalf("PID %d, in the child cgroup made since the inspection, was killed", live.cmd.Process.Pid)
	}
	if !exists(sandbox) {
		t.Fatalf("the child cgroup made since the inspection, %s, was removed", sandbox)
	}
}

// TestAChildMadeSinceTheInspectionRefusesEveryStep: an empty child (runc's
// mkdir before its init joins it) refuses the destroy, which removes
// nothing, and the CPU reduction, which writes nothing; a child gone since
// is no change.
func TestAChildMadeSinceTheInspectionRefusesEveryStep(t *testing.T) {
	rel := filepath.Join("kubepods", "burstable", "pod"+uidA)
	// A fake cgroup's control file is a regular file, which rmdir cannot
	// remove: the destroy's pod cgroup has none.
	setup := func(t *testing.T, shares bool) (mp string, pod PodCgroup) {
		mp = t.TempDir()
		p := filepath.Join(mp, "cpu", rel)
		if shares {
			writeFile(t, filepath.Join(p, "cpu.shares"), "1024\n")
		}
		dirs(t, filepath.Join(p, ctrID))
		return mp, inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{p}})
	}
	for name, act := range map[string]func(h host) func(context.Context, PodCgroup) error{
		"destroy": destroyErr, "reduceCPU": func(h host) func(context.Context, PodCgroup) error { return h.reduceCPU },
	} {
		t.Run(name+" is refused for a new child", func(t *testing.T) {
			mp, pod := setup(t, true)
			sandbox := filepath.Join(mp, "cpu", rel, "a-new-sandbox")
			dirs(t, sandbox)
			err := act((&fakeHost{}).host())(context.Background(), pod)
			var refused *RefusedError
			if !errors.As(err, &refused) || refused.Path != sandbox {
				t.Fatalf("%s = %v; want a refusal naming %s", name, err, sandbox)
			}
			if got, err := os.ReadFile(filepath.Join(mp, "cpu", rel, "cpu.shares")); err != nil || string(got) != "1024\n" {
				t.Errorf("cpu.shares %q (%v), want it untouched", got, err)
			}
			if !exists(sandbox) || !exists(filepath.Join(mp, "cpu", rel, ctrID)) {
				t.Errorf("removed: %s there %v, %s there %v", sandbox, exists(sandbox), ctrID, exists(filepath.Join(mp, "cpu", rel, ctrID)))
			}
		})
		t.Run(name+" goes on when a child is gone since", func(t *testing.T) {
			mp, pod := setup(t, name == "reduceCPU")
			if err := os.Remove(filepath.Join(mp, "cpu", rel, ctrID)); err != nil {
				t.Fatal(err)
			}
			if err := act((&fakeHost{}).host())(context.Background(), pod); err != nil {
				t.Fatalf("%s = %v, want success", name, err)
			}
		})
	}
}

// wantStoppedPartway checks the error of a Destroy that found the pod cgroup
// changed after it acted (systemd stopped the slice, or a kill pass ran):
// it says why and where, and is no RefusedError, which would tell the
// executor nothing was done (an abort: no backoff, its budget unit given
// back).
func wantStoppedPartway(t *testing.T, err error, why, path string) {
	t.Helper()
	var refused *RefusedError
	if err == nil || errors.As(err, &refused) || !strings.Contains(err.Error(), "stopped partway") ||
		!strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), path) {
		t.Fatalf("destroy = %v; want a failure that says it stopped partway, %q, naming %s, and is no refusal", err, why, path)
	}
}

// A refusal from the first look, before anything was done, stays one; after
// systemd stopped the slice it is a failure: every process of the slice is
// dead by then.
func TestAChangeFoundAfterSystemdsStopIsNoRefusal(t *testing.T) {
	mp := t.TempDir()
	rel, err := podRel(DriverSystemd, "kubepods", QOSBestEffort, uidA)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mp, "memory", rel)
	dirs(t, filepath.Join(p, ctrID))
	pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBestEffort, Driver: DriverSystemd, Root: "kubepods", Paths: []string{p}, Containers: []string{ctrID}})
	// A stop job whose wait timed out may have killed the processes all
	// the same.
	for _, stopErr := range []error{nil, context.DeadlineExceeded} {
		child := filepath.Join(p, "a-new-sandbox")
		if err := os.RemoveAll(child); err != nil {
			t.Fatal(err)
		}
		var stopped []string
		h := host{
			cgroupVersion: func(string, string) (Version, error) { return V1, nil },
			stopUnit: func(_ context.Context, unit string) error {
				stopped = append(stopped, unit)
				if err := os.Mkdir(child, 0o755); err != nil { // containerd, meanwhile
					return err
				}
				return stopErr
			},
			selfPid: os.Getpid(),
		}
		d, err := h.destroy(context.Background(), pod)
		if len(stopped) != 1 || d.Unit == "" {
			t.Fatalf("systemd asked to stop %v, Destroyed %+v: the test proves nothing", stopped, d)
		}
		wantStoppedPartway(t, err, "made since the pod cgroup was inspected", child)
	}
}

// TestDestroyKillsNothingInAPodCgroupInspectedEmpty: the plan budgets a
// kill only for a pod cgroup the inspection found processes in; one that
// has processes at the step (a process moved in, a pod of that UID started
// again in a child the inspection saw) is refused as changed, killing and
// removing nothing, with or without systemd.
func TestDestroyKillsNothingInAPodCgroupInspectedEmpty(t *testing.T) {
	for _, driver := range []Driver{DriverCgroupfs, DriverSystemd} {
		t.Run(string(driver), func(t *testing.T) {
			mp := t.TempDir()
			rel, err := podRel(driver, "kubepods", QOSBurstable, uidA)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(mp, "memory", rel)
			cgroup(t, filepath.Join(p, ctrID))
			pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: driver, Root: "kubepods", Paths: []string{p}})
			if pod.Procs != 0 {
				t.Fatalf("inspected with %d processes, want none", pod.Procs)
			}
			s := startSleeper(t)
			cgroup(t, filepath.Join(p, ctrID), s.cmd.Process.Pid)
			f := &fakeHost{}
			_, err = f.host().destroy(context.Background(), pod)
			var r *RefusedError
			if !errors.As(err, &r) || !r.ChangedSinceDecided() || !strings.Contains(err.Error(), "none when it was inspected") {
				t.Fatalf("destroy = %v, want a refusal as changed since the inspection", err)
			}
			if s.killedWithin(300*time.Millisecond) || !s.alive() {
				t.Fatalf("PID %d, in a pod cgroup inspected empty, was killed", s.cmd.Process.Pid)
			}
			if len(f.units) != 0 {
				t.Errorf("systemd was asked to stop %q before the refusal", f.units)
			}
			if !exists(filepath.Join(p, ctrID)) {
				t.Errorf("%s was removed", p)
			}
		})
	}
}

// TestAKillPassThatSentNothingIsNoKill: when every PID listed is gone
// before its signal (nothing written, nothing sent), a change found at
// the next pass is a refusal (an abort: nothing was done), not a stop
// partway that says its processes were sent a kill.
func TestAKillPassThatSentNothingIsNoKill(t *testing.T) {
	mp := t.TempDir()
	p := filepath.Join(mp, "memory", "kubepods", "burstable", "pod"+uidA)
	const gone = 2147483000 // above any pid_max: no such process
	cgroup(t, filepath.Join(p, ctrID), gone)
	pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{p}})
	h := (&fakeHost{}).host()
	checks := 0
	version := h.cgroupVersion
	h.cgroupVersion = func(hierarchy, path string) (Version, error) {
		if checks++; checks == 2 { // the second kill pass's check: kubelet made a sandbox
			if err := os.Mkdir(filepath.Join(p, "a-new-sandbox"), 0o755); err != nil {
				t.Error(err)
			}
		}
		return version(hierarchy, path)
	}
	_, err := h.destroy(context.Background(), pod)
	var r *RefusedError
	if !errors.As(err, &r) || !r.ChangedSinceDecided() {
		t.Fatalf("destroy = %v, want a refusal as changed (no kill was sent)", err)
	}
}

// TestTheWalkOfAPodCgroupStopsAtAMount: a cgroup's subdirectories are its
// children, on its mount; something mounted below the pod cgroup (a bind
// mount of another cgroup, another file system) is not walked: its
// processes are not killed nor its dirs removed, and the error names it.
func TestTheWalkOfAPodCgroupStopsAtAMount(t *testing.T) {
	for _, tt := range []struct {
		name  string
		mount func(t *testing.T, mp, target string) error
		want  string
	}{
		{"another file system", func(t *testing.T, mp, target string) error {
			return unix.Mount("tmpfs", target, "tmpfs", 0, "")
		}, "it is on another file system"},
		{"a bind mount of a dir on the same device", func(t *testing.T, mp, target string) error {
			elsewhere := filepath.Join(mp, "memory", "elsewhere")
			dirs(t, elsewhere)
			return unix.Mount(elsewhere, target, "", unix.MS_BIND, "")
		}, "it is a mount point"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mp := t.TempDir()
			p := filepath.Join(mp, "memory", "kubepods", "burstable", "pod"+uidA)
			nested := filepath.Join(p, ctrID, "nested")
			dirs(t, nested)
			if err := tt.mount(t, mp, nested); err != nil {
				if errors.Is(err, unix.EPERM) {
					t.Skipf("mounting not permitted: %v", err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(nested, unix.MNT_DETACH) })
			pod := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{p}})
			s := startSleeper(t)
			cgroup(t, filepath.Join(nested, "other"), s.cmd.Process.Pid)
			pod.Procs = 1 // as if the plan saw a process, so that only the mount refuses

			if _, err := cgroupDirs(context.Background(), p, nil); err == nil || !strings.Contains(err.Error(), nested+" below "+p+" is not walked: "+tt.want) {
				t.Fatalf("walking %s: %v, want the mount at %s named: %q", p, err, nested, tt.want)
			}
			_, err := (&fakeHost{}).host().destroy(context.Background(), pod)
			if err == nil || !strings.Contains(err.Error(), nested) {
				t.Fatalf("destroy = %v, want the mount named", err)
			}
			if s.killedWithin(300*time.Millisecond) || !s.alive() {
				t.Fatalf("PID %d, in a cgroup mounted below the pod cgroup, was killed", s.cmd.Process.Pid)
			}
			if !exists(filepath.Join(nested, "other")) {
				t.Errorf("a dir on the mount below the pod cgroup was removed")
			}
		})
	}
}
