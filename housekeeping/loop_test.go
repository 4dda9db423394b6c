package housekeeping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/metrics"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// fakeRuntime returns a fixed snapshot (or error) and counts listings.
type fakeRuntime struct {
	mu    sync.Mutex
	snap  cri.Snapshot
	err   error
	calls atomic.Int64
	// onSnapshot, when set, runs while a listing is being taken;
	// onListPod while a pod's objects are listed.
	onSnapshot, onListPod func()
	// exists overrides SandboxExists's answer from the snapshot; asked
	// counts the questions.
	exists map[string]bool
	asked  atomic.Int64
	// existsErr, when set, is every SandboxExists's answer.
	existsErr error
}

func (f *fakeRuntime) Snapshot(context.Context) (cri.Snapshot, error) {
	f.calls.Add(1)
	f.mu.Lock()
	snap, err, hook := f.snap, f.err, f.onSnapshot
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return snap, err
}

// SandboxExists answers from the current snapshot.
func (f *fakeRuntime) SandboxExists(_ context.Context, id string) (bool, error) {
	f.asked.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.existsErr != nil {
		return false, f.existsErr
	}
	if e, ok := f.exists[id]; ok {
		return e, nil
	}
	for _, s := range f.snap.Sandboxes {
		if s.ID == id {
			return true, nil
		}
	}
	return false, f.err
}

// ListPod answers from the current snapshot.
func (f *fakeRuntime) ListPod(_ context.Context, uid string) (cri.PodObjects, error) {
	f.mu.Lock()
	hook := f.onListPod
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var o cri.PodObjects
	for _, s := range f.snap.Sandboxes {
		if s.Labels[podstate.LabelPodUID] == uid {
			o.Sandboxes = append(o.Sandboxes, s.ID)
		}
	}
	for _, c := range f.snap.Containers {
		if c.Labels[podstate.LabelPodUID] == uid {
			o.Containers = append(o.Containers, c.ID)
		}
	}
	return o, f.err
}

func (f *fakeRuntime) set(snap cri.Snapshot, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap, f.err = snap, err
}

func kubeletLabels(uid string) map[string]string {
	return map[string]string{podstate.LabelPodUID: uid, podstate.LabelPodNamespace: "ns", podstate.LabelPodName: "p-" + uid}
}

func testLogger() (*logrus.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	l.SetLevel(logrus.DebugLevel)
	return l, &buf
}

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func TestToListingKeepsOnlyKubeletObjects(t *testing.T) {
	snap := cri.Snapshot{
		Sandboxes: []cri.Sandbox{
			{ID: "s1", Ready: true, Labels: kubeletLabels("u1"), CreatedAt: now, Attempt: 1},
			{ID: "other", Ready: true, Labels: map[string]string{"app": "not-kubelet"}},
		},
		Containers: []cri.Container{
			{ID: "c1", SandboxID: "s1", Name: "app", State: cri.ContainerExited, Labels: kubeletLabels("u1")},
			{ID: "c2", SandboxID: "other", Name: "x", State: cri.ContainerRunning},
		},
		Malformed: []cri.Malformed{{Kind: "sandbox", ID: "weird", Reason: "no metadata"}, {Kind: "container", Reason: "empty entry"}},
	}
	l, st := ToListing(7, snap)
	if st.Unmanaged != 2 || st.Malformed != 2 {
		t.Fatalf("stats = %+v, want 2 unmanaged, 2 malformed", st)
	}
	if l.StartSeq != 7 || len(l.Sandboxes) != 1 || len(l.Containers) != 1 {
		t.Fatalf("listing = %+v", l)
	}
	if l.Sandboxes[0].Pod.UID != "u1" || l.Sandboxes[0].Attempt != 1 || !l.Sandboxes[0].Ready {
		t.Errorf("sandbox = %+v", l.Sandboxes[0])
	}
	if l.Containers[0].State != podstate.ContainerExited || l.Containers[0].Pod.UID != "u1" {
		t.Errorf("container = %+v", l.Containers[0])
	}
	if len(l.Unreadable) != 1 || l.Unreadable[0] != "weird" {
		t.Errorf("unreadable = %q, want [weird]", l.Unreadable)
	}
}

