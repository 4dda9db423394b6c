package executor

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// containerd's StopPodSandbox (v2.4.2 internal/cri/server/sandbox_stop.go,
// stopPodSandbox) stops every container whose SandboxID is the sandbox's
// with a timeout of 0 (SIGKILL) before it stops the sandbox. An orphan stop
// must therefore not reach StopPodSandbox while the sandbox holds a
// container the plan did not stop gracefully itself: a listed entry that
// cannot be read ("never acted on, and still holds its sandbox", README),
// an UNKNOWN container (which the plan stopped with its pod's grace,
// but in the RemoveContainer wave, after the StopSandbox wave), or a
// running container without kubelet's labels, which the planner's pods
// do not include.
func TestAnOrphanStopNeverKillsAContainerThePlanDidNotStop(t *testing.T) {
	labels := func(uid string) map[string]string {
		return map[string]string{podstate.LabelPodUID: uid, podstate.LabelPodNamespace: "ns", podstate.LabelPodName: "p-" + uid}
	}
	now := time.Now()
	base := gc.Input{Now: now,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, StopOrphans: true, StopTimeout: 30 * time.Second,
			Budget: gc.Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 10}, PodLogsDir: "/var/log/pods", ContainerLogsDir: "/var/log/containers"},
		// u9 is live (its pod dir is there); u1 is gone: an orphaned live pod.
		Oracle: gc.Oracle{PodDirs: nodefs.PodDirs{Ready: true, UIDs: map[string]struct{}{"u9": {}}}},
		Sandboxes: []cri.Sandbox{
			{ID: "s1", UID: "u1", Ready: true, CreatedAt: now.Add(-time.Hour), Labels: labels("u1")},
			{ID: "s9", UID: "u9", Ready: true, CreatedAt: now.Add(-time.Hour), Labels: labels("u9")},
		},
		Containers: []cri.Container{{ID: "c1", SandboxID: "s1", Name: "app", State: cri.ContainerRunning, CreatedAt: now.Add(-time.Hour), Labels: labels("u1")}},
	}
	for _, tc := range []struct {
		name string
		edit func(in *gc.Input)
		// killed is the container StopPodSandbox would SIGKILL.
		killed string
	}{
		{"a container the runtime lists but that cannot be read", func(in *gc.Input) {
			in.Unreadable = []cri.Malformed{{Kind: "container", ID: "bad", SandboxID: "s1", PodUID: "u1", Reason: "no creation time"}}
		}, "bad"},
		{"an UNKNOWN container, which may still run", func(in *gc.Input) {
			in.Containers = append(in.Containers, cri.Container{ID: "unk", SandboxID: "s1", Name: "side", State: cri.ContainerUnknown,
				CreatedAt: now.Add(-time.Hour), Labels: labels("u1")})
		}, "unk"},
		{"a running container without kubelet's labels (crictl create)", func(in *gc.Input) {
			in.Containers = append(in.Containers, cri.Container{ID: "dbg", SandboxID: "s1", Name: "debug", State: cri.ContainerRunning,
				CreatedAt: now.Add(-time.Hour)})
		}, "dbg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			in.Containers = slices.Clone(base.Containers)
			tc.edit(&in)
			plan := gc.Plan(in)
			if plan.OracleUntrusted != "" || len(plan.Trips) > 0 {
				t.Fatalf("the test proves nothing: oracle %q, trips %+v", plan.OracleUntrusted, plan.Trips)
			}
			rt := &stopRecorder{}
			New(rt, newFake(), Options{MaxParallel: 1}, nil).Execute(context.Background(), plan.Actions, now, nil)
			stopSandbox := slices.Index(rt.calls, "StopPodSandbox s1")
			gracefulStop := slices.IndexFunc(rt.calls, func(c string) bool { return strings.HasPrefix(c, "StopContainer "+tc.killed+" ") })
			if stopSandbox >= 0 && (gracefulStop < 0 || gracefulStop > stopSandbox) {
				t.Fatalf("calls %q: StopPodSandbox s1 SIGKILLs container %s, which the plan did not stop before it", rt.calls, tc.killed)
			}
		})
	}
}
