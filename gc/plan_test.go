package gc

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

const (
	podLogs = "/var/log/pods"
	ctrLogs = "/var/log/containers"
)

func labels(uid string) map[string]string {
	return map[string]string{podstate.LabelPodUID: uid, podstate.LabelPodNamespace: "ns", podstate.LabelPodName: "pod-" + uid}
}

func sb(id, uid string, ready bool, age time.Duration) cri.Sandbox {
	return cri.Sandbox{ID: id, UID: uid, Name: "pod-" + uid, Namespace: "ns", Ready: ready, CreatedAt: now.Add(-age), Labels: labels(uid)}
}

func ctr(id, sandbox, uid, name string, state cri.ContainerState, age time.Duration) cri.Container {
	return cri.Container{ID: id, SandboxID: sandbox, Name: name, State: state, CreatedAt: now.Add(-age), Labels: labels(uid)}
}

func present(uids ...string) Oracle {
	set := make(map[string]struct{})
	for _, u := range uids {
		set[u] = struct{}{}
	}
	return Oracle{PodDirs: nodefs.PodDirs{Ready: true, UIDs: set}}
}

func policy() Policy {
	return Policy{MaxPerPodContainer: 1, MaxContainers: -1, Budget: Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 1000},
		StopTimeout: time.Second, PodLogsDir: podLogs, ContainerLogsDir: ctrLogs}
}

// due lists the plan's due actions as "kind id", sorted.
func due(r Result) []string {
	var out []string
	for _, a := range r.Actions {
		out = append(out, describe(a))
	}
	sort.Strings(out)
	return out
}

func deferred(r Result) []string {
	var out []string
	for _, d := range r.Deferred {
		out = append(out, describe(d.Action))
	}
	sort.Strings(out)
	return out
}

func describe(a Action) string {
	id := a.ContainerID
	switch a.Kind {
	case RemoveSandbox, StopSandbox:
		id = a.SandboxID
	case RemovePodLogDir, RemoveContainerLogLink:
		id = a.Path
	}
	return string(a.Kind) + " " + id
}

func same(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(want) == 0 {
		want = nil
	}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
	}
}

func keptReason(r Result, object string) string {
	for _, k := range r.Kept {
		if strings.HasPrefix(k.Object, object) {
			return k.Reason
		}
	}
	return ""
}

func TestContainersKeepTheNewestPerEvictUnit(t *testing.T) {
	// Five dead attempts of "app" in a live pod; IDs sort opposite to age so
	// that only creation time can give the right order.
	var five []cri.Container
	for i := range 5 {
		five = append(five, ctr(fmt.Sprintf("c%d", i), "s1", "u1", "app", cri.ContainerExited, time.Duration(i+1)*time.Minute))
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Policy, *[]cri.Container)
		want   []string
	}{
		{"max_per_pod_container 1 keeps the newest by creation time", nil,
			[]string{"remove-container c1", "remove-container c2", "remove-container c3", "remove-container c4"}},
		{"max_per_pod_container 3", func(p *Policy, _ *[]cri.Container) { p.MaxPerPodContainer = 3 },
			[]string{"remove-container c3", "remove-container c4"}},
		{"max_per_pod_container 0 removes every dead instance", func(p *Policy, _ *[]cri.Container) { p.MaxPerPodContainer = 0 },
			[]string{"remove-container c0", "remove-container c1", "remove-container c2", "remove-container c3", "remove-container c4"}},
		{"negative max_per_pod_container keeps all", func(p *Policy, _ *[]cri.Container) { p.MaxPerPodContainer = -1 }, nil},
		{"min_age protects young containers", func(p *Policy, _ *[]cri.Container) { p.MinAge = 150 * time.Second },
			[]string{"remove-container c3", "remove-container c4"}},
		{"running containers are never evicted and are not in the unit", func(_ *Policy, cs *[]cri.Container) {
			*cs = append(*cs, ctr("live", "s1", "u1", "app", cri.ContainerRunning, 0))
		}, []string{"remove-container c1", "remove-container c2", "remove-container c3", "remove-container c4"}},
		{"another container name is another unit", func(_ *Policy, cs *[]cri.Container) {
			*cs = append(*cs, ctr("side", "s1", "u1", "sidecar", cri.ContainerExited, time.Hour))
		}, []string{"remove-container c1", "remove-container c2", "remove-container c3", "remove-container c4"}},
		{"created containers are evictable too", func(_ *Policy, cs *[]cri.Container) {
			*cs = append(*cs, ctr("fresh", "s1", "u1", "app", cri.ContainerCreated, 10*time.Second))
		}, []string{"remove-container c0", "remove-container c1", "remove-container c2", "remove-container c3", "remove-container c4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy()
			cs := append([]cri.Container(nil), five...)
			if tc.mutate != nil {
				tc.mutate(&pol, &cs)
			}
			r := Plan(Input{Now: now, Policy: pol, Oracle: present("u1"),
				Sandboxes: []cri.Sandbox{sb("s1", "u1", true, time.Hour)}, Containers: cs})
			same(t, "due", due(r), tc.want)
		})
	}
}

func TestContainersOfGonePodsAreAllRemoved(t *testing.T) {
	r := Plan(Input{Now: now, Policy: policy(), Oracle: present("other"),
		Sandboxes: []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
		Containers: []cri.Container{
			ctr("a1", "s1", "u1", "app", cri.ContainerExited, time.Minute),
			ctr("a2", "s1", "u1", "app", cri.ContainerExited, 2*time.Minute),
			ctr("b1", "s1", "u1", "sidecar", cri.ContainerCreated, time.Minute),
		}})
	same(t, "due", due(r), []string{"remove-container a1", "remove-container a2", "remove-container b1", "remove-sandbox s1"})
	for _, a := range r.Actions {
		if a.Kind == RemoveContainer && a.Rule != RuleContainerPodGone {
			t.Errorf("%s: rule %s, want %s", describe(a), a.Rule, RuleContainerPodGone)
		}
		if a.RemoveLogFiles {
			t.Errorf("%s removes its log files itself: a gone pod's go with its pod log dir", describe(a))
		}
	}
}