func TestFailedListingChangesNothing(t *testing.T) {
	state := podstate.New(0)
	if err := state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: now, Pod: podstate.PodIdentity{UID: "u", Namespace: "ns", Name: "p"}, SandboxID: "s"}); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{}, errors.New("connection refused"))
	log, buf := testLogger()
	loop := New(state, rt, Options{Period: time.Hour}, log)
	r := loop.Pass(context.Background())
	if r.Err == nil {
		t.Fatal("pass did not report the listing error")
	}
	if p, _ := state.Pod("u"); p.Phase != podstate.PhaseRunning {
		t.Fatalf("phase = %s after a failed listing, want Running (unchanged)", p.Phase)
	}
	if !strings.Contains(buf.String(), "nothing is changed on partial data") {
		t.Fatalf("log does not explain the skipped pass:\n%s", buf.String())
	}
}

// A listing that keeps failing (a wrong runtime.endpoint) leaves NRI
// recording pods: podstate still forgets those removed for longer than its
// retention, or it would grow for as long as the listing fails.
func TestFailedListingsStillForgetRemovedPods(t *testing.T) {
	state := podstate.New(time.Minute)
	for i := range 100 {
		id := podstate.PodIdentity{UID: fmt.Sprintf("u%d", i), Namespace: "ns", Name: "p"}
		for _, kind := range []podstate.EventKind{podstate.RunPodSandbox, podstate.RemovePodSandbox} {
			if err := state.Apply(podstate.Event{Kind: kind, At: now.Add(-time.Hour), Pod: id, SandboxID: "s" + id.UID}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{}, errors.New("connection refused"))
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: time.Hour}, log)
	loop.now = func() time.Time { return now }
	if r := loop.Pass(context.Background()); r.Err == nil || r.Reconcile.Forgotten != 100 {
		t.Fatalf("failed pass: err %v, forgot %d pods removed an hour ago, want 100", r.Err, r.Reconcile.Forgotten)
	}
	if n := len(state.View().Pods); n != 0 {
		t.Fatalf("podstate still holds %d pods", n)
	}
}

func TestPassReconcilesAndLogsPhaseTransitions(t *testing.T) {
	state := podstate.New(0)
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{{ID: "s1", Ready: false, Labels: kubeletLabels("u1"), CreatedAt: now}}}, nil)
	log, buf := testLogger()
	loop := New(state, rt, Options{Period: time.Hour}, log)
	r := loop.Pass(context.Background())
	if r.Err != nil || r.Reconcile.Added != 1 || r.Counts.ByPhase[podstate.PhaseTerminated] != 1 {
		t.Fatalf("result = %+v", r)
	}
	// The first pass: every pod is new; one summary, each pod at debug.
	if !strings.Contains(buf.String(), `level=info msg="first pass: 1 pod(s) known (1 Terminated)`) ||
		!strings.Contains(buf.String(), `level=debug msg="pod ns/p-u1: new -> Terminated`) {
		t.Fatalf("no first-pass summary at info and pod line at debug:\n%s", buf.String())
	}
	buf.Reset()
	loop.Pass(context.Background())
	if strings.Contains(buf.String(), "->") || strings.Contains(buf.String(), "first pass") {
		t.Fatalf("an unchanged pod was logged as a transition:\n%s", buf.String())
	}
	buf.Reset()
	rt.set(cri.Snapshot{TakenAt: now.Add(time.Minute), Sandboxes: []cri.Sandbox{{ID: "s1", Ready: false, Labels: kubeletLabels("u1"), CreatedAt: now},
		{ID: "s2", Ready: false, Labels: kubeletLabels("u2"), CreatedAt: now}}}, nil)
	loop.Pass(context.Background())
	if !strings.Contains(buf.String(), `level=info msg="pod ns/p-u2: new -> Terminated`) || !strings.Contains(buf.String(), "pod_uid=u2") {
		t.Fatalf("no transition line at info with pod fields for a pod new after the first pass:\n%s", buf.String())
	}
	if n, last := loop.Passes(); n != 3 || last.Err != nil {
		t.Fatalf("passes = %d, last = %+v", n, last)
	}
	// A pod gone after it was listed stopped was seen torn down: its line
	// says so, and nothing of its pod dir being left.
	buf.Reset()
	rt.set(cri.Snapshot{TakenAt: now.Add(2 * time.Minute), Sandboxes: []cri.Sandbox{{ID: "s1", Ready: false, Labels: kubeletLabels("u1"), CreatedAt: now}}}, nil)
	loop.Pass(context.Background())
	if !strings.Contains(buf.String(), `msg="pod ns/p-u2: Terminated -> Removed`) || !strings.Contains(buf.String(), "torn_down=true") ||
		strings.Contains(buf.String(), "not seen torn down") {
		t.Fatalf("no Removed line saying the pod was seen torn down:\n%s", buf.String())
	}
}

