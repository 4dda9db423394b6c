package housekeeping

// Found by a review of the safety work of issue 10; each test failed on
// the loop before its fix.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// reviewPolicy: no grace, default budget (3, 0.1, 1, 20).
func reviewPolicy(podLogs string) gc.Policy {
	return gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1,
		Budget:     gc.Budget{MaxPerPass: 3, MaxFraction: 0.1, MinPerPass: 1, MaxPerHour: 20},
		PodLogsDir: podLogs, ContainerLogsDir: filepath.Join(podLogs, "..", filepath.Base(podLogs)+"-links")}
}

func mkPodLogDir(t *testing.T, podLogs, uid string) string {
	t.Helper()
	p := filepath.Join(podLogs, "ns_p-"+uid+"_"+uid)
	if err := os.MkdirAll(filepath.Join(p, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// failingFiles fails RemovePodLogDir for the paths in fail, records the rest.
type failingFiles struct {
	nodeRecorder
	fail map[string]bool
}

func (f *failingFiles) RemovePodLogDir(ctx context.Context, path string) error {
	if f.fail[path] {
		return errors.New("refused: a mount point inside")
	}
	return f.nodeRecorder.RemovePodLogDir(ctx, path)
}

func (f *failingFiles) DestroyPodCgroup(_ context.Context, pod podcgroups.PodCgroup) (podcgroups.Destroyed, error) {
	return podcgroups.Destroyed{}, errors.New("rmdir: device or resource busy (a process in D state)")
}

// <kubelet_root>/pods may be a symlink (pod data moved to another disk).
// ListPodDirs, InspectPodDir and RemoveOrphanedPodDir follow it, and so
// must the re-check right before a step, or every pod-log-dir and
// cgroups.pod-gone step is aborted, every pass, forever.
func TestASymlinkedPodsDirDoesNotAbortEveryGoneStep(t *testing.T) {
	for _, symlinked := range []bool{false, true} {
		t.Run(map[bool]string{false: "real pods dir", true: "symlinked pods dir"}[symlinked], func(t *testing.T) {
			root := t.TempDir()
			live := testUID(60)
			target := filepath.Join(root, "pods")
			if symlinked {
				target = filepath.Join(t.TempDir(), "pods-on-data-disk")
				if err := os.Symlink(target, filepath.Join(root, "pods")); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(target, live), 0o755); err != nil {
				t.Fatal(err)
			}
			podLogs := t.TempDir()
			gone := testUID(61)
			mkPodLogDir(t, podLogs, gone)
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			files := &nodeRecorder{}
			log, _ := testLogger()
			loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root,
				Executor: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
				Policy:   reviewPolicy(podLogs)}, log)
			loop.started = now.Add(-time.Hour)
			r := loop.Pass(context.Background())
			if len(r.Plan.Actions) != 1 {
				t.Fatalf("planned %v: the test proves nothing", r.Plan.Actions)
			}
			if len(files.done) != 1 {
				t.Fatalf("outcomes %+v: the pod log dir of a gone pod was not removed", r.Outcomes)
			}
		})
	}
}

// failingLogDirsLoop is a loop of 30 s passes, with the review's policy,
// on a node whose pod log dirs in podLogs are removed but for those in
// fail (failingFiles); it started an hour ago.
func failingLogDirsLoop(root, podLogs string, fail map[string]bool) (*Loop, *fakeRuntime, *failingFiles) {
	rt := &fakeRuntime{}
	files := &failingFiles{fail: fail}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: 30 * time.Second, KubeletRoot: root,
		Executor: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
		Policy:   reviewPolicy(podLogs)}, log)
	loop.started = now.Add(-time.Hour)
	return loop, rt, files
}

