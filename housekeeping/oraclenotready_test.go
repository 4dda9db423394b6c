package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// A pass whose pod oracle is not ready (kubelet's pods dir unreadable for a
// moment) plans nothing, so it ends nothing: a budget trip still stands (as
// budget_paused says), and is not said to be over, nor said again as an
// error at the next planned pass.
func TestAPassThatCouldNotPlanSaysNoTripOver(t *testing.T) {
	root := podDirs(t, testUID(70))
	podLogs := t.TempDir()
	mkPodLogDir(t, podLogs, testUID(71))
	mkPodLogDir(t, podLogs, testUID(72))
	policy := reviewPolicy(podLogs)
	policy.Budget.MaxPerHour = 1
	rt := &fakeRuntime{}
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: 30 * time.Second, KubeletRoot: root,
		Executor: executor.New(criRecorder{}, &nodeRecorder{}, executor.Options{MaxParallel: 1}, nil),
		Policy:   policy}, log)
	loop.started = now.Add(-time.Hour)
	pass := func(i int) PassResult {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * 30 * time.Second)}, nil)
		return loop.Pass(context.Background())
	}
	pass(0) // takes one of the two log dirs: the hour is spent
	if r := pass(1); len(r.Plan.Trips) != 1 {
		t.Fatalf("pass 1 trips %+v, want the pod-log-dir class (its hour spent)", r.Plan.Trips)
	}
	pods := filepath.Join(root, "pods")
	if err := os.Rename(pods, pods+".away"); err != nil {
		t.Fatal(err)
	}
	if r := pass(2); r.Plan.NotReady == "" {
		t.Fatal("pass 2 planned with the pods dir away: the test proves nothing")
	}
	if err := os.Rename(pods+".away", pods); err != nil {
		t.Fatal(err)
	}
	pass(3)
	out := buf.String()
	if over, trips := strings.Count(out, "the class is within its budget again"), strings.Count(out, `level=error msg="blast-radius budget`); over > 0 || trips != 1 {
		t.Fatalf("with the hour still spent, the log said the class within its budget %d time(s) and its trip %d time(s), want 0 and 1:\n%s", over, trips, out)
	}
}

type countingFailFiles struct {
	failingFiles
	tries int
}

func (f *countingFailFiles) RemovePodLogDir(ctx context.Context, path string) error {
	f.tries++
	return f.failingFiles.RemovePodLogDir(ctx, path)
}

// A pass that could not plan keeps the steps' backoffs, as one whose
// listing is untrusted does: it dropped them all, and a failing step was
// tried again at once, its attempts counted from 1.
func TestAPassThatCouldNotPlanKeepsTheBackoffs(t *testing.T) {
	root := podDirs(t, testUID(70))
	podLogs := t.TempDir()
	a := mkPodLogDir(t, podLogs, testUID(71))
	files := &countingFailFiles{failingFiles: failingFiles{fail: map[string]bool{a: true}}}
	rt := &fakeRuntime{}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: 30 * time.Second, KubeletRoot: root,
		Executor: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
		Policy:   reviewPolicy(podLogs)}, log)
	loop.started = now.Add(-time.Hour)
	pass := func(at time.Duration) PassResult {
		rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
		return loop.Pass(context.Background())
	}
	pass(0) // fails: a backoff of 10 s at least
	pods := filepath.Join(root, "pods")
	if err := os.Rename(pods, pods+".away"); err != nil {
		t.Fatal(err)
	}
	if r := pass(time.Second); r.Plan.NotReady == "" {
		t.Fatal("the pass with the pods dir away planned: the test proves nothing")
	}
	if err := os.Rename(pods+".away", pods); err != nil {
		t.Fatal(err)
	}
	r := pass(2 * time.Second)
	if files.tries != 1 {
		t.Fatalf("tried %d times within 2 s of a failure whose backoff is 10 s or more (outcomes %+v)", files.tries, r.Outcomes)
	}
}

// While the gate is closed (startup_delay, NRI not synchronized) nothing is
// run: an orphan stop in the plan is not said to be done "now", and is said
// so when it runs.
func TestAnOrphanStopIsSaidDoneOnlyWhenItRuns(t *testing.T) {
	pod := gc.PodRef{UID: "u1", Namespace: "ns", Name: "web"}
	stop := gc.Action{Kind: gc.StopSandbox, Rule: gc.RuleOrphanStop, Pod: pod, Key: "stop-sandbox/s1", SandboxID: "s1"}
	log, buf := testLogger()
	loop := New(podstate.New(0), &fakeRuntime{}, Options{Period: time.Hour}, log)
	loop.logPlan(PassResult{Blocked: "housekeeping.startup_delay (1m0s) has not passed", Plan: gc.Result{Actions: []gc.Action{stop}}})
	if out := buf.String(); strings.Contains(out, " now") || !strings.Contains(out, "once housekeeping acts: housekeeping.startup_delay") {
		t.Fatalf("a pass that ran nothing logged:\n%s", out)
	}
	buf.Reset()
	loop.logPlan(PassResult{Plan: gc.Result{Actions: []gc.Action{stop}}, Outcomes: []executor.Outcome{{Action: stop, Result: executor.Success}}})
	if out := buf.String(); !strings.Contains(out, `stopped (orphans.action = \"stop\") now`) || !strings.Contains(out, "rule=orphans.stop") {
		t.Fatalf("the pass that runs the stop did not say it:\n%s", out)
	}
}
