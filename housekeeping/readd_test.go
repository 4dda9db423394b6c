package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/bootclock"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// recentlyTornDown is podstate after NRI reported pod uid run, stopped and
// removed two to one minutes before now: podstate still holds it (its
// retention is 10 minutes) for the whole test.
func recentlyTornDown(t *testing.T, uid string) *podstate.State {
	t.Helper()
	state := podstate.New(0)
	applyTeardown(t, state, uid, "first", now.Add(-2*time.Minute), now.Add(-time.Minute))
	return state
}

// applyTeardown applies to state the NRI events of a pod's sandbox id that
// ran at run with one container, and was torn down at stop as containerd
// does: the container stopped, the sandbox stopped, both removed. The
// container is what shows the sandbox was in containerd's store (one never
// seen there is a start rolled back, no teardown).
func applyTeardown(t *testing.T, state *podstate.State, uid, id string, run, stop time.Time) {
	t.Helper()
	ctr := id + "-app"
	for _, ev := range []podstate.Event{
		{Kind: podstate.RunPodSandbox, At: run, Pod: ident(uid), SandboxID: id},
		{Kind: podstate.CreateContainer, At: run, Pod: ident(uid), SandboxID: id, ContainerID: ctr, ContainerName: "app"},
		{Kind: podstate.StartContainer, At: run, Pod: ident(uid), SandboxID: id, ContainerID: ctr, ContainerName: "app"},
		{Kind: podstate.StopContainer, At: stop, Pod: ident(uid), SandboxID: id, ContainerID: ctr, ContainerName: "app"},
		{Kind: podstate.StopPodSandbox, At: stop, Pod: ident(uid), SandboxID: id},
		{Kind: podstate.RemoveContainer, At: stop, Pod: ident(uid), SandboxID: id, ContainerID: ctr, ContainerName: "app"},
		{Kind: podstate.RemovePodSandbox, At: stop, Pod: ident(uid), SandboxID: id},
	} {
		if err := state.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
}

// makePodCgroup makes (or makes again, with another inode) the besteffort
// pod cgroup of uid in a fakeCgroups tree.
func makePodCgroup(t *testing.T, mp, uid string) {
	t.Helper()
	dir := filepath.Join(mp, "memory", "kubepods", "besteffort", "pod"+uid)
	made := dir + ".new"
	if err := os.MkdirAll(made, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(made, "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(made, dir); err != nil {
		t.Fatal(err)
	}
}

// TestEvidenceOfAReAddOutlivesThePassThatSawIt: a static pod is moved out
// of its manifest dir and back in (it keeps its UID) within podstate's
// retention (10 min) of its teardown. kubelet
// sets it up again: its pod cgroup is made again, or its pod dir grows, or
// its pod dir (removed with the teardown) is made again; its sandbox does
// not start yet (RunPodSandbox fails before containerd reports it: CNI not
// ready, the pause image cannot be pulled; kubelet retries every 10 s).
//
// The pass that sees the evidence drops the torn-down mark, and no later
// pass may make it again for the same teardown: podstate still has the pod
// torn down, and a mark made afresh would take what kubelet just made for
// its baseline; one leak_grace later the pod being set up would be
// "orphaned": its pod dir removed and its pod cgroup destroyed (or its CPU
// reduced to cpu.shares 2, which kubelet never sets back).
func TestEvidenceOfAReAddOutlivesThePassThatSawIt(t *testing.T) {
	uid := testUID(501)
	for _, tc := range []struct {
		name       string
		dirBefore  bool // the pod dir lingered after the teardown
		cgBefore   bool // the pod cgroup lingered after the teardown
		kubeletAdd func(t *testing.T, root, mp string)
	}{
		{"kubelet makes the pod cgroup of a pod that had none left", true, false, func(t *testing.T, _, mp string) {
			makePodCgroup(t, mp, uid)
		}},
		{"kubelet makes the pod cgroup again in place of the one left", true, true, func(t *testing.T, _, mp string) {
			makePodCgroup(t, mp, uid)
		}},
		{"kubelet adds a volume dir to the lingering pod dir", true, true, func(t *testing.T, root, _ string) {
			if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "data"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"kubelet makes the pod dir and the pod cgroup again after both were removed", false, false, func(t *testing.T, root, mp string) {
			if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes"), 0o755); err != nil {
				t.Fatal(err)
			}
			makePodCgroup(t, mp, uid)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var root string
			if tc.dirBefore {
				root = podDirs(t, uid)
			} else {
				root = podDirs(t)
			}
			cg := fakeCgroups(t)
			if tc.cgBefore {
				makePodCgroup(t, cg.Mountpoint, uid)
			}
			policy := reviewPolicy(t.TempDir())
			policy.LeakGrace, policy.RemoveOrphanedPodDirs = 5*time.Minute, true
			files := &podDirRemover{root: root}
			rt := &fakeRuntime{}
			log, _ := testLogger()
			state := recentlyTornDown(t, uid)
			loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Cgroups: cg,
				Executor:     executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
				Synchronized: func() bool { return true }, Policy: policy}, log)
			loop.started = now.Add(-time.Hour)
			pass := func(at time.Duration) PassResult {
				rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil) // kubelet's sandbox never starts
				return loop.Pass(context.Background())
			}
			pass(0) // the first look after the teardown
			tc.kubeletAdd(t, root, cg.Mountpoint)
			pass(time.Minute)
			if tc.dirBefore && loop.tornDown[uid] != nil {
				t.Fatal("the pass that sees kubelet set the pod up again kept its torn-down mark: the test proves nothing")
			}
			for _, at := range []time.Duration{2, 3, 5, 7, 8} {
				r := pass(at * time.Minute)
				if len(files.done) > 0 {
					t.Fatalf("at +%dm (%d min after kubelet began setting the pod up again, its sandbox not started yet): node steps %v "+
						"on the pod; torn-down mark re-made: %v (outcomes %+v)", at, at-1, files.done, loop.tornDown[uid] != nil, r.Outcomes)
				}
			}
			// The pod runs and is torn down again: that teardown is a new
			// one, and what it leaves is orphaned after leak_grace.
			applyTeardown(t, state, uid, "second", now.Add(9*time.Minute), now.Add(10*time.Minute))
			for at := 11 * time.Minute; at <= 18*time.Minute && len(files.done) == 0; at += time.Minute {
				pass(at)
			}
			if len(files.done) == 0 {
				t.Fatalf("8 minutes after a new teardown (leak_grace 5 min), nothing of the pod was reclaimed; torn-down mark: %v", loop.tornDown[uid] != nil)
			}
			t.Logf("after the new teardown: %v", files.done)
		})
	}
}

