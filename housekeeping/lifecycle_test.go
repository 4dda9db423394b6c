package housekeeping

// The loop's lifecycle: each test here failed before its fix (an
// independent review's proof tests).

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// TestAPassCutShortByShutdownSaysNoStateFileFailure: a pass that ends with
// its context (SIGTERM, a pre-registered plugin's NRI connection lost)
// cannot write the state file, and Close writes it right after. The pass
// still said, at error level, "cannot write the state file: a restart now
// would forget ...; check housekeeping.state_file" and set
// degraded{part="state-file"}: on every such shutdown the operator was told
// to fix a file that was fine and written a moment later.
func TestAPassCutShortByShutdownSaysNoStateFileFailure(t *testing.T) {
	uid := testUID(12)
	root := podDirs(t, uid)
	path := filepath.Join(t.TempDir(), "state", "state.json")
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	log, buf := testLogger()
	obs := &partsObserver{}
	loop := New(tornDownState(t, uid), rt, Options{Period: time.Minute, KubeletRoot: root, StateFile: path, Observer: obs,
		Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	loop.Restore(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the plugin is stopping while the pass runs
	loop.Pass(ctx)
	if loop.tornDown[uid] == nil {
		t.Fatal("the pass saw no pod torn down: nothing to write, the test proves nothing")
	}
	if strings.Contains(buf.String(), "cannot write the state file") || strings.Contains(buf.String(), "cannot lock the state file") {
		t.Errorf("a pass cut short by shutdown said the state file failed:\n%s", buf.String())
	}
	if degraded, _ := obs.told(PartStateFile); degraded {
		t.Error("a pass cut short by shutdown set degraded{part=\"state-file\"}")
	}
	if err := loop.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := statefile.Load(context.Background(), path); err != nil || len(s.TornDown) != 1 {
		t.Fatalf("after Close the state file holds %+v (%v), want the pod seen torn down", s.TornDown, err)
	}
}
