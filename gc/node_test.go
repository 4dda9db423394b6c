package gc

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
)

func cgroups(uids ...string) *podcgroups.Listing {
	l := &podcgroups.Listing{Ready: true, Pods: map[string]podcgroups.PodCgroup{}}
	for _, u := range uids {
		l.Pods[u] = podcgroups.PodCgroup{UID: u, QOS: podcgroups.QOSBestEffort, Paths: []string{"/sys/fs/cgroup/memory/kubepods/besteffort/pod" + u}, Procs: 1, Inspected: true}
	}
	return l
}

// unreadable marks the pod cgroups of uids in l as Discover does when
// their tree cannot be read.
func unreadable(l *podcgroups.Listing, uids ...string) *podcgroups.Listing {
	for _, u := range uids {
		cg := l.Pods[u]
		cg.Inspected, cg.Paths, cg.Procs = false, nil, 0
		cg.Unreadable = "cgroup /sys/fs/cgroup/unified/kubepods/besteffort/pod" + u + "/x: read cgroup.procs: operation not supported"
		l.Pods[u] = cg
	}
	return l
}

func podDir(uid string, volumes bool, blockers ...string) nodefs.PodDir {
	d := nodefs.PodDir{UID: uid, Path: "/var/lib/kubelet/pods/" + uid, Blockers: blockers}
	if volumes {
		d.VolumeDirs = []string{d.Path + "/volumes/kubernetes.io~empty-dir/cache"}
	}
	return d
}

// The cgroup of a pod with listed objects is touched only when the pod is
// gone and this plan removes every one of them: then it goes in the same
// pass, after them (one leak_grace for the whole pod).
func TestThePodCgroupOfAListedPodGoesOnlyAfterAllItsObjects(t *testing.T) {
	notInspected := cgroups("u1")
	cg := notInspected.Pods["u1"]
	cg.Inspected = false
	notInspected.Pods["u1"] = cg
	stop := policy()
	stop.StopOrphans = true
	young := policy()
	young.MinAge = 2 * time.Hour
	for _, tc := range []struct {
		name       string
		oracle     Oracle
		policy     Policy
		cgroups    *podcgroups.Listing
		sandboxes  []cri.Sandbox
		containers []cri.Container
		unreadable []cri.Malformed
		deps       []string // nil: no cgroup action at all
	}{
		{"a live pod's NotReady sandbox: never", present("u1"), policy(), cgroups("u1"),
			[]cri.Sandbox{sb("s1", "u1", false, time.Hour)}, nil, nil, nil},
		{"a gone pod's NotReady sandbox removed: after it", present(), policy(), cgroups("u1"),
			[]cri.Sandbox{sb("s1", "u1", false, time.Hour)}, nil, nil, []string{"sandbox/s1"}},
		{"a gone pod's sandbox and exited container removed: after both", present(), policy(), cgroups("u1"),
			[]cri.Sandbox{sb("s1", "u1", false, time.Hour)}, []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerExited, time.Hour)}, nil,
			[]string{"sandbox/s1", "container/c1"}},
		{"only a gone pod's exited container, removed: after it", present(), policy(), cgroups("u1"),
			nil, []cri.Container{ctr("c1", "gone-sandbox", "u1", "app", cri.ContainerExited, time.Hour)}, nil, []string{"container/c1"}},
		{"an exited container kept by containers.min_age: never", present(), young, cgroups("u1"),
			nil, []cri.Container{ctr("c1", "gone-sandbox", "u1", "app", cri.ContainerExited, time.Hour)}, nil, nil},
		{"a running container of a gone pod: never", present(), policy(), cgroups("u1"),
			[]cri.Sandbox{sb("s1", "u1", false, time.Hour)}, []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerRunning, time.Hour)}, nil, nil},
		{"a Ready sandbox of a gone pod, stopped by orphans.action: never", present(), stop, cgroups("u1"),
			[]cri.Sandbox{sb("s1", "u1", true, time.Hour)}, nil, nil, nil},
		{"an unmanaged sandbox claims the UID: never", present(), policy(), cgroups("u1"),
			[]cri.Sandbox{{ID: "x", UID: "u1", CreatedAt: now}}, nil, nil, nil},
		{"an unreadable container of the pod: never", present(), policy(), cgroups("u1"),
			[]cri.Sandbox{sb("s1", "u1", false, time.Hour)}, nil,
			[]cri.Malformed{{Kind: "container", ID: "c1", Reason: "no creation time", SandboxID: "s2", PodUID: "u1"}}, nil},
		{"a cgroup not looked into: never", present(), policy(), notInspected,
			[]cri.Sandbox{sb("s1", "u1", false, time.Hour)}, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Plan(Input{Now: now, Policy: tc.policy, Oracle: tc.oracle, Sandboxes: tc.sandboxes, Containers: tc.containers,
				Unreadable: tc.unreadable, PodCgroups: tc.cgroups, EligibleSince: map[string]time.Time{"pod-cgroup/u1": now.Add(-time.Hour)}})
			var got *Action
			for _, a := range append(r.Actions, deferredActions(r)...) {
				if a.Kind == RemovePodCgroup || a.Kind == ReducePodCgroupCPU {
					got = &a
				}
			}
			switch {
			case tc.deps == nil && got != nil:
				t.Fatalf("planned %s %s (depends on %v); want nothing", got.Kind, got.Key, got.DependsOn)
			case tc.deps != nil && got == nil:
				t.Fatalf("no cgroup action; want one after %v (kept: %+v)", tc.deps, r.Kept)
			case tc.deps != nil:
				if got.Kind != RemovePodCgroup || got.Rule != RuleCgroupPodGone || !slices.Equal(got.DependsOn, tc.deps) {
					t.Fatalf("planned %s (%s) after %v; want remove-pod-cgroup (cgroups.pod-gone) after %v", got.Kind, got.Rule, got.DependsOn, tc.deps)
				}
				if !slices.ContainsFunc(r.Actions, func(a Action) bool { return a.Key == got.Key }) {
					t.Fatalf("the cgroup is not due with its pod's objects: %+v", r.Deferred)
				}
				if got.Pod.Name != "pod-u1" {
					t.Errorf("the action names pod %+v, want the sandbox's or container's pod", got.Pod)
				}
			}
		})
	}
}

