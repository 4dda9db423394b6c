package housekeeping

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// What can happen to a gone pod between the listing its plan was made from
// and the CRI steps on it: kubelet makes its pod dir again, or NRI reports
// a new sandbox or a container start of its UID (a static pod moved out of
// its manifest dir and back keeps its UID).
var gonePodRaces = []struct {
	name string
	race func(t *testing.T, state *podstate.State, root, uid string)
}{
	{"kubelet makes the pod dir again", func(t *testing.T, _ *podstate.State, root, uid string) {
		if err := os.Mkdir(filepath.Join(root, "pods", uid), 0o755); err != nil {
			t.Fatal(err)
		}
	}},
	{"NRI reports a new sandbox of the UID", func(t *testing.T, state *podstate.State, _, uid string) {
		if err := state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: now.Add(time.Second), Pod: ident(uid), SandboxID: "again"}); err != nil {
			t.Fatal(err)
		}
	}},
	{"NRI reports a container start of the UID", func(t *testing.T, state *podstate.State, _, uid string) {
		if err := state.Apply(podstate.Event{Kind: podstate.StartContainer, At: now.Add(time.Second), Pod: ident(uid), SandboxID: "again",
			ContainerID: "started", ContainerName: "app"}); err != nil {
			t.Fatal(err)
		}
	}},
}

// raceLoop is a loop on a node with the live pod live (its pod dir, a
// Ready sandbox) and snap's other objects, listed at now, whose executor
// runs race between the plan and its steps and records the CRI calls.
func raceLoop(t *testing.T, live string, snap cri.Snapshot, policy gc.Policy, race func(state *podstate.State, root string)) (*Loop, *criCalls) {
	t.Helper()
	root := podDirs(t, live)
	state := podstate.New(0)
	snap.TakenAt = now
	snap.Sandboxes = append([]cri.Sandbox{{ID: "live", UID: live, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(live)}}, snap.Sandboxes...)
	rt := &fakeRuntime{}
	rt.set(snap, nil)
	calls := &criCalls{}
	exec := racingExecutor{
		before: func() { race(state, root) },
		inner:  executor.New(calls, &nodeRecorder{}, executor.Options{MaxParallel: 1}, nil),
	}
	policy.PodLogsDir, policy.ContainerLogsDir = t.TempDir(), t.TempDir()
	policy.Budget = gc.Budget{MaxPerPass: 10, MinPerPass: 10, MaxFraction: 1, MaxPerHour: 100}
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Executor: exec, Policy: policy}, log)
	loop.started = now.Add(-time.Hour)
	return loop, calls
}

func plannedKeys(r PassResult) []string {
	var keys []string
	for _, a := range r.Plan.Actions {
		keys = append(keys, a.Key)
	}
	slices.Sort(keys)
	return keys
}

// An orphan stop (a Ready sandbox, a running or UNKNOWN container, of a
// pod whose pod dir is gone) rests on the pod being gone: one that comes
// back between the listing and the step keeps running. Neither its
// container nor its sandbox is stopped.
func TestAnOrphanStopIsCheckedAgainRightBeforeItRuns(t *testing.T) {
	live, orphan := testUID(601), testUID(602)
	policy := gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, StopOrphans: true, StopTimeout: 30 * time.Second}
	races := append([]struct {
		name string
		race func(t *testing.T, state *podstate.State, root, uid string)
	}{{"nothing changes: the orphan is stopped", func(*testing.T, *podstate.State, string, string) {}}}, gonePodRaces...)
	for _, state := range []cri.ContainerState{cri.ContainerRunning, cri.ContainerUnknown} {
		snap := cri.Snapshot{
			Sandboxes:  []cri.Sandbox{{ID: "s1", UID: orphan, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(orphan)}},
			Containers: []cri.Container{{ID: "c1", SandboxID: "s1", Name: "app", State: state, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(orphan)}},
		}
		for _, tc := range races {
			t.Run(string(state)+": "+tc.name, func(t *testing.T) {
				loop, calls := raceLoop(t, live, snap, policy, func(state *podstate.State, root string) { tc.race(t, state, root, orphan) })
				r := loop.Pass(context.Background())
				// An UNKNOWN container is stopped with its pod, as a running
				// one: it is removed by a later pass, once stopped (the
				// pod's while the pod runs, left to orphans.action).
				planned, want := []string{"stop-container/c1", "stop-sandbox/s1"}, []string{"StopContainer c1", "StopPodSandbox s1"}
				if !slices.Equal(plannedKeys(r), planned) || r.Blocked != "" {
					t.Fatalf("planned %q (blocked %q), want %q: the test proves nothing", plannedKeys(r), r.Blocked, planned)
				}
				if !strings.HasPrefix(tc.name, "nothing changes") {
					want = nil
				}
				if !slices.Equal(calls.calls, want) {
					t.Fatalf("CRI calls %q, want %q (outcomes %+v)", calls.calls, want, r.Outcomes)
				}
			})
		}
	}
}