// Steps of a class that keep failing (pod log dirs the remover refuses,
// cgroups with a D-state process) stay due forever; on a node with fewer
// than 20 Ready sandboxes the per-pass budget is 1. Their retries must not
// count against a pass, or from the first other step of that class on,
// every pass would trip and the class never run again; nor, when their
// hour is over, against the hour: max_per_hour (20) of them would take
// each hour's budget again, first (eligible longest), and a newer step of
// their class would never run (with 20, four hours of passes removed the
// new one never: 363 trips).
func TestStuckStepsDoNotPauseTheirClassForever(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stuck int
	}{
		{"one stuck step", 1},
		{"max_per_hour stuck steps", 20},
		{"more stuck steps than max_per_hour", 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, testUID(70)) // one live pod dir: the oracle is not empty
			podLogs := t.TempDir()
			fail := map[string]bool{}
			for i := range tc.stuck {
				fail[mkPodLogDir(t, podLogs, testUID(100+i))] = true
			}
			loop, rt, files := failingLogDirsLoop(root, podLogs, fail)
			var b string
			removedAt := -1
			for pass := range 4 * 120 { // four hours
				if pass == 1 {
					b = mkPodLogDir(t, podLogs, testUID(72))
				}
				rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(pass) * 30 * time.Second)}, nil)
				loop.Pass(context.Background())
				if removedAt < 0 && slices.ContainsFunc(files.done, func(d string) bool { return strings.Contains(d, b) }) {
					removedAt = pass
				}
			}
			// Each stuck one is taken once in the hour, and the new one
			// right after the stuck ones' hour lapses (pass 120 on): at
			// most an hour plus a pass for each not yet taken.
			if limit := 120 + max(0, tc.stuck-20) + 2; removedAt < 0 || removedAt > limit {
				t.Fatalf("the pod log dir %s was removed at pass %d, want by pass %d (of 30 s): %d failing steps pause their class", b, removedAt, limit, tc.stuck)
			}
			if tc.stuck < 20 && removedAt > 2+tc.stuck {
				t.Errorf("the pod log dir %s was removed at pass %d, want it as soon as the stuck ones were each taken once", b, removedAt)
			}
		})
	}
}

// Steps that fail for a common cause (a CNI plugin missing, a read-only
// disk) hour after hour are taken within the budget all the same: when
// the cause clears, no more than max_per_hour of them act at once (an
// exemption of failing units from the hour's count let 60 act in 6
// minutes). The per-pass budget is large here, so that only the hour's
// bounds them.
func TestStepsFailingForHoursActWithinTheBudgetWhenTheCauseClears(t *testing.T) {
	root := podDirs(t, testUID(70))
	podLogs := t.TempDir()
	fail := map[string]bool{}
	var all []string
	for i := range 60 {
		p := mkPodLogDir(t, podLogs, testUID(200+i))
		fail[p] = true
		all = append(all, p)
	}
	loop, rt, files := failingLogDirsLoop(root, podLogs, fail)
	loop.opts.Policy.Budget = gc.Budget{MaxPerPass: 100, MinPerPass: 100, MaxFraction: 1, MaxPerHour: 20}
	pass := 0
	run := func(n int) {
		for range n {
			rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(pass) * 30 * time.Second)}, nil)
			loop.Pass(context.Background())
			pass++
		}
	}
	removed := func() int {
		n := 0
		for _, p := range all {
			if slices.ContainsFunc(files.done, func(d string) bool { return strings.Contains(d, p) }) {
				n++
			}
		}
		return n
	}
	run(3 * 120) // three hours, every removal failing
	if n := removed(); n != 0 {
		t.Fatalf("%d removed while every removal fails", n)
	}
	for _, p := range all {
		fail[p] = false // the cause clears
	}
	run(12) // six minutes
	if n := removed(); n == 0 || n > 20 {
		t.Fatalf("%d pod log dirs removed in the 6 minutes after the cause cleared, want some and at most max_per_hour = 20", n)
	}
	run(120) // the hour after: those taken in the hour before clear it
	if n := removed(); n > 40 {
		t.Fatalf("%d pod log dirs removed in the hour after the cause cleared, want at most the hour before's 20 and the hour's 20", n)
	}
}

// The hour's budget counts a unit once, not each retry of it: else a
// single stuck cgroup would use most of max_per_hour on its own.
func TestARetriedUnitCountsOnceAgainstTheHour(t *testing.T) {
	root := podDirs(t, testUID(80))
	stuck := testUID(81)
	cg := fakeCgroups(t, stuck)
	// The stuck pod cgroup has a process in it.
	if err := os.WriteFile(filepath.Join(cg.Mountpoint, "memory", "kubepods", "besteffort", "pod"+stuck, "cgroup.procs"), []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	files := &failingFiles{}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: 30 * time.Second, KubeletRoot: root, Cgroups: cg,
		Executor: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
		Policy:   reviewPolicy(t.TempDir())}, log)
	loop.started = now.Add(-time.Hour)
	for pass := range 120 { // one hour
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(pass) * 30 * time.Second)}, nil)
		loop.Pass(context.Background())
	}
	if admitted := loop.budgetSpent(now.Add(119 * 30 * time.Second)); len(admitted) != 1 {
		n := len(admitted)
		t.Fatalf("one stuck pod cgroup counts %d of max_per_hour 20 in an hour", n)
	}
}

