package housekeeping

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/regularfile/regularfiletest"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// TestTakingTheStateFileOverKeepsADismissedMarkDismissed: a torn-down mark
// the running plugin dismissed on evidence of a re-add (kubelet made the pod
// cgroup again) must not come back for the same teardown. When the plugin
// is the second on a state file and takes the file over from the first,
// the first plugin's mark for that UID must not be restored: without its
// cgroup baseline, the re-made cgroup would become the baseline, and one
// leak_grace later the pod kubelet is setting up would be reclaimed as
// orphaned.
func TestTakingTheStateFileOverKeepsADismissedMarkDismissed(t *testing.T) {
	for _, tc := range []struct {
		name           string
		removeOrphaned bool
		emptyDir       bool
	}{
		{"remove_orphaned = true", true, false},
		{"the defaults (remove_orphaned = false), a pod with an emptyDir", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) { takeOverAfterAReAdd(t, tc.removeOrphaned, tc.emptyDir) })
	}
}

func takeOverAfterAReAdd(t *testing.T, removeOrphaned, emptyDir bool) {
	uid := testUID(901)
	root := podDirs(t, uid) // the pod dir lingered after the teardown
	if emptyDir {
		if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "data"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cg := fakeCgroups(t) // no pod cgroup left after the teardown
	stateFile := filepath.Join(t.TempDir(), "state.json")
	rt := &fakeRuntime{}
	newLoop := func() (*Loop, *podDirRemover) {
		policy := reviewPolicy(t.TempDir())
		policy.LeakGrace, policy.RemoveOrphanedPodDirs = 5*time.Minute, removeOrphaned
		files := &podDirRemover{root: root}
		log, _ := testLogger()
		l := New(recentlyTornDown(t, uid), rt, Options{Period: time.Minute, KubeletRoot: root, Cgroups: cg, StateFile: stateFile,
			Executor:     executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
			Synchronized: func() bool { return true }, Policy: policy}, log)
		l.started = now.Add(-time.Hour)
		l.Restore(context.Background())
		return l, files
	}
	first, _ := newLoop()
	second, files := newLoop()
	t.Cleanup(func() { _ = first.Close(); _ = second.Close() })
	pass := func(l *Loop, at time.Duration) {
		rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil) // kubelet's sandbox never starts
		l.now = func() time.Time { return now.Add(at) }
		l.Pass(context.Background())
	}
	pass(first, 0)                       // marks the pod, writes the file
	pass(second, 0)                      // marks the pod too; held: writes nothing
	makePodCgroup(t, cg.Mountpoint, uid) // the static pod is back: kubelet makes its pod cgroup first
	pass(second, time.Minute)
	if second.tornDown[uid] != nil {
		t.Fatal("the second plugin kept the mark after the re-add: the test proves nothing")
	}
	if err := first.Close(); err != nil { // the first plugin goes (systemd unit stopped)
		t.Fatal(err)
	}
	for at := 2 * time.Minute; at <= 10*time.Minute; at += time.Minute {
		pass(second, at)
		if len(files.done) > 0 {
			t.Fatalf("at +%s, after taking the state file over, the plugin took node steps %v on a pod being set up again "+
				"(mark dismissed at +1m, restored from the file: %v)", at, files.done, second.tornDown[uid] != nil)
		}
	}
	if second.tornDown[uid] != nil {
		t.Fatalf("the dismissed mark came back from the other plugin's state file")
	}
}