// The removal of a gone pod's container rests on the pod being gone, as
// its sandbox's does: a pod that comes back between the listing and the
// step keeps its dead containers (kubelet's rules for a live pod may keep
// them). Each row is a container removed on its own, not with its sandbox.
func TestAGonePodsContainerRemovalIsCheckedAgainRightBeforeItRuns(t *testing.T) {
	live, gone := testUID(611), testUID(612)
	for _, setup := range []struct {
		name    string
		snap    cri.Snapshot
		planned []string // the plan's keys
		calls   []string // the CRI calls when nothing changes
	}{
		{"a dead container whose sandbox is already removed", cri.Snapshot{
			Containers: []cri.Container{{ID: "c-dead", SandboxID: "removed", Name: "app", State: cri.ContainerExited,
				CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(gone)}},
		}, []string{"container/c-dead"}, []string{"RemoveContainer c-dead"}},
		{"a dead container of a sandbox still Ready (orphans reported only)", cri.Snapshot{
			Sandboxes: []cri.Sandbox{{ID: "s-orphan", UID: gone, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(gone)}},
			Containers: []cri.Container{{ID: "c-dead", SandboxID: "s-orphan", Name: "app", State: cri.ContainerExited,
				CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(gone)}},
		}, []string{"container/c-dead"}, []string{"RemoveContainer c-dead"}},
		{"an UNKNOWN container, stopped first, then its sandbox", cri.Snapshot{
			Sandboxes: []cri.Sandbox{{ID: "s-gone", UID: gone, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(gone)}},
			Containers: []cri.Container{{ID: "c-unknown", SandboxID: "s-gone", Name: "app", State: cri.ContainerUnknown,
				CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(gone)}},
		}, []string{"container/c-unknown", "sandbox/s-gone"},
			[]string{"StopContainer c-unknown", "RemoveContainer c-unknown", "StopPodSandbox s-gone", "RemovePodSandbox s-gone"}},
	} {
		races := append([]struct {
			name string
			race func(t *testing.T, state *podstate.State, root, uid string)
		}{{"nothing changes", func(*testing.T, *podstate.State, string, string) {}}}, gonePodRaces...)
		for _, tc := range races {
			t.Run(setup.name+": "+tc.name, func(t *testing.T) {
				policy := gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1}
				loop, calls := raceLoop(t, live, setup.snap, policy, func(state *podstate.State, root string) { tc.race(t, state, root, gone) })
				r := loop.Pass(context.Background())
				if !slices.Equal(plannedKeys(r), setup.planned) || r.Blocked != "" {
					t.Fatalf("planned %q (blocked %q), want %q: the test proves nothing", plannedKeys(r), r.Blocked, setup.planned)
				}
				var want []string
				if tc.name == "nothing changes" {
					want = setup.calls
				}
				if !slices.Equal(calls.calls, want) {
					t.Fatalf("CRI calls %q, want %q (outcomes %+v)", calls.calls, want, r.Outcomes)
				}
			})
		}
	}
}

// netnsAdding runs before, then the real executor on the plan with, for
// each planned CNI DEL, the removal of the namespace the attachment ran in,
// as the planner proposes it when that namespace is mounted (a test cannot
// mount one): it depends on the DEL and names its owner.
type netnsAdding struct {
	before func()
	inner  Executor
}

