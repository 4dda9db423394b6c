package gc

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
)

// randomInput builds a random node: pods with several sandbox attempts and
// container instances in every state, unmanaged objects, a random oracle,
// log dirs (some outside the root), log links, grace clocks and policies.
func randomInput(seed int64, pods int) Input {
	rng := rand.New(rand.NewSource(seed))
	in := Input{Now: now, LastLifeEvent: map[string]time.Time{}, EligibleSince: map[string]time.Time{}, TornDown: map[string]bool{}}
	in.Policy = Policy{
		LeakGrace:          time.Duration(rng.Intn(3)) * time.Minute,
		MinAge:             time.Duration(rng.Intn(2)) * time.Minute,
		MaxPerPodContainer: rng.Intn(4) - 1,
		MaxContainers:      rng.Intn(pods*2) - 1,
		StopOrphans:        rng.Intn(2) == 0,
		StopTimeout:        time.Second,
		MaxStopsPerPass:    rng.Intn(5),
		MaxStopFraction:    rng.Float64(),
		PodLogsDir:         podLogs,
		ContainerLogsDir:   ctrLogs,
	}
	dirs := nodefs.PodDirs{Ready: rng.Intn(10) != 0, UIDs: map[string]struct{}{}}
	in.Oracle = Oracle{Disabled: rng.Intn(10) == 0, PodDirs: dirs}
	states := []cri.ContainerState{cri.ContainerCreated, cri.ContainerRunning, cri.ContainerExited, cri.ContainerUnknown}
	id := 0
	next := func(kind string) string { id++; return fmt.Sprintf("%s%04d", kind, id) }
	age := func() time.Duration { return time.Duration(rng.Intn(600)) * time.Second }
	for i := range pods {
		uid := fmt.Sprintf("uid-%d", i)
		if rng.Intn(2) == 0 {
			dirs.UIDs[uid] = struct{}{}
		}
		if rng.Intn(4) == 0 {
			in.LastLifeEvent[uid] = now.Add(-age())
		}
		var sandboxIDs []string
		for range 1 + rng.Intn(3) {
			s := sb(next("s"), uid, rng.Intn(3) == 0, age())
			if rng.Intn(15) == 0 {
				s.Labels = nil // not kubelet's
			}
			in.Sandboxes = append(in.Sandboxes, s)
			sandboxIDs = append(sandboxIDs, s.ID)
		}
		for range rng.Intn(6) {
			sandboxID := sandboxIDs[rng.Intn(len(sandboxIDs))]
			if rng.Intn(20) == 0 {
				sandboxID = "missing-sandbox"
			}
			c := ctr(next("c"), sandboxID, uid, fmt.Sprintf("n%d", rng.Intn(2)), states[rng.Intn(len(states))], age())
			if rng.Intn(15) == 0 {
				c.Labels = nil
			}
			if rng.Intn(12) == 0 { // listed, but unreadable (containerd's UNKNOWN with no creation time)
				m := cri.Malformed{Kind: "container", ID: c.ID, Reason: "no creation time", SandboxID: c.SandboxID, PodUID: uid}
				if rng.Intn(4) == 0 {
					m.SandboxID = ""
				}
				in.Unreadable = append(in.Unreadable, m)
				continue
			}
			in.Containers = append(in.Containers, c)
			if rng.Intn(3) == 0 {
				in.ContainerLogLinks = append(in.ContainerLogLinks, nodefs.ContainerLogLink{
					Path: ctrLogs + "/pod_ns_x-" + c.ID + ".log", ContainerID: c.ID, Dangling: rng.Intn(2) == 0})
			}
		}
		if rng.Intn(2) == 0 {
			root := podLogs
			if rng.Intn(10) == 0 {
				root = "/elsewhere"
			}
			name := "ns_pod-" + uid + "_" + uid
			in.PodLogDirs = append(in.PodLogDirs, nodefs.PodLogDir{Path: filepath.Join(root, name), Name: name, Namespace: "ns", PodName: "pod-" + uid, UID: uid})
		}
	}
	// Pod cgroups and pod dirs, for listed pods and for pods with nothing
	// listed, some with volumes left or blockers.
	in.Policy.RemoveOrphanedPodDirs = rng.Intn(2) == 0
	if rng.Intn(5) != 0 {
		cgs := &podcgroups.Listing{Ready: rng.Intn(10) != 0, Pods: map[string]podcgroups.PodCgroup{}}
		for i := range pods + 10 {
			uid := fmt.Sprintf("uid-%d", i)
			if rng.Intn(2) == 0 {
				cgs.Pods[uid] = podcgroups.PodCgroup{UID: uid, Paths: []string{"/sys/fs/cgroup/memory/kubepods/pod" + uid},
					Procs: rng.Intn(3), CPUReduced: rng.Intn(3) == 0}
			}
			if i >= pods && rng.Intn(2) == 0 {
				dirs.UIDs[uid] = struct{}{}
			}
			if rng.Intn(2) == 0 {
				in.TornDown[uid] = true // seen torn down (listed pods too: the listing wins)
			}
		}
		in.PodCgroups = cgs
	}
	for uid := range dirs.UIDs {
		d := nodefs.PodDir{UID: uid, Path: "/var/lib/kubelet/pods/" + uid}
		if rng.Intn(3) == 0 {
			d.VolumeDirs = []string{d.Path + "/volumes/x/y"}
		}
		if rng.Intn(4) == 0 {
			d.Blockers = []string{"volumes/x/y is a mount point"}
		}
		in.PodDirs = append(in.PodDirs, d)
	}
	for range rng.Intn(5) {
		in.ContainerLogLinks = append(in.ContainerLogLinks, nodefs.ContainerLogLink{
			Path: ctrLogs + "/gone_ns_x-" + next("dead") + ".log", ContainerID: next("dead"), Dangling: true})
	}
	// Half of the candidates have been waiting a while already.
	if rng.Intn(2) == 0 {
		first := Plan(in)
		for k := range first.EligibleSince {
			if rng.Intn(2) == 0 {
				in.EligibleSince[k] = now.Add(-time.Duration(rng.Intn(300)) * time.Second)
			}
		}
	}
	return in
}