// TestAStateFileThatCannotBeLockedHoldsTheBudget: "one plugin per state
// file" rests on <file>.lock. When the lock cannot be taken for any reason
// other than another holder (the lock's name is a directory or a symlink,
// refused by O_NOFOLLOW; a file system without flock), a plugin cannot tell
// it is alone: two plugins on the same file would each take a whole
// max_per_hour. Each holds every budgeted step and says why.
func TestAStateFileThatCannotBeLockedHoldsTheBudget(t *testing.T) {
	const limit = 3
	live := testUIDs(100, 20)
	root := podDirs(t, live...)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	// Something other than a lock file at the lock's name.
	if err := os.Mkdir(statefile.LockPath(stateFile), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := orphanStopConfig(t, root, stateFile)
	cfg.Budget.MaxPerPass, cfg.Budget.MinPerPass, cfg.Budget.MaxFraction, cfg.Budget.MaxPerHour = 100, 100, 1, limit
	rt := &fakeRuntime{}
	plugin := func() (*Loop, *fakeExecutor, func() string) {
		opts := OptionsFromConfig(cfg)
		exec := &fakeExecutor{}
		opts.Executor = exec
		loop, logs := restartedLoop(nil, opts, rt, now)
		return loop, exec, logs
	}
	first, firstExec, _ := plugin()
	second, secondExec, secondLogs := plugin()
	t.Cleanup(func() { _ = first.Close(); _ = second.Close() })
	stoppedFirst, stoppedSecond := map[string]bool{}, map[string]bool{}
	var held [2]int // passes whose orphan stops the budget held, by plugin
	for pass := range 4 {
		at := now.Add(time.Duration(pass) * 30 * time.Second)
		stopped := map[string]bool{}
		for id := range stoppedFirst {
			stopped[id] = true
		}
		for id := range stoppedSecond {
			stopped[id] = true
		}
		rt.set(orphanEveryPass(live, pass, at, stopped), nil)
		for _, l := range []*Loop{first, second} {
			l.now = func() time.Time { return at }
		}
		passNotingStops(first, firstExec, stoppedFirst)
		passNotingStops(second, secondExec, stoppedSecond)
		for i, l := range []*Loop{first, second} {
			if _, r := l.Passes(); slices.ContainsFunc(r.Plan.Trips, func(t gc.Trip) bool { return t.Class == gc.ClassOrphanStop }) {
				held[i]++
			}
		}
	}
	// Stops were due, and held by the budget, not left out of the plan:
	// or the test proves nothing.
	if held[0] == 0 || held[1] == 0 {
		t.Fatalf("passes with the orphan stops held by the budget: %v of 4 each: the test proves nothing", held)
	}
	if _, err := os.Stat(stateFile); err != nil {
		t.Logf("state file not written: %v", err)
	}
	if !strings.Contains(secondLogs(), "cannot lock the state file, so another") {
		t.Errorf("the plugin does not say it cannot lock the state file: %q", stateLines(secondLogs()))
	}
	// Each holds every budgeted step: none, not the hour's limit between them.
	if total := len(stoppedFirst) + len(stoppedSecond); total != 0 {
		t.Fatalf("two plugins on one state file, whose lock neither could take, stopped %d live orphans (%d + %d) in two minutes, want none "+
			"(budget.max_per_hour is %d); first holds lock: %v, second holds lock: %v; said about the lock or state file: %q",
			total, len(stoppedFirst), len(stoppedSecond), limit, first.stateLock != nil, second.stateLock != nil, stateLines(secondLogs()))
	}
}

func stateLines(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "state file") || strings.Contains(l, "lock") {
			out = append(out, l)
		}
	}
	return out
}

func writeStateFile(t *testing.T, s statefile.State) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.json")
	data, err := statefile.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := statefile.Write(context.Background(), path, data); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRestoredTimesAheadOfTheClockLastAnHourAtMost: a hold restored from
// the file lasts an hour at most, as the README promises ("every budgeted
// step is held for an hour"), however far ahead the time written in it (a
// clock since set back, a hand-edited budget_held_until); a budgeted step
// dated in the future counts as taken at the restart, for an hour.
func TestRestoredTimesAheadOfTheClockLastAnHourAtMost(t *testing.T) {
	path := writeStateFile(t, statefile.State{
		BudgetHeldUntil: now.Add(48 * time.Hour), BudgetHeldWhy: "the state file could not be read",
		Spent: []statefile.Spent{{At: now.Add(6 * time.Hour), Class: "pod-dir", Unit: "pod-dir/x"}},
	})
	loop, _ := restartedLoop(nil, Options{StateFile: path}, &fakeRuntime{}, now)
	t.Cleanup(func() { _ = loop.Close() })
	later := now.Add(3 * time.Hour)
	held := loop.budgetHeld(later)
	spent := loop.budgetSpent(later)
	if held != "" || spent["pod-dir/pod-dir/x"] {
		t.Fatalf("3 hours after the restart: every budgeted step still held (%q), a step dated 6h ahead still counted (%v)", held, spent)
	}
}

// TestAStateFileThatIsADirectoryIsLeftInPlace: housekeeping.state_file set
// to a directory (the chart's stateDir instead of the file in it) cannot be
// read; it is not the plugin's to move aside as it moves an unreadable
// file: it stays where it is, with what is in it, the log says to check
// the key, and every budgeted step is held as for any unreadable file.
func TestAStateFileThatIsADirectoryIsLeftInPlace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nri-housekeeper")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(dir, "state.json")
	if err := os.WriteFile(inside, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	loop, logs := restartedLoop(nil, Options{StateFile: dir}, &fakeRuntime{}, now)
	t.Cleanup(func() { _ = loop.Close() })
	if _, err := os.Stat(inside); err != nil {
		t.Fatalf("the directory named by housekeeping.state_file was moved: %v", err)
	}
	if _, err := os.Lstat(dir + ".unreadable"); err == nil {
		t.Fatalf("%s.unreadable exists: the directory was moved aside", dir)
	}
	if !strings.Contains(logs(), "check housekeeping.state_file") {
		t.Fatalf("the log does not say to check housekeeping.state_file:\n%s", logs())
	}
	if loop.budgetHeld(now) == "" {
		t.Fatal("budgeted steps are not held although the state file could not be read")
	}
}

