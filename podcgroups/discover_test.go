package podcgroups

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile/regularfiletest"
)

const ctrID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// hybridTree lays out a fake cgroup mountpoint like a hybrid node: v1
// hierarchies (cpu,cpuacct with its two alias symlinks, memory, pids, the
// named systemd one) and the cgroup2 mount at unified. Each hierarchy's top
// has the control file Discover recognises it by. It returns the mountpoint.
func hybridTree(t *testing.T) string {
	t.Helper()
	mp := t.TempDir()
	for _, h := range []string{"cpu,cpuacct", "memory", "pids", "systemd"} {
		writeFile(t, filepath.Join(mp, h, "cgroup.procs"), "1\n")
	}
	writeFile(t, filepath.Join(mp, "unified", "cgroup.controllers"), "")
	writeFile(t, filepath.Join(mp, "unified", "cgroup.procs"), "1\n")
	for _, alias := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink("cpu,cpuacct", filepath.Join(mp, alias)); err != nil {
			t.Fatal(err)
		}
	}
	// Not a cgroup mount (no control file): ignored.
	if err := os.Mkdir(filepath.Join(mp, "rdma"), 0o755); err != nil {
		t.Fatal(err)
	}
	return mp
}

// cgroup makes a fake cgroup directory with a cgroup.procs holding pids.
func cgroup(t *testing.T, path string, pids ...int) {
	t.Helper()
	var b strings.Builder
	for _, p := range pids {
		b.WriteString(strconv.Itoa(p) + "\n")
	}
	writeFile(t, filepath.Join(path, "cgroup.procs"), b.String())
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func hierarchyPaths(mp string, names ...string) []Hierarchy {
	var hs []Hierarchy
	for _, n := range names {
		v := V1
		if n == "unified" {
			v = V2
		}
		hs = append(hs, Hierarchy{Path: filepath.Join(mp, n), Version: v})
	}
	return hs
}

func skippedNames(l Listing) []string {
	var names []string
	for _, s := range l.Skipped {
		names = append(names, filepath.Base(s.Path))
	}
	sort.Strings(names)
	return names
}

func TestDiscoverCgroupfsHybrid(t *testing.T) {
	mp := hybridTree(t)
	// Pod A, guaranteed: directly under the root, in three hierarchies;
	// PID 10 is in two of them and counts once.
	for _, h := range []string{"cpu,cpuacct", "memory", "unified"} {
		cgroup(t, filepath.Join(mp, h, "kubepods", "pod"+uidA))
		cgroup(t, filepath.Join(mp, h, "kubepods", "pod"+uidA, ctrID), 10)
	}
	cgroup(t, filepath.Join(mp, "memory", "kubepods", "pod"+uidA, ctrID, "nested"), 11)
	// Pod B, burstable, only in memory, no processes; static pod, besteffort.
	cgroup(t, filepath.Join(mp, "memory", "kubepods", "burstable", "pod"+uidB))
	cgroup(t, filepath.Join(mp, "pids", "kubepods", "besteffort", "pod"+uidStatic, "abc"), 12, 13)
	// Left alone: names kubelet does not produce, and a symlink.
	for _, name := range []string{"podXYZ", "pod" + strings.ToUpper(uidA), "pod" + uidB + ".slice", "kubepods-besteffort-pod" + under(uidB) + ".slice"} {
		cgroup(t, filepath.Join(mp, "memory", "kubepods", "besteffort", name))
	}
	if err := os.Symlink(filepath.Join(mp, "memory", "kubepods", "pod"+uidA), filepath.Join(mp, "pids", "kubepods", "pod"+uidB)); err != nil {
		t.Fatal(err)
	}
	// Deeper than a pod's parent: not a pod, not even looked at.
	cgroup(t, filepath.Join(mp, "memory", "kubepods", "besteffort", "podXYZ", "pod"+uidB))
	// QoS cgroups with control files of their own.
	writeFile(t, filepath.Join(mp, "cpu,cpuacct", "kubepods", "besteffort", "cpu.shares"), "2\n")

	l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods", Driver: "auto"}, nil)
	if !l.Ready || l.Err != nil {
		t.Fatalf("not ready: %v", l.Err)
	}
	if l.Driver != DriverCgroupfs {
		t.Errorf("driver %q, want cgroupfs (no kubepods.slice anywhere)", l.Driver)
	}
	if want := hierarchyPaths(mp, "cpu,cpuacct", "memory", "pids", "systemd", "unified"); !reflect.DeepEqual(l.Hierarchies, want) {
		t.Errorf("hierarchies %+v, want %+v (aliases and non-cgroup dirs left out)", l.Hierarchies, want)
	}
	want := map[string]PodCgroup{
		uidA: {UID: uidA, QOS: QOSGuaranteed, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{
			filepath.Join(mp, "cpu,cpuacct", "kubepods", "pod"+uidA),
			filepath.Join(mp, "memory", "kubepods", "pod"+uidA),
			filepath.Join(mp, "unified", "kubepods", "pod"+uidA),
		}, Containers: []string{ctrID}, Procs: 2, Inspected: true},
		uidB: {UID: uidB, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{
			filepath.Join(mp, "memory", "kubepods", "burstable", "pod"+uidB),
		}, Procs: 0, Inspected: true},
		uidStatic: {UID: uidStatic, QOS: QOSBestEffort, Driver: DriverCgroupfs, Root: "kubepods", Paths: []string{
			filepath.Join(mp, "pids", "kubepods", "besteffort", "pod"+uidStatic),
		}, Containers: []string{"abc"}, Procs: 2, Inspected: true},
	}
	for uid, p := range want { // each path's inode, as inspected
		want[uid] = inspected(t, p)
	}
	if !reflect.DeepEqual(l.Pods, want) {
		t.Errorf("pods\n got %+v\nwant %+v", l.Pods, want)
	}
	wantSkipped := []string{"kubepods-besteffort-pod" + under(uidB) + ".slice", "pod" + strings.ToUpper(uidA), "pod" + uidB, "pod" + uidB + ".slice", "podXYZ"}
	sort.Strings(wantSkipped)
	if got := skippedNames(l); !reflect.DeepEqual(got, wantSkipped) {
		t.Errorf("skipped %q, want %q", got, wantSkipped)
	}
	for _, s := range l.Skipped {
		if s.Reason == "" {
			t.Errorf("skipped %s without a reason", s.Path)
		}
	}
}

func TestDiscoverSystemdHybrid(t *testing.T) {
	mp := hybridTree(t)
	scope := "cri-containerd-" + ctrID + ".scope"
	root := "kubepods.slice"
	for _, h := range []string{"cpu,cpuacct", "memory", "systemd", "unified"} {
		cgroup(t, filepath.Join(mp, h, root, "kubepods-pod"+under(uidA)+".slice", scope), 20)
		cgroup(t, filepath.Join(mp, h, root, "kubepods-besteffort.slice", "kubepods-besteffort-pod"+under(uidB)+".slice", scope), 21)
		cgroup(t, filepath.Join(mp, h, root, "kubepods-burstable.slice"))
	}
	for _, name := range []string{
		"kubepods-burstable-pod" + under(uidStatic) + ".slice", // burstable name in the besteffort slice
		"kubepods-besteffort-pod" + uidA + ".slice",            // dashes in the UID
		"pod" + uidA, // cgroupfs name
		"system.slice",
	} {
		cgroup(t, filepath.Join(mp, "memory", root, "kubepods-besteffort.slice", name))
	}

	l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods"}, nil)
	if !l.Ready {
		t.Fatalf("not ready: %v", l.Err)
	}
	if l.Driver != DriverSystemd {
		t.Fatalf("driver %q, want systemd (kubepods.slice exists)", l.Driver)
	}
	var pathsA, pathsB []string
	for _, h := range []string{"cpu,cpuacct", "memory", "systemd", "unified"} {
		pathsA = append(pathsA, filepath.Join(mp, h, root, "kubepods-pod"+under(uidA)+".slice"))
		pathsB = append(pathsB, filepath.Join(mp, h, root, "kubepods-besteffort.slice", "kubepods-besteffort-pod"+under(uidB)+".slice"))
	}
	want := map[string]PodCgroup{
		uidA: {UID: uidA, QOS: QOSGuaranteed, Driver: DriverSystemd, Root: "kubepods", Paths: pathsA, Containers: []string{scope}, Procs: 1, Inspected: true},
		uidB: {UID: uidB, QOS: QOSBestEffort, Driver: DriverSystemd, Root: "kubepods", Paths: pathsB, Containers: []string{scope}, Procs: 1, Inspected: true},
	}
	for uid, p := range want {
		want[uid] = inspected(t, p)
	}
	if !reflect.DeepEqual(l.Pods, want) {
		t.Errorf("pods\n got %+v\nwant %+v", l.Pods, want)
	}
	if got := skippedNames(l); len(got) != 4 {
		t.Errorf("skipped %q, want the 4 malformed names", got)
	}
}

func TestDiscoverPureV2(t *testing.T) {
	mp := t.TempDir()
	writeFile(t, filepath.Join(mp, "cgroup.controllers"), "cpu memory pids\n")
	cgroup(t, mp, 1)
	// On pure v2 the cgroups directly under the mount are not hierarchies.
	cgroup(t, filepath.Join(mp, "system.slice"), 2)
	cgroup(t, filepath.Join(mp, "kubepods", "burstable", "pod"+uidA, ctrID), 30)

	l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods", Driver: "cgroupfs"}, nil)
	if !l.Ready {
		t.Fatalf("not ready: %v", l.Err)
	}
	if want := []Hierarchy{{Path: mp, Version: V2}}; !reflect.DeepEqual(l.Hierarchies, want) {
		t.Errorf("hierarchies %+v, want %+v", l.Hierarchies, want)
	}
	want := inspected(t, PodCgroup{UID: uidA, QOS: QOSBurstable, Driver: DriverCgroupfs, Root: "kubepods",
		Paths: []string{filepath.Join(mp, "kubepods", "burstable", "pod"+uidA)}, Containers: []string{ctrID}, Procs: 1, Inspected: true})
	if got := l.Pods[uidA]; len(l.Pods) != 1 || !reflect.DeepEqual(got, want) {
		t.Errorf("pods %+v, want only %+v", l.Pods, want)
	}
}

func TestDiscoverDriverChoice(t *testing.T) {
	for _, tc := range []struct {
		rule       string
		driver     string
		slice, dir bool // kubepods.slice and kubepods exist
		want       Driver
	}{
		{"auto_systemd_when_slice_exists", "auto", true, false, DriverSystemd},
		{"auto_systemd_wins_over_cgroupfs", "auto", true, true, DriverSystemd},
		{"auto_cgroupfs_otherwise", "auto", false, true, DriverCgroupfs},
		{"auto_cgroupfs_when_nothing", "auto", false, false, DriverCgroupfs},
		{"empty_means_auto", "", true, false, DriverSystemd},
		{"explicit_cgroupfs_ignores_slice", "cgroupfs", true, true, DriverCgroupfs},
		{"explicit_systemd", "systemd", false, true, DriverSystemd},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			mp := hybridTree(t)
			if tc.slice {
				cgroup(t, filepath.Join(mp, "pids", "kubepods.slice", "kubepods-pod"+under(uidA)+".slice"))
			}
			if tc.dir {
				cgroup(t, filepath.Join(mp, "memory", "kubepods", "pod"+uidB))
			}
			l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods", Driver: tc.driver}, nil)
			if !l.Ready || l.Driver != tc.want {
				t.Fatalf("driver %q ready %v (%v), want %q", l.Driver, l.Ready, l.Err, tc.want)
			}
			// Only the chosen driver's tree is listed.
			for uid, p := range l.Pods {
				if p.Driver != tc.want {
					t.Errorf("pod %s listed with driver %s", uid, p.Driver)
				}
			}
		})
	}
}