// kubelet's removeContainer removes a container's log file and rotations
// before the container (removeContainerLog); the plugin does the same for
// the containers of a live pod it removes.
func TestAContainerOfALivePodGoesWithItsLogFiles(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		mutate func(*Policy)
	}{
		{RuleContainerMaxPerPod, nil},
		{RuleContainerMaxContainers, func(p *Policy) { p.MaxPerPodContainer, p.MaxContainers = -1, 0 }},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			pol := policy()
			if tc.mutate != nil {
				tc.mutate(&pol)
			}
			r := Plan(Input{Now: now, Policy: pol, Oracle: present("u1"),
				Sandboxes: []cri.Sandbox{sb("s1", "u1", true, time.Hour)},
				Containers: []cri.Container{ctr("old", "s1", "u1", "app", cri.ContainerExited, 2*time.Minute),
					ctr("new", "s1", "u1", "app", cri.ContainerExited, time.Minute)}})
			if len(r.Actions) == 0 {
				t.Fatal("no action")
			}
			for _, a := range r.Actions {
				if a.Kind != RemoveContainer || a.Rule != tc.rule || !a.RemoveLogFiles {
					t.Errorf("%s: rule %s, removes log files %v; want %s removing them", describe(a), a.Rule, a.RemoveLogFiles, tc.rule)
				}
			}
		})
	}
}

// threeLivePodsOfThreeDeadApps: three live pods u1..u3 (sandboxes s-u1..),
// three dead "app" containers each (u1-c0..u3-c2), ages 1..9 minutes.
func threeLivePodsOfThreeDeadApps() (sbs []cri.Sandbox, cs []cri.Container) {
	age := 0
	for _, uid := range []string{"u1", "u2", "u3"} {
		sbs = append(sbs, sb("s-"+uid, uid, true, time.Hour))
		for i := range 3 {
			age++
			cs = append(cs, ctr(fmt.Sprintf("%s-c%d", uid, i), "s-"+uid, uid, "app", cri.ContainerExited, time.Duration(age)*time.Minute))
		}
	}
	return sbs, cs
}

func TestMaxContainersCapsPerUnitShareThenOldestFirst(t *testing.T) {
	sbs, cs := threeLivePodsOfThreeDeadApps()
	for _, tc := range []struct {
		name string
		max  int
		want []string
	}{
		// share = max(1, 4/3) = 1: each unit keeps its newest; 3 <= 4.
		{"per-unit share", 4, []string{"u1-c1", "u1-c2", "u2-c1", "u2-c2", "u3-c1", "u3-c2"}},
		// share = max(1, 2/3) = 1 leaves 3 > 2: the oldest of the rest goes.
		{"then oldest first", 2, []string{"u1-c1", "u1-c2", "u2-c1", "u2-c2", "u3-c0", "u3-c1", "u3-c2"}},
		{"under the cap nothing is removed", 9, nil},
		{"zero keeps none", 0, []string{"u1-c0", "u1-c1", "u1-c2", "u2-c0", "u2-c1", "u2-c2", "u3-c0", "u3-c1", "u3-c2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy()
			pol.MaxPerPodContainer = -1
			pol.MaxContainers = tc.max
			r := Plan(Input{Now: now, Policy: pol, Oracle: present("u1", "u2", "u3"), Sandboxes: sbs, Containers: cs})
			var want []string
			for _, id := range tc.want {
				want = append(want, "remove-container "+id)
			}
			same(t, "due", due(r), want)
		})
	}
}

// TestAContainerMaxContainersRemovesIsNotReportedKept: the plan's kept
// list says what it leaves alone; a dead instance that max_containers
// removes (by the per-name share or oldest first) is not in it, and one
// that stays is.
func TestAContainerMaxContainersRemovesIsNotReportedKept(t *testing.T) {
	sbs, cs := threeLivePodsOfThreeDeadApps()
	for _, tc := range []struct {
		name                string
		maxPerPod, maxTotal int
	}{
		{"per-name share", -1, 4},
		{"then oldest first", -1, 2},
		{"oldest first after max_per_pod_container", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy()
			pol.MaxPerPodContainer, pol.MaxContainers = tc.maxPerPod, tc.maxTotal
			r := Plan(Input{Now: now, Policy: pol, Oracle: present("u1", "u2", "u3"), Sandboxes: sbs, Containers: cs})
			removed := map[string]bool{}
			for _, a := range r.Actions {
				removed[a.ContainerID] = true
			}
			if len(removed) == 0 || len(removed) == len(cs) {
				t.Fatalf("%d of %d containers removed: the case tests nothing", len(removed), len(cs))
			}
			for _, c := range cs {
				why := keptReason(r, "container "+c.ID+" ")
				switch {
				case removed[c.ID] && why != "":
					t.Errorf("container %s is removed, yet reported kept: %q", c.ID, why)
				case !removed[c.ID] && why == "":
					t.Errorf("container %s stays, but is not reported kept", c.ID)
				}
			}
		})
	}
}