func TestWakeIsDebouncedAndResyncIsImmediate(t *testing.T) {
	rt := &fakeRuntime{}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Hour, Debounce: 600 * time.Millisecond, WakeInterval: 600 * time.Millisecond}, log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = loop.Run(ctx); close(done) }()
	waitCalls(t, rt, 1) // the pass at start

	for range 20 {
		loop.Wake()
	}
	time.Sleep(100 * time.Millisecond)
	if got := rt.calls.Load(); got != 1 {
		t.Fatalf("listings = %d before the debounce ended, want 1", got)
	}
	waitCalls(t, rt, 2)
	time.Sleep(700 * time.Millisecond)
	if got := rt.calls.Load(); got != 2 {
		t.Fatalf("a burst of 20 wakes caused %d passes, want 1", got-1)
	}

	start := time.Now()
	loop.Resync()
	waitCalls(t, rt, 3)
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Fatalf("resync pass took %v to start, want immediate (the debounce is 600ms)", d)
	}
	cancel()
	<-done
}

// Under churn every stop event wakes the loop: the passes those wakes
// start are bounded by WakeInterval, and the period counts from the last
// pass, so no periodic pass follows a woken one right after.
func TestChurnWakesAPassAtMostEveryWakeInterval(t *testing.T) {
	rt := &fakeRuntime{}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: 1500 * time.Millisecond, Debounce: 50 * time.Millisecond, WakeInterval: time.Second}, log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = loop.Run(ctx); close(done) }()
	waitCalls(t, rt, 1)
	start := time.Now()
	for time.Since(start) < 3*time.Second {
		loop.Wake()
		time.Sleep(10 * time.Millisecond)
	}
	passes := rt.calls.Load() - 1
	cancel()
	<-done
	// One a second, give or take one at the edges; every 50 ms debounce
	// would be some 60, and periodic passes on top of woken ones 5.
	if passes < 2 || passes > 4 {
		t.Fatalf("3 s of wakes every 10 ms caused %d passes, want about 3 (one per WakeInterval)", passes)
	}
}

// A step whose leak_grace runs out between periods is taken then, not at
// the next period: a leak goes one leak_grace after it was found.
func TestAStepIsTakenWhenItsGraceRunsOutNotAtTheNextPeriod(t *testing.T) {
	root := podDirs(t, testUID(110)) // one live pod: the oracle is not empty
	podLogs := t.TempDir()
	logDir := mkPodLogDir(t, podLogs, testUID(111))
	policy := reviewPolicy(podLogs)
	policy.LeakGrace = 400 * time.Millisecond
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: time.Now()}, nil)
	files := &nodeRecorder{}
	log, _ := testLogger()
	loop := New(podstate.New(0), listedNow{rt}, Options{Period: time.Hour, Debounce: 50 * time.Millisecond, WakeInterval: 50 * time.Millisecond,
		KubeletRoot: root, Policy: policy, Executor: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil)}, log)
	loop.started = time.Now().Add(-time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { _ = loop.Run(ctx); close(done) }()
	for n, _ := loop.Passes(); n < 2; n, _ = loop.Passes() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d pass(es) in 10 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	cancel()
	<-done
	if !slices.Equal(files.done, []string{"RemovePodLogDir " + logDir}) {
		t.Fatalf("node steps %v after the second pass, %v after the start: want the log dir removed when its grace ran out", files.done, took)
	}
	if took < policy.LeakGrace || took > policy.LeakGrace+time.Second {
		t.Fatalf("the second pass came %v after the start; want right after leak_grace (%v), the period being an hour", took, policy.LeakGrace)
	}
}

// listedNow stamps each listing with the time it is taken.
type listedNow struct{ *fakeRuntime }

func (r listedNow) Snapshot(ctx context.Context) (cri.Snapshot, error) {
	snap, err := r.fakeRuntime.Snapshot(ctx)
	snap.TakenAt = time.Now()
	return snap, err
}

