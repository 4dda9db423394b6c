package housekeeping

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/executor"
)

// TestAnOrphanedPodDirIsKeptWhileKubeletsMountsAreOutOfSight: a process
// that may not see the mounts kubelet makes in its pods dir (a DaemonSet
// whose pods dir mount has no HostToContainer propagation) cannot tell an
// orphaned pod dir free of volumes: rmdir of a mount point it cannot see
// would succeed, and detach kubelet's live mount in the node's namespace.
// So the dir is kept and its pod cgroup only CPU-reduced, as for any
// "cannot tell"; and a plan made while the mounts were seen is aborted
// when they are not right before its steps.
func TestAnOrphanedPodDirIsKeptWhileKubeletsMountsAreOutOfSight(t *testing.T) {
	uid := testUID(731)
	const why = "this process may not see the mounts kubelet makes in /var/lib/kubelet/pods: (test)"
	for _, tc := range []struct {
		name        string
		removeDirs  bool   // pod_dirs.remove_orphaned
		atPlan      string // what PodDirMountsUnseen says when the pass plans
		atStep      string // and right before the steps
		want        []string
		wantAborted int
	}{
		{name: "seen: the orphaned dir and its cgroup are reclaimed", removeDirs: true,
			want: []string{"RemoveOrphanedPodDir " + uid, "DestroyPodCgroup " + uid}},
		{name: "seen, the dir only reported: its cgroup is destroyed",
			want: []string{"DestroyPodCgroup " + uid}},
		{name: "out of sight when planned: the dir kept, the cgroup only CPU-reduced", removeDirs: true, atPlan: why, atStep: why,
			want: []string{"ReducePodCgroupCPU " + uid}},
		{name: "out of sight when planned, the dir only reported: the cgroup only CPU-reduced", atPlan: why, atStep: why,
			want: []string{"ReducePodCgroupCPU " + uid}},
		// The cgroup's destroy, after the dir's, is skipped with it.
		{name: "out of sight right before the steps: the dir's removal aborted", removeDirs: true, atStep: why, wantAborted: 1},
		{name: "out of sight right before the steps, the dir only reported: the cgroup's destroy aborted", atStep: why, wantAborted: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			cg := fakeCgroupsWithPodIf(t, true, uid)
			o := newOrphanedPod(t, uid, root, cg, tc.removeDirs)
			unseen := ""
			o.loop.opts.PodDirMountsUnseen = func(context.Context) string { return unseen }
			o.pass(0)
			o.pass(3 * time.Minute)
			if o.loop.tornDown[uid] == nil || len(o.files.done) > 0 {
				t.Fatalf("seen torn down: %v, done %v before leak_grace: the test proves nothing", o.loop.tornDown[uid] != nil, o.files.done)
			}
			unseen = tc.atPlan
			o.race = func() { unseen = tc.atStep }
			r := o.pass(6 * time.Minute)
			if !slices.Equal(o.files.done, tc.want) {
				t.Fatalf("node steps %v, want %v (outcomes %+v, kept %+v)", o.files.done, tc.want, r.Outcomes, r.Plan.Kept)
			}
			aborted := 0
			for _, out := range r.Outcomes {
				if out.Result == executor.Aborted && out.Err != nil && strings.Contains(out.Err.Error(), why) {
					aborted++
				}
			}
			if aborted != tc.wantAborted {
				t.Errorf("%d step(s) aborted saying the mounts are out of sight, want %d (outcomes %+v)", aborted, tc.wantAborted, r.Outcomes)
			}
			if tc.atPlan != "" && tc.removeDirs {
				kept := false
				for _, k := range r.Plan.Kept {
					kept = kept || (k.Pod.UID == uid && strings.Contains(k.Reason, "kept: "+why))
				}
				if !kept {
					t.Errorf("the pod dir is not said kept for its mounts out of sight: %+v", r.Plan.Kept)
				}
			}
		})
	}
}

// TestPodDirMountsUnseenByNamesThePodsDirAndWhatToDo: in this process's
// own mount namespace kubelet's mounts are seen; a containerd out of sight
// (another PID namespace) or not found is "may not see", naming the pods
// dir and what to change.
func TestPodDirMountsUnseenByNamesThePodsDirAndWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  func(context.Context) (int, error)
		want []string // "" : seen
	}{
		{"containerd in this mount namespace: seen", func(context.Context) (int, error) { return os.Getpid(), nil }, nil},
		{"containerd in another PID namespace", func(context.Context) (int, error) { return 0, nil },
			[]string{"this process may not see the mounts kubelet makes in /node/kubelet/pods: ", "give the plugin the node's PID namespace (hostPID)", "HostToContainer (rslave) propagation"}},
		{"containerd not found", func(context.Context) (int, error) { return 0, errors.New("no peer") },
			[]string{"whether this process sees the mounts kubelet makes in /node/kubelet/pods cannot be told while containerd's process cannot be found (no peer)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PodDirMountsUnseenBy(tc.pid, "/node/kubelet")(context.Background())
			if (got == "") != (tc.want == nil) {
				t.Fatalf("PodDirMountsUnseenBy = %q, want seen %v", got, tc.want == nil)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not say %q", got, w)
				}
			}
		})
	}
}

// TestContainerdNotFoundForTheMountCheckIsSaidAtInfo: while containerd's
// process cannot be found (restarting: an upgrade, a crash), whether the
// mounts are seen cannot be told, and the pod dirs are kept; that is
// routine, said at info, once. A process that may not see them is an
// error, said when it starts.
func TestContainerdNotFoundForTheMountCheckIsSaidAtInfo(t *testing.T) {
	uid := testUID(732)
	for _, tc := range []struct {
		name  string
		pid   func(context.Context) (int, error)
		level string
	}{
		{"containerd not found", func(context.Context) (int, error) { return 0, errors.New("connection refused") }, "level=info"},
		{"containerd in another PID namespace", func(context.Context) (int, error) { return 0, nil }, "level=error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podDirs(t, uid)
			cg := fakeCgroupsWithPodIf(t, true, uid)
			o := newOrphanedPod(t, uid, root, cg, true)
			log, buf := testLogger()
			o.loop.log = log
			o.loop.opts.PodDirMountsUnseen = PodDirMountsUnseenBy(tc.pid, root)
			o.pass(0)
			o.pass(3 * time.Minute)
			o.pass(6 * time.Minute)
			var said []string
			for _, line := range strings.Split(buf.String(), "\n") {
				if strings.Contains(line, "orphaned pod dirs are kept") {
					said = append(said, line)
				}
			}
			if len(said) != 1 || !strings.Contains(said[0], tc.level) {
				t.Fatalf("said %q, want it once at %s", said, tc.level)
			}
		})
	}
}