func TestUnknownContainersAreStoppedThenRemovedWithKubeletsMinimumGrace(t *testing.T) {
	in := Input{Now: now, Policy: policy(), Oracle: present(),
		Sandboxes:  []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
		Containers: []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerUnknown, time.Hour)}}
	r := Plan(in)
	same(t, "due", due(r), []string{"remove-container c1", "remove-sandbox s1"})
	a := r.Actions[0]
	if !a.StopFirst || a.Timeout != UnknownStopTimeout || !strings.Contains(a.Reason, "state UNKNOWN: stopped first") {
		t.Fatalf("UNKNOWN container action = %+v", a)
	}
	if class, _ := BudgetClass(a); class != ClassUnknownStop {
		t.Fatalf("budget class = %q, want %q", class, ClassUnknownStop)
	}
	if r.Leaks[LeakUnknownCtr] != 1 {
		t.Fatalf("leaks = %v", r.Leaks)
	}
}

func TestSandboxesFollowKubeletsEvictSandboxes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		oracle     Oracle
		sandboxes  []cri.Sandbox
		containers []cri.Container
		want       []string
		keptWhy    map[string]string
	}{
		{"live pod keeps its newest sandbox even NotReady", present("u1"),
			[]cri.Sandbox{sb("old", "u1", false, 2*time.Hour), sb("new", "u1", false, time.Hour)}, nil,
			[]string{"remove-sandbox old"}, map[string]string{"sandbox new": "newest sandbox of a live pod"}},
		{"live pod: NotReady old attempt goes, Ready new one stays", present("u1"),
			[]cri.Sandbox{sb("old", "u1", false, 2*time.Hour), sb("new", "u1", true, time.Hour)}, nil,
			[]string{"remove-sandbox old"}, nil},
		{"a sandbox referenced by a kept exited container stays", present("u1"),
			[]cri.Sandbox{sb("old", "u1", false, 2*time.Hour), sb("new", "u1", true, time.Hour)},
			[]cri.Container{ctr("c-old", "old", "u1", "app", cri.ContainerExited, 2*time.Hour)},
			nil, map[string]string{"sandbox old": "referenced by container c-old"}},
		{"a sandbox whose containers this plan removes goes after them", present("u1"),
			[]cri.Sandbox{sb("old", "u1", false, 2*time.Hour), sb("new", "u1", true, time.Hour)},
			[]cri.Container{ctr("c-old", "old", "u1", "app", cri.ContainerExited, 2*time.Hour),
				ctr("c-new", "new", "u1", "app", cri.ContainerExited, time.Minute)},
			[]string{"remove-container c-old", "remove-sandbox old"}, nil},
		{"a referencing container of another pod keeps it too", present("u1", "u2"),
			[]cri.Sandbox{sb("old", "u1", false, 2*time.Hour), sb("new", "u1", true, time.Hour)},
			[]cri.Container{{ID: "foreign", SandboxID: "old", Name: "x", State: cri.ContainerExited, CreatedAt: now}},
			nil, map[string]string{"sandbox old": "referenced by container foreign"}},
		{"gone pod loses every inactive sandbox", present(),
			[]cri.Sandbox{sb("a", "u1", false, 2*time.Hour), sb("b", "u1", false, time.Hour)}, nil,
			[]string{"remove-sandbox a", "remove-sandbox b"}, nil},
		{"gone pod: a Ready sandbox is never removed (orphans rule reports it)", present("u9"),
			[]cri.Sandbox{sb("a", "u1", false, 2*time.Hour), sb("b", "u1", true, time.Hour), sb("live", "u9", true, time.Hour)}, nil,
			[]string{"remove-sandbox a"}, map[string]string{"live pod": "reported only"}},
		{"a sandbox without kubelet labels is never touched", present(),
			[]cri.Sandbox{{ID: "foreign", UID: "x", Ready: false, CreatedAt: now.Add(-time.Hour)}}, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Plan(Input{Now: now, Policy: policy(), Oracle: tc.oracle, Sandboxes: tc.sandboxes, Containers: tc.containers})
			same(t, "due", due(r), tc.want)
			for object, why := range tc.keptWhy {
				if got := keptReason(r, object); !strings.Contains(got, why) {
					t.Errorf("%s kept for %q, want %q", object, got, why)
				}
			}
		})
	}
}

func TestPodLogDirGoesWhenThePodIsGoneAndNoSandboxIsLeft(t *testing.T) {
	dir := func(uid string) nodefs.PodLogDir {
		return nodefs.PodLogDir{Path: podLogs + "/ns_pod-" + uid + "_" + uid, Name: "ns_pod-" + uid + "_" + uid, Namespace: "ns", PodName: "pod-" + uid, UID: uid}
	}
	for _, tc := range []struct {
		name      string
		oracle    Oracle
		sandboxes []cri.Sandbox
		dirs      []nodefs.PodLogDir
		want      []string
	}{
		{"gone pod without sandbox", present(), nil, []nodefs.PodLogDir{dir("u1")}, []string{"remove-pod-log-dir " + dir("u1").Path}},
		{"gone pod whose sandbox this plan removes", present(), []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
			[]nodefs.PodLogDir{dir("u1")}, []string{"remove-sandbox s1", "remove-pod-log-dir " + dir("u1").Path}},
		{"gone pod with a live sandbox keeps its logs", present(), []cri.Sandbox{sb("s1", "u1", true, time.Hour)},
			[]nodefs.PodLogDir{dir("u1")}, nil},
		{"live pod keeps its logs", present("u1"), nil, []nodefs.PodLogDir{dir("u1")}, nil},
		{"a dir outside pod_logs_dir is never touched", present(), nil,
			[]nodefs.PodLogDir{{Path: "/etc/ns_p_u1", Name: "ns_p_u1", UID: "u1"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Plan(Input{Now: now, Policy: policy(), Oracle: tc.oracle, Sandboxes: tc.sandboxes, PodLogDirs: tc.dirs})
			same(t, "due", due(r), tc.want)
		})
	}
}

func TestDanglingLogLinkGoesWhenItsContainerIsExitedOrUnknown(t *testing.T) {
	link := func(id string, dangling bool) nodefs.ContainerLogLink {
		return nodefs.ContainerLogLink{Path: ctrLogs + "/pod_ns_app-" + id + ".log", ContainerID: id, PodName: "pod", Namespace: "ns", ContainerName: "app", Dangling: dangling}
	}
	for _, tc := range []struct {
		name string
		link nodefs.ContainerLogLink
		ctrs []cri.Container
		want []string
	}{
		{"not listed", link("aaaaaa1", true), nil, []string{"remove-log-link " + link("aaaaaa1", true).Path}},
		{"exited", link("aaaaaa2", true), []cri.Container{ctr("aaaaaa2", "s1", "u1", "app", cri.ContainerExited, 0)},
			[]string{"remove-log-link " + link("aaaaaa2", true).Path}},
		{"running: rotation may be in progress", link("aaaaaa3", true), []cri.Container{ctr("aaaaaa3", "s1", "u1", "app", cri.ContainerRunning, 0)}, nil},
		{"not dangling", link("aaaaaa4", false), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Plan(Input{Now: now, Policy: policy(), Oracle: present("u1"), Containers: tc.ctrs,
				Sandboxes: []cri.Sandbox{sb("s1", "u1", true, time.Hour)}, ContainerLogLinks: []nodefs.ContainerLogLink{tc.link}})
			same(t, "due", due(r), tc.want)
		})
	}
}

