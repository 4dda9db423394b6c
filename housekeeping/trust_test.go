package housekeeping

import (
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

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// The safety review of issue 10, at the level of the loop: each test is one
// numbered case, and failed on the loop before its fix.

// testUID makes a pod UID in kubelet's format (nodefs only looks at those).
func testUID(n int) string { return fmt.Sprintf("%08d-0000-4000-8000-000000000000", n) }

// testUIDs are n test UIDs from testUID(from) on.
func testUIDs(from, n int) []string {
	uids := make([]string, n)
	for i := range uids {
		uids[i] = testUID(from + i)
	}
	return uids
}

func ident(uid string) podstate.PodIdentity {
	return podstate.PodIdentity{UID: uid, Namespace: "ns", Name: "p-" + uid}
}

// podDirs makes <root>/pods/<uid>/volumes for each uid and returns root.
func podDirs(t *testing.T, uids ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, uid := range uids {
		if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func executedActions(exec *fakeExecutor) []string {
	var out []string
	for _, batch := range exec.executed {
		for _, a := range batch {
			out = append(out, string(a.Kind)+" "+a.Key)
		}
	}
	return out
}

// Case 1: runtime.endpoint answers for another containerd while NRI talks to
// the right one. Its listing is empty and successful. It must change
// nothing: no pod marked Removed (nor "seen torn down"), no action, for as
// many leak_graces as it lasts, and the pass says why.
func TestAListingThatLacksSandboxesNRIReportedLiveChangesNothing(t *testing.T) {
	uids := []string{testUID(1), testUID(2)}
	root := podDirs(t, uids...)
	state := podstate.New(0)
	state.Synchronize(now.Add(-time.Hour),
		[]podstate.SyncedSandbox{{Pod: ident(uids[0]), SandboxID: "s1"}, {Pod: ident(uids[1]), SandboxID: "s2"}},
		[]podstate.SyncedContainer{{Pod: ident(uids[0]), SandboxID: "s1", ID: "c1", Name: "app", State: podstate.ContainerRunning}})
	rt := &fakeRuntime{}
	exec := &fakeExecutor{}
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Executor: exec, Synchronized: func() bool { return true },
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, StopOrphans: true, Budget: gc.Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 20},
			RemoveOrphanedPodDirs: true, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	loop.started = now.Add(-time.Hour)
	var r PassResult
	for pass := range 6 {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(pass) * time.Minute)}, nil)
		r = loop.Pass(context.Background())
		for _, uid := range uids {
			if p, _ := state.Pod(uid); p.Phase == podstate.PhaseRemoved {
				t.Fatalf("pass %d: pod %s marked Removed by a listing that lacks every sandbox NRI reported live", pass+1, uid)
			}
		}
		if got := executedActions(exec); len(got) > 0 {
			t.Fatalf("pass %d: executed %v on the word of another runtime's listing", pass+1, got)
		}
	}
	if !strings.Contains(r.Blocked, "NRI") || !strings.Contains(r.Blocked, "runtime.endpoint") {
		t.Fatalf("blocked = %q, want the disagreement between NRI and the listing named", r.Blocked)
	}
}

// A pass whose listing is not trusted plans nothing, so it checks nothing
// else either: what the last trusted pass found of kubelet's pod dirs
// stands (the gauge, and the error said once), and no recovery is said for
// it; the next trusted pass that finds the same does not say it again.
func TestAnUntrustedListingLeavesWhatTheLastPlanFoundStanding(t *testing.T) {
	uid := testUID(10)
	root := podDirs(t) // kubelet's pods dir empty while a Ready sandbox runs: the oracle is wrong
	state := podstate.New(0)
	state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
	// Asked for by ID, the runtime still knows the sandbox its listing
	// lacks: a listing that disagrees with NRI, not a sandbox gone.
	rt := &fakeRuntime{exists: map[string]bool{"s1": true}}
	log, buf := testLogger()
	obs := &partsObserver{}
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Observer: obs, Synchronized: func() bool { return true },
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	live := []cri.Sandbox{{ID: "s1", UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)}}
	for i, tc := range []struct {
		sandboxes                   []cri.Sandbox
		listingUntrusted, oracleBad bool
	}{
		{live, false, true},
		{nil, true, true}, // lacks the sandbox NRI reported live
		{live, false, true},
	} {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Minute), Sandboxes: tc.sandboxes}, nil)
		r := loop.Pass(context.Background())
		if (r.Untrusted != "") != tc.listingUntrusted {
			t.Fatalf("pass %d: listing untrusted %q, want %v: the test proves nothing", i+1, r.Untrusted, tc.listingUntrusted)
		}
		if got := obs.distrusts(SourceOracle); got != tc.oracleBad {
			t.Errorf("pass %d: untrusted_source{pod-oracle} = %v, want %v", i+1, got, tc.oracleBad)
		}
	}
	if n := strings.Count(buf.String(), "kubelet's pod dirs are not trusted"); n != 1 {
		t.Errorf("the oracle's distrust said %d times over the three passes, want once:\n%s", n, buf.String())
	}
	if strings.Contains(buf.String(), "agree with the runtime again") {
		t.Errorf("a recovery of the oracle was said, though no pass found one:\n%s", buf.String())
	}
}

// racingExecutor runs before, then the real executor: what happens between
// the plan and its execution.
type racingExecutor struct {
	before func()
	inner  Executor
}

func (r racingExecutor) Execute(ctx context.Context, actions []gc.Action, now time.Time, recheck executor.Recheck) []executor.Outcome {
	r.before()
	return r.inner.Execute(ctx, actions, now, recheck)
}

func (r racingExecutor) Forget(proposed map[string]time.Time) { r.inner.Forget(proposed) }

// orphanedPod is a loop over pod uid, seen torn down (tornDownState), whose
// pod dir is under root and pod cgroups in cg, with leak_grace 5 minutes;
// its node steps are recorded in files, and race runs between each pass's
// plan and its steps.
type orphanedPod struct {
	loop  *Loop
	rt    *fakeRuntime
	files *podDirRemover
	race  func()
}

