package housekeeping

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// killingExecutor carries out a pass's steps (recording them in inner), then
// the process is killed (SIGKILL: containerd's NRI kills a pre-registered
// plugin that way whenever it stops it, e.g. on every containerd restart;
// or the OOM killer, or the end of a pod's termination grace) before the
// pass ends.
type killingExecutor struct{ inner *fakeExecutor }

type killed struct{}

func (k killingExecutor) Execute(ctx context.Context, actions []gc.Action, now time.Time, recheck executor.Recheck) []executor.Outcome {
	out := k.inner.Execute(ctx, actions, now, recheck)
	if len(actions) > 0 {
		panic(killed{})
	}
	return out
}

func (k killingExecutor) Forget(p map[string]time.Time) { k.inner.Forget(p) }

// TestAKillDuringAPassKeepsItsBudgetedSteps: the budgeted steps of a pass
// are written to the state file before they run. A plugin killed while a
// pass executes (after its budgeted steps, before the pass ends) would
// otherwise forget them, and one killed this way each time it acts would
// take a fresh budget each run, which is what the state file's hour is
// there to prevent ("a restart (a crash, an upgrade, a crash loop) ... nor
// starts a fresh hour of budget").
func TestAKillDuringAPassKeepsItsBudgetedSteps(t *testing.T) {
	const limit = 20
	live := testUIDs(600, 12)
	root := podDirs(t, live...)
	cfg := orphanStopConfig(t, root, filepath.Join(t.TempDir(), "state.json"))
	cfg.Budget.MaxPerPass, cfg.Budget.MinPerPass, cfg.Budget.MaxFraction, cfg.Budget.MaxPerHour = 100, 100, 1, limit
	opts := OptionsFromConfig(cfg)
	inner := &fakeExecutor{}
	opts.Executor = killingExecutor{inner}
	rt := &fakeRuntime{}
	stopped := map[string]bool{}
	var loop *Loop
	restart := func(at time.Time) {
		if loop != nil {
			// Killed: the kernel drops the flock; nothing else runs.
			_ = loop.stateLock.Release()
		}
		log, _ := testLogger()
		loop = New(podstate.New(0), rt, opts, log)
		loop.now = func() time.Time { return at }
		loop.started = at.Add(-time.Hour)
		loop.Restore(context.Background())
	}
	restart(now)
	const passes = 60 // 30 minutes
	for pass := range passes {
		at := now.Add(time.Duration(pass) * 30 * time.Second)
		rt.set(orphanEveryPass(live, pass, at, stopped), nil)
		before := len(inner.executed)
		wasKilled := func() (k bool) {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(killed); !ok {
						panic(r)
					}
					k = true
				}
			}()
			loop.Pass(context.Background())
			return false
		}()
		for _, batch := range inner.executed[before:] {
			for _, a := range batch {
				if a.Kind == gc.StopSandbox {
					stopped[a.SandboxID] = true
				}
			}
		}
		if wasKilled {
			restart(at.Add(time.Second))
		}
	}
	if len(stopped) > limit {
		t.Fatalf("stopped %d live pods in %d minutes, with budget.max_per_hour = %d: the steps of each killed pass were never written to the state file",
			len(stopped), passes/2, limit)
	}
}

// TestUnitsSpentAheadAreGivenBackWhenNoStepRan: a unit counted before its
// steps run stays counted once one of them succeeded or failed, and is
// given back when none ran (skipped, aborted by its check, backing off,
// shown by a dry run); a unit counted in an earlier pass is not touched.
func TestUnitsSpentAheadAreGivenBackWhenNoStepRan(t *testing.T) {
	stop := func(uid string) gc.Action {
		return gc.Action{Kind: gc.StopSandbox, Rule: gc.RuleOrphanStop, Key: "sandbox/" + uid, Pod: gc.PodRef{UID: uid}}
	}
	for _, tt := range []struct {
		result executor.Result
		kept   bool
	}{
		{executor.Success, true}, {executor.Error, true},
		{executor.Skipped, false}, {executor.Aborted, false}, {executor.Backoff, false}, {executor.Would, false},
	} {
		t.Run(string(tt.result), func(t *testing.T) {
			log, _ := testLogger()
			l := New(podstate.New(0), &fakeRuntime{}, Options{Executor: &fakeExecutor{}}, log)
			earlier := now.Add(-time.Minute)
			l.spent = []spent{{at: earlier, class: gc.ClassOrphanStop, unit: "old"}}
			actions := []gc.Action{stop("old"), stop("new"), stop("new")}
			ahead := l.spendAhead(now, actions)
			if len(ahead) != 1 || !ahead[gc.ClassOrphanStop+"/new"] || len(l.spent) != 2 {
				t.Fatalf("ahead %v, spent %v; want the new unit only, counted before it runs", ahead, l.spent)
			}
			l.settleSpent(now, ahead, []executor.Outcome{
				{Action: actions[0], Result: executor.Success},
				{Action: actions[1], Result: executor.Skipped},
				{Action: actions[2], Result: tt.result},
			})
			got := l.budgetSpent(now)
			if !got[gc.ClassOrphanStop+"/old"] || got[gc.ClassOrphanStop+"/new"] != tt.kept {
				t.Fatalf("after a step ended %s: spent %v; want old kept and new kept %v", tt.result, got, tt.kept)
			}
		})
	}
}