// kubelet's removeContainer removes a container's legacy log link with its
// log files: the link of a live pod's container this plan removes goes in
// the same pass, right after it; the kept instance's link stays.
func TestTheLinkOfAContainerRemovedWithItsLogFilesGoesRightAfterIt(t *testing.T) {
	link := func(id string) nodefs.ContainerLogLink {
		return nodefs.ContainerLogLink{Path: ctrLogs + "/pod_ns_app-" + id + ".log", ContainerID: id, PodName: "pod", Namespace: "ns",
			ContainerName: "app", TargetLogDir: podLogs + "/ns_pod_u1", PodUID: "u1"}
	}
	truncated := link("aaaaaa")
	truncated.Truncated = true
	old := ctr("aaaaaa1", "s1", "u1", "app", cri.ContainerExited, 2*time.Minute)
	newer := ctr("bbbbbb1", "s1", "u1", "app", cri.ContainerExited, time.Minute)
	r := Plan(Input{Now: now, Policy: policy(), Oracle: present("u1"), Containers: []cri.Container{old, newer},
		Sandboxes:         []cri.Sandbox{sb("s1", "u1", true, time.Hour)},
		ContainerLogLinks: []nodefs.ContainerLogLink{link("aaaaaa1"), link("bbbbbb1"), link("cccccc1"), truncated}})
	same(t, "due", due(r), []string{"remove-container aaaaaa1", "remove-log-link " + link("aaaaaa1").Path, "remove-log-link " + truncated.Path})
	for _, a := range r.Actions {
		if a.Kind == RemoveContainerLogLink && !slices.Equal(a.DependsOn, []string{"container/aaaaaa1"}) {
			t.Errorf("%s depends on %v, want the container's removal", describe(a), a.DependsOn)
		}
	}
}

// A link into a pod log dir this plan removes dangles once the dir is gone:
// it goes in the same pass, after the dir, not one leak_grace later.
func TestALinkIntoALogDirThisPlanRemovesGoesRightAfterIt(t *testing.T) {
	logDir := nodefs.PodLogDir{Path: podLogs + "/ns_pod-u2_u2", Name: "ns_pod-u2_u2", Namespace: "ns", PodName: "pod-u2", UID: "u2"}
	link := nodefs.ContainerLogLink{Path: ctrLogs + "/pod-u2_ns_app-c2.log", ContainerID: "c2", PodName: "pod-u2", Namespace: "ns",
		ContainerName: "app", TargetLogDir: logDir.Path, PodUID: "u2"}
	liveDir := nodefs.PodLogDir{Path: podLogs + "/ns_pod-u1_u1", Name: "ns_pod-u1_u1", Namespace: "ns", PodName: "pod-u1", UID: "u1"}
	liveLink := nodefs.ContainerLogLink{Path: ctrLogs + "/pod-u1_ns_app-c1.log", ContainerID: "c1", PodName: "pod-u1", Namespace: "ns",
		ContainerName: "app", TargetLogDir: liveDir.Path, PodUID: "u1"}
	in := Input{Now: now, Policy: policy(), Oracle: present("u1"),
		Sandboxes:  []cri.Sandbox{sb("s1", "u1", true, time.Hour), sb("s2", "u2", false, time.Hour)},
		Containers: []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerExited, time.Hour), ctr("c2", "s2", "u2", "app", cri.ContainerExited, time.Hour)},
		PodLogDirs: []nodefs.PodLogDir{logDir, liveDir}, ContainerLogLinks: []nodefs.ContainerLogLink{link, liveLink}}

	r := Plan(in)
	same(t, "due", due(r), []string{"remove-container c2", "remove-sandbox s2", "remove-pod-log-dir " + logDir.Path, "remove-log-link " + link.Path})
	for _, a := range r.Actions {
		if a.Kind == RemoveContainerLogLink && !slices.Equal(a.DependsOn, []string{"pod-log-dir/" + logDir.Path}) {
			t.Errorf("the link goes after %v, want after its log dir", a.DependsOn)
		}
	}

	// While the log dir waits for leak_grace, so does the link.
	in.Policy.LeakGrace = time.Minute
	r = Plan(in)
	if len(r.Actions) != 0 {
		t.Fatalf("due before leak_grace: %v", due(r))
	}
	if !slices.ContainsFunc(r.Deferred, func(d Deferred) bool { return d.Key == "log-link/"+link.Path }) {
		t.Errorf("the link is not deferred with its log dir: %+v", r.Deferred)
	}
}

