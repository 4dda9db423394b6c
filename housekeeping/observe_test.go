package housekeeping

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/metrics"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// partsObserver is an Observer that keeps what it was last told of each
// part of housekeeping (SetDegraded) and drops the rest.
type partsObserver struct {
	mu        sync.Mutex
	degraded  map[string]bool
	untrusted map[string]bool
}

func (o *partsObserver) ObservePass(string, time.Duration, time.Time) {}
func (o *partsObserver) SetTrackedPods(map[[2]string]int)             {}
func (o *partsObserver) SetLeaks(map[string]int)                      {}
func (o *partsObserver) SetOldestLeaks(map[string]time.Duration)      {}
func (o *partsObserver) ObserveAction(string, string, string)         {}
func (o *partsObserver) ObserveBudgetTrips([]string)                  {}
func (o *partsObserver) SetStuckTerminating(int)                      {}

func (o *partsObserver) SetDegraded(part string, degraded bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.degraded == nil {
		o.degraded = map[string]bool{}
	}
	o.degraded[part] = degraded
}

// told returns what the observer was last told of part, and whether it was
// told anything.
func (o *partsObserver) told(part string) (degraded, told bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	degraded, told = o.degraded[part]
	return degraded, told
}

func (o *partsObserver) SetUntrusted(source string, untrusted bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.untrusted == nil {
		o.untrusted = map[string]bool{}
	}
	o.untrusted[source] = untrusted
}

// distrusts says whether the observer was last told source is untrusted.
func (o *partsObserver) distrusts(source string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.untrusted[source]
}

// oldestObserver keeps what SetOldestLeaks was last told.
type oldestObserver struct {
	partsObserver
	oldest map[string]time.Duration
}

func (o *oldestObserver) SetOldestLeaks(byKind map[string]time.Duration) { o.oldest = byKind }

// leakedLogDirLoop is a loop over a node with one live pod (the oracle is
// not empty) under root and the pod log dir logDir of a gone pod, whose
// removal waits a leak_grace of 2 hours (never due in a test: it waits,
// and grows old); its metrics go to obs.
func leakedLogDirLoop(t *testing.T) (loop *Loop, rt *fakeRuntime, obs *oldestObserver, root, logDir string) {
	t.Helper()
	root = podDirs(t, testUID(110))
	podLogs := t.TempDir()
	logDir = mkPodLogDir(t, podLogs, testUID(111))
	policy := reviewPolicy(podLogs)
	policy.LeakGrace = 2 * time.Hour
	rt, obs = &fakeRuntime{}, &oldestObserver{}
	log, _ := testLogger()
	loop = New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root, Policy: policy, Observer: obs,
		Executor: executor.New(criRecorder{}, &nodeRecorder{}, executor.Options{MaxParallel: 1}, nil)}, log)
	loop.started = now.Add(-time.Hour)
	return loop, rt, obs, root, logDir
}

// TestTheOldestLeakIsHowLongItsStepHasBeenProposedPassAfterPass: what an
// alert on a leak that lasts needs, where leaked_objects also counts what
// kubelet collects itself minutes later. A leak found again pass after pass
// grows old; one whose condition stopped holding starts again from 0.
func TestTheOldestLeakIsHowLongItsStepHasBeenProposedPassAfterPass(t *testing.T) {
	loop, rt, obs, _, logDir := leakedLogDirLoop(t)
	for _, tc := range []struct {
		at   time.Duration
		gone bool // the pod log dir is gone before the pass
		want time.Duration
	}{
		{0, false, 0},
		{10 * time.Minute, false, 10 * time.Minute},
		{70 * time.Minute, false, 70 * time.Minute},
		{71 * time.Minute, true, 0},
	} {
		if tc.gone {
			if err := os.RemoveAll(logDir); err != nil {
				t.Fatal(err)
			}
		}
		rt.set(cri.Snapshot{TakenAt: now.Add(tc.at)}, nil)
		loop.Pass(context.Background())
		if got := obs.oldest[string(gc.RemovePodLogDir)]; got != tc.want {
			t.Errorf("at +%v: the oldest pod log dir removal proposed for %v, want %v (all: %v)", tc.at, got, tc.want, obs.oldest)
		}
	}
}

// stuckSandbox is one sandbox of a stuckPod: how long ago it left Ready (0:
// it is Ready) and was removed (0: it was not).
type stuckSandbox struct{ stopped, removed time.Duration }

