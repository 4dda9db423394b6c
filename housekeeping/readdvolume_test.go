package housekeeping

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestAVolumeDirMadeAgainIsEvidenceOfAReAdd: the teardown left an emptyDir
// x in the pod dir (kubelet's cleanup failed part-way); kubelet removes x
// (or the whole pod dir) later, and a static pod of that UID is put back
// with the same volume: kubelet makes x again, and reuses the pod cgroup
// the teardown left (it writes nothing to an existing one). Compared with
// the first look after the teardown by name only, x was "seen before",
// nothing grew, and the pod being set up again lost its dir and cgroup
// (remove_orphaned = true), or with the defaults its CPU. So a look that
// finds entries gone makes the smaller set the baseline, and x made again
// is growth; and when x goes and comes back between two looks (a period is
// 30 s), every look sees the same names, but x made again is another file:
// a file system hands a freed inode number out again at once (ext4 gives a
// directory removed and made again the same number), not the same birth
// time. Either way the mark is dismissed, whether x comes back before the
// pass or between its plan and its step.
func TestAVolumeDirMadeAgainIsEvidenceOfAReAdd(t *testing.T) {
	uid := testUID(650)
	for _, tc := range []struct {
		name               string
		removeOrphaned     bool
		goneForALook       bool // a look sees x gone before it comes back
		wholePodDir        bool // the whole pod dir goes, not x alone
		betweenPlanAndStep bool
	}{
		{"remove_orphaned = true, x gone for a look, made again before the pass", true, true, false, false},
		{"remove_orphaned = true, x gone for a look, made again between plan and step", true, true, false, true},
		{"the defaults, x gone for a look, made again before the pass", false, true, false, false},
		{"the defaults, x gone for a look, made again between plan and step", false, true, false, true},
		{"remove_orphaned = true, x made again between two looks", true, false, false, false},
		{"the defaults, x made again between two looks", false, false, false, false},
		{"remove_orphaned = true, the pod dir made again between two looks", true, false, true, false},
		{"remove_orphaned = true, x made again between plan and step", true, false, false, true},
		{"the defaults, x made again between plan and step", false, false, false, true},
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
			gone := x
			if tc.wholePodDir {
				gone = pod
			}
			remove := func() {
				time.Sleep(10 * time.Millisecond) // a birth time apart, whatever the clock's grain
				if err := os.RemoveAll(gone); err != nil {
					t.Fatal(err)
				}
			}
			if tc.goneForALook {
				remove()
			}
			o.pass(3 * time.Minute)
			if len(o.files.done) > 0 {
				t.Fatalf("node steps %v before the grace ran out: the test proves nothing", o.files.done)
			}
			remake := func() {
				if !tc.goneForALook {
					remove()
				}
				if err := os.MkdirAll(x, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.betweenPlanAndStep {
				o.race = remake
			} else {
				remake()
			}
			o.pass(6 * time.Minute) // past leak_grace: the pod is being set up again
			if len(o.files.done) > 0 {
				t.Fatalf("%s was removed and made again since the first look, and the plugin took node steps %v on the pod being set up", gone, o.files.done)
			}
			o.race = func() {}
			o.pass(7 * time.Minute)
			if len(o.files.done) > 0 || o.loop.tornDown[uid] != nil {
				t.Fatalf("a pass later: node steps %v, still marked torn down %v", o.files.done, o.loop.tornDown[uid] != nil)
			}
		})
	}
}

// TestAWorkloadRewritingItsFileIsNoReAdd: the teardown left a disk emptyDir
// with the workload's files in it (kubelet's volume teardown is stuck), and
// a process that escaped the kill still runs in the pod cgroup, rewriting
// its state file the usual way (write a temp file, rename it over the
// name). Every look sees the same names; the file under the name is
// another each time. That is the workload, not kubelet: only kubelet makes
// the pod dir and the volume dirs, and it makes nothing inside a volume.
// The pod cgroup's CPU must still be reduced (the defaults: its volumes
// remain), a leak_grace after the teardown, as it was before identities.
func TestAWorkloadRewritingItsFileIsNoReAdd(t *testing.T) {
	uid := testUID(660)
	root := podDirs(t, uid)
	cg := fakeCgroups(t, uid)
	o := newOrphanedPod(t, uid, root, cg, false)
	data := filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(data, "state.json")
	rewrite := func() {
		time.Sleep(10 * time.Millisecond) // a birth time apart
		tmp := state + ".tmp"
		if err := os.WriteFile(tmp, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, state); err != nil {
			t.Fatal(err)
		}
	}
	rewrite()
	o.pass(0) // the first look after the teardown
	rewrite()
	o.pass(3 * time.Minute)
	if len(o.files.done) > 0 {
		t.Fatalf("node steps %v before the grace ran out: the test proves nothing", o.files.done)
	}
	rewrite()
	o.pass(6 * time.Minute) // past leak_grace
	if want := "ReducePodCgroupCPU " + uid; !slices.Contains(o.files.done, want) {
		t.Fatalf("node steps %v, still marked torn down: %v; want %q: the orphaned pod's process rewriting its own file is no evidence of a re-add",
			o.files.done, o.loop.tornDown[uid] != nil, want)
	}
}
