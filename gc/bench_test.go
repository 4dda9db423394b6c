package gc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// nodeInput is a node with n pods × 3 containers and a realistic mix: most
// pods live (Ready sandbox, running containers, one dead instance kept),
// some restarting (older dead attempts), some gone with leaked sandboxes,
// containers and log dirs, and a few orphaned live pods.
//
// Every object gets its own copy of every string, as decoding a CRI
// listing does: a planner cannot profit from strings shared by accident.
func nodeInput(n int) Input {
	in := Input{Now: now, Policy: policy(), LastLifeEvent: map[string]time.Time{}, EligibleSince: map[string]time.Time{}}
	in.Policy.LeakGrace = 5 * time.Minute
	dirs := nodefs.PodDirs{Ready: true, UIDs: make(map[string]struct{}, n)}
	for i := range n {
		uid := fmt.Sprintf("%08x-1234-4abc-8def-%012x", i, i)
		s := fmt.Sprintf("%064x", i)
		kind := i % 20
		ready := kind < 17 // 85% live, 10% gone (leaked), 5% orphaned live
		if kind < 17 {
			dirs.UIDs[strings.Clone(uid)] = struct{}{}
		}
		if kind == 19 {
			ready = true
		}
		in.Sandboxes = append(in.Sandboxes, listedSandbox(s, uid, ready, time.Hour))
		in.LastLifeEvent[strings.Clone(uid)] = now.Add(-time.Hour)
		for j := range 3 {
			state := cri.ContainerRunning
			if !ready {
				state = cri.ContainerExited
			}
			in.Containers = append(in.Containers, listedContainer(fmt.Sprintf("%060x%04d", i, j), s, uid, fmt.Sprintf("c%d", j), state, 50*time.Minute))
		}
		if kind%5 == 0 { // a restarting container: two dead attempts
			for k := range 2 {
				in.Containers = append(in.Containers, listedContainer(fmt.Sprintf("%058x%02d%04d", i, k, 9), s, uid, "c0", cri.ContainerExited, time.Duration(55+k)*time.Minute))
			}
		}
		name := "ns_pod-" + uid + "_" + uid
		in.PodLogDirs = append(in.PodLogDirs, nodefs.PodLogDir{Path: podLogs + "/" + name, Name: name, Namespace: "ns", PodName: "pod-" + uid, UID: strings.Clone(uid)})
	}
	in.Oracle = Oracle{PodDirs: dirs}
	in.EligibleSince = Plan(in).EligibleSince
	return in
}

// listedLabels are kubelet's labels as one decoded listing entry carries them.
func listedLabels(uid string, extra ...string) map[string]string {
	l := map[string]string{
		podstate.LabelPodUID:       strings.Clone(uid),
		podstate.LabelPodNamespace: strings.Clone("ns"),
		podstate.LabelPodName:      "pod-" + uid,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = strings.Clone(extra[i+1])
	}
	return l
}

func listedSandbox(id, uid string, ready bool, age time.Duration) cri.Sandbox {
	return cri.Sandbox{ID: strings.Clone(id), UID: strings.Clone(uid), Name: "pod-" + uid, Namespace: strings.Clone("ns"), Ready: ready,
		CreatedAt: now.Add(-age), Labels: listedLabels(uid, "app", "web")}
}

func listedContainer(id, sandbox, uid, name string, state cri.ContainerState, age time.Duration) cri.Container {
	return cri.Container{ID: id, SandboxID: strings.Clone(sandbox), Name: strings.Clone(name), State: state,
		CreatedAt: now.Add(-age), Labels: listedLabels(uid, "io.kubernetes.container.name", name)}
}

func benchmarkPlan(b *testing.B, pods int) {
	in := nodeInput(pods)
	b.ReportAllocs()
	var r Result
	for b.Loop() {
		r = Plan(in)
	}
	b.ReportMetric(float64(len(r.Actions)+len(r.Deferred)), "candidates")
	if len(r.Actions)+len(r.Deferred) == 0 {
		b.Fatal("the plan proposed nothing: a plan that returned early would post the best times")
	}
}

