package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
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
			policy := reviewPolicy(t.TempDir())
			policy.LeakGrace, policy.RemoveOrphanedPodDirs = 5*time.Minute, tc.removeOrphaned
			files := &podDirRemover{root: root}
			x := filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "x")
			before := func() {}
			exec := racingExecutor{before: func() { before() }, inner: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil)}
			rt := &fakeRuntime{}
			log, _ := testLogger()
			loop := New(tornDownState(t, uid), rt, Options{Period: time.Minute, KubeletRoot: root, Cgroups: cg, Executor: exec,
				Synchronized: func() bool { return true }, Policy: policy}, log)
			loop.started = now.Add(-time.Hour)
			pass := func(at time.Duration) {
				rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
				loop.now = func() time.Time { return now.Add(at) }
				loop.Pass(context.Background())
			}
			mkdir := func() {
				if err := os.MkdirAll(x, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			mkdir()
			pass(0) // the first look after the teardown: x is there
			if err := os.Remove(x); err != nil {
				t.Fatal(err)
			}
			pass(3 * time.Minute) // kubelet's cleanup removed x
			if len(files.done) > 0 {
				t.Fatalf("node steps %v before the grace ran out: the test proves nothing", files.done)
			}
			if tc.betweenPlanAndStep {
				before = mkdir
			} else {
				mkdir()
			}
			pass(6 * time.Minute) // past leak_grace: the pod is being set up again
			if len(files.done) > 0 {
				t.Fatalf("x, gone since the first look, was made again, and the plugin took node steps %v on the pod being set up", files.done)
			}
			if tc.betweenPlanAndStep && loop.tornDown[uid] == nil {
				return // dismissed at the step's check: the next passes see the growth too
			}
			pass(7 * time.Minute)
			if len(files.done) > 0 || loop.tornDown[uid] != nil {
				t.Fatalf("a pass later: node steps %v, still marked torn down %v", files.done, loop.tornDown[uid] != nil)
			}
		})
	}
}