func newOrphanedPod(t *testing.T, uid, root string, cg *podcgroups.Options, removeOrphaned bool) *orphanedPod {
	t.Helper()
	policy := reviewPolicy(t.TempDir())
	policy.LeakGrace, policy.RemoveOrphanedPodDirs = 5*time.Minute, removeOrphaned
	o := &orphanedPod{rt: &fakeRuntime{}, files: &podDirRemover{root: root}, race: func() {}}
	exec := racingExecutor{before: func() { o.race() }, inner: executor.New(criRecorder{}, o.files, executor.Options{MaxParallel: 1}, nil)}
	log, _ := testLogger()
	o.loop = New(tornDownState(t, uid), o.rt, Options{Period: time.Minute, KubeletRoot: root, Cgroups: cg, Executor: exec,
		Synchronized: func() bool { return true }, Policy: policy}, log)
	o.loop.started = now.Add(-time.Hour)
	return o
}

// pass runs a pass over a listing with nothing in it, taken at now+at.
func (o *orphanedPod) pass(at time.Duration) PassResult {
	o.rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
	o.loop.now = func() time.Time { return now.Add(at) }
	return o.loop.Pass(context.Background())
}

// nodeRecorder is executor.Files recording what it was asked to do.
type nodeRecorder struct{ done []string }

func (n *nodeRecorder) RemovePodLogDir(_ context.Context, path string) error {
	n.done = append(n.done, "RemovePodLogDir "+path)
	return nil
}
func (n *nodeRecorder) RemoveContainerLogLink(_ context.Context, path string) error {
	n.done = append(n.done, "RemoveContainerLogLink "+path)
	return nil
}
func (n *nodeRecorder) RemoveContainerLogFiles(_ context.Context, l nodefs.ContainerLog, _ []string) ([]string, error) {
	n.done = append(n.done, "RemoveContainerLogFiles "+l.Path)
	return []string{l.Path}, nil
}
func (n *nodeRecorder) RemoveOrphanedPodDir(_ context.Context, seen nodefs.PodDir) error {
	n.done = append(n.done, "RemoveOrphanedPodDir "+seen.UID)
	return nil
}
func (n *nodeRecorder) DestroyPodCgroup(_ context.Context, pod podcgroups.PodCgroup) (podcgroups.Destroyed, error) {
	n.done = append(n.done, "DestroyPodCgroup "+pod.UID)
	return podcgroups.Destroyed{}, nil
}
func (n *nodeRecorder) ReducePodCgroupCPU(_ context.Context, pod podcgroups.PodCgroup) error {
	n.done = append(n.done, "ReducePodCgroupCPU "+pod.UID)
	return nil
}

func (n *nodeRecorder) DeleteCNIAttachment(_ context.Context, a podnet.Attachment) error {
	n.done = append(n.done, "DeleteCNIAttachment "+a.ContainerID)
	return nil
}

func (n *nodeRecorder) ReleaseIPReservation(_ context.Context, r podnet.Reservation) error {
	n.done = append(n.done, "ReleaseIPReservation "+r.IP)
	return nil
}

func (n *nodeRecorder) RemoveNetns(_ context.Context, ns podnet.Netns) error {
	n.done = append(n.done, "RemoveNetns "+ns.Path)
	return nil
}

// criRecorder is executor.Runtime doing nothing.
type criRecorder struct{}

func (criRecorder) StopContainer(context.Context, string, time.Duration) error { return nil }
func (criRecorder) RemoveContainer(context.Context, string) error              { return nil }
func (criRecorder) StopPodSandbox(context.Context, string) error               { return nil }
func (criRecorder) RemovePodSandbox(context.Context, string) error             { return nil }
func (criRecorder) ContainerLogPaths(context.Context, string) (map[string]string, error) {
	return nil, nil
}

// fakeCgroups lays out a cgroup v1 memory hierarchy under a temp mountpoint
// with one besteffort pod cgroup per uid.
func fakeCgroups(t *testing.T, uids ...string) *podcgroups.Options {
	t.Helper()
	mp := t.TempDir()
	write := func(path, content string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(mp, "memory", "cgroup.procs"), "1\n")
	for _, uid := range uids {
		write(filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uid, "cgroup.procs"), "")
	}
	return &podcgroups.Options{Mountpoint: mp, Root: "kubepods", Driver: "cgroupfs"}
}

// fakeCgroupsWithPodIf is fakeCgroups with uid's pod cgroup when withPod.
func fakeCgroupsWithPodIf(t *testing.T, withPod bool, uid string) *podcgroups.Options {
	t.Helper()
	if withPod {
		return fakeCgroups(t, uid)
	}
	return fakeCgroups(t)
}

// Case 3: the plan is made from a listing; the node steps run after every
// CRI call of the pass. A pod whose UID comes back in between (a static pod
// moved out of its manifest dir and back keeps its UID) must not lose its
// cgroup: right before the step, the pod is checked again.
func TestANodeStepIsCheckedAgainRightBeforeItRuns(t *testing.T) {
	uid := testUID(3)
	for _, tc := range []struct {
		name string
		race func(t *testing.T, state *podstate.State, rt *fakeRuntime, root string)
	}{
		{"NRI reports a new sandbox of the UID", func(t *testing.T, state *podstate.State, _ *fakeRuntime, _ string) {
			if err := state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: now.Add(time.Second), Pod: ident(uid), SandboxID: "new"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"the runtime lists a new sandbox of the UID", func(_ *testing.T, _ *podstate.State, rt *fakeRuntime, _ string) {
			rt.set(cri.Snapshot{TakenAt: now.Add(time.Second), Sandboxes: []cri.Sandbox{
				{ID: "new", UID: uid, Ready: true, CreatedAt: now.Add(time.Second), Labels: kubeletLabels(uid)}}}, nil)
		}},
		{"kubelet makes the pod dir again", func(t *testing.T, _ *podstate.State, _ *fakeRuntime, root string) {
			if err := os.Mkdir(filepath.Join(root, "pods", uid), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"an entry of the pod's name, a symlink to nowhere, appears in kubelet's pods dir", func(t *testing.T, _ *podstate.State, _ *fakeRuntime, root string) {
			if err := os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "pods", uid)); err != nil {
				t.Fatal(err)
			}
		}},
		{"the runtime cannot list the pod's sandboxes and containers again", func(_ *testing.T, _ *podstate.State, rt *fakeRuntime, _ string) {
			rt.set(cri.Snapshot{TakenAt: now.Add(time.Second)}, errors.New("CRI unavailable"))
		}},
		{"kubelet's pods dir can no longer be read (its disk unmounted, say)", func(t *testing.T, _ *podstate.State, _ *fakeRuntime, root string) {
			if err := os.Rename(filepath.Join(root, "pods"), filepath.Join(root, "pods.away")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t)
			state := podstate.New(0)
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			files := &nodeRecorder{}
			exec := racingExecutor{
				before: func() { tc.race(t, state, rt, root) },
				inner:  executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
			}
			log, _ := testLogger()
			loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Cgroups: fakeCgroups(t, uid), Executor: exec,
				Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			loop.started = now.Add(-time.Hour)
			r := loop.Pass(context.Background())
			if len(r.Plan.Actions) == 0 {
				t.Fatalf("nothing planned: the test proves nothing (kept %+v)", r.Plan.Kept)
			}
			if len(files.done) > 0 {
				t.Fatalf("%v after the pod came back between plan and execution", files.done)
			}
		})
	}
}

// criCalls is executor.Runtime recording the calls it was asked to make.
type criCalls struct {
	mu    sync.Mutex
	calls []string
}

func (c *criCalls) record(call string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call)
	return nil
}
func (c *criCalls) StopContainer(_ context.Context, id string, _ time.Duration) error {
	return c.record("StopContainer " + id)
}
func (c *criCalls) RemoveContainer(_ context.Context, id string) error {
	return c.record("RemoveContainer " + id)
}
func (c *criCalls) StopPodSandbox(_ context.Context, id string) error {
	return c.record("StopPodSandbox " + id)
}
func (c *criCalls) ContainerLogPaths(_ context.Context, uid string) (map[string]string, error) {
	return nil, c.record("ContainerLogPaths " + uid)
}
func (c *criCalls) RemovePodSandbox(_ context.Context, id string) error {
	return c.record("RemovePodSandbox " + id)
}

