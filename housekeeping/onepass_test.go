package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// removingRuntime carries out CRI removals on a fakeRuntime's snapshot, as
// containerd does: RemovePodSandbox also removes the sandbox's containers.
type removingRuntime struct{ rt *fakeRuntime }

func (r removingRuntime) StopContainer(context.Context, string, time.Duration) error { return nil }
func (r removingRuntime) StopPodSandbox(context.Context, string) error               { return nil }

func (r removingRuntime) ContainerLogPaths(context.Context, string) (map[string]string, error) {
	return nil, nil
}

func (r removingRuntime) RemoveContainer(_ context.Context, id string) error {
	r.rt.mu.Lock()
	defer r.rt.mu.Unlock()
	r.rt.snap.Containers = slices.DeleteFunc(slices.Clone(r.rt.snap.Containers), func(c cri.Container) bool { return c.ID == id })
	return nil
}

func (r removingRuntime) RemovePodSandbox(_ context.Context, id string) error {
	r.rt.mu.Lock()
	defer r.rt.mu.Unlock()
	r.rt.snap.Containers = slices.DeleteFunc(slices.Clone(r.rt.snap.Containers), func(c cri.Container) bool { return c.SandboxID == id })
	r.rt.snap.Sandboxes = slices.DeleteFunc(slices.Clone(r.rt.snap.Sandboxes), func(s cri.Sandbox) bool { return s.ID == id })
	return nil
}

// A gone pod (kubelet's pod worker stuck, #107730) is reclaimed whole in the
// pass its sandbox is due: its container and sandbox, then its log dir,
// then its log link (which dangles only once the dir is gone) and its pod
// cgroup (looked into although its sandbox is still listed). One
// leak_grace for the leak, not one per stage, whatever state its container
// was left in: the plan removes a created or UNKNOWN one too (the latter
// stopped first), so its pod cgroup and link must be looked into as well.
func TestAGonePodIsReclaimedWholeInOnePass(t *testing.T) {
	for _, state := range []cri.ContainerState{cri.ContainerExited, cri.ContainerCreated, cri.ContainerUnknown} {
		t.Run(string(state), func(t *testing.T) {
			live, gone := testUID(100), testUID(101)
			root := podDirs(t, live) // the gone pod has no pod dir
			podLogs := t.TempDir()
			logDir := mkPodLogDir(t, podLogs, gone)
			if err := os.WriteFile(filepath.Join(logDir, "app", "0.log"), []byte("log\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			policy := reviewPolicy(podLogs)
			ctrID := strings.Repeat("c1", 32)
			if err := os.MkdirAll(policy.ContainerLogsDir, 0o755); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(policy.ContainerLogsDir, "p-"+gone+"_ns_app-"+ctrID+".log")
			if err := os.Symlink(filepath.Join(logDir, "app", "0.log"), link); err != nil {
				t.Fatal(err)
			}
			cg := fakeCgroups(t, live, gone)

			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now,
				Sandboxes: []cri.Sandbox{
					{ID: "live", UID: live, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(live)},
					{ID: "stuck", UID: gone, Ready: false, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(gone)},
				},
				Containers: []cri.Container{{ID: ctrID, SandboxID: "stuck", Name: "app", State: state,
					CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(gone)}},
			}, nil)
			files := &nodeRecorder{}
			log, _ := testLogger()
			loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root, Cgroups: cg,
				Executor: executor.New(removingRuntime{rt}, files, executor.Options{MaxParallel: 1}, nil),
				Policy:   policy}, log)
			loop.started = now.Add(-time.Hour)

			r := loop.Pass(context.Background())
			var got []string
			for _, o := range r.Outcomes {
				got = append(got, string(o.Action.Kind)+" "+string(o.Result))
				if o.Result != executor.Success {
					t.Errorf("%s: %s: %v", o.Action.Key, o.Result, o.Err)
				}
			}
			for _, want := range []string{"remove-container success", "remove-log-link success", "remove-pod-cgroup success",
				"remove-pod-log-dir success", "remove-sandbox success"} {
				if !slices.Contains(got, want) {
					t.Fatalf("one pass did %v;\nwant the whole pod, %q among it\n(deferred %+v, kept %+v)", got, want, r.Plan.Deferred, r.Plan.Kept)
				}
			}
			if !slices.Equal(files.done, []string{"RemovePodLogDir " + logDir, "RemoveContainerLogLink " + link, "DestroyPodCgroup " + gone}) {
				t.Fatalf("node steps %v: want the log dir, then its link, then the pod cgroup", files.done)
			}
		})
	}
}

