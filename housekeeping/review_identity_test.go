package housekeeping

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

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
