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

// TestAnOrphanStopNeverKillsAnUnlabelledContainer: the README says an
// orphan stop "first stops each running and UNKNOWN container of the
// sandbox itself"; a running container in the orphan's sandbox that lacks
// kubelet's pod labels (made by crictl into the pod, or labels cut) is not
// among the planner's containers: StopPodSandbox SIGKILLs it.
func TestAnOrphanStopNeverKillsAnUnlabelledContainer(t *testing.T) {
	labels := func(uid string) map[string]string {
		return map[string]string{podstate.LabelPodUID: uid, podstate.LabelPodNamespace: "ns", podstate.LabelPodName: "p-" + uid}
	}
	now := time.Now()
	in := gc.Input{Now: now,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, StopOrphans: true, StopTimeout: 30 * time.Second,
			Budget: gc.Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 10}, PodLogsDir: "/var/log/pods", ContainerLogsDir: "/var/log/containers"},
		Oracle: gc.Oracle{PodDirs: nodefs.PodDirs{Ready: true, UIDs: map[string]struct{}{"u9": {}}}},
		Sandboxes: []cri.Sandbox{
			{ID: "s1", UID: "u1", Ready: true, CreatedAt: now.Add(-time.Hour), Labels: labels("u1")},
			{ID: "s9", UID: "u9", Ready: true, CreatedAt: now.Add(-time.Hour), Labels: labels("u9")},
		},
		Containers: []cri.Container{
			{ID: "c1", SandboxID: "s1", Name: "app", State: cri.ContainerRunning, CreatedAt: now.Add(-time.Hour), Labels: labels("u1")},
			{ID: "dbg", SandboxID: "s1", Name: "debug", State: cri.ContainerRunning, CreatedAt: now.Add(-time.Hour)},
		},
	}
	plan := gc.Plan(in)
	rt := &stopRecorder{}
	New(rt, newFake(), Options{MaxParallel: 1}, nil).Execute(context.Background(), plan.Actions, now, nil)
	stopSandbox := slices.Index(rt.calls, "StopPodSandbox s1")
	graceful := slices.IndexFunc(rt.calls, func(c string) bool { return strings.HasPrefix(c, "StopContainer dbg ") })
	if stopSandbox >= 0 && (graceful < 0 || graceful > stopSandbox) {
		t.Fatalf("calls %q: StopPodSandbox s1 SIGKILLs running container dbg, which the plan did not stop before it", rt.calls)
	}
}