// TestWithTheDefaultsAReAddedPodKeepsItsCPU (pod_dirs.remove_orphaned =
// false, cgroups on): a
// static pod with an emptyDir volume, moved out of its manifest dir and
// back in within 10 minutes of its teardown, whose sandbox does not start
// for 5 minutes, must not get its pod cgroup's CPU cut to the minimum
// (ReducePodCgroupCPU): kubelet does not set cpu.shares back on a cgroup
// that exists, so the pod would run with cpu.shares = 2.
func TestWithTheDefaultsAReAddedPodKeepsItsCPU(t *testing.T) {
	uid := testUID(502)
	root := podDirs(t, uid)
	if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	cg := fakeCgroups(t)
	policy := reviewPolicy(t.TempDir())
	policy.LeakGrace = 5 * time.Minute // the default; remove_orphaned stays false
	files := &podDirRemover{root: root}
	rt := &fakeRuntime{}
	log, _ := testLogger()
	loop := New(recentlyTornDown(t, uid), rt, Options{Period: 30 * time.Second, KubeletRoot: root, Cgroups: cg,
		Executor:     executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
		Synchronized: func() bool { return true }, Policy: policy}, log)
	loop.started = now.Add(-time.Hour)
	pass := func(at time.Duration) {
		rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
		loop.Pass(context.Background())
	}
	pass(0)                              // torn down, its dir (with an empty volume dir) left: no cgroup
	makePodCgroup(t, cg.Mountpoint, uid) // the static pod is back: kubelet makes its pod cgroup first
	pass(30 * time.Second)               // the mark goes...
	for at := time.Minute; at <= 8*time.Minute; at += 30 * time.Second {
		pass(at) // ...and must not come back with the new cgroup as its baseline
		if len(files.done) > 0 {
			t.Fatalf("at +%s, %s after kubelet made the pod cgroup of the re-added pod (sandbox not started yet): %v",
				at, at-30*time.Second, files.done)
		}
	}
}