func TestNextDue(t *testing.T) {
	taken := now
	deferred := func(d gc.Deferred) PassResult {
		return PassResult{Snapshot: cri.Snapshot{TakenAt: taken}, Plan: gc.Result{Deferred: []gc.Deferred{d}}}
	}
	podDirStep := gc.Action{Kind: gc.RemovePodDir, Rule: gc.RuleOrphanedPodDir, Key: "pod-dir/a", Pod: gc.PodRef{UID: "a"}}
	success := executor.Outcome{Action: podDirStep, Result: executor.Success}
	throttledPodDir := gc.Deferred{Action: podDirStep, Budget: gc.ClassPodDir, Throttled: true}
	for _, tc := range []struct {
		rule string
		r    PassResult
		want time.Time // zero: none
	}{
		{"nothing deferred: none", PassResult{Snapshot: cri.Snapshot{TakenAt: taken}}, time.Time{}},
		{"grace left: when it runs out", deferred(gc.Deferred{GraceLeft: 3 * time.Second}), taken.Add(3 * time.Second)},
		{"the soonest of several", PassResult{Snapshot: cri.Snapshot{TakenAt: taken}, Plan: gc.Result{Deferred: []gc.Deferred{
			{GraceLeft: 9 * time.Second}, {GraceLeft: 2 * time.Second}, {WaitsFor: "x"}}}}, taken.Add(2 * time.Second)},
		{"throttled after steps of its class were taken: now", func() PassResult {
			r := deferred(throttledPodDir)
			r.Outcomes = []executor.Outcome{success}
			return r
		}(), taken},
		{"throttled with nothing taken (a dry run): none", deferred(throttledPodDir), time.Time{}},
		{"throttled, its class's steps aborted and another class's taken: none (the same steps would come first)", func() PassResult {
			r := deferred(throttledPodDir)
			r.Outcomes = []executor.Outcome{{Action: podDirStep, Result: executor.Aborted},
				{Action: gc.Action{Kind: gc.RemoveContainer, Rule: gc.RuleContainerPodGone, Key: "container/c"}, Result: executor.Success}}
			return r
		}(), time.Time{}},
		{"paused by the hour's budget: none", deferred(gc.Deferred{Budget: "pods"}), time.Time{}},
		{"a failed step: its retry", PassResult{Snapshot: cri.Snapshot{TakenAt: taken},
			Outcomes: []executor.Outcome{{Result: executor.Error, RetryAt: taken.Add(5 * time.Second)}}}, taken.Add(5 * time.Second)},
		{"a failed listing: none (the retry has its own timer)", PassResult{Err: errors.New("unavailable")}, time.Time{}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			at, ok := nextDue(tc.r)
			if ok != !tc.want.IsZero() || !at.Equal(tc.want) {
				t.Fatalf("nextDue = %v, %v; want %v", at, ok, tc.want)
			}
		})
	}
}

func TestWakeIntervalForThePeriod(t *testing.T) {
	for _, tc := range []struct{ period, debounce, want time.Duration }{
		{30 * time.Second, time.Second, 10 * time.Second}, // the default: a third of the period
		{2 * time.Second, time.Second, time.Second},       // never below the debounce
		{time.Hour, time.Second, 10 * time.Second},        // at most 10 s
		{6 * time.Second, time.Second, 2 * time.Second},
	} {
		if got := WakeIntervalFor(tc.period, tc.debounce); got != tc.want {
			t.Errorf("WakeIntervalFor(%v, %v) = %v, want %v", tc.period, tc.debounce, got, tc.want)
		}
	}
}

func waitCalls(t *testing.T, rt *fakeRuntime, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rt.calls.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("listings = %d, want %d", rt.calls.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNotifyNeverBlocks(t *testing.T) {
	loop := New(podstate.New(0), &fakeRuntime{}, Options{Period: time.Hour}, logrus.New())
	done := make(chan struct{})
	go func() {
		for range 1000 {
			loop.Wake()
			loop.Resync()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Wake/Resync blocked with no loop running")
	}
}

func TestFailedListingIsRetriedBeforeThePeriod(t *testing.T) {
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{}, errors.New("containerd is starting"))
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Hour}, log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = loop.Run(ctx); close(done) }()
	waitCalls(t, rt, 1)
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	start := time.Now()
	waitCalls(t, rt, 2)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("retry after %v, want about 1s", d)
	}
	cancel()
	<-done
	if n := strings.Count(buf.String(), "runtime listing failed"); n != 1 {
		t.Fatalf("failure logged %d times, want once:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "runtime listing works again") {
		t.Fatalf("recovery not logged:\n%s", buf.String())
	}
}