func (n netnsAdding) Execute(ctx context.Context, actions []gc.Action, now time.Time, recheck executor.Recheck) []executor.Outcome {
	n.before()
	all := slices.Clone(actions)
	for _, a := range actions {
		if a.Kind == gc.RemoveCNIAttachment && a.Attachment != nil && a.Attachment.NetNS != "" {
			path := a.Attachment.NetNS
			all = append(all, gc.Action{Kind: gc.RemoveNetns, Rule: gc.RuleNetworkNetns, Key: "netns/" + path, Path: path,
				Netns: &podnet.Netns{Path: path}, ContainerID: a.ContainerID, DependsOn: []string{a.Key}, Reason: "test"})
		}
	}
	return n.inner.Execute(ctx, all, now, recheck)[:len(actions)]
}

func (n netnsAdding) Forget(proposed map[string]time.Time) { n.inner.Forget(proposed) }

// A network step rests on no source knowing its owner: when, between the
// plan and the step, NRI reports the owner's sandbox or containerd has a
// record of it again, neither the CNI DEL, nor the reservation's release,
// nor the removal of the namespace the attachment ran in is done.
func TestANetworkStepIsCheckedAgainRightBeforeItRuns(t *testing.T) {
	const leaked, lost = "1eaced0000000000000000000000000000000000000000000000000000000000", "10570000000000000000000000000000000000000000000000000000000000ff"
	for _, tc := range []struct {
		name string
		race func(t *testing.T, state *podstate.State, ctrd *fakeContainerd, n netNode)
		want func(n netNode) []string
	}{
		{"nothing changes: the leaks are reclaimed", func(*testing.T, *podstate.State, *fakeContainerd, netNode) {},
			func(n netNode) []string {
				return []string{"DeleteCNIAttachment " + leaked, "ReleaseIPReservation 10.9.0.3", "RemoveNetns " + n.netnsOf(leaked)}
			}},
		{"NRI reports the owners' sandboxes", func(t *testing.T, state *podstate.State, _ *fakeContainerd, _ netNode) {
			for i, id := range []string{leaked, lost} {
				uid := testUID(620 + i)
				if err := state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: now.Add(time.Second), Pod: ident(uid), SandboxID: id}); err != nil {
					t.Fatal(err)
				}
			}
		}, nil},
		{"containerd has records of the owners again, naming the namespace", func(_ *testing.T, _ *podstate.State, ctrd *fakeContainerd, n netNode) {
			ctrd.mu.Lock()
			defer ctrd.mu.Unlock()
			ctrd.records.Sandboxes = map[string]cri.SandboxRecord{leaked: {Namespace: "k8s.io", NetNSPath: n.netnsOf(leaked)}, lost: {Namespace: "k8s.io"}}
		}, nil},
		{"containerd has records of the owners again, naming no namespace", func(_ *testing.T, _ *podstate.State, ctrd *fakeContainerd, _ netNode) {
			ctrd.mu.Lock()
			defer ctrd.mu.Unlock()
			ctrd.records.Sandboxes = map[string]cri.SandboxRecord{leaked: {Namespace: "k8s.io"}, lost: {Namespace: "k8s.io"}}
		}, nil},
		{"containerd cannot be asked for the owners again", func(_ *testing.T, _ *podstate.State, ctrd *fakeContainerd, _ netNode) {
			ctrd.mu.Lock()
			defer ctrd.mu.Unlock()
			ctrd.existsErr = errors.New("containerd is restarting")
		}, nil},
		{"containerd's sandbox records cannot be read again: the owners' leaks are reclaimed, the namespace stays", func(_ *testing.T, _ *podstate.State, ctrd *fakeContainerd, _ netNode) {
			ctrd.mu.Lock()
			defer ctrd.mu.Unlock()
			ctrd.recordsErr = errors.New("containerd is restarting")
		}, func(n netNode) []string {
			return []string{"DeleteCNIAttachment " + leaked, "ReleaseIPReservation 10.9.0.3"}
		}},
		{"a sandbox record of containerd cannot be read again: the owners' leaks are reclaimed, the namespace stays", func(_ *testing.T, _ *podstate.State, ctrd *fakeContainerd, _ netNode) {
			ctrd.mu.Lock()
			defer ctrd.mu.Unlock()
			ctrd.records.Unreadable = []string{"sandbox 5a3e0000000: cannot decode its netns"}
		}, func(n netNode) []string {
			return []string{"DeleteCNIAttachment " + leaked, "ReleaseIPReservation 10.9.0.3"}
		}},
		{"a record of another sandbox names the namespace: the owners' leaks are reclaimed, the namespace stays", func(_ *testing.T, _ *podstate.State, ctrd *fakeContainerd, n netNode) {
			ctrd.mu.Lock()
			defer ctrd.mu.Unlock()
			ctrd.records.Sandboxes = map[string]cri.SandboxRecord{"5a3e000000000000000000000000000000000000000000000000000000000001": {Namespace: "k8s.io", NetNSPath: n.netnsOf(leaked)}}
		}, func(n netNode) []string {
			return []string{"DeleteCNIAttachment " + leaked, "ReleaseIPReservation 10.9.0.3"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNetNode(t)
			n.attach(t, leaked, "10.9.0.2") // a cache entry (and its reservation): a CNI DEL
			if err := os.WriteFile(filepath.Join(n.dataDir, "pods", "10.9.0.3"), []byte(lost+"\r\neth0"), 0o644); err != nil {
				t.Fatal(err) // a reservation alone: released by hand
			}
			ctrd := &fakeContainerd{netnsDir: n.netnsDir}
			kubeletRoot := t.TempDir()
			if err := os.MkdirAll(filepath.Join(kubeletRoot, "pods"), 0o755); err != nil {
				t.Fatal(err)
			}
			state := podstate.New(0)
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			files := &nodeRecorder{}
			exec := netnsAdding{before: func() { tc.race(t, state, ctrd, n) },
				inner: executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil)}
			log, _ := testLogger()
			loop := New(state, rt, Options{Period: time.Hour, KubeletRoot: kubeletRoot, Executor: exec,
				Policy:  gc.Policy{Budget: gc.Budget{MaxPerPass: 10, MinPerPass: 10, MaxFraction: 1, MaxPerHour: 100}},
				Network: NewNetwork(ctrd, NetworkOptions{CacheDir: n.cacheDir, ConfDir: n.confDir, BinDir: "/nonexistent"})}, log)
			loop.started = now.Add(-time.Hour)
			r := loop.Pass(context.Background())
			if want := []string{"cni-attachment/pods/" + leaked + "/eth0", "ip-reservation/pods/10.9.0.3/" + lost}; !slices.Equal(plannedKeys(r), want) || r.Blocked != "" {
				t.Fatalf("planned %q (blocked %q), want %q: the test proves nothing", plannedKeys(r), r.Blocked, want)
			}
			var want []string
			if tc.want != nil {
				want = tc.want(n)
			}
			if !slices.Equal(files.done, want) {
				t.Fatalf("network steps %q, want %q (outcomes %+v)", files.done, want, r.Outcomes)
			}
		})
	}
}