// Records of an earlier NRI session neither confirm the new one nor keep
// the listing untrusted for good.
func TestAnEarlierNRISessionsRecordsNeitherConfirmNorWedge(t *testing.T) {
	uid := testUID(90)
	s1 := cri.Sandbox{ID: "s1", UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)}
	newLoop := func(t *testing.T, state *podstate.State, rt *fakeRuntime) *Loop {
		log, _ := testLogger()
		l := New(state, rt, Options{Period: 30 * time.Second, KubeletRoot: podDirs(t, uid), Synchronized: func() bool { return true },
			Policy: reviewPolicy(t.TempDir())}, log)
		l.started = now.Add(-time.Hour)
		return l
	}

	// The README: a listing that shares no sandbox with NRI is untrusted
	// "until one listing of this NRI session has (the first one after every
	// (re)connect)". After a reconnect to another containerd's NRI (two
	// containerds, one NRI socket path), the listing still shares s1, which
	// only the old session reported: that confirms the new session.
	t.Run("a new session is confirmed only by its own sandboxes", func(t *testing.T) {
		state := podstate.New(0)
		state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
		rt := &fakeRuntime{}
		loop := newLoop(t, state, rt)
		rt.set(cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{s1}}, nil)
		if r := loop.Pass(context.Background()); r.Untrusted != "" {
			t.Fatalf("first session: %s", r.Untrusted)
		}
		// Reconnect: NRI now reports another runtime's pod, none of ours.
		other := testUID(91)
		state.Synchronize(now.Add(time.Minute), []podstate.SyncedSandbox{{Pod: ident(other), SandboxID: "theirs"}}, nil)
		rt.set(cri.Snapshot{TakenAt: now.Add(2 * time.Minute), Sandboxes: []cri.Sandbox{s1}}, nil)
		r := loop.Pass(context.Background())
		if r.Untrusted == "" {
			p, _ := state.Pod(other)
			t.Fatalf("trusted a listing that shares nothing with this NRI session (NRI's own sandbox now: %s, asked the runtime %d time(s))",
				p.Phase, rt.asked.Load())
		}
	})

	// A node emptied while containerd's NRI dropped the removals (after a
	// containerd restart): s1 is dropped without evidence (MarkGone) and kept
	// for the retention. NRI reconnects. The listing is empty, NRI reports
	// nothing, yet the stale s1 makes every listing untrusted, and an
	// untrusted pass never reconciles, so s1 is never forgotten.
	t.Run("an emptied node is trusted again after the retention", func(t *testing.T) {
		state := podstate.New(0)
		state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
		rt := &fakeRuntime{}
		loop := newLoop(t, state, rt)
		rt.set(cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{s1}}, nil)
		loop.Pass(context.Background())
		rt.set(cri.Snapshot{TakenAt: now.Add(30 * time.Second)}, nil) // s1 gone, no NRI event
		if r := loop.Pass(context.Background()); r.Untrusted != "" {
			t.Fatalf("s1 not dropped: %s", r.Untrusted)
		}
		state.Synchronize(now.Add(time.Minute), nil, nil) // NRI reconnects: nothing on the node
		var r PassResult
		for pass := range 120 { // one hour
			rt.set(cri.Snapshot{TakenAt: now.Add(2*time.Minute + time.Duration(pass)*30*time.Second)}, nil)
			r = loop.Pass(context.Background())
		}
		if r.Untrusted != "" {
			t.Fatalf("an hour later, on an empty node, NRI reporting nothing: still untrusted: %s", r.Untrusted)
		}
	})

	// While the listing is untrusted (a wrong runtime.endpoint, the case the
	// check exists for), NRI keeps recording every pod's life, and nothing
	// is ever forgotten: forget runs only inside Reconcile.
	t.Run("podstate forgets while the listing is untrusted", func(t *testing.T) {
		state := podstate.New(0)
		state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
		rt := &fakeRuntime{}
		loop := newLoop(t, state, rt)
		theirs := cri.Snapshot{Sandboxes: []cri.Sandbox{{ID: "x", UID: testUID(92), Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(testUID(92))}}}
		for i := range 200 {
			p := ident(testUID(1000 + i))
			at := now.Add(time.Duration(i) * time.Second)
			for _, k := range []podstate.EventKind{podstate.RunPodSandbox, podstate.StopPodSandbox, podstate.RemovePodSandbox} {
				_ = state.Apply(podstate.Event{Kind: k, At: at, Pod: p, SandboxID: "sb-" + p.UID})
			}
		}
		for pass := range 120 {
			theirs.TakenAt = now.Add(time.Duration(pass) * 30 * time.Second)
			rt.set(theirs, nil)
			if r := loop.Pass(context.Background()); r.Untrusted == "" {
				t.Fatal("the other runtime's listing was trusted: the test proves nothing")
			}
		}
		if n := len(state.View().Pods); n > 1 {
			t.Fatalf("%d pods kept after an hour of untrusted passes (retention %s): podstate grows without bound while the listing is untrusted", n, podstate.DefaultRetention)
		}
	})
}

