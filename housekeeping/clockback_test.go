package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
)

// TestAPodDirBornUnderAClockSinceSetBackIsNoEvidenceOfAReAdd: a node that
// boots with its RTC ahead runs pods until NTP sets the clock back. A pod
// dir made before that, of a pod removed a little after it, has a birth
// time after the pod's removal, on the clock as it reads now: it was not
// made again. Its birth time is after the look that sees it, which no
// file made since can be: it tells nothing, at that look or a later one,
// and the dir the teardown left is reclaimed after leak_grace.
func TestAPodDirBornUnderAClockSinceSetBackIsNoEvidenceOfAReAdd(t *testing.T) {
	uid := testUID(504)
	root := podDirs(t)
	dir := filepath.Join(root, "pods", uid)
	if err := os.MkdirAll(filepath.Join(dir, "volumes", "kubernetes.io~empty-dir", "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	skipWithoutBirthTimes(t, root, uid)
	// Made now; the clock is then set back 3 minutes, and the pod removed
	// a minute later: 2 minutes before now, as the clock reads then.
	removed := time.Now().Add(-2 * time.Minute)
	state := removedAt(t, uid, removed)
	files := &podDirRemover{root: root}
	rt := &fakeRuntime{}
	opts := birthTimeOptions(t, root, files)
	log, buf := testLogger()
	loop := New(state, rt, opts, log)
	loop.started = removed.Add(-time.Hour)
	for at := 30 * time.Second; at <= 8*time.Minute; at += 30 * time.Second {
		now := removed.Add(at)
		rt.set(cri.Snapshot{TakenAt: now}, nil)
		loop.now = func() time.Time { return now }
		loop.Pass(context.Background())
	}
	if len(files.done) == 0 {
		t.Fatalf("a pod dir the teardown left, made before the clock was set back, was not reclaimed 8 minutes after the pod's removal (leak_grace 5m); torn-down mark: %v\n%s",
			loop.tornDown[uid] != nil, buf.String())
	}
}

// TestThePluginComparesBirthTimes: the plugin's clock and NRI events'
// times are the wall clock, as birth times are; only tests that fake the
// clock leave the comparison off. Flipped off, the plugin would lose the
// only evidence of a re-add no look saw, and no other test would fail.
func TestThePluginComparesBirthTimes(t *testing.T) {
	if !OptionsFromConfig(config.Default()).CompareBirthTimes {
		t.Fatal("OptionsFromConfig leaves CompareBirthTimes off")
	}
}