// The link of an older instance of a live pod's container, removed with its
// log files (max_per_pod_container), goes in the same pass, whether that
// instance exited or was left UNKNOWN.
func TestTheLinkOfAnEvictedInstanceGoesWithItWhateverItsState(t *testing.T) {
	for _, state := range []cri.ContainerState{cri.ContainerExited, cri.ContainerUnknown} {
		t.Run(string(state), func(t *testing.T) {
			live := testUID(100)
			root := podDirs(t, live)
			podLogs := t.TempDir()
			logDir := mkPodLogDir(t, podLogs, live)
			for _, f := range []string{"0.log", "1.log"} {
				if err := os.WriteFile(filepath.Join(logDir, "app", f), []byte("log\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			policy := reviewPolicy(podLogs)
			old, newer := strings.Repeat("c1", 32), strings.Repeat("c2", 32)
			if err := os.MkdirAll(policy.ContainerLogsDir, 0o755); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(policy.ContainerLogsDir, "p-"+live+"_ns_app-"+old+".log")
			if err := os.Symlink(filepath.Join(logDir, "app", "0.log"), link); err != nil {
				t.Fatal(err)
			}
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now,
				Sandboxes: []cri.Sandbox{{ID: "live", UID: live, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(live)}},
				Containers: []cri.Container{
					{ID: old, SandboxID: "live", Name: "app", State: state, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(live)},
					{ID: newer, SandboxID: "live", Name: "app", State: cri.ContainerExited, CreatedAt: now.Add(-time.Minute), Labels: kubeletLabels(live)},
				}}, nil)
			log, _ := testLogger()
			loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root, Policy: policy}, log)
			loop.started = now.Add(-time.Hour)
			r := loop.Pass(context.Background())
			var keys []string
			for _, a := range r.Plan.Actions {
				keys = append(keys, a.Key)
			}
			if !slices.Contains(keys, "container/"+old) || !slices.Contains(keys, "log-link/"+link) {
				t.Errorf("planned %v; want the older instance and its link %s", keys, link)
			}
		})
	}
}

// podDirRemover records node steps and removes orphaned pod dirs with
// nodefs' removal, so that the checks right before later steps see them
// gone.
type podDirRemover struct {
	nodeRecorder
	root string
	// afterCheck, when set, runs right before the removal, after the
	// check right before it: what kubelet does in that window.
	afterCheck func()
	// afterRemoval, when set, runs once a pod dir is removed: what happens
	// on the node between that step and the next.
	afterRemoval func()
}

func (r *podDirRemover) RemoveOrphanedPodDir(ctx context.Context, seen nodefs.PodDir) error {
	if r.afterCheck != nil {
		r.afterCheck()
	}
	if err := nodefs.RemoveOrphanedPodDir(ctx, r.root, seen); err != nil {
		return err
	}
	if r.afterRemoval != nil {
		r.afterRemoval()
	}
	return r.nodeRecorder.RemoveOrphanedPodDir(ctx, seen)
}

// An orphaned pod (seen torn down, its pod dir left with an empty volume
// dir) is reclaimed whole in one pass, as kubelet's housekeeping does it:
// the pod dir first, then its cgroup, destroyed now that no volume is left
// (not only CPU-reduced, then destroyed a leak_grace later).
func TestAnOrphanedPodIsReclaimedWholeInOnePass(t *testing.T) {
	live, torn := testUID(102), testUID(103)
	root := podDirs(t, live, torn) // each with an empty volumes dir
	if err := os.MkdirAll(filepath.Join(root, "pods", torn, "volumes", "kubernetes.io~empty-dir", "cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	policy := reviewPolicy(t.TempDir())
	policy.RemoveOrphanedPodDirs = true
	rt := &fakeRuntime{}
	files := &podDirRemover{root: root}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root, Cgroups: fakeCgroups(t, live, torn),
		Executor: executor.New(removingRuntime{rt}, files, executor.Options{MaxParallel: 1}, nil), Policy: policy}, log)
	loop.started = now.Add(-time.Hour)
	sandbox := func(id, uid string, ready bool) cri.Sandbox {
		return cri.Sandbox{ID: id, UID: uid, Ready: ready, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)}
	}
	liveSb := sandbox("live", live, true)
	var r PassResult
	for i, sbs := range [][]cri.Sandbox{
		{liveSb, sandbox("torn", torn, true)},
		{liveSb, sandbox("torn", torn, false)}, // stopped
		{liveSb},                               // removed: torn down, its dir left behind
	} {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Second), Sandboxes: sbs}, nil)
		r = loop.Pass(context.Background())
	}
	for _, o := range r.Outcomes {
		if o.Result != executor.Success {
			t.Errorf("%s: %s: %v", o.Action.Key, o.Result, o.Err)
		}
	}
	if want := []string{"RemoveOrphanedPodDir " + torn, "DestroyPodCgroup " + torn}; !slices.Equal(files.done, want) {
		t.Fatalf("node steps %v, want %v (deferred %+v, kept %+v)", files.done, want, r.Plan.Deferred, r.Plan.Kept)
	}
}