// The pass reads whether NRI synchronized, then the NRI session (Syncs): a
// reconnect that completes between the two reads is a new session, which
// must share a sandbox with the listing; it is not confirmed by the old one.
func TestAReconnectBetweenTheTwoReadsIsNotConfirmed(t *testing.T) {
	uid, other := testUID(95), testUID(96)
	s1 := cri.Sandbox{ID: "s1", UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)}
	state := podstate.New(0)
	state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
	rt := &fakeRuntime{}
	reconnect := false
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: 30 * time.Second, KubeletRoot: podDirs(t, uid, other),
		Synchronized: func() bool {
			if reconnect {
				reconnect = false
				// Connection lost and re-established, Synchronize done.
				state.Synchronize(now.Add(time.Minute), []podstate.SyncedSandbox{{Pod: ident(other), SandboxID: "theirs"}}, nil)
			}
			return true
		},
		Policy: reviewPolicy(t.TempDir())}, log)
	rt.set(cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{s1}}, nil)
	loop.Pass(context.Background())
	// NRI's old sandbox s1 is gone too now (the listing is another runtime's).
	state.Apply(podstate.Event{Kind: podstate.RemovePodSandbox, At: now.Add(50 * time.Second), Pod: ident(uid), SandboxID: "s1"})
	reconnect = true
	rt.set(cri.Snapshot{TakenAt: now.Add(2 * time.Minute)}, nil)
	if r := loop.Pass(context.Background()); r.Untrusted == "" {
		t.Fatalf("the first listing of a new NRI session was trusted without sharing a sandbox with it (asked the runtime %d time(s))", rt.asked.Load())
	}
}

// Marks go when a ready oracle lacks the pod's dir. Without one that can
// be read, they must not grow with every pod torn down, in memory and in
// the state file written after every pass, for as long as the node runs so:
// with pods.source = "none" no pod dir is ever orphaned and the loop keeps
// no mark; with a pods dir that cannot be read (a kubelet_root that is not
// kubelet's --root-dir, a kubelet root not mounted into the plugin's pod),
// a mark goes with podstate's record of the pod.
func TestTornDownMarksDoNotGrowWithoutAnOracleToDropThem(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) Options
	}{
		{"pods.source = none", func(t *testing.T) Options { return Options{OracleDisabled: true} }},
		{"a pods dir that cannot be read", func(t *testing.T) Options { return Options{KubeletRoot: t.TempDir()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := podstate.New(0)
			rt := &fakeRuntime{}
			log, _ := testLogger()
			opts := tc.opts(t)
			opts.Period, opts.Synchronized, opts.Policy = 30*time.Second, func() bool { return true }, reviewPolicy(t.TempDir())
			loop := New(state, rt, opts, log)
			loop.started = now.Add(-time.Hour)
			for pass := range 120 { // an hour, 5 pods torn down every pass
				at := now.Add(time.Duration(pass) * 30 * time.Second)
				for i := range 5 {
					p := ident(testUID(10000 + pass*5 + i))
					for _, k := range []podstate.EventKind{podstate.RunPodSandbox, podstate.StopPodSandbox, podstate.RemovePodSandbox} {
						_ = state.Apply(podstate.Event{Kind: k, At: at.Add(-time.Second), Pod: p, SandboxID: "sb-" + p.UID})
					}
				}
				rt.set(cri.Snapshot{TakenAt: at}, nil)
				r := loop.Pass(context.Background())
				if r.Untrusted != "" {
					t.Fatal(r.Untrusted)
				}
				if !opts.OracleDisabled && r.Plan.NotReady == "" {
					t.Fatal("the oracle is ready: the test needs one that is not")
				}
			}
			if pods, marks := len(state.View().Pods), len(loop.tornDown); marks > pods {
				t.Fatalf("podstate keeps %d pods (retention %s) but the loop keeps %d torn-down marks, and the number only grows", pods, podstate.DefaultRetention, marks)
			}
		})
	}
}

