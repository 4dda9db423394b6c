package podcgroups

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestWhatIsInspectedChangesNoFinding: on random cgroup trees (pods in any
// QoS class and hierarchy, some in two classes, junk names, symlinks and
// control files among them, both drivers), Discover finds the same pods, with
// the same QoS class and the same skips, whichever pods it is told to look
// into; and a pod it looks into is exactly what it is when every pod is. The
// plan's candidates are found by name, so this is what keeps "details for
// candidates only" from losing or changing one.
func TestWhatIsInspectedChangesNoFinding(t *testing.T) {
	for seed := range uint64(80) {
		rng := rand.New(rand.NewPCG(seed, 7))
		mp, uids := randomTree(t, rng, seed)
		opts := Options{Mountpoint: mp, Root: "kubepods"}
		all := Discover(context.Background(), opts, nil)
		if !all.Ready {
			t.Fatalf("seed %d: not ready: %v", seed, all.Err)
		}
		chosen := map[string]bool{}
		for _, uid := range uids {
			chosen[uid] = rng.IntN(2) == 0
		}
		some := Discover(context.Background(), opts, func(uid string) bool { return chosen[uid] })
		// The same skips; a reason may say more of an inspected pod.
		if !some.Ready || some.Driver != all.Driver || !reflect.DeepEqual(skippedPaths(some), skippedPaths(all)) {
			t.Fatalf("seed %d: ready %v (%v), skipped %q; with every pod inspected: %q", seed, some.Ready, some.Err, skippedPaths(some), skippedPaths(all))
		}
		if len(some.Pods) != len(all.Pods) {
			t.Fatalf("seed %d: %d pods found, %d with every pod inspected", seed, len(some.Pods), len(all.Pods))
		}
		for uid, want := range all.Pods {
			got, ok := some.Pods[uid]
			switch {
			case !ok || got.QOS != want.QOS:
				t.Fatalf("seed %d: pod %s found as %+v, with every pod inspected %+v", seed, uid, got, want)
			case chosen[uid] && !reflect.DeepEqual(got, want):
				t.Fatalf("seed %d: inspected pod %s is %+v, with every pod inspected %+v", seed, uid, got, want)
			case !chosen[uid] && (got.Inspected || got.Paths != nil || got.Procs != 0):
				t.Fatalf("seed %d: pod %s was not to be inspected, yet is %+v", seed, uid, got)
			}
		}
	}
}

func skippedPaths(l Listing) []string {
	var paths []string
	for _, s := range l.Skipped {
		paths = append(paths, s.Path)
	}
	return paths
}

// randomTree lays out a random hybrid cgroup tree (randomPod) of 1 to 12
// pods, with either driver, and returns its mountpoint and the pods' UIDs.
func randomTree(t *testing.T, rng *rand.Rand, seed uint64) (string, []string) {
	t.Helper()
	mp := hybridTree(t)
	driver := []Driver{DriverCgroupfs, DriverSystemd}[rng.IntN(2)]
	uids := make([]string, 1+rng.IntN(12))
	for i := range uids {
		uids[i] = fmt.Sprintf("%08x-0000-4000-8000-%012x", seed, i)
		randomPod(t, rng, mp, driver, uids[i])
	}
	return mp, uids
}

var (
	treeHierarchies = []string{"cpu,cpuacct", "memory", "pids", "systemd", "unified"}
	treeClasses     = []string{QOSGuaranteed, QOSBurstable, QOSBestEffort}
)

// randomPod makes the cgroups of pod uid: in one QoS class, in most
// hierarchies (not all: a partial leftover), now and then in a second
// class; with or without processes, a container, a reduced CPU; and now
// and then junk next to it (a name that is no pod's, a symlink, a control
// file).
func randomPod(t *testing.T, rng *rand.Rand, mp string, driver Driver, uid string) {
	t.Helper()
	qos := treeClasses[rng.IntN(3)]
	for _, h := range treeHierarchies {
		if rng.IntN(4) == 0 {
			continue // not in every hierarchy: a partial leftover
		}
		q := qos
		if rng.IntN(10) == 0 {
			q = treeClasses[rng.IntN(3)] // now and then in a second class
		}
		rel, err := podRel(driver, "kubepods", q, uid)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(mp, h, rel)
		var pids []int
		if rng.IntN(2) == 0 {
			pids = []int{100 + rng.IntN(5)}
		}
		cgroup(t, dir, pids...)
		if rng.IntN(2) == 0 {
			cgroup(t, filepath.Join(dir, "ctr"), 200+rng.IntN(5))
		}
		if rng.IntN(8) == 0 {
			writeFile(t, filepath.Join(dir, "cpu.shares"), "2\n")
		}
		parent := filepath.Dir(dir)
		switch rng.IntN(8) {
		case 0:
			_ = os.Mkdir(filepath.Join(parent, "pod-not-a-uid"), 0o755)
		case 1:
			_ = os.Symlink(filepath.Base(dir), filepath.Join(parent, "alias"))
		case 2:
			writeFile(t, filepath.Join(parent, "tasks"), "")
		}
	}
}
