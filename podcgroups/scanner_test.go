package podcgroups

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var scanStart = time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)

const (
	uidC = "3c4d5e6f-0a1b-4c2d-9e8f-00000000000c"
	uidD = "3c4d5e6f-0a1b-4c2d-9e8f-00000000000d"
)

// podIn makes pod uid's besteffort cgroup (cgroupfs) in the given
// hierarchies of a hybridTree, each with process pid.
func podIn(t *testing.T, mp, uid string, pid int, hierarchies ...string) {
	t.Helper()
	for _, h := range hierarchies {
		cgroup(t, filepath.Join(mp, h, "kubepods", "besteffort", "pod"+uid), pid)
	}
}

func hasSkip(l Listing, path string) bool {
	for _, s := range l.Skipped {
		if s.Path == path {
			return true
		}
	}
	return false
}

// TestScannerReadsOnlyThePrimaryBetweenFullScans: the primary is where the
// full scan found the most pods; until the next full scan only its parents
// are read, so what appears elsewhere alone (junk, a pod cgroup kubelet did
// not make everywhere) waits for it, while a pod in the primary that is to
// be looked into is found in every hierarchy.
func TestScannerReadsOnlyThePrimaryBetweenFullScans(t *testing.T) {
	ctx := context.Background()
	mp := hybridTree(t)
	podIn(t, mp, uidA, 10, "cpu,cpuacct", "memory", "pids", "unified")
	podIn(t, mp, uidB, 11, "memory", "pids", "unified")
	podIn(t, mp, uidStatic, 12, "memory", "systemd")
	sc := NewScanner(Options{Mountpoint: mp, Root: "kubepods"}, FullScanEvery)
	all := func(string) bool { return true }
	if l := sc.Discover(ctx, scanStart, all); !l.Ready || len(l.Pods) != 3 {
		t.Fatalf("full scan: %+v", l)
	}
	if got, want := sc.Primary(), filepath.Join(mp, "memory"); got != want {
		t.Fatalf("primary %s, want %s: the hierarchy with the most pods, the first of those", got, want)
	}

	junk := filepath.Join(mp, "pids", "kubepods", "besteffort", "junk")
	cgroup(t, junk)
	podIn(t, mp, uidC, 13, "pids") // made elsewhere alone
	podIn(t, mp, uidD, 14, "memory", "pids", "cpu,cpuacct")
	l := sc.Discover(ctx, scanStart.Add(FullScanEvery-time.Second), all)
	if !l.Ready || hasSkip(l, junk) {
		t.Errorf("between full scans, junk outside the primary is reported: %+v", l)
	}
	if _, ok := l.Pods[uidC]; ok {
		t.Errorf("between full scans, a pod outside the primary alone is found: %+v", l.Pods[uidC])
	}
	want := []string{filepath.Join(mp, "cpu,cpuacct", "kubepods", "besteffort", "pod"+uidD),
		filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uidD), filepath.Join(mp, "pids", "kubepods", "besteffort", "pod"+uidD)}
	if got := l.Pods[uidD]; !got.Inspected || !reflect.DeepEqual(got.Paths, want) || got.Procs != 1 {
		t.Errorf("a new pod looked into is %+v, want every path %q", got, want)
	}

	l = sc.Discover(ctx, scanStart.Add(FullScanEvery), all)
	if !hasSkip(l, junk) || l.Pods[uidC].UID != uidC {
		t.Errorf("the full scan due finds neither the junk nor the pod outside the primary: %+v", l)
	}
	if !reflect.DeepEqual(l, Discover(ctx, Options{Mountpoint: mp, Root: "kubepods"}, all)) {
		t.Errorf("a full scan differs from Discover")
	}
}

// TestScannerFindsAPodRemovedFromThePrimaryOnly: a pod cgroup removed from
// the primary but not from every hierarchy (a removal that failed half
// way) is looked up by name, and found with what is left, until it is gone.
func TestScannerFindsAPodRemovedFromThePrimaryOnly(t *testing.T) {
	ctx := context.Background()
	mp := hybridTree(t)
	podIn(t, mp, uidA, 10, "memory", "pids", "unified")
	podIn(t, mp, uidB, 11, "memory", "pids", "unified")
	sc := NewScanner(Options{Mountpoint: mp, Root: "kubepods"}, FullScanEvery)
	listed := func(uid string) bool { return uid != uidA } // A is live: not looked into
	sc.Discover(ctx, scanStart, listed)
	if sc.Primary() != filepath.Join(mp, "memory") {
		t.Fatalf("primary %s", sc.Primary())
	}
	for _, uid := range []string{uidA, uidB} {
		if err := os.RemoveAll(filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uid)); err != nil {
			t.Fatal(err)
		}
	}
	for pass := 1; pass <= 2; pass++ {
		l := sc.Discover(ctx, scanStart.Add(time.Duration(pass)*time.Minute), listed)
		want := []string{filepath.Join(mp, "pids", "kubepods", "besteffort", "pod"+uidB), filepath.Join(mp, "unified", "kubepods", "besteffort", "pod"+uidB)}
		if got := l.Pods[uidB]; !reflect.DeepEqual(got.Paths, want) || got.Procs != 1 {
			t.Errorf("pass %d: pod B, removed from the primary only, is %+v; want found at %q", pass, got, want)
		}
		if got := l.Pods[uidA]; got.UID != uidA || got.Inspected {
			t.Errorf("pass %d: live pod A, removed from the primary only, is %+v; want found by name", pass, got)
		}
	}
	for _, h := range []string{"pids", "unified"} {
		if err := os.RemoveAll(filepath.Join(mp, h, "kubepods", "besteffort", "pod"+uidB)); err != nil {
			t.Fatal(err)
		}
	}
	if l := sc.Discover(ctx, scanStart.Add(3*time.Minute), listed); len(l.Pods) != 1 {
		t.Errorf("pod B gone everywhere, yet found: %+v", l.Pods)
	}
}