func TestDiscoverRootWithDashesSystemd(t *testing.T) {
	mp := hybridTree(t)
	cgroup(t, filepath.Join(mp, "memory", "my_pods.slice", "my_pods-burstable.slice", "my_pods-burstable-pod"+under(uidA)+".slice"))
	l := Discover(context.Background(), Options{Mountpoint: mp, Root: "my-pods"}, nil)
	if !l.Ready || l.Driver != DriverSystemd || len(l.Pods) != 1 || l.Pods[uidA].QOS != QOSBurstable {
		t.Fatalf("got %+v", l)
	}
}

// TestDiscoverSameUIDTwoQoS: a UID found under two QoS classes keeps the
// first; the other is skipped and never touched, whether the pod is looked
// into or known by name only (a pod with listed objects).
func TestDiscoverSameUIDTwoQoS(t *testing.T) {
	for _, tc := range []struct {
		name      string
		inspect   func(string) bool
		wantPaths int
	}{
		{"a candidate", nil, 1},
		{"a pod with listed objects", func(string) bool { return false }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp := hybridTree(t)
			cgroup(t, filepath.Join(mp, "memory", "kubepods", "burstable", "pod"+uidA))
			cgroup(t, filepath.Join(mp, "pids", "kubepods", "besteffort", "pod"+uidA))
			l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods"}, tc.inspect)
			if !l.Ready || l.Pods[uidA].QOS != QOSBurstable || len(l.Pods[uidA].Paths) != tc.wantPaths {
				t.Fatalf("got %+v", l)
			}
			if len(l.Skipped) != 1 || l.Skipped[0].Path != filepath.Join(mp, "pids", "kubepods", "besteffort", "pod"+uidA) {
				t.Errorf("skipped %+v", l.Skipped)
			}
		})
	}
}