// TestTornDownMarksDoNotGrowAcrossRestartsWhileTheOracleIsNotReady: as
// TestTornDownMarksDoNotGrowWithoutAnOracleToDropThem with a pods dir that
// cannot be read, the plugin restarted every 20 minutes (containerd
// relaunching a pre-registered plugin, an OOM kill, a rollout). A mark no readable pods dir has ever
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

// Two pods leaking at the same moment on a small node (a budget of one a
// pass, the floor): both log dirs are reclaimed, one a pass, not refused
// together for good. Found by the fresh-clone CI run, where two orphaned pod
// dirs came due in one pass.
func TestTwoLeaksAtOnceOnASmallNodeAreReclaimedOneAPass(t *testing.T) {
	root := podDirs(t, testUID(80))
	podLogs := t.TempDir()
	a, b := mkPodLogDir(t, podLogs, testUID(81)), mkPodLogDir(t, podLogs, testUID(82))
	rt := &fakeRuntime{}
	files := &removingFiles{}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: 30 * time.Second, KubeletRoot: root,
		Executor: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
		Policy:   reviewPolicy(podLogs)}, log)
	loop.started = now.Add(-time.Hour)
	for pass := range 2 {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(pass) * 30 * time.Second)}, nil)
		if r := loop.Pass(context.Background()); len(r.Plan.Trips) > 0 {
			t.Fatalf("pass %d: the class was paused: %s", pass+1, r.Plan.Trips[0].Message)
		}
		if len(files.done) != pass+1 {
			t.Fatalf("pass %d: done %v, want one more log dir a pass", pass+1, files.done)
		}
	}
	if !strings.Contains(strings.Join(files.done, " "), a) || !strings.Contains(strings.Join(files.done, " "), b) {
		t.Fatalf("done %v, want both %s and %s", files.done, a, b)
	}
}

// removingFiles removes the pod log dirs it is asked to, and records them.
type removingFiles struct{ nodeRecorder }

func (f *removingFiles) RemovePodLogDir(ctx context.Context, path string) error {
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	return f.nodeRecorder.RemovePodLogDir(ctx, path)
}

// failingSandboxStop fails StopPodSandbox of the sandboxes in fail, as
// containerd does while the pod's CNI DEL keeps failing (kubelet's "Failed
// to stop sandbox before removing", retried forever).
type failingSandboxStop struct {
	criRecorder
	fail map[string]bool
}

func (f failingSandboxStop) StopPodSandbox(_ context.Context, id string) error {
	if f.fail[id] {
		return errors.New("failed to destroy network for sandbox: plugin type=\"bridge\" failed (delete)")
	}
	return nil
}

// The same as TestAStuckStepDoesNotPauseItsClassForever, one step removed:
// the pod log dir of a gone pod whose sandbox cannot be stopped (its CNI
// DEL keeps failing) waits for that sandbox every pass, and is the step of
// its class eligible longest. A step that cannot run because what it rests
// on failed must not take its class's per-pass budget every pass, or no
// other pod log dir is ever removed on a node with fewer than 20 Ready
// sandboxes ("a Stop failure ... never blocks other work").
func TestAStepWhosePrerequisiteKeepsFailingDoesNotPauseItsClassForever(t *testing.T) {
	root := podDirs(t, testUID(73)) // one live pod dir: the oracle is not empty
	podLogs := t.TempDir()
	stuck := testUID(74)
	mkPodLogDir(t, podLogs, stuck)
	rt := &fakeRuntime{}
	files := &nodeRecorder{}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: 30 * time.Second, KubeletRoot: root,
		Executor: executor.New(failingSandboxStop{fail: map[string]bool{"stuck": true}}, files, executor.Options{MaxParallel: 1}, nil),
		Policy:   reviewPolicy(podLogs)}, log)
	loop.started = now.Add(-time.Hour)
	var b string
	for pass := range 240 { // two hours
		if pass == 1 {
			b = mkPodLogDir(t, podLogs, testUID(75))
		}
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(pass) * 30 * time.Second), Sandboxes: []cri.Sandbox{
			{ID: "stuck", UID: stuck, Ready: false, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(stuck)}}}, nil)
		loop.Pass(context.Background())
	}
	for _, d := range files.done {
		if strings.Contains(d, b) {
			return
		}
	}
	t.Fatalf("in two hours the pod log dir %s was never removed: the class is paused for good by the one whose sandbox cannot be stopped (done %v)", b, files.done)
}