func TestOrphanedLivePodsAreReportedOrStopped(t *testing.T) {
	sandboxes := []cri.Sandbox{sb("s1", "u1", true, time.Hour), sb("live", "u9", true, time.Hour)}
	containers := []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerRunning, time.Hour)}
	in := Input{Now: now, Policy: policy(), Oracle: present("u9"), Sandboxes: sandboxes, Containers: containers}

	r := Plan(in)
	same(t, "report: due", due(r), nil)
	if got := keptReason(r, "live pod ns/pod-u1"); !strings.Contains(got, `orphans.action = "report"`) {
		t.Fatalf("orphan not reported: %+v", r.Kept)
	}
	if r.Leaks[LeakOrphanPod] != 1 {
		t.Fatalf("leaks = %v", r.Leaks)
	}

	in.Policy.StopOrphans = true
	r = Plan(in)
	same(t, "stop: due", due(r), []string{"stop-container c1", "stop-sandbox s1"})
	for _, a := range r.Actions {
		if a.Kind == StopSandbox && (len(a.DependsOn) != 1 || a.DependsOn[0] != "stop-container/c1") {
			t.Fatalf("sandbox stop depends on %q, want its container's stop", a.DependsOn)
		}
		if a.Kind == StopContainer && a.Timeout != time.Second {
			t.Fatalf("stop timeout %v, want orphans.stop_timeout", a.Timeout)
		}
	}
}

// TestAnUnknownContainerOfAnOrphanedLivePodIsLeftToOrphansAction: an
// UNKNOWN container may run, and in a pod that still runs it is the pod's:
// with orphans.action = "report" it is reported with the pod, not killed
// by the dead containers' rule; with "stop" it is stopped with the pod,
// under the orphan breaker, and removed once stopped (a later pass). An
// UNKNOWN container of a gone pod that runs nothing else is kubelet's dead
// container as before.
func TestAnUnknownContainerOfAnOrphanedLivePodIsLeftToOrphansAction(t *testing.T) {
	sandboxes := []cri.Sandbox{sb("s1", "u1", true, time.Hour), sb("old", "u1", false, 2*time.Hour),
		sb("s2", "u2", false, time.Hour), sb("live", "u9", true, time.Hour)}
	containers := []cri.Container{
		ctr("run", "s1", "u1", "app", cri.ContainerRunning, time.Hour),
		ctr("unk", "s1", "u1", "side", cri.ContainerUnknown, time.Hour),
		ctr("unk-old", "old", "u1", "side", cri.ContainerUnknown, 2*time.Hour), // not in a Ready sandbox
		ctr("dead", "s1", "u1", "init", cri.ContainerExited, time.Hour),
		ctr("unk2", "s2", "u2", "app", cri.ContainerUnknown, time.Hour), // u2 runs nothing
	}
	in := Input{Now: now, Policy: policy(), Oracle: present("u9"), Sandboxes: sandboxes, Containers: containers}

	r := Plan(in)
	same(t, "report: due", due(r), []string{"remove-container dead", "remove-container unk2", "remove-sandbox s2"})
	for _, id := range []string{"unk", "unk-old"} {
		if why := keptReason(r, "container "+id+" "); !strings.Contains(why, `left with the pod to orphans.action ("report")`) {
			t.Errorf("report: container %s kept for %q, want it left to orphans.action", id, why)
		}
	}

	in.Policy.StopOrphans = true
	r = Plan(in)
	same(t, "stop: due", due(r), []string{"remove-container dead", "remove-container unk2", "remove-sandbox s2",
		"stop-container run", "stop-container unk", "stop-sandbox s1"})
	for _, a := range r.Actions {
		if a.ContainerID == "unk" && (a.Rule != RuleOrphanStop || a.Timeout != in.Policy.StopTimeout) {
			t.Errorf("stop: %s %s by %s with %s, want orphans.stop_timeout under %s", a.Kind, a.ContainerID, a.Rule, a.Timeout, RuleOrphanStop)
		}
	}
	if why := keptReason(r, "container unk-old "); !strings.Contains(why, `left with the pod to orphans.action ("stop")`) {
		t.Errorf("stop: container unk-old kept for %q, want it left to orphans.action until the pod is stopped", why)
	}

	// The orphan breaker trips (more live pods stopped than a pass may):
	// nothing of the orphan is stopped, by any rule.
	in.Policy.Budget = Budget{MaxPerPass: 1, MaxFraction: 0.01, MinPerPass: 0, MaxPerHour: 10} // 0 a pass here
	r = Plan(in)
	if len(r.Trips) == 0 {
		t.Fatalf("no trip: due %v", due(r))
	}
	for _, a := range r.Actions {
		if a.Pod.UID == "u1" && a.ContainerID != "dead" {
			t.Errorf("tripped: %s %s%s still due by %s", a.Kind, a.ContainerID, a.SandboxID, a.Rule)
		}
	}
}