// TestAUnitHeldByAFailingPrerequisiteStaysSpentWhateverTheOrder: a step
// skipped because what it rests on failed (or backs off), directly or
// through a chain, keeps its unit spent, as a failed step does; one skipped
// for a step that was only aborted or skipped by itself gives it back.
// Outcomes come in the plan's order, which need not put a dependency
// before what rests on it.
func TestAUnitHeldByAFailingPrerequisiteStaysSpentWhateverTheOrder(t *testing.T) {
	logDir := gc.Action{Kind: gc.RemovePodLogDir, Key: "pod-log-dir/u1", Pod: gc.PodRef{UID: "u1"}, DependsOn: []string{"pod-dir/u1"}}
	podDir := gc.Action{Kind: gc.RemovePodDir, Key: "pod-dir/u1", Pod: gc.PodRef{UID: "u1"}, DependsOn: []string{"sandbox/s1"}}
	sandbox := gc.Action{Kind: gc.RemoveSandbox, Key: "sandbox/s1", Pod: gc.PodRef{UID: "u1"}}
	for _, tt := range []struct {
		name    string
		sandbox executor.Result
		kept    bool
	}{
		{"the sandbox's removal failed", executor.Error, true},
		{"the sandbox's removal backs off", executor.Backoff, true},
		{"the sandbox's removal was aborted by its check", executor.Aborted, false},
	} {
		for _, order := range []string{"dependencies first", "dependents first"} {
			t.Run(tt.name+"/"+order, func(t *testing.T) {
				log, _ := testLogger()
				l := New(podstate.New(0), &fakeRuntime{}, Options{Executor: &fakeExecutor{}}, log)
				actions := []gc.Action{sandbox, podDir, logDir}
				ahead := l.spendAhead(now, actions)
				outcomes := []executor.Outcome{{Action: sandbox, Result: tt.sandbox},
					{Action: podDir, Result: executor.Skipped}, {Action: logDir, Result: executor.Skipped}}
				if order == "dependents first" {
					slices.Reverse(outcomes)
				}
				l.settleSpent(now, ahead, outcomes)
				got := l.budgetSpent(now)
				for _, unit := range []string{gc.ClassPodDir + "/" + podDir.Key, gc.ClassPodLogDir + "/" + logDir.Key} {
					if got[unit] != tt.kept {
						t.Errorf("unit %s spent: %v, want %v (spent %v)", unit, got[unit], tt.kept, got)
					}
				}
			})
		}
	}
}

// TestAUnitIsFailingFromItsFailureUntilItsNextOtherOutcome: a unit is
// failing (taken after the others of its class) from a failed try on,
// also while the budget holds it untried, until a try of it ends
// otherwise (a success, a refusal by its check) or the plan has not
// proposed it for an hour (a pass that did not look at its class proposes
// nothing of it). A unit of several steps is failing when one of them is.
func TestAUnitIsFailingFromItsFailureUntilItsNextOtherOutcome(t *testing.T) {
	podDir := gc.Action{Kind: gc.RemovePodDir, Key: "pod-dir/u1", Pod: gc.PodRef{UID: "u1"}}
	unit := gc.ClassPodDir + "/" + podDir.Key
	proposed := gc.Result{Actions: []gc.Action{podDir}}
	held := gc.Result{Deferred: []gc.Deferred{{Action: podDir, Budget: gc.ClassPodDir, Throttled: true}}}
	for _, tc := range []struct {
		name     string
		after    time.Duration
		plan     gc.Result
		outcomes []executor.Outcome
		failing  bool
	}{
		{"failed again", time.Minute, proposed, []executor.Outcome{{Action: podDir, Result: executor.Error}}, true},
		{"backs off", time.Minute, proposed, []executor.Outcome{{Action: podDir, Result: executor.Backoff}}, true},
		{"held by the budget, untried", time.Minute, held, nil, true},
		{"succeeded", time.Minute, proposed, []executor.Outcome{{Action: podDir, Result: executor.Success}}, false},
		{"refused by its check", time.Minute, proposed, []executor.Outcome{{Action: podDir, Result: executor.Aborted}}, false},
		{"not proposed by a pass that did not look at its class", time.Minute, gc.Result{}, nil, true},
		{"not proposed for an hour", time.Hour, gc.Result{}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, _ := testLogger()
			l := New(podstate.New(0), &fakeRuntime{}, Options{Executor: &fakeExecutor{}}, log)
			l.noteFailing(now, proposed, []executor.Outcome{{Action: podDir, Result: executor.Error}})
			if _, ok := l.failing[unit]; !ok {
				t.Fatalf("after a failed try: failing %v, want %s", l.failing, unit)
			}
			l.noteFailing(now.Add(tc.after), tc.plan, tc.outcomes)
			if _, ok := l.failing[unit]; ok != tc.failing {
				t.Fatalf("failing %v, want %s failing: %v", l.failing, unit, tc.failing)
			}
		})
	}
	// A leaked sandbox's network steps are one unit: its pod network's
	// DEL failing and its loopback DEL done, it is failing.
	net := gc.Action{Kind: gc.RemoveCNIAttachment, Key: "cni/pods/c1", ContainerID: "c1"}
	lo := gc.Action{Kind: gc.RemoveCNIAttachment, Key: "cni/lo/c1", ContainerID: "c1"}
	log, _ := testLogger()
	l := New(podstate.New(0), &fakeRuntime{}, Options{Executor: &fakeExecutor{}}, log)
	l.noteFailing(now, gc.Result{Actions: []gc.Action{net, lo}}, []executor.Outcome{{Action: net, Result: executor.Error}, {Action: lo, Result: executor.Success}})
	if _, ok := l.failing[gc.ClassNetwork+"/c1"]; !ok {
		t.Fatalf("a unit one of whose steps failed: failing %v, want %s", l.failing, gc.ClassNetwork+"/c1")
	}
}