// stuckPod is a pod for TestStuckTerminatingCountsPodsTerminatingForLeakGrace:
// its sandboxes in the order they ran, and whether its container, in the
// last one, runs.
type stuckPod struct {
	sandboxes []stuckSandbox
	running   bool
}

// phase is the phase podstate should give the pod.
func (p stuckPod) phase() podstate.Phase {
	switch last := p.sandboxes[len(p.sandboxes)-1]; {
	case last.stopped == 0:
		return podstate.PhaseRunning
	case p.running:
		return podstate.PhaseTerminating
	}
	return podstate.PhaseTerminated
}

// TestStuckTerminatingCountsPodsTerminatingForLeakGrace: the gauge
// stuck_terminating_pods is the number of pods Terminating (no Ready
// sandbox, a container that may still run) since at least leak_grace ago,
// counted from when their last sandbox left Ready. The pods are told by NRI
// events, as in the plugin, and listed as they are; the gauge is read from
// the metrics a pass reports to.
func TestStuckTerminatingCountsPodsTerminatingForLeakGrace(t *testing.T) {
	const grace = 5 * time.Minute
	running := stuckPod{sandboxes: []stuckSandbox{{}}, running: true}
	terminated := stuckPod{sandboxes: []stuckSandbox{{stopped: time.Hour}}}
	terminating := func(ago time.Duration) stuckPod {
		return stuckPod{sandboxes: []stuckSandbox{{stopped: ago}}, running: true}
	}
	for _, tc := range []struct {
		rule string
		pods []stuckPod
		want float64
	}{
		{"no pod: 0", nil, 0},
		{"running pods and a pod terminated long ago (nothing runs): 0", []stuckPod{running, running, terminated}, 0},
		{"a pod terminating for less than leak_grace: 0", []stuckPod{running, terminating(grace - time.Second)}, 0},
		// As for a step's clock: leak_grace has run out.
		{"a pod terminating for exactly leak_grace: 1", []stuckPod{terminating(grace)}, 1},
		{"pods terminating for longer than leak_grace: their count",
			[]stuckPod{running, terminating(grace + time.Second), terminating(time.Hour), terminating(time.Minute), terminated}, 2},
		// An older sandbox that stopped an hour ago does not date the pod:
		// it ran again since.
		{"a pod whose last sandbox left Ready less than leak_grace ago: 0",
			[]stuckPod{{sandboxes: []stuckSandbox{{stopped: time.Hour}, {stopped: time.Minute}}, running: true}}, 0},
		// kubelet's garbage collection removes a pod's older sandboxes
		// while the pod lives: that is no sandbox leaving Ready.
		{"a pod stuck for an hour whose older sandbox was removed a minute ago: 1",
			[]stuckPod{{sandboxes: []stuckSandbox{{stopped: 2 * time.Hour, removed: time.Minute}, {stopped: time.Hour}}, running: true}}, 1},
		// Nor is the newest sandbox's removal, taken before an older one's
		// (by hand): the pod stopped when that newest sandbox did, not
		// when the older one stopped, nor when the newest was removed.
		{"a pod whose newest sandbox stopped 2 minutes ago, removed since, beside an older one stopped 2 hours ago: 0",
			[]stuckPod{{sandboxes: []stuckSandbox{{stopped: 2 * time.Hour}, {stopped: 2 * time.Minute, removed: time.Minute}}, running: true}}, 0},
		{"a pod whose newest sandbox stopped an hour ago, removed a minute ago, beside an older one: 1",
			[]stuckPod{{sandboxes: []stuckSandbox{{stopped: 2 * time.Hour}, {stopped: time.Hour, removed: time.Minute}}, running: true}}, 1},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			state := podstate.New(0)
			snap := cri.Snapshot{TakenAt: now}
			apply := func(ev podstate.Event) {
				t.Helper()
				if err := state.Apply(ev); err != nil {
					t.Fatal(err)
				}
			}
			wantPhases := map[string]podstate.Phase{}
			for i, p := range tc.pods {
				uid := testUID(800 + i)
				wantPhases[uid] = p.phase()
				ranAt := now.Add(-3 * time.Hour)
				var sb string
				for j, s := range p.sandboxes {
					sb = fmt.Sprintf("sb-%d-%d", i, j)
					apply(podstate.Event{Kind: podstate.RunPodSandbox, At: ranAt, Pod: ident(uid), SandboxID: sb})
					if s.stopped > 0 {
						ranAt = now.Add(-s.stopped) // the next one runs then
						apply(podstate.Event{Kind: podstate.StopPodSandbox, At: ranAt, Pod: ident(uid), SandboxID: sb})
					}
					if s.removed > 0 {
						apply(podstate.Event{Kind: podstate.RemovePodSandbox, At: now.Add(-s.removed), Pod: ident(uid), SandboxID: sb})
						continue
					}
					snap.Sandboxes = append(snap.Sandboxes, cri.Sandbox{ID: sb, UID: uid, Ready: s.stopped == 0, Attempt: uint32(j),
						CreatedAt: now.Add(-3 * time.Hour), Labels: kubeletLabels(uid)})
				}
				ctr := cri.Container{ID: "c-" + sb, SandboxID: sb, Name: "app", State: cri.ContainerRunning,
					CreatedAt: now.Add(-3 * time.Hour), Labels: kubeletLabels(uid)}
				apply(podstate.Event{Kind: podstate.StartContainer, At: now.Add(-3 * time.Hour), Pod: ident(uid), SandboxID: sb,
					ContainerID: ctr.ID, ContainerName: ctr.Name})
				if !p.running {
					ctr.State = cri.ContainerExited
					apply(podstate.Event{Kind: podstate.StopContainer, At: ranAt, Pod: ident(uid), SandboxID: sb,
						ContainerID: ctr.ID, ContainerName: ctr.Name})
				}
				snap.Containers = append(snap.Containers, ctr)
			}
			rt := &fakeRuntime{}
			rt.set(snap, nil)
			m := metrics.New(metrics.BuildInfo{})
			m.SetStuckTerminating(99) // a 0 below is the pass's, not the gauge's start
			log, _ := testLogger()
			loop := New(state, rt, Options{Period: time.Minute, Observer: m, OracleDisabled: true,
				Policy: gc.Policy{LeakGrace: grace, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			loop.now = func() time.Time { return now }
			if r := loop.Pass(context.Background()); r.Err != nil || r.Untrusted != "" {
				t.Fatalf("pass failed (%v) or untrusted (%q)", r.Err, r.Untrusted)
			}
			for _, p := range state.View().Pods {
				if p.Phase != wantPhases[p.UID] {
					t.Fatalf("pod %s is %s, want %s: the test proves nothing", p.UID, p.Phase, wantPhases[p.UID])
				}
			}
			if got := gaugeValue(t, m, "nri_housekeeper_stuck_terminating_pods"); got != tc.want {
				t.Errorf("stuck_terminating_pods = %v, want %v", got, tc.want)
			}
		})
	}
}

// gaugeValue is the value of the unlabelled gauge name in m's registry.
func gaugeValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s in the registry", name)
	return 0
}