func deferredActions(r Result) []Action {
	var out []Action
	for _, d := range r.Deferred {
		out = append(out, d.Action)
	}
	return out
}

func TestPodCgroupRules(t *testing.T) {
	pol := policy()
	pol.LeakGrace = time.Minute
	long := now.Add(-time.Hour) // clocks that ran out long ago
	reduced := cgroups("u-reduced")
	cg := reduced.Pods["u-reduced"]
	cg.CPUReduced = true
	reduced.Pods["u-reduced"] = cg
	tornDown := map[string]bool{"u2": true, "u3": true, "u4": true, "u-reduced": true}
	for _, tc := range []struct {
		name    string
		oracle  Oracle
		cgroups *podcgroups.Listing
		dirs    []nodefs.PodDir
		clocks  map[string]time.Time
		want    []string // due
		kept    string
	}{
		{"gone pod without sandbox: destroyed after grace", present(), cgroups("u1"), nil,
			map[string]time.Time{"pod-cgroup/u1": long}, []string{"remove-pod-cgroup u1"}, ""},
		{"gone pod: waits for grace first", present(), cgroups("u1"), nil, nil, nil, ""},
		{"pod dir present, not yet orphaned: untouched", present("u2"), cgroups("u2"), []nodefs.PodDir{podDir("u2", true)},
			nil, nil, "orphaned pod dir if that lasts"},
		{"orphaned pod dir with volumes: CPU reduced, not destroyed", present("u3"), cgroups("u3"), []nodefs.PodDir{podDir("u3", true)},
			map[string]time.Time{"pod-dir/u3": long, "pod-cgroup-cpu/u3": long}, []string{"reduce-pod-cgroup-cpu u3"}, ""},
		{"orphaned pod dir with volumes and CPU already reduced: kept", present("u-reduced"), reduced, []nodefs.PodDir{podDir("u-reduced", true)},
			map[string]time.Time{"pod-dir/u-reduced": long}, nil, "CPU already at the minimum"},
		{"orphaned pod dir without volumes: destroyed", present("u4"), cgroups("u4"), []nodefs.PodDir{podDir("u4", false)},
			map[string]time.Time{"pod-dir/u4": long, "pod-cgroup/u4": long}, []string{"remove-pod-cgroup u4"}, ""},
		// The cgroup's condition has held as long as the dir's: the pod's
		// cgroup is due in the pass its dir is found orphaned, not a
		// leak_grace later.
		{"a dir found orphaned this pass: its cgroup is due with it", present("u4"), cgroups("u4"), []nodefs.PodDir{podDir("u4", false)},
			map[string]time.Time{"pod-dir/u4": long}, []string{"remove-pod-cgroup u4"}, ""},
		{"a dir found orphaned this pass, volumes left: CPU reduced with it", present("u3"), cgroups("u3"), []nodefs.PodDir{podDir("u3", true)},
			map[string]time.Time{"pod-dir/u3": long}, []string{"reduce-pod-cgroup-cpu u3"}, ""},
		{"a dir not orphaned yet: its cgroup's clock does not start early", present("u4"), cgroups("u4"), []nodefs.PodDir{podDir("u4", false)},
			map[string]time.Time{"pod-dir/u4": now.Add(-30 * time.Second)}, nil, "orphaned pod dir if that lasts"},
		// A pod waiting for a volume attach has a pod dir and a pod cgroup
		// but no sandbox yet: only seeing the pod torn down tells it apart.
		{"pod dir with volumes never seen torn down: CPU left alone", present("u6"), cgroups("u6"), []nodefs.PodDir{podDir("u6", true)},
			map[string]time.Time{"pod-dir/u6": long, "pod-cgroup-cpu/u6": long}, nil, "did not see the pod torn down"},
		{"pod dir without volumes never seen torn down: not destroyed", present("u7"), cgroups("u7"), []nodefs.PodDir{podDir("u7", false)},
			map[string]time.Time{"pod-dir/u7": long, "pod-cgroup/u7": long}, nil, "did not see the pod torn down"},
		{"cgroup listing not ready: nothing, and said", present(), &podcgroups.Listing{Err: errors.New("cannot read /sys/fs/cgroup")}, nil,
			nil, nil, "cannot read /sys/fs/cgroup"},
		// One pod whose tree cannot be read (a threaded cgroup v2 subtree)
		// is left alone, and said; the others are planned as usual.
		{"a pod cgroup whose tree cannot be read: left alone, the others planned", present(), unreadable(cgroups("u1", "u2"), "u2"), nil,
			map[string]time.Time{"pod-cgroup/u1": long, "pod-cgroup/u2": long}, []string{"remove-pod-cgroup u1"}, "its cgroup tree cannot be read"},
		{"oracle disabled: a pod is never gone", Oracle{Disabled: true}, cgroups("u5"), nil,
			map[string]time.Time{"pod-cgroup/u5": long}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Plan(Input{Now: now, Policy: pol, Oracle: tc.oracle, PodCgroups: tc.cgroups, PodDirs: tc.dirs, EligibleSince: tc.clocks,
				TornDown: tornDown})
			var got []string
			for _, a := range r.Actions {
				got = append(got, string(a.Kind)+" "+a.Pod.UID)
				if a.Cgroup == nil || a.Cgroup.UID != a.Pod.UID {
					t.Errorf("%s carries cgroup %+v", a.Key, a.Cgroup)
				}
			}
			same(t, "due", got, tc.want)
			if tc.kept != "" && !keptContains(r, tc.kept) {
				t.Errorf("nothing kept for %q: %+v", tc.kept, r.Kept)
			}
		})
	}
}