// TestAStateFileThatIsAFIFOIsLeftInPlaceWithoutBlocking: a FIFO at
// housekeeping.state_file must not hold the plugin's start for ever waiting
// for a writer. It cannot be read, so it is treated as a directory there
// is: left in place, the log says to check the key, and every budgeted step
// is held as for any unreadable file. The pass's write does not replace it
// (it is another program's): the file cannot be written, which is said.
func TestAStateFileThatIsAFIFOIsLeftInPlaceWithoutBlocking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		loop *Loop
		logs func() string
	)
	regularfiletest.ReturnsWithin(t, func() {
		loop, logs = restartedLoop(nil, Options{StateFile: path}, &fakeRuntime{}, now)
	})
	t.Cleanup(func() { _ = loop.Close() })
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
		t.Fatalf("the FIFO named by housekeeping.state_file was moved or changed: %v, %v", fi, err)
	}
	if _, err := os.Lstat(path + ".unreadable"); err == nil {
		t.Fatalf("%s.unreadable exists: the FIFO was moved aside", path)
	}
	if !strings.Contains(logs(), "is a FIFO, not a regular file") || !strings.Contains(logs(), "check housekeeping.state_file") {
		t.Fatalf("the log does not say the state file is a FIFO and to check housekeeping.state_file:\n%s", logs())
	}
	if loop.budgetHeld(now) == "" {
		t.Fatal("budgeted steps are not held although the state file could not be read")
	}
	// Nor is it written over by the pass's write: the file cannot be
	// written, which is said.
	loop.persist(context.Background(), now)
	if fi, err := os.Lstat(path); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Type() != os.ModeNamedPipe {
		t.Fatalf("the FIFO named by housekeeping.state_file was written over by the first write: it is %s now", fi.Mode())
	}
	if !strings.Contains(logs(), "cannot write the state file") {
		t.Fatalf("the log does not say the state file cannot be written:\n%s", logs())
	}
}

// TestTheStateFilesOwnerRemovesTheTempFilesOfUnfinishedWrites: a plugin
// killed during a write leaves its temp file beside the state file, one per
// crash, for ever. The plugin that holds the lock removes them; one that
// does not must leave them, for they may be its owner's live write.
func TestTheStateFilesOwnerRemovesTheTempFilesOfUnfinishedWrites(t *testing.T) {
	dir := t.TempDir()
	stateFile := filepath.Join(dir, "state.json")
	leftover := filepath.Join(dir, ".state.json5577006791947779410")
	newLoop := func() (*Loop, *bytes.Buffer) {
		log, buf := testLogger()
		l := New(podstate.New(0), &fakeRuntime{}, Options{Period: time.Minute, KubeletRoot: podDirs(t), StateFile: stateFile,
			Synchronized: func() bool { return true }, Policy: reviewPolicy(t.TempDir())}, log)
		return l, buf
	}
	owner, ownerLog := newLoop()
	owner.Restore(context.Background())
	t.Cleanup(func() { _ = owner.Close() })
	if err := os.WriteFile(leftover, []byte(`{"torn_down": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	other, otherLog := newLoop()
	other.Restore(context.Background())
	t.Cleanup(func() { _ = other.Close() })
	if _, err := os.Lstat(leftover); err != nil {
		t.Fatalf("a plugin that does not hold the lock removed a temp file (the owner's write?): %v\n%s", err, otherLog)
	}
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	other.Pass(context.Background()) // takes the file over after the pass
	if _, err := os.Lstat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the temp file of an unfinished write is still there once the plugin holds the lock (%v)\n%s", err, otherLog)
	}
	if !strings.Contains(otherLog.String(), "removed the temp files of state file writes that never finished") ||
		!strings.Contains(otherLog.String(), leftover) {
		t.Errorf("the log does not say which temp files were removed:\n%s", otherLog)
	}
	if strings.Contains(ownerLog.String(), "temp files") {
		t.Errorf("the first owner found temp files where there were none:\n%s", ownerLog)
	}
}