// The CRI steps of the pod-gone rules (and orphan stops) rest on the pod
// being gone, as the node steps do: a pod that comes back between the
// listing and the step (its pod dir made again, a new sandbox of its UID)
// keeps its dead containers and sandboxes, which kubelet's rules for a live
// pod may still keep. The steps of the keep-newest rules rest on newer
// instances, which only grow: they are not stopped (the live pod's
// container goes after its log files, for which the runtime is asked).
func TestACRIStepOfAGonePodIsCheckedAgainRightBeforeItRuns(t *testing.T) {
	gone, live := testUID(5), testUID(6)
	for _, tc := range []struct {
		name string
		race func(t *testing.T, state *podstate.State, root string)
		want []string
	}{
		{"nothing changes: the gone pod's steps run", func(*testing.T, *podstate.State, string) {},
			[]string{"ContainerLogPaths " + live, "RemoveContainer old", "StopPodSandbox stuck", "RemovePodSandbox stuck"}},
		{"kubelet makes the gone pod's dir again", func(t *testing.T, _ *podstate.State, root string) {
			if err := os.Mkdir(filepath.Join(root, "pods", gone), 0o755); err != nil {
				t.Fatal(err)
			}
		}, []string{"ContainerLogPaths " + live, "RemoveContainer old"}},
		{"NRI reports a new sandbox of the gone pod's UID", func(t *testing.T, state *podstate.State, _ string) {
			if err := state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: now.Add(time.Second), Pod: ident(gone), SandboxID: "new"}); err != nil {
				t.Fatal(err)
			}
		}, []string{"ContainerLogPaths " + live, "RemoveContainer old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, live)
			state := podstate.New(0)
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now,
				Sandboxes: []cri.Sandbox{
					{ID: "live", UID: live, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(live)},
					{ID: "stuck", UID: gone, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(gone)},
				},
				Containers: []cri.Container{
					// A dead instance beyond max_per_pod_container of the live pod.
					{ID: "old", SandboxID: "live", Name: "app", State: cri.ContainerExited, CreatedAt: now.Add(-2 * time.Hour), Labels: kubeletLabels(live)},
					{ID: "new", SandboxID: "live", Name: "app", State: cri.ContainerExited, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(live)},
				}}, nil)
			calls := &criCalls{}
			loop := racingCRILoop(t, state, rt, root, calls, func() { tc.race(t, state, root) })
			r := loop.Pass(context.Background())
			if len(r.Plan.Actions) != 2 {
				t.Fatalf("planned %+v: want the gone pod's sandbox and the live pod's old container", r.Plan.Actions)
			}
			if !slices.Equal(calls.calls, tc.want) {
				t.Fatalf("CRI calls %v, want %v", calls.calls, tc.want)
			}
		})
	}
}

// A dead container whose labels name another pod than its sandbox's (not
// kubelet's doing, but a listing may hold it) rests on its own pod being
// gone: when that pod's dir is made again between the listing and the
// steps, neither the container nor the sandbox that references it goes,
// though the sandbox's own pod is still gone.
func TestAContainerOfAnotherPodInAGoneSandboxIsCheckedAsItsOwnPods(t *testing.T) {
	ctrPod, sbPod := testUID(7), testUID(8)
	root := podDirs(t)
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now,
		Sandboxes:  []cri.Sandbox{{ID: "sb", UID: sbPod, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(sbPod)}},
		Containers: []cri.Container{{ID: "c", SandboxID: "sb", Name: "app", State: cri.ContainerExited, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(ctrPod)}},
	}, nil)
	calls := &criCalls{}
	loop := racingCRILoop(t, podstate.New(0), rt, root, calls, func() {
		if err := os.Mkdir(filepath.Join(root, "pods", ctrPod), 0o755); err != nil {
			t.Fatal(err)
		}
	})
	r := loop.Pass(context.Background())
	if len(r.Plan.Actions) != 2 {
		t.Fatalf("planned %+v: want the container and its sandbox", r.Plan.Actions)
	}
	if len(calls.calls) > 0 {
		t.Fatalf("CRI calls %v after the container's pod came back between plan and execution (outcomes %+v)", calls.calls, r.Outcomes)
	}
}

