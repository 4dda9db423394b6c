package housekeeping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// restartedLoop is a loop as the plugin builds it after a restart: fresh
// podstate (NRI has forgotten everything), the same options, the state
// file restored, its clock at start. prev (nil: none) is the run before,
// which exited: its hold on the state file is gone.
func restartedLoop(prev *Loop, opts Options, rt Runtime, start time.Time) (*Loop, func() string) {
	if prev != nil {
		_ = prev.Close()
	}
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, opts, log)
	loop.now = func() time.Time { return start }
	loop.started = start.Add(-time.Hour)
	loop.Restore(context.Background())
	return loop, buf.String
}

// A pod the plugin saw torn down, whose pod dir kubelet could not remove,
// is still one it saw torn down after the plugin restarts: its orphaned dir
// is reclaimed by the next run. Without the state file the next run cannot
// tell the dir from that of a pod kubelet has not started yet, and leaves
// it for good.
func TestAPodSeenTornDownIsStillOrphanedAfterARestart(t *testing.T) {
	uid := testUID(7)
	for _, tc := range []struct {
		name      string
		stateFile bool
		want      []string
	}{
		{"with a state file", true, []string{string(gc.RemovePodDir) + " pod-dir/" + uid}},
		{"without one (housekeeping.state_file = \"\")", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			opts := Options{Period: time.Minute, KubeletRoot: root, Synchronized: func() bool { return true },
				Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, RemoveOrphanedPodDirs: true,
					PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir(),
					Budget: gc.Budget{MaxPerPass: 10, MaxFraction: 1, MinPerPass: 10, MaxPerHour: 100}}}
			if tc.stateFile {
				opts.StateFile = filepath.Join(t.TempDir(), "state", "state.json")
			}
			state := tornDownState(t, uid)
			rt := &fakeRuntime{}
			log, _ := testLogger()
			first := New(state, rt, opts, log)
			first.started = now.Add(-time.Hour)
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			first.Pass(context.Background())
			if first.tornDown[uid] == nil {
				t.Fatal("the pod was not seen torn down: the test proves nothing")
			}
			// Killed before its grace ran out; started again.
			exec := &fakeExecutor{}
			opts.Executor = exec
			second, _ := restartedLoop(first, opts, rt, now.Add(time.Minute))
			for _, at := range []time.Duration{time.Minute, 7 * time.Minute} {
				rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
				second.Pass(context.Background())
			}
			if got := executedActions(exec); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("the run after the restart executed %v, want %v", got, tc.want)
			}
		})
	}
}

// budget.max_per_hour counts an hour, not a run of the plugin: a plugin
// restarted every few passes (a crash loop) stops no more live pods in an
// hour than one that runs on. Without the state file every run had an
// hour of its own.
func TestTheHourlyBudgetHoldsAcrossRestarts(t *testing.T) {
	const limit = 20
	for _, tc := range []struct {
		name      string
		stateFile bool
		check     func(stopped int) bool
		want      string
	}{
		{"with a state file", true, func(n int) bool { return n > 0 && n <= limit }, "1 to 20"},
		{"without one (housekeeping.state_file = \"\")", false, func(n int) bool { return n > limit }, "more than 20: the test has teeth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var live []string
			for i := range 12 {
				live = append(live, testUID(100+i))
			}
			root := podDirs(t, live...)
			stateFile := ""
			if tc.stateFile {
				stateFile = filepath.Join(t.TempDir(), "state.json")
			}
			cfg := orphanStopConfig(t, root, stateFile)
			// The per-pass limit out of the way: the hour is what is tested.
			cfg.Budget.MaxPerPass, cfg.Budget.MinPerPass, cfg.Budget.MaxFraction, cfg.Budget.MaxPerHour = 100, 100, 1, limit
			opts := OptionsFromConfig(cfg)
			exec := &fakeExecutor{}
			opts.Executor = exec
			rt := &fakeRuntime{}
			stopped := map[string]bool{}
			const passes = 60 // 30 minutes
			var loop *Loop
			for pass := range passes {
				at := now.Add(time.Duration(pass) * 30 * time.Second)
				if pass%3 == 0 { // a restart every 1.5 minutes
					loop, _ = restartedLoop(loop, opts, rt, at)
				}
				rt.set(orphanEveryPass(live, pass, at, stopped), nil)
				passNotingStops(loop, exec, stopped)
			}
			if !tc.check(len(stopped)) {
				t.Fatalf("stopped %d live pods in %d minutes across %d restarts, with a budget of %d an hour; want %s",
					len(stopped), passes/2, passes/3, limit, tc.want)
			}
		})
	}
}

