package housekeeping

// The loop's lifecycle: each test here failed before its fix (an
// independent review's proof tests).

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
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

// passObserver records the outcomes ObservePass was told.
type passObserver struct {
	partsObserver
	mu       sync.Mutex
	outcomes []string
}

func (o *passObserver) ObservePass(outcome string, _ time.Duration, _ time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes = append(o.outcomes, outcome)
}

// A stop (SIGTERM, the NRI connection lost) that cuts the runtime listing
// short is no failure of the runtime: nothing is warned of or counted as a
// failed listing, and the next listing that fails is said as the first.
// (It was a warning, "the runtime listing failed … context canceled", and
// a listing_failed pass, on a normal stop.)
func TestAStopDuringTheListingSaysNoListingFailure(t *testing.T) {
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{}, fmt.Errorf("listing pod sandboxes: %w", context.Canceled))
	log, buf := testLogger()
	obs := &passObserver{}
	loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: t.TempDir(), Observer: obs,
		Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := loop.Pass(ctx); !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("pass error %v, want the listing's, cut short", r.Err)
	}
	if strings.Contains(buf.String(), "level=warning") || strings.Contains(buf.String(), "level=error") {
		t.Errorf("a listing cut short by a stop was warned of:\n%s", buf.String())
	}
	if slices.Contains(obs.outcomes, "listing_failed") || loop.failures != 0 {
		t.Errorf("observed %q, %d failures counted, for a listing cut short by a stop", obs.outcomes, loop.failures)
	}
}

// A stop during start-up, before the state file is locked, is no failure of
// the file: nothing says to check housekeeping.state_file, nothing is
// degraded, and Close writes the file.
func TestAStopBeforeTheStateFileIsLockedSaysNoStateFileFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "state.json")
	log, buf := testLogger()
	obs := &partsObserver{}
	loop := New(podstate.New(0), &fakeRuntime{}, Options{Period: time.Minute, KubeletRoot: t.TempDir(), StateFile: path, Observer: obs,
		Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	loop.Restore(ctx)
	if err := loop.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "level=warning") || strings.Contains(buf.String(), "level=error") {
		t.Errorf("a stop before the state file was locked was warned of:\n%s", buf.String())
	}
	if degraded, _ := obs.told(PartStateFile); degraded {
		t.Error("a stop before the state file was locked left degraded{part=\"state-file\"} set")
	}
	if _, err := statefile.Load(context.Background(), path); err != nil {
		t.Fatalf("after Close: %v, want the state file written", err)
	}
}