// racingCRILoop is a loop over rt and root whose CRI steps are recorded
// in calls, race running between its plan and its steps.
func racingCRILoop(t *testing.T, state *podstate.State, rt *fakeRuntime, root string, calls *criCalls, race func()) *Loop {
	t.Helper()
	exec := racingExecutor{before: race, inner: executor.New(calls, &nodeRecorder{}, executor.Options{MaxParallel: 1}, nil)}
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Executor: exec,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir(),
			Budget: gc.Budget{MaxPerPass: 10, MinPerPass: 10, MaxFraction: 1, MaxPerHour: 100}}}, log)
	loop.started = now.Add(-time.Hour)
	return loop
}

// Case 4: a pod torn down while watched leaves its dir behind; then kubelet
// adds a pod of the same UID onto it (a static pod back in its manifest
// dir). The old torn-down mark and clocks must not carry over: neither
// when RunPodSandbox arrives just after a listing, nor while kubelet sets
// the pod up (its volumes) before any event.
func TestAPodReAddedOntoItsLingeringPodDirIsLeftAlone(t *testing.T) {
	uid := testUID(4)
	for _, tc := range []struct {
		name     string
		snapshot func(state *podstate.State) // runs while the last listing is taken
		before   func(t *testing.T, root string)
	}{
		{"RunPodSandbox arrives right after the listing", func(state *podstate.State) {
			_ = state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: now.Add(6*time.Minute + time.Millisecond), Pod: ident(uid), SandboxID: "again"})
		}, nil},
		{"kubelet mounts its volumes before RunPodSandbox", nil, func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "data"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			state := tornDownState(t, uid)
			rt := &fakeRuntime{}
			exec := &fakeExecutor{}
			log, _ := testLogger()
			loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Executor: exec, Synchronized: func() bool { return true },
				Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, RemoveOrphanedPodDirs: true,
					PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			loop.started = now.Add(-time.Hour)
			for _, at := range []time.Duration{0, 3 * time.Minute} {
				rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
				loop.Pass(context.Background())
			}
			if loop.tornDown[uid] == nil {
				t.Fatal("the pod was not seen torn down: the test proves nothing")
			}
			if tc.before != nil {
				tc.before(t, root)
			}
			rt.set(cri.Snapshot{TakenAt: now.Add(6 * time.Minute)}, nil)
			rt.onSnapshot = func() {
				if tc.snapshot != nil {
					tc.snapshot(state)
				}
			}
			loop.Pass(context.Background())
			if got := executedActions(exec); len(got) > 0 {
				t.Fatalf("executed %v on the dir of a pod that is being added again", got)
			}
		})
	}
}

// Case 4, the pod cgroup: kubelet sets a pod up again by making its pod
// cgroup first, before its pod dir changes at all (a static pod with
// hostPath volumes only, such as etcd, put back in its manifest dir onto
// its lingering dir). A pod cgroup made since the first look after the
// teardown (where there was none, or in place of the one there was) ends
// the pod's torn-down mark, and is checked again right before each step
// that rests on the mark; with nothing made again, the orphaned dir and
// cgroup are reclaimed.
func TestAPodWhosePodCgroupIsMadeAgainIsLeftAlone(t *testing.T) {
	uid := testUID(7)
	podCgroup := func(mp string) string { return filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uid) }
	makeCgroup := func(t *testing.T, mp string) {
		// A new directory renamed into place: another inode, whatever the
		// file system reuses (cgroupfs never gives a new cgroup an old one).
		made := podCgroup(mp) + ".new"
		if err := os.MkdirAll(made, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(made, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(podCgroup(mp)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(made, podCgroup(mp)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name         string
		cgroupBefore bool                          // the pod cgroup was left behind by the teardown
		before       func(t *testing.T, mp string) // before the last pass
		race         func(t *testing.T, mp string) // between its plan and its steps
		afterDir     func(t *testing.T, mp string) // between the pod dir's removal and the cgroup's destroy
		want         []string
	}{
		{name: "nothing is made again: the orphaned dir and cgroup are reclaimed", cgroupBefore: true,
			want: []string{"RemoveOrphanedPodDir " + uid, "DestroyPodCgroup " + uid}},
		{name: "kubelet makes the pod cgroup of a pod that had none left", before: makeCgroup},
		{name: "kubelet makes the pod cgroup again in place of the one left", cgroupBefore: true, before: makeCgroup},
		{name: "kubelet makes the pod cgroup between the plan and the steps", race: makeCgroup},
		{name: "kubelet makes the pod cgroup again between the pod dir's removal and the cgroup's destroy", cgroupBefore: true, afterDir: makeCgroup,
			want: []string{"RemoveOrphanedPodDir " + uid}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			cg := fakeCgroupsWithPodIf(t, tc.cgroupBefore, uid)
			o := newOrphanedPod(t, uid, root, cg, true)
			o.pass(0)
			o.pass(3 * time.Minute)
			if o.loop.tornDown[uid] == nil || len(o.files.done) > 0 {
				t.Fatalf("seen torn down: %v, done %v before leak_grace: the test proves nothing", o.loop.tornDown[uid] != nil, o.files.done)
			}
			if tc.before != nil {
				tc.before(t, cg.Mountpoint)
			}
			if tc.race != nil {
				o.race = func() { tc.race(t, cg.Mountpoint) }
			}
			if tc.afterDir != nil {
				o.files.afterRemoval = func() { tc.afterDir(t, cg.Mountpoint) }
			}
			r := o.pass(6 * time.Minute)
			if tc.race != nil && len(r.Plan.Actions) == 0 {
				t.Fatalf("nothing planned before the race: the test proves nothing (kept %+v)", r.Plan.Kept)
			}
			if !slices.Equal(o.files.done, tc.want) {
				t.Fatalf("node steps %v, want %v (outcomes %+v)", o.files.done, tc.want, r.Outcomes)
			}
		})
	}
}

// Case 6: a budget over time. One orphan a pass stays within any per-pass
// limit, but stopping live pods without end is what a wrong source looks
// like: the per-hour budget holds across passes.
func TestThePerHourBudgetHoldsAcrossPasses(t *testing.T) {
	var live []string
	for i := range 12 {
		live = append(live, testUID(100+i))
	}
	root := podDirs(t, live...)
	opts := OptionsFromConfig(orphanStopConfig(t, root, ""))
	exec := &fakeExecutor{}
	opts.Executor = exec
	rt := &fakeRuntime{}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, opts, log)
	loop.started = now.Add(-time.Hour)
	stopped := map[string]bool{}
	const passes = 60 // 30 minutes
	for pass := range passes {
		rt.set(orphanEveryPass(live, pass, now.Add(time.Duration(pass)*30*time.Second), stopped), nil)
		passNotingStops(loop, exec, stopped)
	}
	if limit := 20; len(stopped) != limit {
		t.Fatalf("stopped %d live pods in %d minutes, with a budget of %d an hour (one orphan a pass: the budget, not the orphans, is what runs out)", len(stopped), passes/2, limit)
	}
	if len(stopped) == 0 {
		t.Fatal("stopped no orphan at all: the test proves nothing")
	}
}

// orphanStopConfig is the default config with orphans stopped, a 30 s
// period and leak_grace, kubelet's root at root, no cgroups, log dirs
// under the test's temp dir, and the state file at stateFile ("" keeps
// none: never the node's own).
func orphanStopConfig(t *testing.T, root, stateFile string) config.Config {
	cfg := config.Default()
	cfg.Housekeeping.Period, cfg.Housekeeping.LeakGrace = 30*time.Second, 30*time.Second
	cfg.Housekeeping.StateFile = stateFile
	cfg.Orphans.Action = config.OrphansActionStop
	cfg.Pods.KubeletRoot = root
	cfg.Cgroups.Enabled = false
	cfg.Logs.PodLogsDir, cfg.Logs.ContainerLogsDir = t.TempDir(), t.TempDir()
	return cfg
}

// tornDownState is podstate after NRI reported pod uid run, stopped and
// removed (its sandbox "first") ten to nine minutes before now.
func tornDownState(t *testing.T, uid string) *podstate.State {
	t.Helper()
	state := podstate.New(0)
	applyTeardown(t, state, uid, "first", now.Add(-10*time.Minute), now.Add(-9*time.Minute))
	return state
}

// orphanEveryPass is the listing of pass number pass, taken at at: the live
// pods, and one orphan more every pass (its pod dir gone); the stopped
// ones are NotReady.
func orphanEveryPass(live []string, pass int, at time.Time, stopped map[string]bool) cri.Snapshot {
	snap := cri.Snapshot{TakenAt: at}
	for i, uid := range live {
		snap.Sandboxes = append(snap.Sandboxes, cri.Sandbox{ID: fmt.Sprintf("live%d", i), UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)})
	}
	for o := 0; o <= pass; o++ {
		id := fmt.Sprintf("orphan%d", o)
		snap.Sandboxes = append(snap.Sandboxes, cri.Sandbox{ID: id, UID: testUID(1000 + o), Ready: !stopped[id],
			CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(testUID(1000 + o))})
	}
	return snap
}

