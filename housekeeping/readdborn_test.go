package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// TestAPodDirBornAfterThePodsRemovalIsEvidenceOfAReAdd: a static pod put
// back in its manifest dir keeps its UID; kubelet makes its pod dir again
// before its sandbox runs (which may not, for minutes: CNI not ready, the
// pause image not pulled). A changed identity between two looks tells that
// only when a look saw the dir before the re-add. Where none did — the
// re-add came before the first pass after the teardown, or while the
// plugin was down — the dir's birth time, after the pod's removal, tells.
// A dir born before the removal is no evidence: it is reclaimed after
// leak_grace, restart or not.
//
// Birth times are real (statx), so the test's clock is the wall clock
// from the removal on.
func TestAPodDirBornAfterThePodsRemovalIsEvidenceOfAReAdd(t *testing.T) {
	uid := testUID(503)
	for _, tc := range []struct {
		name    string
		restart bool // the plugin is restarted from its state file after its first look
		readd   bool // kubelet makes the pod dir again after the removal
	}{
		{"put back before the first pass after its teardown", false, true},
		{"put back while the plugin was down", true, true},
		{"a dir the teardown left, not made again, is reclaimed", false, false},
		{"a dir the teardown left, not made again, is reclaimed across a restart", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t)
			dir := filepath.Join(root, "pods", uid)
			makeDir := func() {
				if err := os.MkdirAll(filepath.Join(dir, "volumes", "kubernetes.io~empty-dir", "data"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			makeDir()
			skipWithoutBirthTimes(t, root, uid)
			removed := time.Now() // the dir is older
			state := removedAt(t, uid, removed)
			readd := func() {
				if !tc.readd {
					return
				}
				// A clock tick later: a file system dates a file by the
				// kernel's coarse clock.
				time.Sleep(25 * time.Millisecond)
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				makeDir()
			}
			files := &podDirRemover{root: root}
			rt := &fakeRuntime{}
			opts := birthTimeOptions(t, root, files)
			log, buf := testLogger()
			logs := buf.String
			loop := New(state, rt, opts, log)
			loop.now = func() time.Time { return removed }
			loop.started = removed.Add(-time.Hour)
			pass := func(at time.Time) {
				rt.set(cri.Snapshot{TakenAt: at}, nil) // kubelet's sandbox never starts
				loop.now = func() time.Time { return at }
				loop.Pass(context.Background())
			}
			if tc.restart {
				opts.StateFile = filepath.Join(t.TempDir(), "state.json")
				loop = New(state, rt, opts, log)
				loop.started = removed.Add(-time.Hour)
				pass(time.Now()) // the first look after the teardown
				if loop.tornDown[uid] == nil || loop.tornDown[uid].seen == nil {
					t.Fatal("the first run did not see the pod torn down, its dir looked at: the test proves nothing")
				}
				readd()
				loop, logs = restartedLoop(loop, opts, rt, time.Now())
			} else {
				readd()
			}
			for at := 30 * time.Second; at <= 8*time.Minute; at += 30 * time.Second {
				pass(removed.Add(at))
			}
			reclaimed := len(files.done) > 0
			switch {
			case tc.readd && reclaimed:
				t.Fatalf("kubelet made the pod dir again after the pod's removal (its sandbox not started yet), and the plugin took node steps %v on it", files.done)
			case !tc.readd && !reclaimed:
				t.Fatalf("a pod dir left by the teardown (born before it) was not reclaimed 8 minutes after it (leak_grace 5m); torn-down mark: %v\n%s",
					loop.tornDown[uid] != nil, logs())
			}
			if tc.readd && !strings.Contains(logs(), "after the pod's removal") {
				t.Errorf("the log does not say why the pod is no longer treated as orphaned:\n%s", logs())
			}
		})
	}
}

// skipWithoutBirthTimes skips a test whose pod dir (uid's under root) has
// no birth time: its file system keeps none, and there is nothing to test.
// The file system is asked directly, not through the code under test: code
// that stopped reading birth times must fail, not skip.
func skipWithoutBirthTimes(t *testing.T, root, uid string) {
	t.Helper()
	var stx unix.Statx_t
	path := filepath.Join(root, "pods", uid)
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &stx); err != nil {
		t.Fatal(err)
	}
	if stx.Mask&unix.STATX_BTIME == 0 {
		t.Skipf("the file system of %s keeps no birth time", path)
	}
	d, err := nodefs.InspectPodDir(context.Background(), root, uid)
	if err != nil {
		t.Fatal(err)
	}
	if id := d.Identities[d.Path]; !strings.HasPrefix(id, "born ") {
		t.Fatalf("the file system keeps birth times, but the pod dir's identity has none (%q)", id)
	}
}

// removedAt is podstate after NRI reported pod uid run an hour before
// removed, then stopped and removed at removed.
func removedAt(t *testing.T, uid string, removed time.Time) *podstate.State {
	t.Helper()
	state := podstate.New(0)
	applyTeardown(t, state, uid, "first", removed.Add(-time.Hour), removed)
	return state
}

// birthTimeOptions are a loop's options with birth times compared, as the
// plugin has them, orphaned pod dirs removed through files, and leak_grace
// 5 minutes.
func birthTimeOptions(t *testing.T, root string, files *podDirRemover) Options {
	return Options{Period: 30 * time.Second, KubeletRoot: root, Synchronized: func() bool { return true },
		CompareBirthTimes: true, Executor: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
		Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, RemoveOrphanedPodDirs: true,
			PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir(),
			Budget: gc.Budget{MaxPerPass: 10, MaxFraction: 1, MinPerPass: 10, MaxPerHour: 100}}}
}