// fakeExecutor records what it was asked to execute.
type fakeExecutor struct {
	executed [][]gc.Action
	forgot   int
}

func (f *fakeExecutor) Execute(_ context.Context, actions []gc.Action, _ time.Time, _ executor.Recheck) []executor.Outcome {
	f.executed = append(f.executed, actions)
	out := make([]executor.Outcome, len(actions))
	for i, a := range actions {
		out[i] = executor.Outcome{Action: a, Result: executor.Success}
	}
	return out
}

func (f *fakeExecutor) Forget(map[string]time.Time) { f.forgot++ }

func TestNoActionBeforeEverySourceIsReady(t *testing.T) {
	// A leaked NotReady sandbox of a pod whose kubelet dir is gone: due at once
	// with no grace, if the plan may act.
	leak := cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{{ID: "s1", UID: "u1", Ready: false, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels("u1")}}}
	for _, tc := range []struct {
		name         string
		synchronized bool
		podsDir      bool
		startupDelay time.Duration
		blocked      string
	}{
		{"all ready", true, true, 0, ""},
		{"NRI not synchronized", false, true, 0, "NRI has not synchronized"},
		{"kubelet pods dir missing", true, false, 0, "pods dir"},
		{"startup delay not over", true, true, time.Hour, "startup_delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.podsDir {
				if err := os.Mkdir(filepath.Join(root, "pods"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			rt := &fakeRuntime{}
			rt.set(leak, nil)
			exec := &fakeExecutor{}
			log, buf := testLogger()
			state := podstate.New(0)
			if tc.synchronized { // NRI reported the sandbox the listing has
				state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: podstate.PodIdentity{UID: "u1", Namespace: "ns", Name: "p-u1"}, SandboxID: "s1"}}, nil)
			}
			loop := New(state, rt, Options{
				Period: time.Hour, StartupDelay: tc.startupDelay, KubeletRoot: root,
				Policy:       gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()},
				Synchronized: func() bool { return tc.synchronized },
				Executor:     exec,
			}, log)
			loop.started = now // the snapshot's clock
			r := loop.Pass(context.Background())
			if !strings.Contains(r.Blocked, tc.blocked) || (tc.blocked == "") != (r.Blocked == "") {
				t.Fatalf("blocked = %q, want %q", r.Blocked, tc.blocked)
			}
			switch {
			case tc.blocked == "" && (len(exec.executed) != 1 || len(exec.executed[0]) != 1):
				t.Fatalf("executed %v, want the sandbox removal", exec.executed)
			case tc.blocked != "" && len(exec.executed) != 0:
				t.Fatalf("executed %v while blocked", exec.executed)
			}
			// A pass that could not plan (the pods dir missing) ended
			// nothing: the backoffs stand.
			if want := map[bool]int{true: 0, false: 1}[r.Plan.NotReady != ""]; exec.forgot != want {
				t.Fatalf("Forget called %d times, want %d (plan not ready: %q)", exec.forgot, want, r.Plan.NotReady)
			}
			if tc.blocked != "" && !strings.Contains(buf.String(), "does not act yet") {
				t.Fatalf("the closed gate was not logged:\n%s", buf.String())
			}
		})
	}
}

// TestMetricsKnowEveryKindAndRule keeps the metrics' fixed label sets in
// step with the planner: an unknown kind or rule would be counted as "other".
func TestMetricsKnowEveryKindAndRule(t *testing.T) {
	allowed := metrics.AllowedLabelValues()["nri_housekeeper_actions_total"]
	has := func(label, v string) bool {
		for _, a := range allowed[label] {
			if a == v {
				return true
			}
		}
		return false
	}
	for _, k := range gc.Kinds {
		if !has("kind", string(k)) {
			t.Errorf("metrics do not know action kind %q", k)
		}
	}
	for _, r := range gc.Rules {
		if !has("rule", r) {
			t.Errorf("metrics do not know rule %q", r)
		}
	}
}