func TestDiscoverRootMissingIsReadyAndEmpty(t *testing.T) {
	mp := hybridTree(t)
	l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods"}, nil)
	if !l.Ready || len(l.Pods) != 0 || len(l.Skipped) != 0 || !l.RootMissing {
		t.Fatalf("got %+v; want ready, empty, and the root said missing", l)
	}
	// There, with no pod in it: no pods, and nothing missing.
	if err := os.MkdirAll(filepath.Join(mp, "memory", "kubepods"), 0o755); err != nil {
		t.Fatal(err)
	}
	if l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods"}, nil); !l.Ready || len(l.Pods) != 0 || l.RootMissing {
		t.Fatalf("with the root in one hierarchy: %+v", l)
	}
}

func TestDiscoverNotReady(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		rule  string
		setup func(t *testing.T, mp string) Options
		ctx   context.Context
		want  string // in the error
	}{
		{"mountpoint_missing", func(t *testing.T, mp string) Options {
			return Options{Mountpoint: filepath.Join(mp, "nope"), Root: "kubepods"}
		}, nil, "nope"},
		{"mountpoint_relative", func(t *testing.T, mp string) Options {
			return Options{Mountpoint: "sys/fs/cgroup", Root: "kubepods"}
		}, nil, "absolute"},
		{"mountpoint_not_clean", func(t *testing.T, mp string) Options {
			return Options{Mountpoint: mp + "/../x", Root: "kubepods"}
		}, nil, "clean"},
		{"no_hierarchy_under_mountpoint", func(t *testing.T, mp string) Options {
			return Options{Mountpoint: t.TempDir(), Root: "kubepods"}
		}, nil, "no cgroup hierarchy"},
		{"root_escapes", func(t *testing.T, mp string) Options {
			return Options{Mountpoint: mp, Root: "../etc"}
		}, nil, "../etc"},
		{"unknown_driver", func(t *testing.T, mp string) Options {
			return Options{Mountpoint: mp, Root: "kubepods", Driver: "systemd-cgroup"}
		}, nil, "systemd-cgroup"},
		{"qos_dir_unreadable", func(t *testing.T, mp string) Options {
			writeFile(t, filepath.Join(mp, "memory", "kubepods", "burstable"), "not a directory")
			return Options{Mountpoint: mp, Root: "kubepods"}
		}, nil, filepath.Join("memory", "kubepods", "burstable")},
		{"canceled", func(t *testing.T, mp string) Options {
			return Options{Mountpoint: mp, Root: "kubepods"}
		}, canceled, "canceled"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			mp := hybridTree(t)
			cgroup(t, filepath.Join(mp, "memory", "kubepods", "pod"+uidB), 5)
			opts := tc.setup(t, mp)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			l := Discover(ctx, opts, nil)
			if l.Ready || l.Err == nil || len(l.Pods) != 0 {
				t.Fatalf("ready %v, err %v, %d pods: want not ready with no pods", l.Ready, l.Err, len(l.Pods))
			}
			if !strings.Contains(l.Err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", l.Err, tc.want)
			}
		})
	}
}