// kubelet's housekeeping removes orphaned pod dirs, then destroys the
// cgroups of pods whose volumes no longer exist: an orphaned pod's cgroup
// is destroyed right after its dir (volume dirs empty, nothing mounted)
// when the plan removes the dir, and only loses CPU while the dir stays.
func TestAnOrphanedPodsCgroupGoesRightAfterItsDir(t *testing.T) {
	long := now.Add(-time.Hour)
	for _, tc := range []struct {
		name   string
		remove bool
		dir    nodefs.PodDir
		unseen string   // Input.PodDirMountsUnseen
		want   []string // due, in plan order
	}{
		{"the dir is removed: the cgroup goes right after it", true, podDir("u3", true), "",
			[]string{"remove-pod-dir u3", "remove-pod-cgroup u3 after [pod-dir/u3]"}},
		{"pod_dirs.remove_orphaned = false: CPU reduced only", false, podDir("u3", true), "",
			[]string{"reduce-pod-cgroup-cpu u3 after []"}},
		{"a blocker keeps the dir: CPU reduced only", true, podDir("u3", false, "volumes/x/y is a mount point"), "",
			[]string{"reduce-pod-cgroup-cpu u3 after []"}},
		// Mounts out of this process's sight: "cannot tell" is "volumes
		// may be mounted", whether or not the dir could be removed.
		{"mounts out of sight keep the dir: CPU reduced only", true, podDir("u3", true), "mounts unseen",
			[]string{"reduce-pod-cgroup-cpu u3 after []"}},
		{"mounts out of sight, reported only: CPU reduced only", false, podDir("u3", true), "mounts unseen",
			[]string{"reduce-pod-cgroup-cpu u3 after []"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy()
			pol.LeakGrace = time.Minute
			pol.RemoveOrphanedPodDirs = tc.remove
			r := Plan(Input{Now: now, Policy: pol, Oracle: present("u3"), PodCgroups: cgroups("u3"), PodDirs: []nodefs.PodDir{tc.dir},
				PodDirMountsUnseen: tc.unseen, EligibleSince: map[string]time.Time{"pod-dir/u3": long}, TornDown: map[string]bool{"u3": true}})
			var got []string
			for _, a := range r.Actions {
				s := string(a.Kind) + " " + a.Pod.UID
				if a.Kind != RemovePodDir {
					s += fmt.Sprintf(" after %v", a.DependsOn)
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("due %q, want %q (deferred %+v)", got, tc.want, r.Deferred)
			}
		})
	}
}

func keptContains(r Result, s string) bool {
	for _, k := range r.Kept {
		if strings.Contains(k.Reason, s) {
			return true
		}
	}
	return false
}

func TestOrphanedPodDirsAreReportedOrRemoved(t *testing.T) {
	long := now.Add(-time.Hour)
	for _, tc := range []struct {
		name     string
		remove   bool
		tornDown bool
		dir      nodefs.PodDir
		unseen   string // Input.PodDirMountsUnseen
		want     []string
		kept     string
		leaks    int
	}{
		{"reported by default", false, true, podDir("u1", false), "", nil, "reported only (pod_dirs.remove_orphaned = false)", 1},
		{"removed when enabled and nothing blocks", true, true, podDir("u1", false), "", []string{"remove-pod-dir /var/lib/kubelet/pods/u1"}, "", 1},
		{"a mounted volume blocks removal and is named", true, true, podDir("u1", true, "volume kubernetes.io~csi/pvc-1/mount is a mount point"), "", nil,
			"kubelet could not remove: volume kubernetes.io~csi/pvc-1/mount is a mount point", 1},
		{"a leftover vol_data.json blocks removal", true, true, podDir("u1", true, "leftover file volumes/kubernetes.io~csi/pvc-1/vol_data.json"), "", nil,
			"leftover file", 1},
		{"a pod never seen torn down may not have started yet: left alone", true, false, podDir("u1", false), "", nil,
			"may be a pod kubelet has not started yet", 0},
		{"kept while kubelet's mounts are out of this process's sight, saying why", true, true, podDir("u1", false), "this process may not see the mounts", nil,
			"with nothing mounted that this process sees, kept: this process may not see the mounts", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy()
			pol.LeakGrace, pol.RemoveOrphanedPodDirs = time.Minute, tc.remove
			r := Plan(Input{Now: now, Policy: pol, Oracle: present("u1"), PodDirs: []nodefs.PodDir{tc.dir}, PodDirMountsUnseen: tc.unseen,
				EligibleSince: map[string]time.Time{"pod-dir/u1": long}, TornDown: map[string]bool{"u1": tc.tornDown}})
			var got []string
			for _, a := range r.Actions {
				got = append(got, string(a.Kind)+" "+a.Path)
				// The removal takes only what this inspection found.
				if a.Kind == RemovePodDir && (a.PodDir == nil || !reflect.DeepEqual(*a.PodDir, tc.dir)) {
					t.Errorf("%s carries pod dir %+v, want the one planned on, %+v", a.Key, a.PodDir, tc.dir)
				}
			}
			same(t, "due", got, tc.want)
			if tc.kept != "" && !keptContains(r, tc.kept) {
				t.Errorf("nothing kept for %q: %+v", tc.kept, r.Kept)
			}
			if r.Leaks[LeakPodDir] != tc.leaks {
				t.Errorf("leaks = %v, want %d pod-dir", r.Leaks, tc.leaks)
			}
		})
	}
}

