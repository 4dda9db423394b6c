package housekeeping

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// TestTornDownMarksDoNotGrowAcrossRestartsWhileTheOracleIsNotReady: as
// TestTornDownMarksDoNotGrowWhileTheOracleIsNotReady, with the plugin
// restarted every 20 minutes (containerd relaunching a pre-registered
// plugin, an OOM kill, a rollout). A mark no readable pods dir has ever
// checked goes with podstate's record of the pod; restored from the state
// file, it must not become one that never goes, or every restart adds the
// last ten minutes' teardowns to the marks for good, in memory and in the
// state file.
func TestTornDownMarksDoNotGrowAcrossRestartsWhileTheOracleIsNotReady(t *testing.T) {
	rt := &fakeRuntime{}
	opts := Options{Period: 30 * time.Second, KubeletRoot: t.TempDir(), Synchronized: func() bool { return true },
		StateFile: filepath.Join(t.TempDir(), "state.json"), Policy: reviewPolicy(t.TempDir())}
	var loop *Loop
	n := 0
	for run := range 6 {
		start := now.Add(time.Duration(run) * 20 * time.Minute)
		loop, _ = restartedLoop(loop, opts, rt, start)
		for pass := range 40 {
			at := start.Add(time.Duration(pass) * 30 * time.Second)
			for range 5 {
				p := ident(testUID(20000 + n))
				n++
				for _, k := range []podstate.EventKind{podstate.RunPodSandbox, podstate.StopPodSandbox, podstate.RemovePodSandbox} {
					_ = loop.state.Apply(podstate.Event{Kind: k, At: at.Add(-time.Second), Pod: p, SandboxID: "sb-" + p.UID})
				}
			}
			rt.set(cri.Snapshot{TakenAt: at}, nil)
			loop.now = func() time.Time { return at }
			if r := loop.Pass(context.Background()); r.Plan.NotReady == "" {
				t.Fatal("the oracle is ready: the test needs one that is not")
			}
		}
	}
	if pods, marks := len(loop.state.View().Pods), len(loop.tornDown); marks > pods {
		t.Fatalf("after 6 runs podstate keeps %d pods (retention %s) but the loop keeps %d torn-down marks: each restart made the marks it restored permanent",
			pods, podstate.DefaultRetention, marks)
	}
}