// TestAPodCgroupWhoseTreeCannotBeReadIsLeftAloneAndTheOthersListed: one
// pod cgroup whose tree cannot be read (a threaded cgroup v2 subtree, whose
// cgroup.procs fails with EOPNOTSUPP; garbage; an I/O error) is that pod's
// problem: it is listed as unreadable, not inspected (nothing may be done
// to it), and the node's other pod cgroups are listed as usual, every pass.
func TestAPodCgroupWhoseTreeCannotBeReadIsLeftAloneAndTheOthersListed(t *testing.T) {
	for _, tc := range []struct {
		rule  string
		setup func(t *testing.T, mp string)
		want  string // in Unreadable
	}{
		{"its cgroup.procs cannot be read", func(t *testing.T, mp string) {
			if err := os.MkdirAll(filepath.Join(mp, "pids", "kubepods", "pod"+uidA, "cgroup.procs"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "pod" + uidA},
		{"a descendant's cgroup.procs holds garbage", func(t *testing.T, mp string) {
			cgroup(t, filepath.Join(mp, "memory", "kubepods", "pod"+uidA), 7)
			writeFile(t, filepath.Join(mp, "pids", "kubepods", "pod"+uidA, ctrID, "cgroup.procs"), "12\nx\n")
		}, ctrID},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			mp := hybridTree(t)
			cgroup(t, filepath.Join(mp, "memory", "kubepods", "pod"+uidB), 5)
			tc.setup(t, mp)
			for pass := range 2 {
				l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods"}, nil)
				if !l.Ready {
					t.Fatalf("pass %d: not ready (%v): one pod's tree made the node's listing fail", pass, l.Err)
				}
				a := l.Pods[uidA]
				if a.Inspected || !strings.Contains(a.Unreadable, tc.want) {
					t.Errorf("pass %d: pod A inspected %v, unreadable %q: want left alone, saying %q", pass, a.Inspected, a.Unreadable, tc.want)
				}
				if b := l.Pods[uidB]; !b.Inspected || b.Procs != 1 || b.Unreadable != "" {
					t.Errorf("pass %d: pod B %+v: want it inspected as usual, with its process", pass, b)
				}
			}
		})
	}
}

// TestDiscoverRefusesAControlFileThatIsNotARegularFileWithoutBlocking:
// Discover does not check that cgroups.mountpoint is a cgroup file system,
// and a FIFO named cgroup.procs under a wrong one must not block the pass,
// and every later pass, for ever waiting for a writer. It, a device (which
// never ends) and a file larger than any cgroup.procs make the pod
// unreadable, naming the file and what it is.
func TestDiscoverRefusesAControlFileThatIsNotARegularFileWithoutBlocking(t *testing.T) {
	for _, tc := range []struct {
		rule  string
		setup func(t *testing.T, procs string)
		want  string // in the error, after the path of procs
	}{
		{"a FIFO", func(t *testing.T, procs string) {
			if err := unix.Mkfifo(procs, 0o600); err != nil {
				t.Fatal(err)
			}
		}, " is a FIFO, not a regular file"},
		{"a link to a character device", func(t *testing.T, procs string) {
			if err := os.Symlink("/dev/zero", procs); err != nil {
				t.Fatal(err)
			}
		}, " is a character device, not a regular file"},
		{"a file larger than any cgroup.procs", func(t *testing.T, procs string) {
			writeFile(t, procs, strings.Repeat("1\n", maxProcsSize/2+1))
		}, fmt.Sprintf(" is more than %d bytes", maxProcsSize)},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			mp := hybridTree(t)
			dir := filepath.Join(mp, "pids", "kubepods", "pod"+uidA, ctrID)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			procs := filepath.Join(dir, "cgroup.procs")
			tc.setup(t, procs)
			var l Listing
			regularfiletest.ReturnsWithin(t, func() { l = Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods"}, nil) })
			if a := l.Pods[uidA]; !l.Ready || a.Inspected || !strings.Contains(a.Unreadable, procs+tc.want) {
				t.Fatalf("ready %v (%v), pod %+v: want the pod left alone, saying %q", l.Ready, l.Err, a, procs+tc.want)
			}
		})
	}

	t.Run("a FIFO as cpu.weight is not read, and no evidence of a reduced CPU", func(t *testing.T) {
		mp := hybridTree(t)
		dir := filepath.Join(mp, "unified", "kubepods", "pod"+uidA)
		cgroup(t, dir)
		if err := unix.Mkfifo(filepath.Join(dir, "cpu.weight"), 0o600); err != nil {
			t.Fatal(err)
		}
		var l Listing
		regularfiletest.ReturnsWithin(t, func() { l = Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods"}, nil) })
		if !l.Ready || l.Pods[uidA].CPUReduced {
			t.Fatalf("ready %v (%v), CPUReduced %v: want ready, the CPU not reduced", l.Ready, l.Err, l.Pods[uidA].CPUReduced)
		}
	})
}

func TestDiscoverTellsWhetherCPUIsAlreadyReduced(t *testing.T) {
	mp := hybridTree(t)
	// Pod A: v1 shares and v2 weight both at the minimum. Pod B: v1 at the
	// minimum, v2 not. Static pod: no CPU file at all.
	for uid, files := range map[string]map[string]string{
		uidA: {"cpu,cpuacct/cpu.shares": "2\n", "unified/cpu.weight": "1\n"},
		uidB: {"cpu,cpuacct/cpu.shares": "2\n", "unified/cpu.weight": "100\n"},
	} {
		for file, value := range files {
			h, name := filepath.Split(file)
			dir := filepath.Join(mp, h, "kubepods", "pod"+uid)
			cgroup(t, dir)
			writeFile(t, filepath.Join(dir, name), value)
		}
	}
	cgroup(t, filepath.Join(mp, "memory", "kubepods", "pod"+uidStatic))
	l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods", Driver: "cgroupfs"}, nil)
	if !l.Ready {
		t.Fatal(l.Err)
	}
	for uid, want := range map[string]bool{uidA: true, uidB: false, uidStatic: false} {
		if got := l.Pods[uid].CPUReduced; got != want {
			t.Errorf("pod %s: CPUReduced = %v, want %v", uid, got, want)
		}
	}
}

// A pod with listed objects is found by name in every hierarchy, and nothing
// below its pod cgroup is read: on a busy node those are most of the tree.
func TestOnlyCandidatesAreLookedInto(t *testing.T) {
	mp := t.TempDir()
	for _, h := range []string{"cpu,cpuacct", "memory"} {
		cgroup(t, filepath.Join(mp, h), 1)
		cgroup(t, filepath.Join(mp, h, "kubepods", "besteffort", "pod"+uidA, ctrID), 10)
		// A cgroup.procs that does not parse makes its pod unreadable in any
		// listing that reads it.
		cgroup(t, filepath.Join(mp, h, "kubepods", "besteffort", "pod"+uidB, ctrID))
		writeFile(t, filepath.Join(mp, h, "kubepods", "besteffort", "pod"+uidB, ctrID, "cgroup.procs"), "not a pid\n")
	}
	onlyA := func(uid string) bool { return uid == uidA }
	l := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods", Driver: "cgroupfs"}, onlyA)
	if !l.Ready {
		t.Fatalf("not ready: %v (a pod that is not a candidate was looked into)", l.Err)
	}
	a, b := l.Pods[uidA], l.Pods[uidB]
	if !a.Inspected || a.Procs != 1 || !reflect.DeepEqual(a.Containers, []string{ctrID}) || len(a.Paths) != 2 {
		t.Errorf("candidate %+v, want it looked into in both hierarchies", a)
	}
	if _, found := l.Pods[uidB]; !found || b.Inspected || b.Unreadable != "" || b.Procs != 0 || b.Containers != nil || b.Paths != nil {
		t.Errorf("listed pod %+v, want it found by name in both hierarchies and nothing more", b)
	}
	if all := Discover(context.Background(), Options{Mountpoint: mp, Root: "kubepods", Driver: "cgroupfs"}, nil); all.Pods[uidB].Unreadable == "" {
		t.Error("inspecting every pod read the bad cgroup.procs without a word: the test proves nothing")
	}
}