// The budgets are at 1k, 10k and 20k pods; 2k, 5k and 40k make every
// doubling visible (make bench prints how each doubling scales).
func BenchmarkPlan1kPods(b *testing.B)  { benchmarkPlan(b, 1000) }
func BenchmarkPlan2kPods(b *testing.B)  { benchmarkPlan(b, 2000) }
func BenchmarkPlan5kPods(b *testing.B)  { benchmarkPlan(b, 5000) }
func BenchmarkPlan10kPods(b *testing.B) { benchmarkPlan(b, 10000) }
func BenchmarkPlan20kPods(b *testing.B) { benchmarkPlan(b, 20000) }
func BenchmarkPlan40kPods(b *testing.B) { benchmarkPlan(b, 40000) }

// benchmarkReadPods is the floor under any planner: learn each listed
// object's pod (its kubelet labels) and whether the oracle has it, with
// no other work and no allocation. Its cost per pod grows with the node
// only through the machine's memory hierarchy (caches, TLB), so how it
// scales per doubling is the best any planner can scale on the machine;
// make bench prints Plan's ratios beside it.
func benchmarkReadPods(b *testing.B, pods int) {
	in := nodeInput(pods)
	gone := 0
	for b.Loop() {
		gone = 0
		for i := range in.Sandboxes {
			if id, ok := podstate.KubeletPod(in.Sandboxes[i].Labels); ok && in.Oracle.gone(id.UID) {
				gone++
			}
		}
		for i := range in.Containers {
			if id, ok := podstate.KubeletPod(in.Containers[i].Labels); ok && in.Oracle.gone(id.UID) {
				gone++
			}
		}
	}
	if want := pods * 3 / 20 * 4; gone < want {
		b.Fatalf("%d objects of gone pods read, want at least %d", gone, want)
	}
}

func BenchmarkReadPods1kPods(b *testing.B)  { benchmarkReadPods(b, 1000) }
func BenchmarkReadPods2kPods(b *testing.B)  { benchmarkReadPods(b, 2000) }
func BenchmarkReadPods5kPods(b *testing.B)  { benchmarkReadPods(b, 5000) }
func BenchmarkReadPods10kPods(b *testing.B) { benchmarkReadPods(b, 10000) }
func BenchmarkReadPods20kPods(b *testing.B) { benchmarkReadPods(b, 20000) }
func BenchmarkReadPods40kPods(b *testing.B) { benchmarkReadPods(b, 40000) }

// benchmarkReadPodUIDs is a lower floor still: only find each listed
// object's pod UID label (its entry in the labels map), without even
// reading the UID's bytes.
func benchmarkReadPodUIDs(b *testing.B, pods int) {
	in := nodeInput(pods)
	length := 0
	for b.Loop() {
		length = 0
		for i := range in.Sandboxes {
			length += len(in.Sandboxes[i].Labels[podstate.LabelPodUID])
		}
		for i := range in.Containers {
			length += len(in.Containers[i].Labels[podstate.LabelPodUID])
		}
	}
	if want := 36 * (len(in.Sandboxes) + len(in.Containers)); length != want {
		b.Fatalf("read %d bytes of pod UIDs, want %d", length, want)
	}
}

func BenchmarkReadPodUIDs10kPods(b *testing.B) { benchmarkReadPodUIDs(b, 10000) }
func BenchmarkReadPodUIDs20kPods(b *testing.B) { benchmarkReadPodUIDs(b, 20000) }

// BenchmarkCheckListing10kPods is the check of a listing against NRI, which
// Plan runs again after the loop did: its cost beside Plan's.
func BenchmarkCheckListing10kPods(b *testing.B) {
	in := nodeInput(10000)
	nri := NRIView{Session: 1, Confirmed: true}
	for _, s := range in.Sandboxes {
		nri.Sandboxes = append(nri.Sandboxes, podstate.NRISandbox{ID: strings.Clone(s.ID), PodUID: s.UID, ReportedAt: now.Add(-time.Hour),
			Synced: true, Session: 1, Live: s.Ready})
	}
	b.ReportAllocs()
	for b.Loop() {
		if c := CheckListing(nri, in.Sandboxes, nil, now); c.Untrusted != "" {
			b.Fatal(c.Untrusted)
		}
	}
}