// TestScannerScansFullyWhen: the cases where a scan reads every hierarchy
// although the last full scan is younger than FullScanEvery.
func TestScannerScansFullyWhen(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change the node after the first scan; it returns the next
		// scan's clock. pods: whether the node has pod cgroups.
		change func(t *testing.T, mp string) time.Time
		pods   bool
	}{
		{"the last full scan found no pod", func(*testing.T, string) time.Time { return scanStart.Add(time.Minute) }, false},
		{"the clock went back", func(*testing.T, string) time.Time { return scanStart.Add(-time.Minute) }, true},
		{"a hierarchy was mounted", func(t *testing.T, mp string) time.Time {
			writeFile(t, filepath.Join(mp, "rdma", "cgroup.procs"), "1\n")
			return scanStart.Add(time.Minute)
		}, true},
		{"the driver changed", func(t *testing.T, mp string) time.Time {
			rel, err := podRel(DriverSystemd, "kubepods", QOSBestEffort, uidC)
			if err != nil {
				t.Fatal(err)
			}
			cgroup(t, filepath.Join(mp, "cpu,cpuacct", rel), 13)
			return scanStart.Add(time.Minute)
		}, true},
		{"most pods are outside the primary", func(t *testing.T, mp string) time.Time {
			for _, uid := range []string{uidA, uidB} {
				if err := os.RemoveAll(filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uid)); err != nil {
					t.Fatal(err)
				}
			}
			// The scan then is partial and finds both outside the
			// primary: the one after is full.
			return scanStart.Add(time.Minute)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mp := hybridTree(t)
			if tc.pods {
				podIn(t, mp, uidA, 10, "memory", "pids")
				podIn(t, mp, uidB, 11, "memory", "pids")
			}
			opts := Options{Mountpoint: mp, Root: "kubepods", Driver: DriverAuto}
			sc := NewScanner(opts, FullScanEvery)
			sc.Discover(ctx, scanStart, nil)
			junk := filepath.Join(mp, "unified", "kubepods", "junk")
			cgroup(t, junk)
			next := tc.change(t, mp)
			if tc.name == "most pods are outside the primary" {
				sc.Discover(ctx, next, nil)
				next = next.Add(time.Second)
			}
			// Only a full scan sees the junk outside the primary (with
			// the systemd driver, it is not in a pod parent at all).
			l := sc.Discover(ctx, next, nil)
			if !reflect.DeepEqual(l, Discover(ctx, opts, nil)) || l.Driver == DriverCgroupfs && !hasSkip(l, junk) {
				t.Errorf("not a full scan: %+v", l)
			}
		})
	}
}

// TestFindFindsOnePodAsAFullScanDoes: a check right before a step looks one
// pod up by name in every hierarchy and gets what a full scan gets for it,
// inode numbers included; a pod with no cgroup is not found, and a tree
// that cannot be read is an error, not "none".
func TestFindFindsOnePodAsAFullScanDoes(t *testing.T) {
	ctx := context.Background()
	mp := hybridTree(t)
	podIn(t, mp, uidA, 10, "cpu,cpuacct", "memory", "pids", "unified")
	podIn(t, mp, uidB, 11, "pids")
	opts := Options{Mountpoint: mp, Root: "kubepods"}
	full := Discover(ctx, opts, nil)
	for _, uid := range []string{uidA, uidB} {
		pod, found, err := Find(ctx, opts, uid)
		if err != nil || !found || !reflect.DeepEqual(pod, full.Pods[uid]) {
			t.Errorf("Find(%s) = %+v, %v, %v; want %+v", uid, pod, found, err, full.Pods[uid])
		}
	}
	if pod, found, err := Find(ctx, opts, uidC); err != nil || found {
		t.Errorf("Find of a pod with no cgroup = %+v, %v, %v; want not found", pod, found, err)
	}
	if _, _, err := Find(ctx, Options{Mountpoint: filepath.Join(mp, "nonexistent"), Root: "kubepods"}, uidA); err == nil {
		t.Error("Find under a mountpoint that does not exist: no error")
	}
}