func TestTheBudgetStopsNoLivePodWhenAPassWouldStopTooMany(t *testing.T) {
	var sandboxes []cri.Sandbox
	for i := range 20 {
		sandboxes = append(sandboxes, sb(fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i), true, time.Hour))
	}
	for _, tc := range []struct {
		name        string
		orphans     int // u0..u(n-1) are gone
		maxPerPass  int
		maxFraction float64
		spent       int // orphan stops in the last hour
		trips       bool
	}{
		{"within both limits", 2, 3, 0.5, 0, false},
		{"more than max_per_pass", 4, 3, 1, 0, true},
		{"more than max_fraction of Ready sandboxes", 3, 10, 0.1, 0, true},
		{"exactly at the limits", 3, 3, 0.15, 0, false},
		{"the floor lets one orphan through on a small fraction", 1, 3, 0.01, 0, false},
		{"the floor lets no more than one through", 2, 3, 0.01, 0, true},
		{"what is left of the hour is less than the pass", 2, 3, 1, 9, true},
		{"the hour is spent", 1, 3, 1, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var live []string
			for i := tc.orphans; i < 20; i++ {
				live = append(live, fmt.Sprintf("u%d", i))
			}
			pol := policy()
			pol.StopOrphans = true
			pol.Budget = Budget{MaxPerPass: tc.maxPerPass, MaxFraction: tc.maxFraction, MinPerPass: 1, MaxPerHour: 10}
			earlier := map[string]bool{} // orphans stopped earlier this hour
			for i := range tc.spent {
				earlier[fmt.Sprintf("%s/earlier-%d", ClassOrphanStop, i)] = true
			}
			r := Plan(Input{Now: now, Policy: pol, Oracle: present(live...), Sandboxes: sandboxes, BudgetAdmitted: earlier})
			if r.OracleUntrusted != "" {
				t.Fatalf("oracle untrusted: %s", r.OracleUntrusted)
			}
			if (len(r.Trips) > 0) != tc.trips {
				t.Fatalf("trips = %+v, want trip %v", r.Trips, tc.trips)
			}
			stops := 0
			for _, a := range r.Actions {
				if a.Rule == RuleOrphanStop {
					stops++
				}
			}
			if tc.trips {
				trip := r.Trips[0]
				if stops != 0 || trip.Class != ClassOrphanStop || trip.Due != tc.orphans || len(deferred(r)) != tc.orphans || len(trip.AffectedPods) != tc.orphans {
					t.Fatalf("tripped budget still stops %d; trip %+v", stops, trip)
				}
				for _, d := range r.Deferred {
					if d.Budget != ClassOrphanStop || !strings.Contains(d.Why(), "blast-radius budget") {
						t.Fatalf("deferred %s: %q", d.Key, d.Why())
					}
				}
			}
			if !tc.trips && stops != tc.orphans {
				t.Fatalf("stops = %d, want %d", stops, tc.orphans)
			}
		})
	}
}

func TestLeakGraceCountsFromWhenAnActionWasFirstProposed(t *testing.T) {
	pol := policy()
	pol.LeakGrace = 5 * time.Minute
	in := Input{Now: now, Policy: pol, Oracle: present(),
		Sandboxes:  []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
		Containers: []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerExited, time.Hour)}}
	r := Plan(in)
	same(t, "first pass: due", due(r), nil)
	same(t, "first pass: deferred", deferred(r), []string{"remove-container c1", "remove-sandbox s1"})
	if !strings.Contains(r.Deferred[0].Why(), "5m0s left") {
		t.Fatalf("why = %q", r.Deferred[0].Why())
	}

	in.EligibleSince, in.Now = r.EligibleSince, now.Add(4*time.Minute)
	r = Plan(in)
	same(t, "before the grace: due", due(r), nil)

	in.EligibleSince, in.Now = r.EligibleSince, now.Add(5*time.Minute)
	r = Plan(in)
	same(t, "after the grace: due", due(r), []string{"remove-container c1", "remove-sandbox s1"})

	// A life event of the pod restarts the clock.
	in.LastLifeEvent = map[string]time.Time{"u1": now.Add(3 * time.Minute)}
	r = Plan(in)
	same(t, "after a life event: due", due(r), nil)

	// The condition stops holding (the pod dir is back): the clock is dropped.
	in.Oracle = present("u1")
	in.EligibleSince = r.EligibleSince
	r = Plan(in)
	if _, ok := r.EligibleSince["container/c1"]; ok {
		t.Fatal("a candidate that is no longer proposed kept its clock")
	}
}

func TestDependentActionsWaitForWhatTheyDependOn(t *testing.T) {
	pol := policy()
	pol.LeakGrace = time.Minute
	in := Input{Now: now, Policy: pol, Oracle: present(),
		Sandboxes:     []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
		Containers:    []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerExited, time.Hour)},
		EligibleSince: map[string]time.Time{"sandbox/s1": now.Add(-time.Hour)}}
	r := Plan(in)
	for _, d := range r.Deferred {
		if d.Kind == RemoveSandbox && d.Why() != "waits for container/c1" {
			t.Fatalf("sandbox deferred for %q, want it to wait for its container", d.Why())
		}
	}
	same(t, "due", due(r), nil)
}

func TestNoPlanWhileTheOracleIsNotReady(t *testing.T) {
	r := Plan(Input{Now: now, Policy: policy(),
		Oracle:    Oracle{PodDirs: nodefs.PodDirs{Err: errors.New("/var/lib/kubelet/pods does not exist")}},
		Sandboxes: []cri.Sandbox{sb("s1", "u1", false, time.Hour), sb("s0", "u1", false, 2*time.Hour)}})
	if len(r.Actions)+len(r.Deferred) != 0 || !strings.Contains(r.NotReady, "/var/lib/kubelet/pods") {
		t.Fatalf("plan with an unready oracle: %+v", r)
	}
}

func TestDisabledOracleNeverSaysGone(t *testing.T) {
	r := Plan(Input{Now: now, Policy: policy(), Oracle: Oracle{Disabled: true},
		Sandboxes:  []cri.Sandbox{sb("old", "u1", false, 2*time.Hour), sb("new", "u1", false, time.Hour)},
		PodLogDirs: []nodefs.PodLogDir{{Path: podLogs + "/ns_p_u1", UID: "u1"}}})
	same(t, "due", due(r), []string{"remove-sandbox old"})
}

