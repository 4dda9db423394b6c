package housekeeping

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAVolumeDirGoneThenMadeAgainIsEvidenceOfAReAdd: the teardown left an
// emptyDir x in the pod dir (kubelet's cleanup failed part-way), kubelet
// removed it later, and then a static pod of that UID was put back with the
// same volume: kubelet makes x again, and reuses the pod cgroup the
// teardown left (it writes nothing to an existing one). Compared with the
// first look after the teardown only, x was "seen before", nothing grew,
// and the pod being set up again lost its dir and cgroup, or with the
// defaults its CPU. A look that finds entries gone makes the smaller set
// the baseline, so x made again is growth: the mark is dismissed, whether
// x comes back before the pass or between its plan and its step.
func TestAVolumeDirGoneThenMadeAgainIsEvidenceOfAReAdd(t *testing.T) {
	uid := testUID(650)
	for _, tc := range []struct {
		name               string
		removeOrphaned     bool
		betweenPlanAndStep bool
	}{
		{"remove_orphaned = true, x made again before the pass", true, false},
		{"remove_orphaned = true, x made again between plan and step", true, true},
		{"the defaults, x made again before the pass", false, false},
		{"the defaults, x made again between plan and step", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			cg := fakeCgroups(t, uid) // the teardown left the pod cgroup
			o := newOrphanedPod(t, uid, root, cg, tc.removeOrphaned)
			x := filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "x")
			mkdir := func() {
				if err := os.MkdirAll(x, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			mkdir()
			o.pass(0) // the first look after the teardown: x is there
			if err := os.Remove(x); err != nil {
				t.Fatal(err)
			}
			o.pass(3 * time.Minute) // kubelet's cleanup removed x
			if len(o.files.done) > 0 {
				t.Fatalf("node steps %v before the grace ran out: the test proves nothing", o.files.done)
			}
			if tc.betweenPlanAndStep {
				o.race = mkdir
			} else {
				mkdir()
			}
			o.pass(6 * time.Minute) // past leak_grace: the pod is being set up again
			if len(o.files.done) > 0 {
				t.Fatalf("x, gone since the first look, was made again, and the plugin took node steps %v on the pod being set up", o.files.done)
			}
			if tc.betweenPlanAndStep && o.loop.tornDown[uid] == nil {
				return // dismissed at the step's check: the next passes see the growth too
			}
			o.pass(7 * time.Minute)
			if len(o.files.done) > 0 || o.loop.tornDown[uid] != nil {
				t.Fatalf("a pass later: node steps %v, still marked torn down %v", o.files.done, o.loop.tornDown[uid] != nil)
			}
		})
	}
}

// TestADirRemadeWithinOnePeriodIsEvidenceOfAReAdd: as above, but kubelet
// removes x (or the whole pod dir) and a static pod of that UID put back
// makes it again between two looks of the plugin (a period is 30 s): every
// look sees the same names, so names alone show no growth, and the pod
// being set up again lost its dir and cgroup (remove_orphaned = true) or
// its CPU (the defaults). A name made again is another file: a
// file system hands a freed inode number out again at once (ext4 gives a
// directory removed and made again the same number), but not the same
// birth time.
func TestADirRemadeWithinOnePeriodIsEvidenceOfAReAdd(t *testing.T) {
	uid := testUID(652)
	for _, tc := range []struct {
		name               string
		removeOrphaned     bool
		wholePodDir        bool
		betweenPlanAndStep bool
	}{
		{"remove_orphaned = true, x made again", true, false, false},
		{"the defaults, x made again", false, false, false},
		{"remove_orphaned = true, the pod dir made again", true, true, false},
		{"remove_orphaned = true, x made again between plan and step", true, false, true},
		{"the defaults, x made again between plan and step", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			cg := fakeCgroups(t, uid) // the teardown left the pod cgroup: kubelet reuses it
			o := newOrphanedPod(t, uid, root, cg, tc.removeOrphaned)
			pod := filepath.Join(root, "pods", uid)
			x := filepath.Join(pod, "volumes", "kubernetes.io~empty-dir", "x")
			if err := os.MkdirAll(x, 0o755); err != nil {
				t.Fatal(err)
			}
			o.pass(0) // the first look after the teardown: x is there
			remake := func() {
				gone := x
				if tc.wholePodDir {
					gone = pod
				}
				time.Sleep(10 * time.Millisecond) // a birth time apart, whatever the clock's grain
				if err := os.RemoveAll(gone); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(x, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			o.pass(3 * time.Minute) // nothing changed yet
			if len(o.files.done) > 0 {
				t.Fatalf("node steps %v before the grace ran out: the test proves nothing", o.files.done)
			}
			if tc.betweenPlanAndStep {
				o.race = remake
			} else {
				remake()
			}
			o.pass(6 * time.Minute) // past leak_grace: the pod is being set up again
			if len(o.files.done) > 0 {
				t.Fatalf("the pod dir's %s was removed and made again since the last look, and the plugin took node steps %v on the pod being set up",
					map[bool]string{true: "whole dir", false: "volume dir x"}[tc.wholePodDir], o.files.done)
			}
			o.race = func() {}
			o.pass(7 * time.Minute)
			if len(o.files.done) > 0 || o.loop.tornDown[uid] != nil {
				t.Fatalf("a pass later: node steps %v, still marked torn down %v", o.files.done, o.loop.tornDown[uid] != nil)
			}
		})
	}
}
