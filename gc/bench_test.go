package gc

import (
	"fmt"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
)

// nodeInput is a node with n pods × 3 containers and a realistic mix: most
// pods live (Ready sandbox, running containers, one dead instance kept),
// some restarting (older dead attempts), some gone with leaked sandboxes,
// containers and log dirs, and a few orphaned live pods.
func nodeInput(n int) Input {
	in := Input{Now: now, Policy: policy(), LastLifeEvent: map[string]time.Time{}, EligibleSince: map[string]time.Time{}}
	in.Policy.LeakGrace = 5 * time.Minute
	dirs := nodefs.PodDirs{Ready: true, UIDs: make(map[string]struct{}, n)}
	for i := range n {
		uid := fmt.Sprintf("%08x-1234-4abc-8def-%012x", i, i)
		s := fmt.Sprintf("%064x", i)
		kind := i % 20
		ready := kind < 17 // 85% live, 10% gone (leaked), 5% orphaned live
		if kind < 17 || kind == 19 {
			dirs.UIDs[uid] = struct{}{}
		}
		if kind == 19 {
			delete(dirs.UIDs, uid)
			ready = true
		}
		in.Sandboxes = append(in.Sandboxes, sb(s, uid, ready, time.Hour))
		in.LastLifeEvent[uid] = now.Add(-time.Hour)
		for j := range 3 {
			state := cri.ContainerRunning
			if !ready {
				state = cri.ContainerExited
			}
			in.Containers = append(in.Containers, ctr(fmt.Sprintf("%060x%04d", i, j), s, uid, fmt.Sprintf("c%d", j), state, 50*time.Minute))
		}
		if kind%5 == 0 { // a restarting container: two dead attempts
			for k := range 2 {
				in.Containers = append(in.Containers, ctr(fmt.Sprintf("%058x%02d%04d", i, k, 9), s, uid, "c0", cri.ContainerExited, time.Duration(55+k)*time.Minute))
			}
		}
		name := "ns_pod-" + uid + "_" + uid
		in.PodLogDirs = append(in.PodLogDirs, nodefs.PodLogDir{Path: podLogs + "/" + name, Name: name, Namespace: "ns", PodName: "pod-" + uid, UID: uid})
	}
	in.Oracle = Oracle{PodDirs: dirs}
	in.EligibleSince = Plan(in).EligibleSince
	return in
}

func benchmarkPlan(b *testing.B, pods int) {
	in := nodeInput(pods)
	b.ReportAllocs()
	var r Result
	for b.Loop() {
		r = Plan(in)
	}
	b.ReportMetric(float64(len(r.Actions)+len(r.Deferred)), "candidates")
}

func BenchmarkPlan1kPods(b *testing.B)  { benchmarkPlan(b, 1000) }
func BenchmarkPlan10kPods(b *testing.B) { benchmarkPlan(b, 10000) }
func BenchmarkPlan20kPods(b *testing.B) { benchmarkPlan(b, 20000) }