// TestTheLeakGaugesStandWhileThePodOracleIsNotReady: a pass whose pod
// oracle is not ready (kubelet's pods dir cannot be read) plans nothing,
// and so checks nothing: what the last planned pass found stands, as it
// does while the listing is not trusted. (The gauges went to 0: the
// dashboard showed no leak, and the alert on a lasting leak could not
// fire, for as long as the pods dir could not be read.)
func TestTheLeakGaugesStandWhileThePodOracleIsNotReady(t *testing.T) {
	loop, rt, obs, root, _ := leakedLogDirLoop(t)
	for _, at := range []time.Duration{0, 10 * time.Minute} {
		rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
		loop.Pass(context.Background())
	}
	if got := obs.oldest[string(gc.RemovePodLogDir)]; got != 10*time.Minute {
		t.Fatalf("the oldest pod log dir removal proposed for %v, want 10m: the test proves nothing", got)
	}
	if err := os.Rename(filepath.Join(root, "pods"), filepath.Join(root, "pods.away")); err != nil {
		t.Fatal(err)
	}
	rt.set(cri.Snapshot{TakenAt: now.Add(11 * time.Minute)}, nil)
	if r := loop.Pass(context.Background()); r.Plan.NotReady == "" {
		t.Fatalf("the pod oracle is ready without its pods dir: the test proves nothing")
	}
	if got := obs.oldest[string(gc.RemovePodLogDir)]; got != 10*time.Minute {
		t.Fatalf("while the pod oracle is not ready the oldest leak is %v, want the last planned pass's 10m to stand", got)
	}
}