// checkContract fails on any plan that breaks DESIGN.md §4.
func checkContract(t *testing.T, in Input, r Result) {
	t.Helper()
	sandboxes := map[string]cri.Sandbox{}
	for _, s := range in.Sandboxes {
		sandboxes[s.ID] = s
	}
	containers := map[string]cri.Container{}
	for _, c := range in.Containers {
		containers[c.ID] = c
	}
	due := map[string]Action{}
	stoppedPods := map[string]bool{}
	listedUID := map[string]bool{}
	for _, s := range in.Sandboxes {
		listedUID[s.UID] = true
	}
	for _, c := range in.Containers {
		listedUID[c.Labels["io.kubernetes.pod.uid"]] = true
	}
	// Unreadable entries are listed too: they hold their sandbox (or, naming
	// none, every sandbox of their pod), their pod and their log link.
	heldSandbox, heldPodSandboxes, unreadableID, unreadableUID := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, m := range in.Unreadable {
		listedUID[m.PodUID] = true
		unreadableUID[m.PodUID] = true
		heldSandbox[m.SandboxID] = true
		heldPodSandboxes[m.PodUID] = heldPodSandboxes[m.PodUID] || m.SandboxID == ""
		unreadableID[m.ID] = true
	}
	blocked, volumes := map[string]bool{}, map[string]bool{}
	for _, d := range in.PodDirs {
		blocked[d.UID] = len(d.Blockers) > 0
		volumes[d.UID] = nodefs.PodVolumesExist(d)
	}
	for i, a := range r.Actions {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("action %d %s %s: %s", i, a.Kind, a.Key, fmt.Sprintf(format, args...))
		}
		gone := in.Oracle.gone(a.Pod.UID)
		if in.Now.Sub(a.EligibleSince) < in.Policy.LeakGrace {
			fail("due before leak_grace")
		}
		for _, dep := range a.DependsOn {
			if _, ok := due[dep]; !ok {
				fail("depends on %s, which is not due before it", dep)
			}
		}
		switch a.Kind {
		case RemoveContainer, StopContainer:
			c, ok := containers[a.ContainerID]
			if !ok || c.Labels == nil {
				fail("not a listed kubelet container")
			}
			if a.Rule != RuleOrphanStop && in.Now.Sub(c.CreatedAt) < in.Policy.MinAge {
				fail("evicts a container younger than containers.min_age")
			}
			if c.State == cri.ContainerRunning && !(a.Kind == StopContainer && in.Policy.StopOrphans && gone) {
				fail("touches a RUNNING container (stop orphans %v, pod gone %v)", in.Policy.StopOrphans, gone)
			}
			if a.Kind == RemoveContainer && c.State == cri.ContainerUnknown {
				fail("removes an UNKNOWN container without stopping it first")
			}
			if a.Rule == RuleOrphanStop {
				stoppedPods[a.Pod.UID] = true
			}
		case RemoveSandbox, StopSandbox:
			s, ok := sandboxes[a.SandboxID]
			if !ok || s.Labels == nil {
				fail("not a listed kubelet sandbox")
			}
			if s.Ready && !(a.Kind == StopSandbox && in.Policy.StopOrphans && gone) {
				fail("touches a Ready sandbox")
			}
			if a.Kind == RemoveSandbox && (heldSandbox[s.ID] || heldPodSandboxes[a.Pod.UID]) {
				fail("still held by a listed container that could not be read")
			}
			if a.Kind == RemoveSandbox {
				for _, c := range in.Containers {
					if c.SandboxID == s.ID {
						if _, ok := due["container/"+c.ID]; !ok {
							fail("still referenced by container %s (%s), not removed before it", c.ID, c.State)
						}
					}
				}
			}
			if a.Rule == RuleOrphanStop {
				stoppedPods[a.Pod.UID] = true
			}
		case RemovePodLogDir:
			if filepath.Dir(a.Path) != in.Policy.PodLogsDir {
				fail("path outside pod_logs_dir")
			}
			if !gone {
				fail("log dir of a pod that is not gone")
			}
			if unreadableUID[a.Pod.UID] {
				fail("log dir of a pod with a listed entry that could not be read")
			}
			for _, s := range in.Sandboxes {
				if s.UID == a.Pod.UID {
					if _, ok := due["sandbox/"+s.ID]; !ok {
						fail("sandbox %s of the pod is left", s.ID)
					}
				}
			}
		case RemovePodCgroup, ReducePodCgroupCPU, RemovePodDir:
			if listedUID[a.Pod.UID] {
				fail("touches the cgroup or pod dir of a pod with a listed sandbox or container")
			}
			if a.Kind == RemovePodDir && (!in.Policy.RemoveOrphanedPodDirs || blocked[a.Pod.UID]) {
				fail("removes a pod dir without pod_dirs.remove_orphaned or despite a blocker")
			}
			if a.Kind == RemovePodCgroup && in.Oracle.Disabled {
				fail("destroys a pod cgroup with the oracle disabled")
			}
			// A pod dir with nothing listed may be a pod not started yet:
			// only a gone pod, or one this plugin saw torn down, is touched.
			if !gone && !in.TornDown[a.Pod.UID] {
				fail("touches the cgroup or pod dir of a pod that is neither gone nor seen torn down")
			}
			if a.Kind == RemovePodCgroup && !gone && volumes[a.Pod.UID] {
				fail("destroys the cgroup of a pod whose volume dirs remain")
			}
		case RemoveContainerLogLink:
			if filepath.Dir(a.Path) != in.Policy.ContainerLogsDir {
				fail("path outside container_logs_dir")
			}
			if unreadableID[a.ContainerID] {
				fail("link of a listed container that could not be read")
			}
			if c, ok := containers[a.ContainerID]; ok && c.State != cri.ContainerExited {
				if _, removing := due["container/"+c.ID]; !removing {
					fail("link of a %s container", c.State)
				}
			}
		}
		due[a.Key] = a
	}
	if n := len(stoppedPods); n > 0 {
		ready := 0
		for _, s := range in.Sandboxes {
			if s.Ready && s.Labels != nil {
				ready++
			}
		}
		if n > in.Policy.MaxStopsPerPass || float64(n) > in.Policy.MaxStopFraction*float64(ready) {
			t.Fatalf("a pass stops %d live pods: over max_per_pass %d or max_fraction %g of %d Ready",
				n, in.Policy.MaxStopsPerPass, in.Policy.MaxStopFraction, ready)
		}
	}
	if r.Breaker != nil && len(stoppedPods) > 0 {
		t.Fatalf("the breaker tripped, yet %d live pods are stopped", len(stoppedPods))
	}
	if !in.Oracle.Ready() && len(r.Actions) > 0 {
		t.Fatal("actions while the oracle is not ready")
	}
}

func TestEveryPlanKeepsTheSafetyContract(t *testing.T) {
	for seed := int64(1); seed <= 2000; seed++ {
		in := randomInput(seed, 1+int(seed%40))
		checkContract(t, in, Plan(in))
	}
}

func FuzzPlanKeepsTheSafetyContract(f *testing.F) {
	for _, seed := range []int64{1, 7, 99, 12345} {
		f.Add(seed, uint8(10))
	}
	f.Fuzz(func(t *testing.T, seed int64, pods uint8) {
		in := randomInput(seed, 1+int(pods%64))
		checkContract(t, in, Plan(in))
	})
}