func TestFileProblemsAreLoggedOnceWhileTheyLast(t *testing.T) {
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	log, buf := testLogger()
	podLogs := t.TempDir()
	loop := New(podstate.New(0), rt, Options{Period: time.Hour, OracleDisabled: true,
		Policy: gc.Policy{PodLogsDir: podLogs, ContainerLogsDir: t.TempDir()}}, log)
	odd := filepath.Join(podLogs, "not-a-pod-log-dir")
	const leftAlone = "left alone: not a name kubelet writes"
	steps := []struct {
		present bool
		logged  bool
	}{
		{present: true, logged: true},   // first seen
		{present: true, logged: false},  // still there: said already
		{present: false, logged: false}, // gone: forgotten
		{present: true, logged: true},   // back: said again
	}
	for i, step := range steps {
		if step.present {
			if err := os.MkdirAll(odd, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.RemoveAll(odd); err != nil {
			t.Fatal(err)
		}
		buf.Reset()
		loop.Pass(context.Background())
		if got := strings.Count(buf.String(), leftAlone); got != map[bool]int{true: 1, false: 0}[step.logged] {
			t.Fatalf("pass %d: %q logged %d times:\n%s", i+1, leftAlone, got, buf.String())
		}
		if want := map[bool]int{true: 1, false: 0}[step.present]; len(loop.warned) != want {
			t.Fatalf("pass %d: %d problems remembered, want %d: %v", i+1, len(loop.warned), want, loop.warned)
		}
	}
}

// TestOnlyPodsSeenTornDownMayHaveOrphanedPodDirs: a pod dir with nothing
// listed is also a pod kubelet has not started yet. The loop passes on the
// pods it saw Removed, for as long as their dir lasts and even after
// podstate forgot them; a pod that lives again, or whose dir goes, drops out.
func TestOnlyPodsSeenTornDownMayHaveOrphanedPodDirs(t *testing.T) {
	root := t.TempDir()
	for _, uid := range []string{"torn", "pending"} {
		if err := os.MkdirAll(filepath.Join(root, "pods", uid), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rt := &fakeRuntime{}
	log, _ := testLogger()
	state := podstate.New(time.Nanosecond) // forgets Removed pods at once
	loop := New(state, rt, Options{Period: time.Hour, KubeletRoot: root,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	listed := func(id string, ready bool, at time.Time) cri.Snapshot {
		return cri.Snapshot{TakenAt: at, Sandboxes: []cri.Sandbox{{ID: id, UID: "torn", Ready: ready, CreatedAt: now, Labels: kubeletLabels("torn")}}}
	}
	empty := func(at time.Time) cri.Snapshot { return cri.Snapshot{TakenAt: at} }
	steps := []struct {
		name string
		snap cri.Snapshot
		do   func()
		want []string
	}{
		{"running: not torn down", listed("s1", true, now), nil, nil},
		{"its sandbox stopped: not torn down", listed("s1", false, now.Add(5*time.Second)), nil, nil},
		{"its sandbox removed after it was seen stopped: torn down", empty(now.Add(10 * time.Second)), nil, []string{"torn"}},
		{"forgotten by podstate: still remembered", empty(now.Add(time.Hour)), nil, []string{"torn"}},
		{"running again: not torn down", listed("s2", true, now.Add(time.Hour+time.Minute)), nil, nil},
		{"gone without being seen stopped: only absent, not torn down", empty(now.Add(2 * time.Hour)), nil, nil},
		{"running again", listed("s3", true, now.Add(2*time.Hour+time.Minute)), nil, nil},
		{"stopped again", listed("s3", false, now.Add(2*time.Hour+2*time.Minute)), nil, nil},
		{"removed again", empty(now.Add(2*time.Hour + 3*time.Minute)), nil, []string{"torn"}},
		{"its pod dir gone: forgotten", empty(now.Add(3 * time.Hour)), func() {
			if err := os.Remove(filepath.Join(root, "pods", "torn")); err != nil {
				t.Fatal(err)
			}
		}, nil},
	}
	for _, step := range steps {
		if step.do != nil {
			step.do()
		}
		rt.set(step.snap, nil)
		loop.Pass(context.Background())
		var got []string
		for uid := range loop.tornDown {
			got = append(got, uid)
		}
		if strings.Join(got, ",") != strings.Join(step.want, ",") {
			t.Fatalf("%s: torn down = %v, want %v (the pending pod is never in it)", step.name, got, step.want)
		}
		if _, tracked := state.Pod("torn"); strings.HasPrefix(step.name, "forgotten") && tracked {
			t.Fatalf("%s: podstate still tracks the pod, so the step proves nothing", step.name)
		}
	}
}

// TestUnreadableListingEntriesReachThePlan: a container the runtime lists
// but that cannot be read still holds its sandbox, and the pass says why.
func TestUnreadableListingEntriesReachThePlan(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now,
		Sandboxes: []cri.Sandbox{{ID: "s1", UID: "u1", Ready: false, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels("u1")}},
		Malformed: []cri.Malformed{{Kind: "container", ID: "c1", Reason: "no creation time", SandboxID: "s1", PodUID: "u1"}},
	}, nil)
	exec := &fakeExecutor{}
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Hour, KubeletRoot: root, Executor: exec,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	loop.started = now
	r := loop.Pass(context.Background())
	if r.Blocked != "" || len(r.Plan.Actions) != 0 {
		t.Fatalf("blocked %q, actions %v: the sandbox of an unreadable container was planned", r.Blocked, r.Plan.Actions)
	}
	if !strings.Contains(buf.String(), "keep the sandboxes and pods they name") {
		t.Fatalf("the malformed entry is not explained:\n%s", buf.String())
	}
	for _, k := range r.Plan.Kept {
		if k.Object == "sandbox s1" && strings.Contains(k.Reason, "container c1 that the runtime listed but that could not be read") {
			return
		}
	}
	t.Fatalf("sandbox s1 not kept for its unreadable container: %+v", r.Plan.Kept)
}

// TestAPassSaysWhichCgroupHierarchyItListsBetweenFullScans: on cgroup v1
// a pass lists one hierarchy's pods between full scans; the log says which,
// once, and not on a node with one hierarchy.
func TestAPassSaysWhichCgroupHierarchyItListsBetweenFullScans(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		n := makeFakeNode(t, t.TempDir(), v2, 3, 0)
		loop := n.loop(false)
		buf := &bytes.Buffer{}
		loop.log.(*logrus.Logger).SetOutput(buf)
		for range 3 {
			if r := loop.Pass(context.Background()); r.Err != nil || r.Untrusted != "" {
				t.Fatalf("v2 %v: pass failed: %v %q", v2, r.Err, r.Untrusted)
			}
		}
		said := strings.Count(buf.String(), "pod cgroups: between full scans")
		switch {
		case v2 && said != 0:
			t.Errorf("one hierarchy, yet said %d times which one is listed: %s", said, buf.String())
		case !v2 && (said != 1 || !strings.Contains(buf.String(), "hierarchy="+n.cgroups.Mountpoint+"/")):
			t.Errorf("v1: said %d times which hierarchy is listed, want once, naming one under %s: %s", said, n.cgroups.Mountpoint, buf.String())
		}
	}
}

// stepsExecutor runs each action's re-check, a minute apart on clock, and
// records what the loop's LastProgress says after each.
type stepsExecutor struct {
	clock    *time.Time
	loop     *Loop
	progress []time.Time
}

func (f *stepsExecutor) Execute(ctx context.Context, actions []gc.Action, _ time.Time, recheck executor.Recheck) []executor.Outcome {
	out := make([]executor.Outcome, len(actions))
	for i, a := range actions {
		*f.clock = f.clock.Add(time.Minute)
		_ = recheck(ctx, a)
		f.progress = append(f.progress, f.loop.LastProgress())
		out[i] = executor.Outcome{Action: a, Result: executor.Success}
	}
	return out
}

func (f *stepsExecutor) Forget(map[string]time.Time) {}

// TestAPassAtWorkShowsProgress: /healthz asks LastProgress whether the loop
// is alive. A pass reclaiming a mass leak takes minutes; each step it starts
// is progress, so a liveness probe does not kill it half way (and restart
// every grace clock), while a pass stuck on one step makes none.
func TestAPassAtWorkShowsProgress(t *testing.T) {
	var sandboxes []cri.Sandbox
	for i := range 3 {
		uid := testUID(900 + i)
		sandboxes = append(sandboxes, cri.Sandbox{ID: fmt.Sprintf("s%d", i), UID: uid, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)})
	}
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now, Sandboxes: sandboxes}, nil)
	clock := now
	exec := &stepsExecutor{clock: &clock}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: podDirs(t, testUID(999)), Executor: exec,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	exec.loop = loop
	loop.now = func() time.Time { return clock }
	loop.started = now
	if !loop.LastProgress().IsZero() {
		t.Fatalf("progress %v before any pass", loop.LastProgress())
	}
	loop.Pass(context.Background())
	if len(exec.progress) != 3 {
		t.Fatalf("%d steps started, want the 3 sandbox removals", len(exec.progress))
	}
	for i, p := range exec.progress {
		if want := now.Add(time.Duration(i+1) * time.Minute); !p.Equal(want) {
			t.Errorf("after step %d of the pass, progress %s, want %s: a liveness probe would see no progress since the last pass ended",
				i+1, p.Format(time.TimeOnly), want.Format(time.TimeOnly))
		}
	}
	if got := loop.LastProgress(); !got.Equal(loop.LastPassEnd()) || !got.Equal(clock) {
		t.Errorf("after the pass, progress %s, want its end %s", got, clock)
	}
}