// passNotingStops runs one pass and notes the sandboxes it stopped.
func passNotingStops(loop *Loop, exec *fakeExecutor, stopped map[string]bool) {
	before := len(exec.executed)
	loop.Pass(context.Background())
	for _, batch := range exec.executed[before:] {
		for _, a := range batch {
			if a.Kind == gc.StopSandbox {
				stopped[a.SandboxID] = true
			}
		}
	}
}

// Case 10: deciding whether a /var/log/containers link dangles used to stat
// its target wherever it points, which hangs a pass on a dead mount. A
// link's target is only looked at inside logs.pod_logs_dir (where kubelet
// points them), without following symlinks; others are left alone.
func TestLogLinksAreNotFollowedOutsideThePodLogsDir(t *testing.T) {
	podLogs, links := t.TempDir(), t.TempDir()
	outside := filepath.Join(links, "pod_ns_app-"+strings.Repeat("a", 64)+".log")
	inside := filepath.Join(links, "pod_ns_app-"+strings.Repeat("b", 64)+".log")
	if err := os.Symlink("/nrihk-nonexistent-mount/ns_pod_uid/app/0.log", outside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(podLogs, "ns_pod_"+testUID(5), "app", "0.log"), inside); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Minute, OracleDisabled: true,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: podLogs, ContainerLogsDir: links}}, log)
	r := loop.Pass(context.Background())
	var planned []string
	for _, a := range r.Plan.Actions {
		planned = append(planned, a.Path)
	}
	if strings.Contains(strings.Join(planned, " "), outside) {
		t.Fatalf("a link pointing outside logs.pod_logs_dir was followed and planned for removal: %v", planned)
	}
	if !strings.Contains(strings.Join(planned, " "), inside) {
		t.Fatalf("the dangling link into logs.pod_logs_dir is not planned: %v", planned)
	}
}