// Every NRI session must share a sandbox with the listing before a
// sandbox the listing lacks is asked for by ID, also on a node that starts
// empty: a listing and NRI that both have nothing share nothing, so they
// confirm nothing. When NRI then reports a sandbox another runtime's
// listing lacks, that listing stays untrusted, and the other runtime is
// not asked whether it knows NRI's sandbox (it would say no, and the
// sandbox would be taken for gone).
func TestEveryNRISessionMustShareASandboxWithTheListingWhenTheNodeStartsEmpty(t *testing.T) {
	uid, theirs := testUID(630), testUID(631)
	for _, tc := range []struct {
		name     string
		emptyFor int           // passes with both sides empty
		listing  []cri.Sandbox // what the other runtime lists afterwards
	}{
		{"one empty pass, then the other runtime lists nothing", 1, nil},
		{"three empty passes, then the other runtime lists nothing", 3, nil},
		{"one empty pass, then the other runtime lists a sandbox of its own", 1,
			[]cri.Sandbox{{ID: "theirs", UID: theirs, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(theirs)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := podstate.New(0)
			state.Synchronize(now.Add(-time.Hour), nil, nil) // NRI's session: no sandbox
			rt := &fakeRuntime{}
			exec := &fakeExecutor{}
			log, _ := testLogger()
			loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: podDirs(t, uid, theirs), Executor: exec, Synchronized: func() bool { return true },
				Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			loop.started = now.Add(-time.Hour)
			at := now
			for pass := range tc.emptyFor {
				rt.set(cri.Snapshot{TakenAt: at}, nil)
				if r := loop.Pass(context.Background()); r.Untrusted != "" {
					t.Fatalf("empty pass %d: untrusted %q: both sides empty is no disagreement", pass+1, r.Untrusted)
				}
				at = at.Add(time.Minute)
			}
			// NRI reports a pod's sandbox, settled long before the next
			// listing, which another runtime takes.
			if err := state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: at.Add(-30 * time.Second), Pod: ident(uid), SandboxID: "s1"}); err != nil {
				t.Fatal(err)
			}
			for pass := range 2 {
				rt.set(cri.Snapshot{TakenAt: at, Sandboxes: tc.listing}, nil)
				r := loop.Pass(context.Background())
				if !strings.Contains(r.Untrusted, "shares no sandbox with NRI") {
					t.Fatalf("pass %d after NRI reported s1: untrusted %q, want the listing untrusted for sharing no sandbox with NRI", pass+1, r.Untrusted)
				}
				at = at.Add(time.Minute)
			}
			if n := rt.asked.Load(); n != 0 {
				t.Fatalf("asked the other runtime %d time(s) whether it knows NRI's sandbox", n)
			}
			if p, _ := state.Pod(uid); p.Phase == podstate.PhaseRemoved {
				t.Fatalf("pod %s marked %s on the word of another runtime", uid, p.Phase)
			}
			for _, s := range state.NRISandboxes() {
				if s.ID == "s1" && !s.Live {
					t.Fatalf("NRI's sandbox s1 is no longer live: %+v", s)
				}
			}
			if got := executedActions(exec); len(got) > 0 {
				t.Fatalf("executed %v", got)
			}
		})
	}
}