// TestTheGateIsSaidWhenItOpensOrClosesNotEveryPassOfTheStartupDelay: the
// gate's line says why housekeeping does not act yet, once; a reason that
// changed its words every pass (the time left) said it at every pass.
func TestTheGateIsSaidWhenItOpensOrClosesNotEveryPassOfTheStartupDelay(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, Options{
		Period: time.Minute, StartupDelay: 5 * time.Minute, KubeletRoot: root,
		Policy:       gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()},
		Synchronized: func() bool { return true },
		Executor:     &fakeExecutor{},
	}, log)
	loop.started = now
	for m := range 7 {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(m) * time.Minute)}, nil)
		loop.Pass(context.Background())
	}
	closed := strings.Count(buf.String(), `msg="housekeeping plans but does not act yet"`)
	opened := strings.Count(buf.String(), "all sources ready: housekeeping acts on what is due from now on")
	if closed != 1 || opened != 1 || !strings.Contains(buf.String(), "acting from "+now.Add(5*time.Minute).UTC().Format(time.RFC3339)) {
		t.Errorf("in 7 passes over a 5m startup_delay, the gate said closed %d and open %d times, want once each, saying when it opens:\n%s", closed, opened, buf.String())
	}
}

// TestThePassSummaryCountsTheStepsTriedAsOnceDoes: "executed" is what was
// tried (as once's "executed N action(s)"), not every outcome: a step
// checked again and aborted, skipped or backing off was not.
func TestThePassSummaryCountsTheStepsTriedAsOnceDoes(t *testing.T) {
	log, buf := testLogger()
	loop := New(podstate.New(0), &fakeRuntime{}, Options{Period: time.Minute}, log)
	var outcomes []executor.Outcome
	for _, r := range []executor.Result{executor.Success, executor.Success, executor.Error, executor.Aborted, executor.Skipped, executor.Backoff} {
		outcomes = append(outcomes, executor.Outcome{Result: r})
	}
	loop.finish(PassResult{Outcomes: outcomes}, nil)
	line := buf.String()
	if !strings.Contains(line, `msg="housekeeping pass"`) || !strings.Contains(line, " executed=3 ") || !strings.Contains(line, " failed=1 ") ||
		!strings.Contains(line, " not_done=3 ") {
		t.Errorf("summary %q, want executed=3 failed=1 not_done=3", line)
	}
}

// report and once run one pass and print what it found: the running
// plugin's "from now on, each pod's phase changes are logged" is not said
// (nothing follows).
func TestAOneShotPassSaysNothingOfPassesToCome(t *testing.T) {
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{{ID: "s1", Labels: kubeletLabels("u1"), CreatedAt: now}}}, nil)
	log, buf := testLogger()
	New(podstate.New(0), rt, Options{Period: time.Hour, OneShot: true}, log).Pass(context.Background())
	if out := buf.String(); strings.Contains(out, "from now on") || !strings.Contains(out, `level=debug msg="1 pod(s) known (1 Terminated)"`) {
		t.Fatalf("a one-shot pass spoke of passes to come, or did not say the pods at debug:\n%s", out)
	}
}