// containerd drops the NRI stop and removal of the pods it had before a
// restart: a sandbox NRI holds live can vanish silently. Once this NRI
// session's listings are confirmed to be NRI's runtime, such a sandbox is
// asked for by ID; one the runtime does not know is dropped (without
// evidence of a teardown) and the listing trusted, one it still knows keeps
// the listing untrusted. When asking fails, the listing stays untrusted and
// the failure is said, once while it lasts: "the listing or NRI is wrong"
// alone would hide that the runtime's PodSandboxStatus is what fails.
func TestALiveSandboxTheListingLacksIsAskedForByID(t *testing.T) {
	uids := []string{testUID(20), testUID(21)}
	synced := []podstate.SyncedSandbox{{Pod: ident(uids[0]), SandboxID: "s1"}, {Pod: ident(uids[1]), SandboxID: "s2"}}
	both := cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{
		{ID: "s1", UID: uids[0], Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uids[0])},
		{ID: "s2", UID: uids[1], Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uids[1])}}}
	onlyS1 := cri.Snapshot{TakenAt: now.Add(time.Minute), Sandboxes: both.Sandboxes[:1]}
	for _, tc := range []struct {
		name      string
		exists    bool
		askErr    error
		untrusted bool
	}{
		{"the runtime does not know it: dropped, not torn down", false, nil, false},
		{"the runtime still knows it: the listing is wrong", true, nil, true},
		{"the runtime cannot be asked: nothing is known, and that is said", false, errors.New("rpc error: code = DeadlineExceeded"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := podstate.New(0)
			state.Synchronize(now.Add(-time.Hour), synced, nil)
			rt := &fakeRuntime{exists: map[string]bool{"s2": tc.exists}, existsErr: tc.askErr}
			log, buf := testLogger()
			loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: podDirs(t, uids...), Synchronized: func() bool { return true },
				Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			rt.set(both, nil)
			if r := loop.Pass(context.Background()); r.Untrusted != "" {
				t.Fatalf("first pass untrusted: %s", r.Untrusted)
			}
			rt.set(onlyS1, nil)
			r := loop.Pass(context.Background())
			if (r.Untrusted != "") != tc.untrusted || rt.asked.Load() != 1 {
				t.Fatalf("untrusted %q after asking %d time(s); want untrusted %v after asking once", r.Untrusted, rt.asked.Load(), tc.untrusted)
			}
			p, _ := state.Pod(uids[1])
			switch {
			case tc.untrusted && (p.Phase == podstate.PhaseRemoved || !strings.Contains(loop.NotReady(), "lacks 1 sandbox")):
				t.Fatalf("phase %s, not ready %q: an untrusted listing changed podstate or is not named", p.Phase, loop.NotReady())
			case !tc.untrusted && (p.Phase != podstate.PhaseRemoved || p.TornDown || !strings.Contains(buf.String(), "gone from the runtime, without an NRI stop")):
				t.Fatalf("phase %s, torn down %v: want Removed without a teardown, and said", p.Phase, p.TornDown)
			case !tc.untrusted && (!strings.Contains(buf.String(), "torn_down=false") || !strings.Contains(buf.String(), "not seen torn down")):
				// Its pod dir is never reclaimed: the line that says it gone says that too.
				t.Fatalf("the pod's Removed line does not say it was not seen torn down:\n%s", buf.String())
			}
			if tc.askErr == nil {
				return
			}
			for i := 2; i <= 3; i++ {
				rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Minute), Sandboxes: onlyS1.Sandboxes}, nil)
				if r := loop.Pass(context.Background()); r.Untrusted == "" {
					t.Fatalf("pass %d trusted the listing though the runtime could not be asked about s2", i+1)
				}
			}
			if n := strings.Count(buf.String(), tc.askErr.Error()); n != 1 || !strings.Contains(buf.String(), "sandbox s2 of pod") {
				t.Fatalf("the failure to ask for s2 said %d time(s) in 3 passes, want once, naming the sandbox:\n%s", n, buf.String())
			}
		})
	}
}

// The first listing of an NRI session (after a reconnect: containerd
// restarted, say) may already lack a sandbox NRI reported live, its stop
// and removal dropped. A listing that shares a sandbox with NRI is the
// right runtime's, so the missing one is asked for by ID at once; were it
// not, the listing would stay untrusted, and the session never confirmed,
// for as long as the session lasts.
func TestASessionsFirstListingThatLacksALiveSandboxIsAskedForByID(t *testing.T) {
	uids := []string{testUID(24), testUID(25)}
	state := podstate.New(0)
	state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uids[0]), SandboxID: "s1"}, {Pod: ident(uids[1]), SandboxID: "s2"}}, nil)
	rt := &fakeRuntime{exists: map[string]bool{"s2": false}}
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: podDirs(t, uids...), Synchronized: func() bool { return true },
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	for i := range 2 {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Minute), Sandboxes: []cri.Sandbox{
			{ID: "s1", UID: uids[0], Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uids[0])}}}, nil)
		if r := loop.Pass(context.Background()); r.Untrusted != "" {
			t.Fatalf("pass %d: untrusted %q after asking %d time(s): the listing shares s1 with NRI, and the runtime does not know s2",
				i+1, r.Untrusted, rt.asked.Load())
		}
	}
	if p, _ := state.Pod(uids[1]); p.Phase != podstate.PhaseRemoved || p.TornDown {
		t.Fatalf("s2's pod: phase %s, torn down %v; want Removed without a teardown", p.Phase, p.TornDown)
	}
}

// A listing that shares no sandbox with NRI is never confirmed, so a
// missing sandbox is never asked for; and every NRI session (a Synchronize
// after a reconnect) must be confirmed anew.
func TestEveryNRISessionMustShareASandboxWithTheListing(t *testing.T) {
	uid := testUID(22)
	state := podstate.New(0)
	state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
	rt := &fakeRuntime{}
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: podDirs(t, uid), Synchronized: func() bool { return true },
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	other := cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{{ID: "theirs", UID: testUID(23), Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(testUID(23))}}}
	rt.set(other, nil)
	for range 3 {
		if r := loop.Pass(context.Background()); !strings.Contains(r.Untrusted, "shares no sandbox with NRI") {
			t.Fatalf("untrusted = %q", r.Untrusted)
		}
	}
	if rt.asked.Load() != 0 {
		t.Fatalf("asked another runtime %d time(s) about NRI's sandboxes", rt.asked.Load())
	}
	// The right runtime: confirmed.
	rt.set(cri.Snapshot{TakenAt: now.Add(time.Minute), Sandboxes: []cri.Sandbox{{ID: "s1", UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)}}}, nil)
	if r := loop.Pass(context.Background()); r.Untrusted != "" {
		t.Fatalf("the right runtime's listing is untrusted: %s", r.Untrusted)
	}
	// A new session (containerd restarted, say), then another runtime again.
	state.Synchronize(now.Add(2*time.Minute), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
	other.TakenAt = now.Add(3 * time.Minute)
	rt.set(other, nil)
	if r := loop.Pass(context.Background()); !strings.Contains(r.Untrusted, "shares no sandbox with NRI") {
		t.Fatalf("a new session's first listing was trusted without sharing a sandbox: %q", r.Untrusted)
	}
}

// The oracle's distrust reaches /readyz's reason, not only the plan.
func TestAnUntrustedOracleMakesTheLoopNotReady(t *testing.T) {
	uid := testUID(24)
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{{ID: "s1", UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)}}}, nil)
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: podDirs(t),
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	loop.started = now.Add(-time.Hour)
	loop.Pass(context.Background())
	loop.Pass(context.Background())
	if why := loop.NotReady(); !strings.Contains(why, "kubelet pods dir is empty") {
		t.Fatalf("not ready = %q", why)
	}
	if n := strings.Count(buf.String(), "kubelet's pod dirs are not trusted"); n != 1 {
		t.Fatalf("the distrust was logged %d times over two passes, want once:\n%s", n, buf.String())
	}
}