func TestAPodDirWithAListedSandboxIsNeverOrphaned(t *testing.T) {
	pol := policy()
	pol.RemoveOrphanedPodDirs = true
	r := Plan(Input{Now: now, Policy: pol, Oracle: present("u1"), Sandboxes: []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
		PodDirs: []nodefs.PodDir{podDir("u1", false)}, EligibleSince: map[string]time.Time{"pod-dir/u1": now.Add(-time.Hour)},
		TornDown: map[string]bool{"u1": true}})
	if len(r.Actions) != 0 || r.Leaks[LeakPodDir] != 0 {
		t.Fatalf("actions %v, leaks %v for the pod dir of a pod with a sandbox", due(r), r.Leaks)
	}
}

// An SRE finds a pod by namespace/name: actions on objects named by UID
// alone (a pod cgroup, a pod dir) carry the pod's name when the plugin knew
// the pod, or its log dir names it. The name never decides anything.
func TestNodeActionsNameTheirPod(t *testing.T) {
	long := now.Add(-time.Hour)
	logDir := nodefs.PodLogDir{Path: "/var/log/pods/ns_web_u1", Name: "ns_web_u1", Namespace: "ns", PodName: "web", UID: "u1"}
	for _, tc := range []struct {
		name    string
		names   map[string]PodRef
		logDirs []nodefs.PodLogDir
		want    PodRef
	}{
		{"from what the plugin knew of the pod", map[string]PodRef{"u1": {Namespace: "ns", Name: "web"}}, nil,
			PodRef{UID: "u1", Namespace: "ns", Name: "web"}},
		{"from the pod's log dir", nil, []nodefs.PodLogDir{logDir}, PodRef{UID: "u1", Namespace: "ns", Name: "web"}},
		{"what the plugin knew wins over a log dir", map[string]PodRef{"u1": {Namespace: "ns", Name: "api"}},
			[]nodefs.PodLogDir{logDir}, PodRef{UID: "u1", Namespace: "ns", Name: "api"}},
		{"a legacy <uid> log dir names nothing", nil, []nodefs.PodLogDir{{Path: "/var/log/pods/u1", Name: "u1", UID: "u1"}},
			PodRef{UID: "u1"}},
		{"unknown: the UID alone", map[string]PodRef{"u2": {Namespace: "ns", Name: "other"}}, nil, PodRef{UID: "u1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy()
			pol.LeakGrace, pol.RemoveOrphanedPodDirs = time.Minute, true
			r := Plan(Input{Now: now, Policy: pol, Oracle: present("u1"), PodDirs: []nodefs.PodDir{podDir("u1", false)},
				PodCgroups: cgroups("u1"), PodLogDirs: tc.logDirs, PodNames: tc.names, TornDown: map[string]bool{"u1": true},
				EligibleSince: map[string]time.Time{"pod-dir/u1": long, "pod-cgroup/u1": long}})
			kinds := map[Kind]bool{}
			for _, a := range r.Actions {
				if a.Kind != RemovePodDir && a.Kind != RemovePodCgroup {
					continue
				}
				kinds[a.Kind] = true
				if a.Pod != tc.want {
					t.Errorf("%s names %+v, want %+v", a.Kind, a.Pod, tc.want)
				}
			}
			if !kinds[RemovePodDir] || !kinds[RemovePodCgroup] {
				t.Fatalf("planned %v, want a pod dir and a pod cgroup removal", r.Actions)
			}
		})
	}
}

func TestALogLinkNamesThePodUIDOfItsTarget(t *testing.T) {
	pol := policy()
	link := nodefs.ContainerLogLink{Path: pol.ContainerLogsDir + "/web_ns_app-c1.log", Name: "web_ns_app-c1.log", ContainerID: "c1",
		PodName: "web", Namespace: "ns", ContainerName: "app", PodUID: "u1", Dangling: true}
	r := Plan(Input{Now: now, Policy: pol, Oracle: present(), ContainerLogLinks: []nodefs.ContainerLogLink{link}})
	if len(r.Actions) != 1 || r.Actions[0].Pod != (PodRef{UID: "u1", Namespace: "ns", Name: "web"}) {
		t.Fatalf("actions = %+v, want one link removal naming ns/web u1", r.Actions)
	}
}