// The node steps of an orphaned pod (seen torn down, its dir left) rest on
// its pod dir not growing since the teardown, and a pod cgroup's destroy on
// the dir holding no volume: kubelet adds a volume dir when it sets up a
// pod of that UID again. A volume dir made between the plan and the steps
// stops the pod dir's removal and the cgroup's destroy, and so does one
// made after the pod dir's check, before its removal (the removal takes
// nothing the plan's inspection did not find); while volumes
// remain, a CPU reduction is all the rule allows, and a new volume stops it
// too.
func TestAVolumeMadeBetweenPlanAndStepKeepsAnOrphanedPodsDirAndCgroup(t *testing.T) {
	uid := testUID(640)
	volume := func(name string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	removeVolume := func(name string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			if err := os.Remove(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name           string
		removeOrphaned bool                            // pod_dirs.remove_orphaned
		first          func(t *testing.T, root string) // before the first look after the teardown
		before         func(t *testing.T, root string) // before the last pass
		race           func(t *testing.T, root string) // between its plan and its steps
		afterCheck     func(t *testing.T, root string) // between the pod dir's check and its removal
		planned        []gc.Kind
		want           []string
	}{
		{name: "dirs removed, nothing changes: the dir and the cgroup go", removeOrphaned: true,
			planned: []gc.Kind{gc.RemovePodDir, gc.RemovePodCgroup}, want: []string{"RemoveOrphanedPodDir " + uid, "DestroyPodCgroup " + uid}},
		{name: "dirs removed, a volume dir is made between the plan and the steps", removeOrphaned: true, race: volume("x"),
			planned: []gc.Kind{gc.RemovePodDir, gc.RemovePodCgroup}},
		{name: "dirs removed, a volume dir is made between the pod dir's check and its removal: neither goes", removeOrphaned: true,
			afterCheck: volume("x"), planned: []gc.Kind{gc.RemovePodDir, gc.RemovePodCgroup}},
		{name: "dirs reported only, nothing changes: the cgroup goes",
			planned: []gc.Kind{gc.RemovePodCgroup}, want: []string{"DestroyPodCgroup " + uid}},
		{name: "dirs reported only, a volume dir is made between the plan and the step", race: volume("x"),
			planned: []gc.Kind{gc.RemovePodCgroup}},
		{name: "dirs reported only, a volume dir the first look saw, gone at the plan, is back before the step",
			first: volume("x"), before: removeVolume("x"), race: volume("x"),
			planned: []gc.Kind{gc.RemovePodCgroup}},
		{name: "dirs reported only, kubelet's pods dir cannot be read before the step", race: func(t *testing.T, root string) {
			if err := os.Rename(filepath.Join(root, "pods"), filepath.Join(root, "pods.away")); err != nil {
				t.Fatal(err)
			}
		}, planned: []gc.Kind{gc.RemovePodCgroup}},
		{name: "dirs reported only, the pod dir is no longer a directory before the step", race: func(t *testing.T, root string) {
			dir := filepath.Join(root, "pods", uid)
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(t.TempDir(), dir); err != nil {
				t.Fatal(err)
			}
		}, planned: []gc.Kind{gc.RemovePodCgroup}},
		{name: "dirs reported only, volumes remain: only the CPU is reduced", first: volume("x"),
			planned: []gc.Kind{gc.ReducePodCgroupCPU}, want: []string{"ReducePodCgroupCPU " + uid}},
		{name: "dirs reported only, volumes remain, another volume dir is made before the step", first: volume("x"), race: volume("y"),
			planned: []gc.Kind{gc.ReducePodCgroupCPU}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			cg := fakeCgroups(t, uid) // the teardown left the pod cgroup
			o := newOrphanedPod(t, uid, root, cg, tc.removeOrphaned)
			if tc.first != nil {
				tc.first(t, root)
			}
			o.pass(0)
			o.pass(3 * time.Minute)
			if o.loop.tornDown[uid] == nil || len(o.files.done) > 0 {
				t.Fatalf("seen torn down: %v, done %v before leak_grace: the test proves nothing", o.loop.tornDown[uid] != nil, o.files.done)
			}
			if tc.before != nil {
				tc.before(t, root)
			}
			if tc.race != nil {
				o.race = func() { tc.race(t, root) }
			}
			if tc.afterCheck != nil {
				o.files.afterCheck = func() { tc.afterCheck(t, root) }
			}
			r := o.pass(6 * time.Minute)
			planned := plannedKinds(r)
			if !slices.Equal(planned, tc.planned) || r.Blocked != "" {
				t.Fatalf("planned %v (blocked %q), want %v: the test proves nothing (kept %+v)", planned, r.Blocked, tc.planned, r.Plan.Kept)
			}
			if !slices.Equal(o.files.done, tc.want) {
				t.Fatalf("node steps %v, want %v (outcomes %+v)", o.files.done, tc.want, r.Outcomes)
			}
			if tc.afterCheck != nil {
				// The volume dir kubelet made is kept, and the refusal names it.
				if _, err := os.Stat(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "x")); err != nil {
					t.Fatalf("the volume dir made after the check: %v", err)
				}
				if o := outcomeOf(r, "pod-dir/"+uid); o.Result != executor.Aborted || o.Err == nil || !strings.Contains(o.Err.Error(), "kubernetes.io~empty-dir/x (new volume dir)") {
					t.Fatalf("pod dir removal: %+v, want it aborted for the new volume dir (no failure: nothing was done)", o)
				}
			}
		})
	}
}