// NRI synchronizing while a pass runs must not open the gate for a listing
// that was not checked against NRI: whether NRI had synchronized is read
// once, before the listing.
func TestASynchronizeDuringAPassDoesNotOpenTheGateForAnUncheckedListing(t *testing.T) {
	uid := testUID(30)
	state := podstate.New(0)
	var synchronized atomic.Bool
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now}, nil) // another runtime's: empty
	rt.onSnapshot = func() {
		state.Synchronize(now, []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
		synchronized.Store(true)
	}
	exec := &fakeExecutor{}
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: podDirs(t, uid), Executor: exec, Synchronized: synchronized.Load,
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	loop.started = now.Add(-time.Hour)
	r := loop.Pass(context.Background())
	if !strings.Contains(r.Blocked, "NRI has not synchronized") || len(exec.executed) != 0 {
		t.Fatalf("blocked %q, executed %v: the gate opened for a listing taken before NRI synchronized", r.Blocked, exec.executed)
	}
	rt.onSnapshot = nil
	if r := loop.Pass(context.Background()); !strings.Contains(r.Untrusted, "shares no sandbox with NRI") {
		t.Fatalf("the next pass: untrusted %q", r.Untrusted)
	}
}

// A problem said while it lasts is said again (as an error) only when it
// changes in kind, not when its figures or the sandboxes it names change:
// a wrong pods.kubelet_root is one error while pods start, not one a pod.
func TestAProblemIsNotSaidAgainForItsFigures(t *testing.T) {
	root := podDirs(t) // empty: every Ready sandbox lacks its pod dir
	rt := &fakeRuntime{}
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root,
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	var sandboxes []cri.Sandbox
	for i := range 4 {
		uid := testUID(20 + i)
		sandboxes = append(sandboxes, cri.Sandbox{ID: "s" + uid, UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)})
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Minute), Sandboxes: slices.Clone(sandboxes)}, nil)
		if r := loop.Pass(context.Background()); r.Plan.OracleUntrusted == "" {
			t.Fatalf("pass %d: the oracle is trusted: the test proves nothing", i+1)
		}
	}
	if n := strings.Count(buf.String(), "level=error msg=\"kubelet's pod dirs are not trusted"); n != 1 {
		t.Fatalf("said as an error %d times while 1 to 4 Ready sandboxes ran, want once:\n%s", n, buf.String())
	}
}

func TestGistDropsFiguresAndParenthesizedLists(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"runs 3 Ready sandbox(es)", "runs 12 Ready sandbox(es)"},
		{"lacks the pods of 2 of 5 Ready sandbox(es) (ns/a (uid-1), ns/b (uid-2))", "lacks the pods of 3 of 6 Ready sandbox(es) (ns/c (uid-3))"},
	} {
		if gist(tc.a) != gist(tc.b) {
			t.Errorf("gist(%q) = %q, gist(%q) = %q: want the same problem", tc.a, gist(tc.a), tc.b, gist(tc.b))
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"the kubelet pods dir is empty", "the kubelet pods dir lacks the pods"},
		{"cannot read /var/lib/cni: permission denied", "cannot read /var/lib/cni: no such file or directory"},
	} {
		if gist(tc.a) == gist(tc.b) {
			t.Errorf("gist(%q) = gist(%q) = %q: want different problems", tc.a, tc.b, gist(tc.a))
		}
	}
}

// The check right before a node step refuses a step it has nothing to rest
// on: one that names no pod, a pod-gone rule while pods.source is "none"
// (no pod is ever gone), an orphaned-pod rule of a pod no longer seen torn
// down, and a rule no node step rests on.
func TestANodeStepWithNothingToRestOnIsAborted(t *testing.T) {
	uid := testUID(5)
	for _, tc := range []struct {
		name           string
		podDirs        []string
		oracleDisabled bool
		a              gc.Action
	}{
		{"an action that names no pod", nil, false,
			gc.Action{Kind: gc.RemovePodCgroup, Rule: gc.RuleCgroupPodGone}},
		{"a pod-gone rule while pods.source is none", nil, true,
			gc.Action{Kind: gc.RemovePodCgroup, Rule: gc.RuleCgroupPodGone, Pod: gc.PodRef{UID: uid}}},
		{"an orphaned-pod rule of a pod not seen torn down", []string{uid}, false,
			gc.Action{Kind: gc.RemovePodDir, Rule: gc.RuleOrphanedPodDir, Pod: gc.PodRef{UID: uid}}},
		{"a rule no node step rests on", nil, false,
			gc.Action{Kind: gc.RemovePodDir, Rule: "pod-dirs.made-up", Pod: gc.PodRef{UID: uid}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, tc.podDirs...)
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			log, _ := testLogger()
			loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root, OracleDisabled: tc.oracleDisabled,
				Executor: &fakeExecutor{}, Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			err := loop.recheck(now, loop.state.Syncs(), nodefs.PodDirs{})(context.Background(), tc.a)
			if err == nil {
				t.Fatalf("%s (%s) passed its check", tc.a.Kind, tc.a.Rule)
			}
			t.Logf("aborted as wanted: %v", err)
		})
	}
}

// A sandbox can leave the listing before NRI's removal of it is delivered
// (after a plugin pause, the queued events come after the pass): the pod's
// Removed line says it not seen torn down, and the removal then marks it.
// That is said too, as the soak's judge and an operator read the Removed
// line: the pod dir is no longer left to kubelet.
func TestAPodMarkedAfterItsRemovedLineIsSaidTornDown(t *testing.T) {
	uids := []string{testUID(26), testUID(27)}
	state := podstate.New(0)
	state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uids[0]), SandboxID: "s1"}, {Pod: ident(uids[1]), SandboxID: "s2"}}, nil)
	rt := &fakeRuntime{exists: map[string]bool{"s2": false}}
	log, buf := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: podDirs(t, uids...), Synchronized: func() bool { return true },
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	listed := func(at time.Duration, ids ...string) {
		snap := cri.Snapshot{TakenAt: now.Add(at)}
		for i, id := range []string{"s1", "s2"} {
			if slices.Contains(ids, id) {
				snap.Sandboxes = append(snap.Sandboxes, cri.Sandbox{ID: id, UID: uids[i], Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uids[i])})
			}
		}
		rt.set(snap, nil)
		loop.Pass(context.Background())
	}
	listed(0, "s1", "s2")
	listed(time.Minute, "s1") // s2 gone without NRI's stop or removal
	if !strings.Contains(buf.String(), "torn_down=false") || loop.tornDown[uids[1]] != nil {
		t.Fatalf("the pod was not said Removed without a teardown, or was marked:\n%s", buf.String())
	}
	if err := state.Apply(podstate.Event{Kind: podstate.RemovePodSandbox, At: now.Add(time.Minute), Pod: ident(uids[1]), SandboxID: "s2"}); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	listed(2*time.Minute, "s1")
	if loop.tornDown[uids[1]] == nil {
		t.Fatal("NRI's removal did not mark the pod: the test proves nothing")
	}
	if out := buf.String(); !strings.Contains(out, "seen torn down after all") || !strings.Contains(out, "torn_down=true") || !strings.Contains(out, "phase=Removed") {
		t.Fatalf("the mark made after the Removed line was not said:\n%s", out)
	}
}