func TestPlanIsDeterministic(t *testing.T) {
	in := randomInput(42, 200)
	a, b := Plan(in), Plan(in)
	if strings.Join(due(a), ",") != strings.Join(due(b), ",") || fmt.Sprint(a.Kept) != fmt.Sprint(b.Kept) {
		t.Fatal("the same input gave two plans")
	}
}

// TestUnreadableEntriesHoldWhatTheyBelongTo: containerd lists a container
// whose status it could not load as UNKNOWN with no creation time. The
// planner never acts on such an entry, and it still holds its sandbox (or
// every sandbox of its pod, when it names none), its pod's log dir, cgroup
// and dir, and its log link.
func TestUnreadableEntriesHoldWhatTheyBelongTo(t *testing.T) {
	unloaded := func(id, sandbox, uid string) cri.Malformed {
		return cri.Malformed{Kind: "container", ID: id, Reason: "no creation time", SandboxID: sandbox, PodUID: uid}
	}
	logDir := nodefs.PodLogDir{Path: podLogs + "/ns_pod-u1_u1", Name: "ns_pod-u1_u1", Namespace: "ns", PodName: "pod-u1", UID: "u1"}
	link := nodefs.ContainerLogLink{Path: ctrLogs + "/pod-u1_ns_app-cx.log", ContainerID: "cx", PodName: "pod-u1", Namespace: "ns", ContainerName: "app", Dangling: true}
	for _, tc := range []struct {
		name       string
		oracle     Oracle
		sandboxes  []cri.Sandbox
		unreadable []cri.Malformed
		want       []string
		keptWhy    map[string]string
	}{
		{"an old sandbox of a live pod referenced by an unreadable container stays", present("u1"),
			[]cri.Sandbox{sb("old", "u1", false, 2*time.Hour), sb("new", "u1", true, time.Hour)},
			[]cri.Malformed{unloaded("cx", "old", "u1")}, nil,
			map[string]string{"sandbox old": "referenced by container cx that the runtime listed but that could not be read (no creation time)"}},
		{"a gone pod's sandbox, log dir and link stay while an unreadable container holds them", present(),
			[]cri.Sandbox{sb("s1", "u1", false, time.Hour)},
			[]cri.Malformed{unloaded("cx", "s1", "u1")}, nil,
			map[string]string{"sandbox s1": "referenced by container cx", "pod log dir " + logDir.Path: "the pod has container cx",
				"log link " + link.Path: "its container is container cx"}},
		{"an unreadable container naming no sandbox holds every sandbox of its pod", present(),
			[]cri.Sandbox{sb("a", "u1", false, 2*time.Hour), sb("b", "u1", false, time.Hour)},
			[]cri.Malformed{unloaded("cx", "", "u1")}, nil,
			map[string]string{"sandbox a": "which names no sandbox", "sandbox b": "which names no sandbox"}},
		{"an unreadable entry of another pod holds nothing here", present(),
			[]cri.Sandbox{sb("s1", "u1", false, time.Hour)},
			[]cri.Malformed{unloaded("cy", "elsewhere", "u2")},
			[]string{"remove-sandbox s1", "remove-pod-log-dir " + logDir.Path, "remove-log-link " + link.Path}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Plan(Input{Now: now, Policy: policy(), Oracle: tc.oracle, Sandboxes: tc.sandboxes, Unreadable: tc.unreadable,
				PodLogDirs: []nodefs.PodLogDir{logDir}, ContainerLogLinks: []nodefs.ContainerLogLink{link}})
			same(t, "due", due(r), tc.want)
			for object, why := range tc.keptWhy {
				if got := keptReason(r, object); !strings.Contains(got, why) {
					t.Errorf("%s kept for %q, want %q", object, got, why)
				}
			}
		})
	}
}

func TestATruncatedLinkToUnreadableContainersStays(t *testing.T) {
	link := nodefs.ContainerLogLink{Path: ctrLogs + "/pod_ns_app-abc.log", ContainerID: "abc", Truncated: true, Dangling: true}
	for _, tc := range []struct {
		name string
		ids  []string
	}{
		{"one matches the prefix", []string{"abc123"}},
		{"several match the prefix", []string{"abc123", "abc456"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var unreadable []cri.Malformed
			for _, id := range tc.ids {
				unreadable = append(unreadable, cri.Malformed{Kind: "container", ID: id, Reason: "no creation time"})
			}
			r := Plan(Input{Now: now, Policy: policy(), Oracle: present(), Unreadable: unreadable, ContainerLogLinks: []nodefs.ContainerLogLink{link}})
			same(t, "due", due(r), nil)
			if got := keptReason(r, "log link "+link.Path); !strings.Contains(got, "could not be read") {
				t.Fatalf("link kept for %q", got)
			}
		})
	}
}

// TestAPodLogDirStaysWhileASandboxLabelledWithItsUIDIsListed: a pod log
// dir stays while any sandbox of the pod is listed, in any state. A sandbox
// belongs to the pod its pod UID label names as much as to the one its CRI
// metadata names (housekeeping counts both when it decides which pods are
// listed): kubelet sets both alike, so a sandbox where they differ, or
// whose metadata names no UID, is not one to guess about.
func TestAPodLogDirStaysWhileASandboxLabelledWithItsUIDIsListed(t *testing.T) {
	dir := nodefs.PodLogDir{Path: podLogs + "/ns_pod-u2_u2", Name: "ns_pod-u2_u2", Namespace: "ns", PodName: "pod-u2", UID: "u2"}
	otherMetadata := sb("s1", "u1", true, time.Hour)
	otherMetadata.Labels = labels("u2")
	noMetadataUID := sb("s1", "", true, time.Hour)
	noMetadataUID.Labels = map[string]string{podstate.LabelPodUID: "u2"}
	for _, tc := range []struct {
		name string
		s    cri.Sandbox
	}{
		{"its metadata names another pod", otherMetadata},
		{"its metadata names no pod", noMetadataUID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Plan(Input{Now: now, Policy: policy(), Oracle: present("u1"), Sandboxes: []cri.Sandbox{tc.s}, PodLogDirs: []nodefs.PodLogDir{dir}})
			same(t, "due", due(r), nil)
			if got := keptReason(r, "pod log dir "+dir.Path); !strings.Contains(got, "sandbox s1") {
				t.Fatalf("log dir kept for %q, want the sandbox labelled with its UID named", got)
			}
		})
	}
}