// TestAnOrphanedPodDirWaitsForAListingOfThePodCgroups: the pod cgroup made
// again is the early sign of a pod being set up again, and it is told from
// the first look at the pod cgroups after the teardown. While no listing of
// them is ready there is no first look: the pod dir is held, not removed
// on the other signs alone, and goes once a listing is ready.
func TestAnOrphanedPodDirWaitsForAListingOfThePodCgroups(t *testing.T) {
	uid := testUID(502)
	root := podDirs(t, uid)
	cg := fakeCgroups(t)
	// The QoS parent is a file: no pod cgroup listing is ready.
	qos := filepath.Join(cg.Mountpoint, "memory", "kubepods", "besteffort")
	if err := os.MkdirAll(filepath.Dir(qos), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(qos, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := reviewPolicy(t.TempDir())
	policy.LeakGrace, policy.RemoveOrphanedPodDirs = 5*time.Minute, true
	files := &podDirRemover{root: root}
	rt := &fakeRuntime{}
	log, _ := testLogger()
	loop := New(recentlyTornDown(t, uid), rt, Options{Period: time.Minute, KubeletRoot: root, Cgroups: cg,
		Executor:     executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
		Synchronized: func() bool { return true }, Policy: policy}, log)
	loop.started = now.Add(-time.Hour)
	pass := func(at time.Duration) PassResult {
		rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
		return loop.Pass(context.Background())
	}
	held := false
	for at := time.Duration(0); at <= 8*time.Minute; at += time.Minute {
		r := pass(at)
		if len(files.done) > 0 {
			t.Fatalf("at +%s, with no pod cgroup listing since the teardown: node steps %v", at, files.done)
		}
		for _, o := range r.Outcomes {
			if o.Action.Kind == gc.RemovePodDir && o.Result == executor.Aborted && strings.Contains(o.Err.Error(), "have not been listed since the pod was torn down") {
				held = true
			}
		}
	}
	if !held {
		t.Fatal("the pod dir was never due: the test proves nothing")
	}
	if err := os.Remove(qos); err != nil { // the listing is ready again
		t.Fatal(err)
	}
	for at := 9 * time.Minute; at <= 12*time.Minute && len(files.done) == 0; at += time.Minute {
		pass(at)
	}
	if len(files.done) == 0 {
		t.Fatal("once the pod cgroups are listed again, the orphaned pod dir is still held")
	}
}

// TestARestartTakesNoPodCgroupMadeWhileItWasDownForItsBaseline: a static
// pod with hostPath volumes only is torn down, its dir lingers. While the
// plugin is down (an upgrade; containerd restarting a pre-registered
// plugin) its manifest is put back: kubelet makes the pod cgroup first, and
// the sandbox does not start yet. The pod cgroup made again is the only
// sign, and the restarted plugin's first look must not take it for the
// baseline the mark had: that comes from the state file, in the boot that
// wrote it, and is "none" otherwise (after a reboot every pod cgroup is
// new). One that lingered from before the mark, the file showing it, is
// still reclaimed.
func TestARestartTakesNoPodCgroupMadeWhileItWasDownForItsBaseline(t *testing.T) {
	uid := testUID(503)
	const bootA, bootB = "0b1f2e3d-aaaa-4bbb-8ccc-00000000000a", "0b1f2e3d-aaaa-4bbb-8ccc-00000000000b"
	for _, tc := range []struct {
		name          string
		lingered      bool // the pod cgroup was left by the teardown
		madeWhileDown bool // kubelet made it (again) while the plugin was down
		restartBoot   string
		once          bool // the restart is `once --leak-grace 0s`
		wantReclaimed bool
	}{
		{"made while down, same boot", false, true, bootA, false, false},
		{"made again (another inode) while down, same boot", true, true, bootA, false, false},
		{"made while down, once with no grace", false, true, bootA, true, false},
		{"lingered, unchanged, same boot: reclaimed", true, false, bootA, false, true},
		{"lingered, and the node booted again: no baseline holds", true, false, bootB, false, false},
		{"none lingered or was made: reclaimed", false, false, bootA, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			cg := fakeCgroupsWithPodIf(t, tc.lingered, uid)
			policy := reviewPolicy(t.TempDir())
			policy.LeakGrace, policy.RemoveOrphanedPodDirs = 5*time.Minute, true
			files := &podDirRemover{root: root}
			rt := &fakeRuntime{}
			log, _ := testLogger()
			boot := bootclock.Reading{BootID: bootA, Since: time.Hour}
			opts := Options{Period: time.Minute, KubeletRoot: root, Cgroups: cg,
				StateFile:    filepath.Join(t.TempDir(), "state.json"),
				BootClock:    func() (bootclock.Reading, error) { return boot, nil },
				Executor:     executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
				Synchronized: func() bool { return true }, Policy: policy}
			first := New(recentlyTornDown(t, uid), rt, opts, log)
			first.now = func() time.Time { return now }
			first.started = now.Add(-time.Hour)
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			first.Pass(context.Background()) // the mark, and its first look at the pod cgroups
			if mark := first.tornDown[uid]; mark == nil || mark.cgroups == nil {
				t.Fatal("no mark with a pod cgroup baseline before the restart: the test proves nothing")
			}
			if tc.madeWhileDown {
				makePodCgroup(t, cg.Mountpoint, uid)
			}
			boot = bootclock.Reading{BootID: tc.restartBoot, Since: time.Hour + 2*time.Minute}
			if tc.restartBoot != bootA {
				boot.Since = time.Minute
			}
			last := 10 * time.Minute
			if tc.once {
				opts.Synchronized, opts.Policy.LeakGrace, last = nil, 0, 2*time.Minute
			}
			second, logs := restartedLoop(first, opts, rt, now.Add(2*time.Minute))
			for at := 2 * time.Minute; at <= last; at += time.Minute {
				second.now = func() time.Time { return now.Add(at) }
				rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
				second.Pass(context.Background())
				if !tc.wantReclaimed && len(files.done) > 0 {
					t.Fatalf("at +%s, after a restart: node steps %v on a pod whose cgroup the file does not show\n%s", at, files.done, logs())
				}
			}
			if tc.wantReclaimed && len(files.done) == 0 {
				t.Fatalf("the orphaned pod dir was not reclaimed after the restart\n%s", logs())
			}
			// Dropped for what the file cannot show, not for a cgroup made
			// again: said as such.
			if said := strings.Contains(logs(), "restored from a state file that does not show its pod cgroup"); said != (tc.restartBoot != bootA) {
				t.Fatalf("the drop for want of a baseline said: %v, want %v\n%s", said, tc.restartBoot != bootA, logs())
			}
		})
	}
}

// TestARunPodSandboxRolledBackIsNoTeardown: containerd rolls back a
// RunPodSandbox that fails after NRI's hook (v2.4.2 sandbox_run.go: a
// failed sandbox store Add or WaitSandbox; 1.7: a failed task start) with
// an NRI RemovePodSandbox and no StopPodSandbox; one that an NRI plugin
// failed (a policy plugin rejecting the pod, one timing out) with a
// StopPodSandbox then a RemovePodSandbox to every plugin, which those after
// the failing one get without the RunPodSandbox (internal/cri/nri
// RunPodSandbox; nri Adaptation stops at the first failure). kubelet
// retries the pod (here the retries fail before the hook: no more events).
// None is a teardown: the sandbox never reached containerd's store. A new
// pod being set up, or a static pod put back after its mark was dismissed,
// must keep its dir and cgroup (and its CPU).
func TestARunPodSandboxRolledBackIsNoTeardown(t *testing.T) {
	for _, rb := range []struct {
		name   string
		events []podstate.EventKind
	}{
		{"after the hook", []podstate.EventKind{podstate.RunPodSandbox, podstate.RemovePodSandbox}},
		{"a plugin failed the hook", []podstate.EventKind{podstate.RunPodSandbox, podstate.StopPodSandbox, podstate.RemovePodSandbox}},
		{"a plugin ahead failed the hook", []podstate.EventKind{podstate.StopPodSandbox, podstate.RemovePodSandbox}},
	} {
		t.Run(rb.name, func(t *testing.T) {
			rollback := func(t *testing.T, state *podstate.State, uid string, at time.Time) {
				t.Helper()
				for i, k := range rb.events {
					if err := state.Apply(podstate.Event{Kind: k, At: at.Add(time.Duration(i) * time.Millisecond), Pod: ident(uid), SandboxID: "attempt1"}); err != nil {
						t.Fatal(err)
					}
				}
			}
			rolledBackIsNoTeardown(t, rollback)
		})
	}
}

func rolledBackIsNoTeardown(t *testing.T, rollback func(t *testing.T, state *podstate.State, uid string, at time.Time)) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, uid string) (done func() []string, pass func(at time.Duration))
	}{
		{"a new pod (defaults: its CPU)", func(t *testing.T, uid string) (func() []string, func(time.Duration)) {
			root := podDirs(t, uid)
			if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "data"), 0o755); err != nil {
				t.Fatal(err)
			}
			state := podstate.New(0)
			rollback(t, state, uid, now.Add(-10*time.Second))
			loop, files, rt := rolledBackLoop(t, state, root, fakeCgroups(t, uid))
			return func() []string { return files.done }, func(at time.Duration) {
				loop.now = func() time.Time { return now.Add(at) }
				rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
				loop.Pass(context.Background())
			}
		}},
		{"a static pod put back after its mark was dismissed", func(t *testing.T, uid string) (func() []string, func(time.Duration)) {
			root := podDirs(t, uid)
			cg := fakeCgroups(t)
			state := recentlyTornDown(t, uid)
			loop, files, rt := rolledBackLoop(t, state, root, cg)
			pass := func(at time.Duration) {
				loop.now = func() time.Time { return now.Add(at) }
				rt.set(cri.Snapshot{TakenAt: now.Add(at)}, nil)
				loop.Pass(context.Background())
			}
			pass(0)
			makePodCgroup(t, cg.Mountpoint, uid)
			pass(30 * time.Second)
			if loop.tornDown[uid] != nil {
				t.Fatal("the mark was not dismissed: the test proves nothing")
			}
			rollback(t, state, uid, now.Add(40*time.Second))
			return func() []string { return files.done }, pass
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, pass := tc.run(t, testUID(904))
			for at := time.Minute; at <= 10*time.Minute; at += 30 * time.Second {
				pass(at)
				if steps := done(); len(steps) > 0 {
					t.Fatalf("at +%s: node steps %v on a pod whose only new sandbox failed to start", at, steps)
				}
			}
		})
	}
}

// rolledBackLoop is a loop with the default remove_orphaned (false), a
// 5-minute leak_grace and node steps recorded.
func rolledBackLoop(t *testing.T, state *podstate.State, root string, cg *podcgroups.Options) (*Loop, *podDirRemover, *fakeRuntime) {
	t.Helper()
	policy := reviewPolicy(t.TempDir())
	policy.LeakGrace = 5 * time.Minute
	files := &podDirRemover{root: root}
	rt := &fakeRuntime{}
	log, _ := testLogger()
	loop := New(state, rt, Options{Period: 30 * time.Second, KubeletRoot: root, Cgroups: cg,
		Executor:     executor.New(criRecorder{}, files, executor.Options{MaxParallel: 1}, nil),
		Synchronized: func() bool { return true }, Policy: policy}, log)
	loop.started = now.Add(-time.Hour)
	return loop, files, rt
}