// TestAStepAfterTheNRISessionChangedMidPassWaits: every step rests on the
// NRI session the pass's gate saw. One lost (containerd restarting) or made
// anew (a Synchronize) while the pass runs its steps can have missed a life
// event since the listing: the steps after that are refused with why; the
// same step on an unchanged session passes its check.
func TestAStepAfterTheNRISessionChangedMidPassWaits(t *testing.T) {
	uid := testUID(6)
	step := gc.Action{Kind: gc.RemoveSandbox, Rule: gc.RuleSandboxPodGone, Pod: gc.PodRef{UID: uid}, SandboxID: "s1"}
	for _, tc := range []struct {
		name   string
		change func(state *podstate.State, synced *atomic.Bool)
		passes bool
	}{
		{"the session unchanged", func(*podstate.State, *atomic.Bool) {}, true},
		{"the connection lost", func(_ *podstate.State, synced *atomic.Bool) { synced.Store(false) }, false},
		{"a new connection synchronized", func(state *podstate.State, _ *atomic.Bool) { state.Synchronize(now, nil, nil) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t)
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			log, _ := testLogger()
			var synced atomic.Bool
			synced.Store(true)
			loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root, Synchronized: synced.Load,
				Executor: &fakeExecutor{}, Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			check := loop.recheck(now, loop.state.Syncs(), nodefs.PodDirs{})
			tc.change(loop.state, &synced)
			err := check(context.Background(), step)
			if (err == nil) != tc.passes || (err != nil && !strings.Contains(err.Error(), "NRI connection")) {
				t.Fatalf("check = %v, want it to pass: %v (or to say the NRI connection changed)", err, tc.passes)
			}
		})
	}
}

// TestALifeEventDuringTheChecksReadsAbortsTheStep: NRI is told of a new
// sandbox before containerd stores it, so one told while the check lists
// the pod again is in no listing yet: the pod's life events are read again
// after the check's other reads.
func TestALifeEventDuringTheChecksReadsAbortsTheStep(t *testing.T) {
	uid := testUID(6)
	for _, a := range []gc.Action{
		{Kind: gc.RemovePodLogDir, Rule: gc.RulePodLogDir, Key: "pod-log-dir/x", Pod: gc.PodRef{UID: uid}},
		{Kind: gc.RemovePodCgroup, Rule: gc.RuleCgroupPodGone, Key: "pod-cgroup/" + uid, Pod: gc.PodRef{UID: uid}},
	} {
		t.Run(a.Rule, func(t *testing.T) {
			root := podDirs(t, testUID(7))
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			state := podstate.New(0)
			rt.onListPod = func() {
				if err := state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: now.Add(time.Second), Pod: ident(uid), SandboxID: "again"}); err != nil {
					t.Error(err)
				}
			}
			log, _ := testLogger()
			loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root,
				Executor: &fakeExecutor{}, Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			err := loop.recheck(now, loop.state.Syncs(), nodefs.ListPodDirs(context.Background(), root))(context.Background(), a)
			if err == nil || !strings.Contains(err.Error(), "had a life event") {
				t.Fatalf("check = %v, want the life event told during its reads named", err)
			}
		})
	}
}

// TestAPodsDirMountedOverSinceThePlanAbortsAGoneStep: a step that rests on
// a pod being gone (its pod dir absent) reads the pods dir again; one
// mounted over or put in the place of the one the plan read (empty, or
// another's) says nothing of the pods the plan found gone, and orphan
// stops stop live pods.
func TestAPodsDirMountedOverSinceThePlanAbortsAGoneStep(t *testing.T) {
	uid := testUID(8)
	steps := []gc.Action{
		{Kind: gc.StopSandbox, Rule: gc.RuleOrphanStop, Key: "sandbox/s1", Pod: gc.PodRef{UID: uid}},
		{Kind: gc.RemoveContainer, Rule: gc.RuleContainerPodGone, Key: "container/c1", Pod: gc.PodRef{UID: uid}},
		{Kind: gc.RemovePodLogDir, Rule: gc.RulePodLogDir, Key: "pod-log-dir/x", Pod: gc.PodRef{UID: uid}},
	}
	for _, tc := range []struct {
		name     string
		change   func(t *testing.T, root string)
		refusals bool
	}{
		{"the same pods dir", func(*testing.T, string) {}, false},
		{"a pods dir put in its place", func(t *testing.T, root string) {
			pods := filepath.Join(root, "pods")
			if err := os.Rename(pods, pods+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(pods, 0o755); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a pods dir mounted over", func(t *testing.T, root string) {
			pods := filepath.Join(root, "pods")
			if err := unix.Mount("tmpfs", pods, "tmpfs", 0, ""); err != nil {
				if errors.Is(err, unix.EPERM) {
					t.Skipf("mounting not permitted: %v", err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(pods, unix.MNT_DETACH) })
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, testUID(9))
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			log, _ := testLogger()
			loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root,
				Executor: &fakeExecutor{}, Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			read := nodefs.ListPodDirs(context.Background(), root)
			if !read.Ready || read.Ino == 0 {
				t.Fatalf("the pods dir read: %+v", read)
			}
			tc.change(t, root)
			check := loop.recheck(now, loop.state.Syncs(), read)
			for _, a := range steps {
				err := check(context.Background(), a)
				if tc.refusals != (err != nil) || (err != nil && !strings.Contains(err.Error(), "not the one the plan read")) {
					t.Errorf("%s (%s): check = %v, want a refusal naming the pods dir: %v", a.Kind, a.Rule, err, tc.refusals)
				}
			}
		})
	}
}