// TestNoStepDependsOnOneThisPlanDoesNotPropose: a pod with a life event
// after the listing has none of its actions planned. A step of another
// pod that rests on one of them (a sandbox whose referencing container
// goes first) is not due either: it is kept, as with any container the
// plan leaves, rather than planned after a step that is not in the plan.
func TestNoStepDependsOnOneThisPlanDoesNotPropose(t *testing.T) {
	r := Plan(Input{Now: now, Policy: policy(), Oracle: present(),
		Sandboxes:     []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
		Containers:    []cri.Container{ctr("c2", "s1", "u2", "app", cri.ContainerExited, time.Hour)},
		LastLifeEvent: map[string]time.Time{"u2": now.Add(time.Second)}})
	same(t, "due", due(r), nil)
	proposed := map[string]bool{}
	for _, a := range r.Actions {
		proposed[a.Key] = true
	}
	for _, d := range r.Deferred {
		proposed[d.Key] = true
	}
	for _, a := range append(r.Actions, deferredActions(r)...) {
		for _, dep := range a.DependsOn {
			if !proposed[dep] {
				t.Errorf("%s depends on %s, which the plan does not propose", a.Key, dep)
			}
		}
	}
	if got := keptReason(r, "sandbox s1"); !strings.Contains(got, "referenced by container c2") {
		t.Fatalf("sandbox kept for %q, want its container named", got)
	}
}

// TestAnUnknownContainerIsStoppedWithItsPodsGraceOrLeftToKubelet: kubelet's
// container GC stops an UNKNOWN container with killContainer and no pod
// object: the grace period it restores from the container's annotations
// (the pod's deletion grace period, else its termination grace period; at
// least 2 s). The plugin gives the same grace (not the preStop hook, which
// kubelet ran when it stopped the container), and leaves to kubelet what
// it cannot stop as kubelet would: an annotation it cannot read, a grace
// longer than one step of it may wait.
func TestAnUnknownContainerIsStoppedWithItsPodsGraceOrLeftToKubelet(t *testing.T) {
	for _, tc := range []struct {
		rule  string
		kill  cri.KillSpec
		grace time.Duration // 0: kept
		kept  string
	}{
		{"no grace annotation: kubelet's minimum", cri.KillSpec{}, 2 * time.Second, ""},
		{"the pod's termination grace period", cri.KillSpec{Grace: 30 * time.Second}, 30 * time.Second, ""},
		{"a grace under kubelet's minimum is raised to it", cri.KillSpec{Grace: time.Second}, 2 * time.Second, ""},
		{"a grace of 0 is raised to kubelet's minimum", cri.KillSpec{Grace: 0}, 2 * time.Second, ""},
		{"a grace at the plugin's longest stop", cri.KillSpec{Grace: UnknownStopMaxGrace}, UnknownStopMaxGrace, ""},
		{"a grace longer than a stop of the plugin waits is left to kubelet", cri.KillSpec{Grace: time.Hour}, 0, "longer than the 2m0s a stop of the plugin waits"},
		{"a preStop hook is not run again, its grace is given", cri.KillSpec{Grace: 30 * time.Second, PreStop: true}, 30 * time.Second, ""},
		{"an unreadable grace annotation is left to kubelet", cri.KillSpec{Unreadable: "annotation io.kubernetes.pod.terminationGracePeriod = \"x\" is not a number"}, 0, "is not a number"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			c := ctr("c1", "s1", "u1", "app", cri.ContainerUnknown, time.Hour)
			c.Kill = tc.kill
			in := Input{Now: now, Policy: policy(), Oracle: present(),
				Sandboxes:  []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
				Containers: []cri.Container{c}}
			r := Plan(in)
			if r.Leaks[LeakUnknownCtr] != 1 {
				t.Errorf("leaks = %v, want the UNKNOWN container counted", r.Leaks)
			}
			if tc.grace == 0 {
				if len(r.Actions) != 0 {
					t.Fatalf("actions %v, want none: the container is kept, and its sandbox with it", due(r))
				}
				if len(r.Kept) == 0 || !strings.HasPrefix(r.Kept[0].Object, "container c1 ") || !strings.Contains(r.Kept[0].Reason, tc.kept) || !strings.Contains(r.Kept[0].Reason, "left to kubelet") {
					t.Fatalf("kept %+v, want the container kept saying %q", r.Kept, tc.kept)
				}
				return
			}
			same(t, "due", due(r), []string{"remove-container c1", "remove-sandbox s1"})
			if a := r.Actions[0]; !a.StopFirst || a.Timeout != tc.grace {
				t.Fatalf("stop first %v with %s, want %s", a.StopFirst, a.Timeout, tc.grace)
			}
			if a := r.Actions[0]; tc.kill.PreStop != strings.Contains(a.Reason, "preStop hook is not run again") {
				t.Fatalf("reason %q: want it to say the preStop hook is not run again: %v", a.Reason, tc.kill.PreStop)
			}
		})
	}
}