// The destroy of an orphaned pod's cgroup rests on its pod dir inspected
// right before it: a dir that cannot be inspected then (an I/O error; here
// the pass's context, ended between the executor's start of the step and
// its check) may hold volumes, and the cgroup is kept.
func TestAnOrphanedPodsCgroupWhosePodDirCannotBeInspectedAgainIsKept(t *testing.T) {
	uid := testUID(642)
	root := podDirs(t, uid)
	o := newOrphanedPod(t, uid, root, nil, false)
	o.pass(0)
	if o.loop.tornDown[uid] == nil || o.loop.tornDown[uid].seen == nil {
		t.Fatal("the pod is not seen torn down, its dir looked at: the test proves nothing")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a := gc.Action{Kind: gc.RemovePodCgroup, Rule: gc.RuleCgroupOrphaned, Pod: gc.PodRef{UID: uid}, Key: "pod-cgroup/" + uid}
	err := o.loop.recheck(now, o.loop.state.Syncs(), nodefs.PodDirs{})(ctx, a)
	if err == nil {
		t.Fatal("the destroy of an orphaned pod's cgroup passed its check, though its pod dir could not be inspected")
	}
	t.Logf("aborted as wanted: %v", err)
}

// The destroy of an orphaned pod's cgroup rests on its pod cgroup not made
// again since the teardown: when the cgroups cannot be looked up right
// before, it is not done.
func TestAnOrphanedPodsCgroupThatCannotBeLookedUpAgainIsKept(t *testing.T) {
	uid := testUID(641)
	root := podDirs(t, uid)
	cg := fakeCgroups(t, uid)
	o := newOrphanedPod(t, uid, root, cg, false)
	o.pass(0)
	o.pass(3 * time.Minute)
	o.race = func() {
		// The QoS level's dir is no longer a dir: every look fails, and
		// not with "does not exist".
		qos := filepath.Join(cg.Mountpoint, "memory", "kubepods", "besteffort")
		if err := os.RemoveAll(qos); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(qos, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o.destroyNotDone(t, "the pod cgroup could not be looked up again")
}

// The destroy of an orphaned pod's cgroup rests on its pod cgroup not made
// again in any hierarchy: when one hierarchy's tree of it cannot be read
// right before, the look-up cannot tell, and the step is not done. (It
// was: the unreadable tree ended the look, the later hierarchies' dirs
// were not in its answer, and a pod cgroup kubelet made again there went
// unseen.)
func TestAPodCgroupThatCannotBeReadInOneHierarchyRightBeforeItsStepIsKept(t *testing.T) {
	uid := testUID(644)
	root := podDirs(t, uid)
	cg := fakeCgroups(t, uid)
	cpu := filepath.Join(cg.Mountpoint, "cpu,cpuacct", "kubepods", "besteffort", "pod"+uid)
	for _, f := range []string{filepath.Join(cg.Mountpoint, "cpu,cpuacct", "cgroup.procs"), filepath.Join(cpu, "cgroup.procs")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := newOrphanedPod(t, uid, root, cg, false)
	o.pass(0)
	o.pass(3 * time.Minute)
	o.race = func() {
		// cpu,cpuacct's tree of the pod cannot be read (a container's
		// process list is not one), and kubelet makes the memory pod
		// cgroup again (another inode).
		if err := os.MkdirAll(filepath.Join(cpu, "c1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cpu, "c1", "cgroup.procs"), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		mem := filepath.Join(cg.Mountpoint, "memory", "kubepods", "besteffort", "pod"+uid)
		if err := os.RemoveAll(mem); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(cg.Mountpoint, "memory", "spacer"), 0o755); err != nil { // takes the old inode
			t.Fatal(err)
		}
		if err := os.MkdirAll(mem, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mem, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := o.destroyNotDone(t, "the pod cgroup could not be read in one hierarchy and was made again in another")
	for _, out := range r.Outcomes {
		if out.Action.Kind == gc.RemovePodCgroup && (out.Result != executor.Aborted || !strings.Contains(out.Err.Error(), "cannot be read")) {
			t.Errorf("the destroy's outcome is %s (%v), want aborted, saying the pod cgroup cannot be read", out.Result, out.Err)
		}
	}
}

// A CPU reduction goes ahead when the pod dir cannot be inspected again
// ("cannot tell" is what a reduction is for), but not when the pod cgroup
// was made again meanwhile: that cgroup is a new pod's, kubelet adding a
// pod of the UID again, and its CPU must not be cut.
func TestACPUReductionWhosePodDirCannotBeInspectedAgainStillLooksItsCgroupUp(t *testing.T) {
	uid := testUID(643)
	podCgroup := func(mp string) string { return filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uid) }
	for _, tc := range []struct {
		name   string
		remake bool
		want   []string
	}{
		{name: "the pod cgroup is the one left: the CPU is reduced", want: []string{"ReducePodCgroupCPU " + uid}},
		{name: "the pod cgroup is made again: it is left alone", remake: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			cg := fakeCgroups(t, uid)
			o := newOrphanedPod(t, uid, root, cg, false)
			o.pass(0)
			o.pass(3 * time.Minute)
			if o.loop.tornDown[uid] == nil || o.loop.tornDown[uid].cgroups == nil || len(o.files.done) > 0 {
				t.Fatalf("seen torn down: %v, done %v before leak_grace: the test proves nothing", o.loop.tornDown[uid] != nil, o.files.done)
			}
			o.race = func() {
				if tc.remake {
					// Another inode in place of the pod cgroup, as a
					// new mkdir by kubelet makes.
					made := podCgroup(cg.Mountpoint) + ".new"
					if err := os.Mkdir(made, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.RemoveAll(podCgroup(cg.Mountpoint)); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(made, podCgroup(cg.Mountpoint)); err != nil {
						t.Fatal(err)
					}
				}
				o.loop.inspectPodDir = func(_ context.Context, _, uid string) (nodefs.PodDir, error) {
					return nodefs.PodDir{UID: uid}, fmt.Errorf("inspecting pod dir %s: reading volumes: %w", uid, unix.EIO)
				}
			}
			r := o.pass(6 * time.Minute)
			planned := plannedKinds(r)
			if !slices.Equal(planned, []gc.Kind{gc.ReducePodCgroupCPU}) || r.Blocked != "" {
				t.Fatalf("planned %v (blocked %q): the test proves nothing (kept %+v)", planned, r.Blocked, r.Plan.Kept)
			}
			if !slices.Equal(o.files.done, tc.want) {
				t.Fatalf("node steps %v, want %v (outcomes %+v)", o.files.done, tc.want, r.Outcomes)
			}
		})
	}
}

// plannedKinds is the kinds of a pass's planned actions, in order.
func plannedKinds(r PassResult) []gc.Kind {
	var kinds []gc.Kind
	for _, a := range r.Plan.Actions {
		kinds = append(kinds, a.Kind)
	}
	return kinds
}

// destroyNotDone runs the pass at +6m, whose plan must destroy the pod
// cgroup (or the test proves nothing), and fails if any node step was
// taken, though (why) its check should have stopped it.
func (o *orphanedPod) destroyNotDone(t *testing.T, why string) PassResult {
	t.Helper()
	r := o.pass(6 * time.Minute)
	planned := plannedKinds(r)
	if !slices.Equal(planned, []gc.Kind{gc.RemovePodCgroup}) || r.Blocked != "" {
		t.Fatalf("planned %v (blocked %q): the test proves nothing (kept %+v)", planned, r.Blocked, r.Plan.Kept)
	}
	if len(o.files.done) > 0 {
		t.Fatalf("node steps %v, though %s (outcomes %+v)", o.files.done, why, r.Outcomes)
	}
	return r
}

// outcomeOf is the outcome of the action key in r (zero if none).
func outcomeOf(r PassResult, key string) executor.Outcome {
	for _, o := range r.Outcomes {
		if o.Action.Key == key {
			return o
		}
	}
	return executor.Outcome{}
}

// The destroy of a pod cgroup rests on it holding no child cgroup the plan
// did not see: kubelet keeps a pod cgroup that exists (its inode number
// unchanged), and containerd starts the pause of a pod of that UID set up
// again in a new child before the sandbox is listed or NRI reports it.
// Checked right before, the step is aborted: the orphaned pod's (its dir
// left) and the gone pod's (no dir), which was failed by the destroy's own
// check instead (an error, a backoff and a budget unit spent).
func TestAChildCgroupMadeBetweenPlanAndStepKeepsThePodCgroup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		podDir bool
		rule   string
	}{
		{"an orphaned pod's", true, gc.RuleCgroupOrphaned},
		{"a gone pod's", false, gc.RuleCgroupPodGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid := testUID(645)
			root := podDirs(t)
			if tc.podDir {
				root = podDirs(t, uid)
			}
			cg := fakeCgroups(t, uid)
			o := newOrphanedPod(t, uid, root, cg, false)
			o.pass(0)
			o.pass(3 * time.Minute)
			o.race = func() {
				if err := os.Mkdir(filepath.Join(cg.Mountpoint, "memory", "kubepods", "besteffort", "pod"+uid, "a-new-sandbox"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			r := o.destroyNotDone(t, "a child cgroup was made between the plan and the step")
			out := outcomeOf(r, "pod-cgroup/"+uid)
			if out.Action.Rule != tc.rule {
				t.Fatalf("planned under %q, want %s: the test proves nothing", out.Action.Rule, tc.rule)
			}
			if out.Result != executor.Aborted || !strings.Contains(fmt.Sprint(out.Err), "not the one the plan saw (child cgroup a-new-sandbox)") {
				t.Fatalf("destroy: %s (%v), want aborted for the child cgroup a-new-sandbox", out.Result, out.Err)
			}
		})
	}
}