// TestAReportThatCannotReadTheStateFileDoesNotSayToRemoveIt: report reads
// the running plugin's file; it said "stop the plugin, remove the file" of
// a file it could not read, which would lose the plugin's hour.
func TestAReportThatCannotReadTheStateFileDoesNotSayToRemoveIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	garbage := []byte(`{"version": 1, "torn_down": [`)
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs := restartedLoop(nil, Options{StateFile: path, StateReadOnly: true}, &fakeRuntime{}, now)
	// Nor that the pods are forgotten and the budget held for an hour, an
	// error: that is what the plugin does, not this command.
	if !strings.Contains(logs(), "cannot read the state file") || strings.Contains(logs(), "remove the file") ||
		!strings.Contains(logs(), "nothing is written by this command") || strings.Contains(logs(), "level=error") ||
		!strings.Contains(logs(), "the running plugin is not affected") {
		t.Fatalf("a read-only reader's words on the unreadable file:\n%s", logs())
	}
	if kept, err := os.ReadFile(path); err != nil || string(kept) != string(garbage) {
		t.Fatalf("the file was changed: %q, %v", kept, err)
	}
}

// A state file that cannot be read says nothing of the hour before: it is
// kept aside, and every budgeted step is held for an hour, across restarts
// too; steps outside the budget go on. After the hour, steps resume.
func TestAnUnreadableStateFileHoldsTheBudgetForAnHour(t *testing.T) {
	orphan := testUID(9)
	root := podDirs(t) // the orphan's pod dir is gone
	cfg := orphanStopConfig(t, root, filepath.Join(t.TempDir(), "state.json"))
	garbage := []byte(`{"version": 1, "torn_down": [`)
	if err := os.WriteFile(cfg.Housekeeping.StateFile, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := OptionsFromConfig(cfg)
	exec := &fakeExecutor{}
	opts.Executor = exec
	rt := &fakeRuntime{}
	snapAt := func(at time.Time) cri.Snapshot {
		return cri.Snapshot{TakenAt: at, Sandboxes: []cri.Sandbox{
			{ID: "live", UID: testUID(1), Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(testUID(1))},
			{ID: "orphan", UID: orphan, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(orphan)},
			{ID: "dead", UID: orphan, Ready: false, CreatedAt: now.Add(-2 * time.Hour), Labels: kubeletLabels(orphan)},
		}}
	}
	if err := os.MkdirAll(filepath.Join(root, "pods", testUID(1)), 0o755); err != nil {
		t.Fatal(err)
	}
	loop, logs := restartedLoop(nil, opts, rt, now)
	if !strings.Contains(logs(), "cannot read the state file") || !strings.Contains(logs(), "line 1") {
		t.Fatalf("the unreadable file was not said with where it is wrong:\n%s", logs())
	}
	if kept, err := os.ReadFile(cfg.Housekeeping.StateFile + ".unreadable"); err != nil || string(kept) != string(garbage) {
		t.Fatalf("the unreadable file was not kept aside as it was: %q, %v", kept, err)
	}
	stops := func() int {
		n := 0
		for _, a := range executedActions(exec) {
			if strings.HasPrefix(a, string(gc.StopSandbox)) {
				n++
			}
		}
		return n
	}
	for _, at := range []time.Duration{0, time.Minute} {
		rt.set(snapAt(now.Add(at)), nil)
		r := loop.Pass(context.Background())
		if at > 0 && (len(r.Plan.Trips) != 1 || !strings.Contains(r.Plan.Trips[0].Message, "state file could not be read")) {
			t.Fatalf("trips %+v: want the orphan stop held, saying why", r.Plan.Trips)
		}
	}
	if n := stops(); n != 0 {
		t.Fatalf("%d orphan stop(s) while the budget is held", n)
	}
	if got := executedActions(exec); len(got) != 1 || !strings.HasPrefix(got[0], string(gc.RemoveSandbox)+" sandbox/dead") {
		t.Fatalf("executed %v; want only the dead sandbox (not budgeted) removed", got)
	}
	// The hold is in the new file: a restart keeps it.
	s, err := statefile.Load(context.Background(), cfg.Housekeeping.StateFile)
	if err != nil || !s.BudgetHeldUntil.Equal(now.Add(time.Hour)) {
		t.Fatalf("state file after the first pass: %+v, %v; want the hold until %s in it", s, err, now.Add(time.Hour))
	}
	loop, _ = restartedLoop(loop, opts, rt, now.Add(2*time.Minute))
	// The restart ages the hold (here by the boot clock, which the test's
	// clock does not move): its reason says the hold's end as it is now,
	// not as the file's first writer had it.
	if why, until := loop.budgetHeld(now.Add(2*time.Minute)), loop.budgetHeldUntil.Format(time.RFC3339); strings.Count(why, "held until") != 1 || !strings.Contains(why, "held until "+until) {
		t.Fatalf("after a restart the hold says %q; want it held until %s, said once", why, until)
	}
	rt.set(snapAt(now.Add(3*time.Minute)), nil)
	loop.Pass(context.Background())
	rt.set(snapAt(now.Add(4*time.Minute)), nil)
	loop.Pass(context.Background())
	if n := stops(); n != 0 {
		t.Fatalf("%d orphan stop(s) after a restart within the hold", n)
	}
	for _, at := range []time.Duration{61 * time.Minute, 62 * time.Minute} {
		rt.set(snapAt(now.Add(at)), nil)
		loop.Pass(context.Background())
	}
	if n := stops(); n == 0 {
		t.Fatal("no orphan stop after the hour; want the orphan stopped")
	}
	if s, err := statefile.Load(context.Background(), cfg.Housekeeping.StateFile); err != nil || !s.BudgetHeldUntil.IsZero() {
		t.Fatalf("state file after the hold: %+v, %v; want no hold in it", s, err)
	}
}

// The report and once commands read the state file, never write it: the
// running plugin owns it.
func TestAReadOnlyLoopNeverWritesTheStateFile(t *testing.T) {
	uid := testUID(3)
	root := podDirs(t, uid)
	path := filepath.Join(t.TempDir(), "state.json")
	kept := statefile.State{TornDown: []statefile.TornDown{{UID: uid, Namespace: "ns", Name: "p", At: now.Add(-time.Hour)}}}
	data, err := statefile.Encode(kept)
	if err != nil {
		t.Fatal(err)
	}
	if err := statefile.Write(context.Background(), path, data); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	opts := Options{Period: time.Minute, KubeletRoot: root, StateFile: path, StateReadOnly: true,
		Policy: gc.Policy{LeakGrace: 0, MaxPerPodContainer: 1, MaxContainers: -1, RemoveOrphanedPodDirs: true,
			PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir(), Budget: gc.Budget{MaxPerPass: 1, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 1}}}
	loop, _ := restartedLoop(nil, opts, rt, now)
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	r := loop.Pass(context.Background())
	if after, err := os.ReadFile(path); err != nil || string(after) != string(data) {
		t.Fatalf("the file changed: %q, %v", after, err)
	}
	// Read, all the same: the pod dir is that of a pod seen torn down.
	found := false
	for _, a := range r.Plan.Actions {
		if a.Pod.UID == uid && a.Kind == gc.RemovePodDir {
			found = true
		}
	}
	if !found {
		t.Fatalf("the pod dir of the pod the file says was torn down is not in the plan: %+v", r.Plan)
	}
}

// A state file that cannot be written is an error said once while it
// lasts, not every pass, and housekeeping goes on.
func TestAStateFileThatCannotBeWrittenIsSaidWhileItLasts(t *testing.T) {
	uid := testUID(5)
	root := podDirs(t, uid)
	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	state := tornDownState(t, uid)
	loop, buf, obs, pass := stateFileLoop(t, state, root, filepath.Join(blocker, "state.json"))
	for i := range 3 {
		pass(i)
	}
	if loop.tornDown[uid] == nil {
		t.Fatal("nothing to keep: the test proves nothing")
	}
	// Its dir cannot be made, so neither can its lock: every budgeted step
	// is held too.
	if n := strings.Count(buf.String(), "cannot lock the state file, so another"); n != 1 {
		t.Fatalf("said %d times in 3 passes, want once:\n%s", n, buf.String())
	}
	if degraded, _ := obs.told(PartStateFile); !degraded {
		t.Fatal("the state-file part is not degraded while the file cannot be written")
	}

	// The dir becomes writable: the next pass writes what it kept.
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	pass(3)
	if _, err := os.Stat(filepath.Join(blocker, "state.json")); err != nil {
		t.Fatalf("the state file was not written once it could be: %v", err)
	}
	if degraded, told := obs.told(PartStateFile); degraded || !told {
		t.Fatalf("the state-file part is degraded=%v (told: %v) after a write that worked, want false", degraded, told)
	}
	if !strings.Contains(buf.String(), "the state file is written again") {
		t.Fatalf("the recovery is not said:\n%s", buf.String())
	}
}

// A symlink at housekeeping.state_file is read through at the start but
// never written over, nor what it points to (statefile.Write): the plugin
// says so at its first pass, not at the first change of what it keeps
// (which may be hours later, with a restart in between losing it), and
// leaves both the link and its target as they were.
func TestAStateFileThatIsASymlinkIsSaidAtTheFirstPassAndLeftAsItIs(t *testing.T) {
	uid := testUID(6)
	root := podDirs(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "persistent", "state.json")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	// One budgeted step of the last hour: nothing a pass changes.
	kept, err := statefile.Encode(statefile.State{Spent: []statefile.Spent{{At: now.Add(-time.Minute), Class: "orphans", Unit: uid}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, kept, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "state.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	loop, buf, obs, pass := stateFileLoop(t, podstate.New(0), root, link)
	loop.now = func() time.Time { return now }
	loop.Restore(context.Background())
	if len(loop.spent) != 1 {
		t.Fatalf("the step the file behind the link keeps was not restored:\n%s", buf.String())
	}
	pass(0)
	pass(1)
	if n := strings.Count(buf.String(), "cannot write the state file"); n != 1 || !strings.Contains(buf.String(), link+" is a symlink (to "+target+")") {
		t.Fatalf("said %d times in 2 passes, want once, naming the link and its target:\n%s", n, buf.String())
	}
	if degraded, _ := obs.told(PartStateFile); !degraded {
		t.Fatal("the state-file part is not degraded while the file is a symlink")
	}
	if got, err := os.Readlink(link); err != nil || got != target {
		t.Fatalf("the link after two passes: %q, %v; want it left pointing to %s", got, err, target)
	}
	if data, err := os.ReadFile(target); err != nil || !bytes.Equal(data, kept) {
		t.Fatalf("the file behind the link after two passes: %q, %v; want it as it was", data, err)
	}
}

// Two plugins on one node (a DaemonSet beside a leftover systemd unit)
// would each count only their own budgeted steps: together, twice
// budget.max_per_hour. The second one to start finds the state file's lock
// held: it takes no budgeted step and writes nothing until the first
// exits; then it takes the file over with the first's steps in it, and the
// hour they were taken in still counts.
func TestASecondPluginOnTheSameStateFileTakesNoBudgetedStep(t *testing.T) {
	const limit = 3
	// Enough live pods that the orphans (one more a pass) stay few enough
	// for the pod oracle to be trusted.
	live := testUIDs(100, 20)
	root := podDirs(t, live...)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	cfg := orphanStopConfig(t, root, stateFile)
	cfg.Budget.MaxPerPass, cfg.Budget.MinPerPass, cfg.Budget.MaxFraction, cfg.Budget.MaxPerHour = 100, 100, 1, limit
	rt := &fakeRuntime{}
	plugin := func(prev *Loop, start time.Time) (*Loop, *fakeExecutor, *partsObserver, func() string) {
		opts := OptionsFromConfig(cfg)
		exec, obs := &fakeExecutor{}, &partsObserver{}
		opts.Executor, opts.Observer = exec, obs
		loop, logs := restartedLoop(prev, opts, rt, start)
		return loop, exec, obs, logs
	}
	first, firstExec, _, _ := plugin(nil, now)
	second, secondExec, secondObs, secondLogs := plugin(nil, now)
	t.Cleanup(func() { _ = first.Close(); _ = second.Close() })

	stoppedFirst, stoppedSecond := map[string]bool{}, map[string]bool{}
	pass, skip := 0, time.Duration(0)
	both := func(loops ...*Loop) {
		at := now.Add(time.Duration(pass)*30*time.Second + skip)
		for _, l := range loops {
			l.now = func() time.Time { return at }
		}
		stopped := map[string]bool{}
		for id := range stoppedFirst {
			stopped[id] = true
		}
		for id := range stoppedSecond {
			stopped[id] = true
		}
		rt.set(orphanEveryPass(live, pass, at, stopped), nil)
		for _, l := range loops {
			if l == first {
				passNotingStops(l, firstExec, stoppedFirst)
			} else {
				passNotingStops(l, secondExec, stoppedSecond)
			}
		}
		pass++
	}
	for range 4 { // an orphan is due a pass after it is listed: 3 stops
		both(first, second)
	}
	if len(stoppedFirst) != limit {
		t.Fatalf("the first plugin stopped %d orphans, want its budget of %d: the test proves nothing", len(stoppedFirst), limit)
	}
	if len(stoppedSecond) != 0 {
		t.Fatalf("the second plugin on the same state file stopped %v: with the first's %d, more than max_per_hour %d",
			stoppedSecond, len(stoppedFirst), limit)
	}
	if degraded, _ := secondObs.told(PartStateFile); !degraded {
		t.Fatal("the second plugin's state-file part is not degraded while another holds the file")
	}
	if n := strings.Count(secondLogs(), "holds every budgeted step and writes nothing"); n != 1 {
		t.Fatalf("the second plugin said it %d times in 4 passes, want once:\n%s", n, secondLogs())
	}
	if held := second.last.Plan.Trips; len(held) == 0 || !strings.Contains(held[0].Message, "another nri-housekeeper uses the same state file") {
		t.Fatalf("the second plugin's last pass tripped %+v; want the hold said", held)
	}
	kept, err := statefile.Load(context.Background(), stateFile)
	if err != nil || len(kept.Spent) != limit {
		t.Fatalf("the state file holds %+v (%v); want the first plugin's %d steps", kept.Spent, err, limit)
	}

	// The first exits: the second takes the file over after its next pass,
	// and the first's steps of the hour count against it.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		both(second)
	}
	if why := second.last.Plan.OracleUntrusted; why != "" {
		t.Fatalf("the pod oracle is not trusted, so no orphan is stopped anyway: the test proves nothing: %s", why)
	}
	if len(stoppedSecond) != 0 {
		t.Fatalf("after taking over within the hour, the second plugin stopped %v; the first's %d steps spent the hour", stoppedSecond, limit)
	}
	if !strings.Contains(secondLogs(), "took the state file over") || !strings.Contains(secondLogs(), "the state file is written again") {
		t.Fatalf("the take-over is not said:\n%s", secondLogs())
	}
	if degraded, _ := secondObs.told(PartStateFile); degraded {
		t.Fatal("the second plugin's state-file part is still degraded after it took the file over")
	}
	if kept, err := statefile.Load(context.Background(), stateFile); err != nil || len(kept.Spent) != limit {
		t.Fatalf("after the take-over the file holds %+v (%v); want the first plugin's %d steps kept", kept.Spent, err, limit)
	}
	// An hour after the first's steps, the second takes its own.
	skip = time.Hour
	both(second)
	if len(stoppedSecond) == 0 {
		t.Fatalf("an hour later the second plugin still stops nothing: it is held for good; its last pass: blocked %q, trips %+v, due %d, oracle %q, leaks %v, deferred %d, stopped %v",
			second.last.Blocked, second.last.Plan.Trips, len(second.last.Plan.Actions), second.last.Plan.OracleUntrusted, second.last.Plan.Leaks, len(second.last.Plan.Deferred), stoppedSecond)
	}
}

// A write that fails leaves the last written state as it was; when what the
// loop keeps comes back to exactly that before the file can be written
// again, the failure must still end: the next pass writes, says so, and
// the state-file part is no longer degraded.
func TestAStateFileFailureEndsWhenTheStateComesBackToTheLastWritten(t *testing.T) {
	kept, passing := testUID(8), testUID(9)
	root := podDirs(t, kept, passing)
	dir := filepath.Join(t.TempDir(), "state")
	state := podstate.New(0)
	tearDown := func(uid string, at time.Time) {
		t.Helper()
		applyTeardown(t, state, uid, "sb-"+uid, at, at.Add(time.Second))
	}
	tearDown(kept, now.Add(-10*time.Minute))
	loop, buf, obs, pass := stateFileLoop(t, state, root, filepath.Join(dir, "state.json"))
	pass(0) // written: the one pod seen torn down
	if degraded, _ := obs.told(PartStateFile); degraded {
		t.Fatal("degraded after a write that worked")
	}
	// The dir goes (a file in its place), and a second pod is torn down:
	// the write of the two fails.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tearDown(passing, now.Add(30*time.Second))
	pass(1)
	if degraded, _ := obs.told(PartStateFile); !degraded || loop.tornDown[passing] == nil {
		t.Fatalf("degraded %v, second pod kept %v: the test proves nothing", degraded, loop.tornDown[passing] != nil)
	}
	// The second pod's dir goes (so does its mark: the state is the one
	// last written again) and the dir can be written again.
	if err := os.RemoveAll(filepath.Join(root, "pods", passing)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	pass(2)
	if loop.tornDown[passing] != nil {
		t.Fatal("the second pod is still kept: the test proves nothing")
	}
	if degraded, _ := obs.told(PartStateFile); degraded {
		t.Fatal("the state-file part is still degraded once the file can be written")
	}
	if _, err := os.Stat(filepath.Join(dir, "state.json")); err != nil {
		t.Fatalf("the state file was not written again: %v", err)
	}
	if !strings.Contains(buf.String(), "the state file is written again") {
		t.Fatalf("the recovery is not said:\n%s", buf.String())
	}
}

// A pass cut short by its context (SIGTERM, a pre-registered plugin's NRI
// connection lost) cannot write the state file; Close writes what it
// learned, so the pods it saw torn down outlive the restart.
func TestCloseWritesWhatAPassCutShortCouldNot(t *testing.T) {
	uid := testUID(11)
	root := podDirs(t, uid)
	path := filepath.Join(t.TempDir(), "state", "state.json")
	state := tornDownState(t, uid)
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, StateFile: path,
		Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	loop.Restore(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the plugin is stopping while the pass runs
	loop.Pass(ctx)
	if loop.tornDown[uid] == nil {
		t.Fatal("the pass saw no pod torn down: the test proves nothing")
	}
	if s, err := statefile.Load(context.Background(), path); err == nil && len(s.TornDown) > 0 {
		t.Fatal("the pass wrote the state file with its context done: the test proves nothing")
	}
	if err := loop.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := statefile.Load(context.Background(), path)
	if err != nil || len(s.TornDown) != 1 || s.TornDown[0].UID != uid {
		t.Fatalf("after Close the state file holds %+v (%v), want the pod seen torn down", s.TornDown, err)
	}
}

// stateFileLoop is a loop over state keeping its state file at path, with
// an observer of its parts, and pass(i), which runs a pass whose (empty)
// listing is taken i minutes after now.
func stateFileLoop(t *testing.T, state *podstate.State, root, path string) (*Loop, *bytes.Buffer, *partsObserver, func(i int)) {
	rt := &fakeRuntime{}
	log, buf := testLogger()
	obs := &partsObserver{}
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, StateFile: path, Observer: obs,
		Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	pass := func(i int) {
		t.Helper()
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Minute)}, nil)
		if r := loop.Pass(context.Background()); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return loop, buf, obs, pass
}

// TestStepsOnLiveWorkloadsWaitWhileTheStateFileCannotBeWritten: the hour's
// budgeted steps are written before they run, so that a restart keeps
// them. On a full file system, which refuses the write, a step counted in
// memory only would let every restart
// take the hour afresh: orphan stops, and the other classes that act on
// what may be a live workload, wait instead; the steps that free disk
// space (pod log dirs) go on.
func TestStepsOnLiveWorkloadsWaitWhileTheStateFileCannotBeWritten(t *testing.T) {
	// A full file system: a tmpfs of one page, filled. (A read-only one
	// fails the lock's open first, which holds every budgeted step.)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4k"); err != nil {
		t.Skipf("cannot mount a tmpfs on %s (needs root): %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 64<<10), 0o600); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v, want ENOSPC", err)
	}
	var live []string
	for i := range 12 {
		live = append(live, testUID(100+i))
	}
	root := podDirs(t, live...)
	cfg := orphanStopConfig(t, root, filepath.Join(dir, "state.json"))
	cfg.Budget.MaxPerPass, cfg.Budget.MinPerPass, cfg.Budget.MaxFraction, cfg.Budget.MaxPerHour = 100, 100, 1, 20
	gone := filepath.Join(cfg.Logs.PodLogsDir, "ns_gone_"+testUID(999))
	if err := os.MkdirAll(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := OptionsFromConfig(cfg)
	exec := &fakeExecutor{}
	opts.Executor = exec
	rt := &fakeRuntime{}
	stopped := map[string]bool{}
	var loop *Loop
	var logs func() string
	var last PassResult
	for pass := range 9 {
		at := now.Add(time.Duration(pass) * 30 * time.Second)
		if pass%3 == 0 { // a restart every 1.5 minutes
			loop, logs = restartedLoop(loop, opts, rt, at)
		}
		snap := orphanEveryPass(live, 0, at, stopped) // the one orphan "orphan0"
		rt.set(snap, nil)
		before := len(exec.executed)
		last = loop.Pass(context.Background())
		for _, batch := range exec.executed[before:] {
			for _, a := range batch {
				if a.Kind == gc.StopSandbox {
					stopped[a.SandboxID] = true
				}
			}
		}
	}
	t.Cleanup(func() { _ = loop.Close() })
	if len(stopped) > 0 {
		t.Fatalf("stopped %d live pods while no state file could be written: a restart forgets them", len(stopped))
	}
	logDirs := 0
	for _, batch := range exec.executed {
		for _, a := range batch {
			if a.Kind == gc.RemovePodLogDir && a.Path == gone {
				logDirs++
			}
		}
	}
	if logDirs == 0 {
		t.Errorf("the pod log dir of a gone pod was not removed: steps that free disk space must go on\n%s", logs())
	}
	if !strings.Contains(logs(), "wait: the state file could not be written before them") {
		t.Errorf("nothing says why the orphan stops wait:\n%s", logs())
	}
	// The held stop is shown as not due, with why, in the pass's plan (what
	// once prints, what the metrics count), not dropped from it.
	held := false
	for _, d := range last.Plan.Deferred {
		if d.Rule == gc.RuleOrphanStop && strings.Contains(d.Why(), "held while the state file cannot be written") {
			held = true
		}
	}
	if !held {
		t.Errorf("the held orphan stop is not among the last pass's deferred steps: %+v", last.Plan.Deferred)
	}
}

// BenchmarkRestoreALargeStateFile: a state file of many budgeted steps
// (up to statefile.MaxSize) is restored in time linear in its size; the
// merge was quadratic (16 s for 60,000 steps).
func BenchmarkRestoreALargeStateFile(b *testing.B) {
	for _, n := range []int{6000, 60000} {
		b.Run(fmt.Sprintf("steps=%d", n), func(b *testing.B) {
			st := statefile.State{}
			for i := range n {
				st.Spent = append(st.Spent, statefile.Spent{At: now.Add(-time.Minute), Class: gc.ClassPodDir, Unit: fmt.Sprint(i)})
			}
			data, err := statefile.Encode(st)
			if err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(b.TempDir(), "state.json")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				b.Fatal(err)
			}
			log, _ := testLogger()
			for b.Loop() {
				loop := New(podstate.New(0), &fakeRuntime{}, Options{StateFile: path, StateReadOnly: true}, log)
				loop.now = func() time.Time { return now }
				loop.Restore(context.Background())
				if len(loop.spent) != n {
					b.Fatalf("restored %d steps, want %d", len(loop.spent), n)
				}
			}
		})
	}
}

// A restored mark's pod cgroup baseline is the file's only when the file
// has one and was written in this boot; otherwise it is "none", so that a
// pod cgroup found at the first look after the restart drops the mark
// (never "not looked at yet", which would take that pod cgroup for it).
func TestARestoredMarkKeepsAPodCgroupBaselineOnlyFromThisBoot(t *testing.T) {
	dirs := map[string]uint64{"/sys/fs/cgroup/memory/kubepods/podx": 42}
	thisBoot := restoredClock{boot: &bootAnchor{id: "this"}}
	for _, tc := range []struct {
		name  string
		mark  statefile.TornDown
		clock restoredClock
		want  map[string]uint64
	}{
		{"this boot's, with a baseline", statefile.TornDown{CgroupsInspected: true, Cgroups: dirs}, thisBoot, dirs},
		{"this boot's, looked and none", statefile.TornDown{CgroupsInspected: true}, thisBoot, map[string]uint64{}},
		{"this boot's, never looked (a version 2 file)", statefile.TornDown{}, thisBoot, map[string]uint64{}},
		{"another boot's, or one the clock cannot tell", statefile.TornDown{CgroupsInspected: true, Cgroups: dirs}, restoredClock{}, map[string]uint64{}},
	} {
		got := restoredCgroups(tc.mark, tc.clock)
		if got == nil || !maps.Equal(got, tc.want) {
			t.Errorf("%s: baseline %v, want %v (never nil)", tc.name, got, tc.want)
		}
	}
}

// A time restored on the wall clock alone (after a reboot) is anchored to
// the run's own clock reading: it carries its monotonic reading, so a wall
// clock NTP steps forward later in the run does not age the hour's
// restored steps out early (Go measures between two such times on the
// monotonic clock).
func TestATimeRestoredOnTheWallClockMovesWithTheRunsClock(t *testing.T) {
	start := time.Now() // with a monotonic reading, as the loop's clock
	c := restoredClock{now: start}
	restored := c.at(start.Add(-20*time.Minute).Round(0), 0) // read from a file: no monotonic reading
	if !strings.Contains(restored.String(), "m=") {
		t.Fatalf("restored %s carries no monotonic reading", restored)
	}
	if age := start.Sub(restored); age != 20*time.Minute {
		t.Fatalf("restored %v old, want 20m", age)
	}
}

// A file moved aside as unreadable is evidence: one moved aside at a later
// start does not replace it.
func TestASecondUnreadableStateFileKeepsTheFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	opts := Options{Period: time.Minute, StateFile: path}
	first, second := []byte(`{"version": 1, "torn_down": [`), []byte(`not json`)
	if err := os.WriteFile(path, first, 0o600); err != nil {
		t.Fatal(err)
	}
	loop, _ := restartedLoop(nil, opts, &fakeRuntime{}, now)
	_ = loop.Close()
	if err := os.WriteFile(path, second, 0o600); err != nil {
		t.Fatal(err)
	}
	loop, logs := restartedLoop(nil, opts, &fakeRuntime{}, now.Add(time.Minute))
	_ = loop.Close()
	if kept, err := os.ReadFile(path + ".unreadable"); err != nil || string(kept) != string(first) {
		t.Fatalf("the first unreadable file is %q (%v), want it kept as it was\n%s", kept, err, logs())
	}
	later := path + ".unreadable." + now.Add(time.Minute).UTC().Format("20060102T150405Z")
	if kept, err := os.ReadFile(later); err != nil || string(kept) != string(second) || !strings.Contains(logs(), later) {
		t.Fatalf("the second unreadable file is %q (%v) at %s, want it kept there and said\n%s", kept, err, later, logs())
	}
}

// A mark restored from the state file whose pod dir was never checked goes
// when the first pass after the restart cannot read kubelet's pods dir (a
// mark restored as checked would be kept for good): that is said, with the
// pod, not done silently.
func TestAnUncheckedRestoredMarkIsForgottenAloud(t *testing.T) {
	uid := testUID(11)
	path := writeStateFile(t, statefile.State{TornDown: []statefile.TornDown{{UID: uid, Namespace: "ns", Name: "web", At: now.Add(-time.Minute)}}})
	rt := &fakeRuntime{}
	loop, logs := restartedLoop(nil, Options{Period: time.Minute, StateFile: path, KubeletRoot: filepath.Join(t.TempDir(), "not-mounted-yet"),
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, rt, now)
	t.Cleanup(func() { _ = loop.Close() })
	if loop.tornDown[uid] == nil {
		t.Fatal("the mark was not restored: the test proves nothing")
	}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	loop.Pass(context.Background())
	if loop.tornDown[uid] != nil {
		t.Fatal("the unchecked mark outlived a pass that could not read the pods dir")
	}
	if out := logs(); !strings.Contains(out, "forgot a pod seen torn down whose pod dir was never checked") || !strings.Contains(out, "pod_uid="+uid) {
		t.Fatalf("the mark went without a word:\n%s", out)
	}
}

// A state too large for a reader to load is not written, and the file
// before it must not stand: a restart would bring back what the run dropped
// since (here a mark a re-add dismissed). What fits is written instead:
// nothing seen torn down, and an hour's hold on budgeted steps.
func TestAStateTooLargeToKeepLeavesNoStaleFile(t *testing.T) {
	uid := testUID(901)
	path := writeStateFile(t, statefile.State{TornDown: []statefile.TornDown{{UID: uid, Namespace: "ns", Name: "web", At: now.Add(-time.Minute), Inspected: true}}})
	loop, _ := restartedLoop(nil, Options{Period: time.Minute, StateFile: path}, &fakeRuntime{}, now)
	loop.dismissTeardown(uid)
	for i := range 200000 {
		loop.spent = append(loop.spent, spent{at: now, class: "network", unit: fmt.Sprintf("network/%064d", i)})
	}
	if err := loop.persist(context.Background(), now); !errors.Is(err, statefile.ErrTooLarge) {
		t.Fatalf("persist = %v, want the state said too large", err)
	}
	_ = loop.stateLock.Release() // a crash: no Close
	again, logs := restartedLoop(nil, Options{Period: time.Minute, StateFile: path}, &fakeRuntime{}, now.Add(time.Minute))
	t.Cleanup(func() { _ = again.Close() })
	if again.tornDown[uid] != nil {
		t.Fatalf("a mark the run dismissed came back from the file it could not replace\n%s", logs())
	}
	if held := again.budgetHeld(now.Add(time.Minute)); !strings.Contains(held, "too large to keep") {
		t.Fatalf("after a state too large to keep, the restart holds budgeted steps for %q, want the hour held\n%s", held, logs())
	}
}
