package gc

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// The safety review of issue 10: each test below is one numbered case, and
// failed on the planner before its fix.

func logDir(uid string) nodefs.PodLogDir {
	name := "ns_pod-" + uid + "_" + uid
	return nodefs.PodLogDir{Path: podLogs + "/" + name, Name: name, Namespace: "ns", PodName: "pod-" + uid, UID: uid}
}

// Case 2: a stale kubelet_root (an empty pods dir while pods run) makes
// every pod look gone. kubelet never calls a pod gone while the runtime runs
// it, so the oracle is not trusted and no pod-gone rule runs: not the dead
// init container of a running pod, not the completed pod's sandbox,
// container or logs.
func TestAnOracleThatCallsRunningPodsGoneIsNotTrusted(t *testing.T) {
	in := Input{Now: now, Policy: policy(), Oracle: present(),
		Sandboxes: []cri.Sandbox{sb("s1", "u1", true, time.Hour), sb("s2", "u2", true, time.Hour), sb("done", "u3", false, time.Hour)},
		Containers: []cri.Container{
			ctr("c1", "s1", "u1", "app", cri.ContainerRunning, time.Hour),
			ctr("init", "s1", "u1", "init", cri.ContainerExited, time.Hour),
			ctr("c2", "s2", "u2", "app", cri.ContainerRunning, time.Hour),
			ctr("c3", "done", "u3", "job", cri.ContainerExited, time.Hour),
		},
		PodLogDirs: []nodefs.PodLogDir{logDir("u1"), logDir("u3")},
	}
	r := Plan(in)
	same(t, "due with every running pod called gone", due(r), nil)
	same(t, "deferred", deferred(r), nil)
}

// Case 3: a RunPodSandbox (or StartContainer) that arrives after the
// listing was taken is newer than the plan's picture of the pod: the pod is
// skipped this pass, whatever its clocks say.
func TestAPodWithALifeEventAfterTheSnapshotIsSkipped(t *testing.T) {
	pol := policy()
	pol.LeakGrace = 5 * time.Minute
	in := Input{Now: now, Policy: pol, Oracle: present(),
		Sandboxes:  []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
		PodLogDirs: []nodefs.PodLogDir{logDir("u1")},
		PodCgroups: cgroups("u2"),
		EligibleSince: map[string]time.Time{"sandbox/s1": now.Add(-time.Hour), "pod-log-dir/" + logDir("u1").Path: now.Add(-time.Hour),
			"pod-cgroup/u2": now.Add(-time.Hour)},
		LastLifeEvent: map[string]time.Time{"u1": now.Add(time.Second), "u2": now.Add(10 * time.Millisecond)},
	}
	r := Plan(in)
	same(t, "due for pods with a life event after the listing", due(r), nil)
	// Skipped, not merely waiting: a grace clock started again would defer
	// the same steps, and hide a plan that no longer skips.
	same(t, "deferred for pods with a life event after the listing", deferred(r), nil)
	var skipped []string
	for _, p := range r.Skipped {
		skipped = append(skipped, p.UID)
	}
	slices.Sort(skipped)
	same(t, "skipped pods", skipped, []string{"u1", "u2"})
}

// Case 5: kubelet treats a pod dir it cannot read as "volumes may be
// mounted", which allows a CPU reduction of the pod cgroup, never its
// destruction.
func TestAPodDirThatCannotBeInspectedOnlyGetsItsCPUReduced(t *testing.T) {
	d := nodefs.PodDir{UID: "u1", Path: "/var/lib/kubelet/pods/u1", Blockers: []string{"cannot inspect: input/output error"}}
	r := Plan(Input{Now: now, Policy: policy(), Oracle: present("u1"), PodDirs: []nodefs.PodDir{d},
		PodCgroups: cgroups("u1"), TornDown: map[string]bool{"u1": true}})
	for _, a := range append(r.Actions, deferredActions(r)...) {
		if a.Kind == RemovePodCgroup {
			t.Fatalf("the cgroup of a pod whose dir cannot be inspected is destroyed (%s: %s)", a.Rule, a.Reason)
		}
	}
	same(t, "due", due(r), []string{"reduce-pod-cgroup-cpu "})
}

// Case 6: one orphan on a small node. With max_fraction 0.1, fewer than 10
// Ready sandboxes could never stop one orphan; the floor lets one through.
func TestOneOrphanOnASmallNodeIsStopped(t *testing.T) {
	pol := policy()
	pol.StopOrphans, pol.Budget.MaxPerPass, pol.Budget.MaxFraction = true, 3, 0.1
	r := Plan(Input{Now: now, Policy: pol, Oracle: present("u1", "u2"),
		Sandboxes: []cri.Sandbox{sb("s1", "u1", true, time.Hour), sb("s2", "u2", true, time.Hour), sb("s3", "u3", true, time.Hour)}})
	same(t, "due", due(r), []string{"stop-sandbox s3"})
}

// Case 6: UNKNOWN stops (a container that may still run) and cgroup kills
// with processes count against the budget like orphan stops: a pass takes
// no more of them than it allows (here the floor, 1), the rest wait.
func TestUnknownStopsAndCgroupKillsCountAgainstTheBudget(t *testing.T) {
	pol := policy()
	pol.Budget.MaxPerPass, pol.Budget.MaxFraction = 3, 0.1
	in := Input{Now: now, Policy: pol, Oracle: present("live"), PodCgroups: cgroups()}
	for i := range 5 {
		uid := fmt.Sprintf("g%d", i)
		in.Sandboxes = append(in.Sandboxes, sb("s"+uid, uid, false, time.Hour))
		in.Containers = append(in.Containers, ctr("c"+uid, "s"+uid, uid, "app", cri.ContainerUnknown, time.Hour))
		in.PodCgroups.Pods["k"+uid] = cgroups("k" + uid).Pods["k"+uid]
	}
	in.Sandboxes = append(in.Sandboxes, sb("slive", "live", true, time.Hour))
	r := Plan(in)
	stops, kills := 0, 0
	for _, a := range r.Actions {
		switch {
		case a.Kind == StopContainer || a.Kind == RemoveContainer:
			stops++
		case a.Kind == RemovePodCgroup:
			kills++
		}
	}
	if stops != 1 || kills != 1 {
		t.Fatalf("a pass with 5 UNKNOWN stops and 5 cgroup kills, over a budget of 1 per pass, does %d stops and %d kills", stops, kills)
	}
	throttled := 0
	for _, d := range r.Deferred {
		if d.Throttled && strings.Contains(d.Why(), "waits for a later pass") {
			throttled++
		}
	}
	if throttled != 8 || len(r.Trips) != 0 {
		t.Fatalf("%d steps wait for a later pass, trips %+v: want 8 waiting and no class paused", throttled, r.Trips)
	}
}

// Case 7: a RUNNING container whose sandbox is not listed still holds its
// pod's log dir: only sandboxes used to.
func TestAPodLogDirStaysWhileAContainerOfThePodIsListed(t *testing.T) {
	r := Plan(Input{Now: now, Policy: policy(), Oracle: present(),
		Containers: []cri.Container{ctr("c1", "unlisted-sandbox", "u1", "app", cri.ContainerRunning, time.Hour)},
		PodLogDirs: []nodefs.PodLogDir{logDir("u1")}})
	for _, a := range r.Actions {
		if a.Kind == RemovePodLogDir {
			t.Fatalf("the log dir of a pod with a RUNNING container is removed: %s", a.Reason)
		}
	}
}

// Case 9: kubelet kills an UNKNOWN container and removes it right after,
// with at least its 2 s minimum grace. Stopping it alone left it UNKNOWN
// and proposed again every pass, and a 0 s timeout gave it no grace.
func TestAnUnknownContainerIsStoppedAndRemovedInOneStep(t *testing.T) {
	r := Plan(Input{Now: now, Policy: policy(), Oracle: present(),
		Sandboxes:  []cri.Sandbox{sb("s1", "u1", false, time.Hour)},
		Containers: []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerUnknown, time.Hour)}})
	same(t, "due", due(r), []string{"remove-container c1", "remove-sandbox s1"})
	for _, a := range r.Actions {
		if a.ContainerID == "c1" && a.Timeout < 2*time.Second {
			t.Fatalf("the UNKNOWN container is stopped with a %v timeout, under kubelet's 2 s minimum grace", a.Timeout)
		}
	}
	if strings.Contains(keptReason(r, "sandbox s1"), "in use") {
		t.Fatal("the sandbox waits for a later pass")
	}
}

func nriSandbox(id, uid string, reportedAgo time.Duration, live bool) podstate.NRISandbox {
	return podstate.NRISandbox{ID: id, PodUID: uid, ReportedAt: now.Add(-reportedAgo), Live: live}
}

// CheckListing: NRI and the CRI listing must agree before a plan is made.
func TestAListingMustAgreeWithNRI(t *testing.T) {
	listed := []cri.Sandbox{sb("s1", "u1", true, time.Hour), sb("s2", "u2", false, time.Hour)}
	for _, tc := range []struct {
		name      string
		nri       NRIView
		sandboxes []cri.Sandbox
		untrusted string // substring; "" for trusted
		missing   int
	}{
		{"the same sandboxes", NRIView{Sandboxes: []podstate.NRISandbox{nriSandbox("s1", "u1", time.Hour, true), nriSandbox("s2", "u2", time.Hour, false)}}, listed, "", 0},
		{"both empty: an empty node", NRIView{}, nil, "", 0},
		{"another runtime: NRI's sandboxes unlisted", NRIView{Sandboxes: []podstate.NRISandbox{nriSandbox("a", "u1", time.Hour, true)}}, nil,
			"shares no sandbox with NRI", 1},
		{"another runtime: its own sandboxes listed, none NRI's", NRIView{}, listed, "shares no sandbox with NRI", 0},
		{"another runtime, even once this session was confirmed", NRIView{Confirmed: true, Sandboxes: []podstate.NRISandbox{nriSandbox("a", "u1", time.Hour, true)}}, nil,
			"lacks 1 sandbox(es) NRI reported live", 1},
		{"a live sandbox missing", NRIView{Sandboxes: []podstate.NRISandbox{nriSandbox("s1", "u1", time.Hour, true), nriSandbox("gone", "u3", time.Hour, true)}}, listed,
			"lacks 1 sandbox(es) NRI reported live", 1},
		{"a stopped sandbox missing: a teardown", NRIView{Sandboxes: []podstate.NRISandbox{nriSandbox("s1", "u1", time.Hour, true), nriSandbox("gone", "u3", time.Hour, false)}}, listed, "", 0},
		{"a sandbox synchronized 1 s ago is in containerd's store", NRIView{Sandboxes: []podstate.NRISandbox{nriSandbox("s1", "u1", time.Hour, true),
			{ID: "synced", PodUID: "u3", ReportedAt: now.Add(-time.Second), Synced: true, Live: true}}}, listed, "lacks 1 sandbox(es) NRI reported live", 1},
		{"a sandbox reported 1 s ago: containerd may not have stored it", NRIView{Sandboxes: []podstate.NRISandbox{nriSandbox("s1", "u1", time.Hour, true), nriSandbox("new", "u3", time.Second, true)}}, listed, "", 0},
		{"only a sandbox reported 1 s ago, and the node was empty", NRIView{Sandboxes: []podstate.NRISandbox{nriSandbox("new", "u3", time.Second, true)}}, nil, "", 0},
		{"a sandbox reported after the listing", NRIView{Sandboxes: []podstate.NRISandbox{nriSandbox("s1", "u1", time.Hour, true), nriSandbox("new", "u3", -time.Second, true)}}, listed, "", 0},
		{"confirmed this session, NRI knows nothing yet, the listing has pods", NRIView{Confirmed: true}, listed, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := CheckListing(tc.nri, tc.sandboxes, nil, now)
			if (tc.untrusted == "") != (c.Untrusted == "") || !strings.Contains(c.Untrusted, tc.untrusted) || len(c.Missing) != tc.missing {
				t.Fatalf("untrusted %q, missing %v; want %q, %d missing", c.Untrusted, c.Missing, tc.untrusted, tc.missing)
			}
			// The plan refuses what the check refuses.
			r := Plan(Input{Now: now, Policy: policy(), Oracle: present("u1", "u2"), Sandboxes: tc.sandboxes, NRI: &tc.nri})
			if r.Untrusted != c.Untrusted || (c.Untrusted != "" && (len(r.Actions) > 0 || len(r.Deferred) > 0 || len(r.Kept) > 0)) {
				t.Fatalf("plan untrusted %q with %d actions, want %q and nothing", r.Untrusted, len(r.Actions), c.Untrusted)
			}
		})
	}
}

// The oracle's threshold: a few Ready sandboxes without a pod dir are
// orphaned live pods; more, or all of them, is a wrong oracle.
func TestTheOracleIsTrustedUpToAFewOrphans(t *testing.T) {
	node := func(live, orphans int, young bool) Input {
		in := Input{Now: now, Policy: policy()}
		in.Policy.OracleSettle = 10 * time.Second
		var dirs []string
		for i := range live + orphans {
			uid := fmt.Sprintf("u%d", i)
			age := time.Hour
			if young {
				age = time.Second
			}
			in.Sandboxes = append(in.Sandboxes, sb("s"+uid, uid, true, age))
			if i < live {
				dirs = append(dirs, uid)
			}
		}
		in.Oracle = present(dirs...)
		return in
	}
	for _, tc := range []struct {
		name          string
		live, orphans int
		young         bool
		untrusted     bool
	}{
		{"one orphan beside two live pods", 2, 1, false, false},
		{"two orphans beside two live pods", 2, 2, false, false},
		{"three orphans beside two live pods", 2, 3, false, true},
		{"every Ready sandbox an orphan", 0, 2, false, true},
		{"the only Ready sandbox an orphan, the pods dir empty", 0, 1, false, true},
		{"a quarter of a large node", 15, 5, false, false},
		{"more than a quarter of a large node", 14, 6, false, true},
		{"young sandboxes do not count against a pods dir that is not empty", 1, 3, true, false},
		{"an empty pods dir counts young sandboxes too", 0, 3, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Plan(node(tc.live, tc.orphans, tc.young))
			if (r.OracleUntrusted != "") != tc.untrusted {
				t.Fatalf("oracle untrusted = %q, want untrusted %v", r.OracleUntrusted, tc.untrusted)
			}
			if r.OracleUntrusted != "" && (r.Leaks[LeakOrphanPod] != 0 || !strings.Contains(r.OracleUntrusted, "pods.kubelet_root")) {
				t.Fatalf("untrusted oracle: leaks %v, reason %q", r.Leaks, r.OracleUntrusted)
			}
			if r.OracleUntrusted == "" && r.Leaks[LeakOrphanPod] != tc.orphans {
				t.Fatalf("trusted oracle: %d orphans reported, want %d", r.Leaks[LeakOrphanPod], tc.orphans)
			}
		})
	}
}

// Every class of step that can hurt a live workload or user data is
// counted; removing what is dead is not.
func TestBudgetClassesCoverEveryHarmfulStep(t *testing.T) {
	cg := func(procs int) *podcgroups.PodCgroup { return &podcgroups.PodCgroup{Procs: procs, Inspected: true} }
	covered := map[Kind]bool{}
	for _, tc := range []struct {
		a     Action
		class string
	}{
		{Action{Kind: StopContainer, Rule: RuleOrphanStop, Pod: PodRef{UID: "u"}}, ClassOrphanStop},
		{Action{Kind: StopSandbox, Rule: RuleOrphanStop, Pod: PodRef{UID: "u"}}, ClassOrphanStop},
		{Action{Kind: RemoveContainer, Rule: RuleContainerPodGone, StopFirst: true}, ClassUnknownStop},
		{Action{Kind: RemoveContainer, Rule: RuleContainerPodGone}, ""},
		{Action{Kind: RemoveSandbox, Rule: RuleSandboxPodGone}, ""},
		{Action{Kind: RemoveContainerLogLink, Rule: RuleDanglingLogLink}, ""},
		{Action{Kind: RemovePodCgroup, Rule: RuleCgroupPodGone, Cgroup: cg(2)}, ClassCgroupKill},
		{Action{Kind: RemovePodCgroup, Rule: RuleCgroupPodGone, Cgroup: cg(0)}, ""},
		{Action{Kind: ReducePodCgroupCPU, Rule: RuleCgroupVolumesRemain, Cgroup: cg(0)}, ClassCgroupCPU},
		{Action{Kind: RemovePodDir, Rule: RuleOrphanedPodDir}, ClassPodDir},
		{Action{Kind: RemovePodLogDir, Rule: RulePodLogDir}, ClassPodLogDir},
		{Action{Kind: StopContainer, Rule: RuleContainerPodGone, Key: "stop/c"}, ClassUnknownStop},
		{Action{Kind: RemoveCNIAttachment, Rule: RuleNetworkAttachment, ContainerID: "sb"}, ClassNetwork},
		{Action{Kind: ReleaseIPReservation, Rule: RuleNetworkReservation, ContainerID: "sb"}, ClassNetwork},
		{Action{Kind: RemoveNetns, Rule: RuleNetworkNetns, Key: "netns/x"}, ClassNetwork},
	} {
		if class, _ := BudgetClass(tc.a); class != tc.class {
			t.Errorf("%s %s: class %q, want %q", tc.a.Kind, tc.a.Rule, class, tc.class)
		}
		covered[tc.a.Kind] = true
	}
	for _, k := range Kinds {
		if !covered[k] {
			t.Errorf("no case for %s: a kind added without its budget class checked", k)
		}
	}
}

// Pod log dirs over the budget: the pass takes what the budget allows, the
// dirs eligible longest, and leaves the rest for later passes; once the
// hour is spent the class is paused, and the trip names it.
func TestAPassOverTheBudgetTakesWhatTheBudgetAllows(t *testing.T) {
	in := Input{Now: now, Policy: policy()}
	in.Policy.Budget = Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 20}
	var live []string
	for i := range 8 {
		uid := fmt.Sprintf("live%d", i)
		live = append(live, uid)
		in.Sandboxes = append(in.Sandboxes, sb("s"+uid, uid, true, time.Hour))
	}
	in.Oracle = present(live...)
	in.EligibleSince = map[string]time.Time{}
	for i := range 4 {
		uid := fmt.Sprintf("gone%d", i)
		in.Sandboxes = append(in.Sandboxes, sb("s"+uid, uid, false, time.Hour))
		in.PodLogDirs = append(in.PodLogDirs, logDir(uid))
		in.EligibleSince["pod-log-dir/"+logDir(uid).Path] = now.Add(-time.Duration(i) * time.Minute) // gone3 waited longest
	}
	r := Plan(in)
	if removals, logDirs := countKinds(r, RemoveSandbox), countKinds(r, RemovePodLogDir); removals != 4 || logDirs != 3 || len(r.Trips) != 0 {
		t.Fatalf("%d sandbox removals, %d log dirs, trips %+v: want the 4 dead sandboxes removed and 3 log dirs, no trip", removals, logDirs, r.Trips)
	}
	if waiting := deferred(r); len(waiting) != 1 || waiting[0] != "remove-pod-log-dir "+logDir("gone0").Path || !r.Deferred[0].Throttled {
		t.Fatalf("deferred %v: want the log dir eligible for the shortest time", waiting)
	}

	// The hour spent: the class is paused.
	in.BudgetAdmitted = map[string]bool{}
	for i := range 20 {
		in.BudgetAdmitted[fmt.Sprintf("%s/earlier-%d", ClassPodLogDir, i)] = true
	}
	r = Plan(in)
	if removals, logDirs := countKinds(r, RemoveSandbox), countKinds(r, RemovePodLogDir); removals != 4 || logDirs != 0 || len(r.Trips) != 1 || r.Trips[0].Class != ClassPodLogDir || r.Trips[0].Due != 4 || r.Trips[0].Allowed != 0 {
		t.Fatalf("%d sandbox removals, %d log dirs, trips %+v: want the 4 dead sandboxes removed and the 4 log dirs held back by the spent hour", removals, logDirs, r.Trips)
	}
	if !strings.Contains(r.Trips[0].Message, "pod-log-dir") {
		t.Fatalf("trip message %q does not name the class", r.Trips[0].Message)
	}
}

// A held budget (the steps of the last hour are unknown) takes no budgeted
// step of any class, whatever max_per_hour allows, and says why in the
// trip; steps outside the budget go on.
func TestAHeldBudgetTakesNoBudgetedStep(t *testing.T) {
	in := Input{Now: now, Policy: policy()}
	in.Policy.Budget = Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 20}
	in.Oracle = present("live")
	in.Sandboxes = append(in.Sandboxes, sb("slive", "live", true, time.Hour), sb("sgone", "gone", false, time.Hour))
	in.PodLogDirs = append(in.PodLogDirs, logDir("gone"))
	in.EligibleSince = map[string]time.Time{"pod-log-dir/" + logDir("gone").Path: now.Add(-time.Hour)}
	r := Plan(in)
	if countKinds(r, RemovePodLogDir) != 1 || len(r.Trips) != 0 {
		t.Fatalf("not held: %d log dirs, trips %+v; want the log dir taken", countKinds(r, RemovePodLogDir), r.Trips)
	}
	in.BudgetHeld = "the state file could not be read: the steps of the last hour are unknown"
	r = Plan(in)
	if removals, logDirs := countKinds(r, RemoveSandbox), countKinds(r, RemovePodLogDir); removals != 1 || logDirs != 0 {
		t.Fatalf("held: %d sandbox removals, %d log dirs; want the sandbox removed (not budgeted) and the log dir held", removals, logDirs)
	}
	if len(r.Trips) != 1 || r.Trips[0].Class != ClassPodLogDir || r.Trips[0].Allowed != 0 || !strings.Contains(r.Trips[0].Message, in.BudgetHeld) {
		t.Fatalf("trips %+v: want one for %s that says why", r.Trips, ClassPodLogDir)
	}
}

// Only this NRI session's reports say which containerd NRI talks to now: a
// sandbox an earlier session reported, still listed, does not confirm it.
func TestOnlyThisNRISessionsReportsConfirmTheListing(t *testing.T) {
	listed := []cri.Sandbox{sb("old", "u1", true, time.Hour)}
	old := nriSandbox("old", "u1", time.Hour, true)
	old.Session = 1
	theirs := nriSandbox("theirs", "u2", time.Hour, true)
	theirs.Session, theirs.Synced = 2, true
	c := CheckListing(NRIView{Session: 2, Sandboxes: []podstate.NRISandbox{old, theirs}}, listed, nil, now)
	if c.Shared || !strings.Contains(c.Untrusted, "shares no sandbox with NRI") {
		t.Fatalf("shared %v, untrusted %q: an earlier session's sandbox confirmed the new one", c.Shared, c.Untrusted)
	}
	theirs.PodUID, theirs.ID = "u1", "old"
	if c := CheckListing(NRIView{Session: 2, Sandboxes: []podstate.NRISandbox{theirs}}, listed, nil, now); c.Untrusted != "" || !c.Shared {
		t.Fatalf("this session's sandbox listed: untrusted %q", c.Untrusted)
	}
}

// A pod dir absent from a pods dir that has not changed since the pod's
// sandbox was created was never removed from it: kubelet does not write
// there. One sandbox in any state proves it: a stale copy of the root that
// still holds the long-running pods' dirs is found by a completed pod
// created after the copy.
func TestAPodsDirUnchangedSinceASandboxOfAnAbsentPodIsNotTrusted(t *testing.T) {
	copied := now.Add(-10 * time.Minute)
	for _, tc := range []struct {
		name      string
		modTime   time.Time
		sandbox   cri.Sandbox
		untrusted bool
	}{
		{"a completed pod created after the copy", copied, sb("job", "u9", false, 5*time.Minute), true},
		{"a deleted pod: its dir removed after its sandbox was made", now.Add(-time.Minute), sb("job", "u9", false, 5*time.Minute), false},
		{"a pod older than the pods dir's last change", copied, sb("job", "u9", false, time.Hour), false},
		{"within the clock margin", copied, sb("job", "u9", false, 10*time.Minute-time.Second), false},
		{"a creation time after the listing (the clock stepped back)", copied, sb("job", "u9", false, -time.Minute), false},
		{"no modification time", time.Time{}, sb("job", "u9", false, 5*time.Minute), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := present("u1", "u2")
			o.PodDirs.ModTime = tc.modTime
			in := Input{Now: now, Policy: policy(), Oracle: o, Sandboxes: []cri.Sandbox{
				sb("s1", "u1", true, time.Hour), sb("s2", "u2", true, time.Hour), tc.sandbox}}
			r := Plan(in)
			if (r.OracleUntrusted != "") != tc.untrusted || (tc.untrusted && !strings.Contains(r.OracleUntrusted, "has not changed since")) {
				t.Fatalf("oracle untrusted %q, want untrusted %v", r.OracleUntrusted, tc.untrusted)
			}
			if tc.untrusted && len(r.Actions)+len(r.Deferred) > 0 {
				t.Fatalf("the completed pod's sandbox is planned: %v %v", due(r), deferred(r))
			}
		})
	}
}

// An empty pods dir made after a sandbox was created never held that
// sandbox's pod dir: with every sandbox NotReady (a reboot) no Ready one
// gives a wrong kubelet_root away, and every pod would be called gone.
func TestAnEmptyPodsDirMadeAfterASandboxIsNotTrusted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		born      time.Time
		uids      []string // the pods dir's entries
		untrusted bool
	}{
		{"empty, made after the sandboxes", now.Add(-time.Minute), nil, true},
		{"empty, made before the sandboxes (kubelet removed the last pod dir)", now.Add(-48 * time.Hour), nil, false},
		{"empty, made after the older sandbox, within the clock margin of the newer", now.Add(-10*time.Minute + time.Second), nil, true},
		{"empty, made within the clock margin of every sandbox", now.Add(-time.Hour + time.Second), nil, false},
		{"not empty, made after the sandboxes (a root copied to a new disk)", now.Add(-time.Minute), []string{"u9"}, false},
		{"no birth time", time.Time{}, nil, false},
		{"a birth time after the listing (the clock stepped back)", now.Add(time.Minute), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := present(tc.uids...)
			o.PodDirs.Born = tc.born
			in := Input{Now: now, Policy: policy(), Oracle: o,
				Sandboxes:  []cri.Sandbox{sb("s1", "u1", false, time.Hour), sb("s2", "u2", false, 10*time.Minute)},
				Containers: []cri.Container{ctr("c1", "s1", "u1", "app", cri.ContainerExited, time.Hour)}}
			in.PodLogDirs = []nodefs.PodLogDir{logDir("u1")}
			r := Plan(in)
			if (r.OracleUntrusted != "") != tc.untrusted || (tc.untrusted && !strings.Contains(r.OracleUntrusted, "is empty and was made")) {
				t.Fatalf("oracle untrusted %q, want untrusted %v", r.OracleUntrusted, tc.untrusted)
			}
			if tc.untrusted && len(r.Actions)+len(r.Deferred) > 0 {
				t.Fatalf("pods called gone by an untrusted pods dir are planned: %v %v", due(r), deferred(r))
			}
			if !tc.untrusted && tc.uids == nil && len(r.Actions) == 0 {
				t.Fatalf("a trusted empty pods dir plans nothing: the case tests nothing (kept %+v)", r.Kept)
			}
		})
	}
}

// A unit taken already this hour (a step that failed and is retried) is
// not counted against the pass again, so it cannot pause its class.
func TestARetriedStepDoesNotCountAgainstThePass(t *testing.T) {
	in := Input{Now: now, Policy: policy(), Oracle: present("live")}
	in.Policy.Budget = Budget{MaxPerPass: 1, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 20}
	in.Sandboxes = []cri.Sandbox{sb("slive", "live", true, time.Hour)}
	in.PodLogDirs = []nodefs.PodLogDir{logDir("g1"), logDir("g2")}
	if r := Plan(in); len(r.Actions) != 1 || len(r.Deferred) != 1 || !r.Deferred[0].Throttled {
		t.Fatalf("two log dirs over a budget of one: due %v, deferred %v", due(r), deferred(r))
	}
	in.BudgetAdmitted = map[string]bool{ClassPodLogDir + "/pod-log-dir/" + logDir("g1").Path: true}
	r := Plan(in)
	same(t, "due with one retried", due(r), []string{"remove-pod-log-dir " + logDir("g1").Path, "remove-pod-log-dir " + logDir("g2").Path})
	if len(r.Trips) != 0 {
		t.Fatalf("trips %+v", r.Trips)
	}
}

func countKinds(r Result, k Kind) int {
	n := 0
	for _, a := range r.Actions {
		if a.Kind == k {
			n++
		}
	}
	return n
}

// A class's places go to steps that can run: a step that rests on one an
// earlier class refused (paused or throttled) is held before its own class
// is counted, so that it takes no place another step could use. (Before,
// each class picked from all its steps at once, and the dependency was
// applied after: on a node allowed 1 step a pass, a pod log dir waiting
// for a stop the paused unknown-stop class refused took the pod-log-dir
// class's place every pass, and the other gone pod's dir was not removed
// for the hour.)
func TestAStepWaitingForARefusedOneTakesNoPlaceOfItsClass(t *testing.T) {
	long := now.Add(-time.Hour)
	t.Run("a log dir waiting for an UNKNOWN container's stop, its class paused", func(t *testing.T) {
		in := Input{Now: now, Policy: policy(), EligibleSince: map[string]time.Time{}, BudgetAdmitted: map[string]bool{}}
		in.Policy.Budget = Budget{MaxPerPass: 1, MaxFraction: 0, MinPerPass: 1, MaxPerHour: 20}
		for i := range 20 {
			in.BudgetAdmitted[fmt.Sprintf("%s/earlier-%d", ClassUnknownStop, i)] = true
		}
		var live []string
		for i := range 4 {
			uid := fmt.Sprintf("live%d", i)
			live = append(live, uid)
			in.Sandboxes = append(in.Sandboxes, sb("s"+uid, uid, true, time.Hour))
		}
		in.Oracle = present(live...)
		for _, uid := range []string{"x", "y"} {
			in.Sandboxes = append(in.Sandboxes, sb("s"+uid, uid, false, time.Hour))
			in.PodLogDirs = append(in.PodLogDirs, logDir(uid))
		}
		in.Containers = append(in.Containers, ctr("cx", "sx", "x", "app", cri.ContainerUnknown, time.Hour))
		in.EligibleSince["pod-log-dir/"+logDir("x").Path] = now.Add(-10 * time.Minute) // x's waited longest
		r := Plan(in)
		if got := due(r); !slices.Contains(got, "remove-pod-log-dir "+logDir("y").Path) {
			t.Fatalf("due %v, deferred %v: y's log dir is not removed, though only x's waits for the refused stop", got, deferred(r))
		}
		if len(r.Trips) != 1 || r.Trips[0].Class != ClassUnknownStop {
			t.Fatalf("trips %+v, want the unknown-stop class's alone", r.Trips)
		}
	})
	t.Run("a pod cgroup kill waiting for its pod dir's removal, that class throttled", func(t *testing.T) {
		pol := policy()
		pol.RemoveOrphanedPodDirs = true
		pol.Budget = Budget{MaxPerPass: 1, MaxFraction: 0, MinPerPass: 1, MaxPerHour: 20}
		in := Input{Now: now, Policy: pol, Oracle: present("u1", "u2"),
			PodDirs: []nodefs.PodDir{podDir("u1", false), podDir("u2", false)}, PodCgroups: cgroups("u1", "u2"),
			TornDown: map[string]bool{"u1": true, "u2": true},
			EligibleSince: map[string]time.Time{
				"pod-dir/u1": long.Add(-time.Minute), "pod-dir/u2": long, // u1's dir waited longest
				"pod-cgroup/u1": long, "pod-cgroup/u2": long.Add(-10 * time.Minute), // u2's cgroup waited longest
			}}
		r := Plan(in)
		var got []string
		for _, a := range r.Actions {
			got = append(got, a.Key)
		}
		if !slices.Equal(got, []string{"pod-dir/u1", "pod-cgroup/u1"}) {
			t.Fatalf("due %v, deferred %v: want u1's pod dir and cgroup (u2's cgroup waits for u2's dir, which the pod-dir class throttles)", got, r.Deferred)
		}
	})
}

// The budget decides every class, and each once: a class left out of
// budgetOrder would run unbudgeted.
func TestTheBudgetOrderHasEveryClassOnce(t *testing.T) {
	if got, want := slices.Sorted(slices.Values(budgetOrder)), slices.Sorted(slices.Values(BudgetClasses)); !slices.Equal(got, want) {
		t.Fatalf("budgetOrder %v, want the classes %v, each once", budgetOrder, BudgetClasses)
	}
}

// A cap of 0 configured (budget.max_per_pass or budget.max_per_hour)
// disables every budgeted step: each is held with that reason, and no
// class trips, since a trip is an alarm (the breaker-open alert) and this
// is a choice. What the budget does not limit is still due. A cap the
// node's size brings to 0 (max_fraction of few Ready sandboxes, no floor)
// still trips: that is the budget at work.
func TestACapOfZeroDisablesBudgetedStepsWithoutATrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget Budget
		trips  bool
	}{
		{"max_per_pass = 0", Budget{MaxPerPass: 0, MaxFraction: 1, MinPerPass: 0, MaxPerHour: 20}, false},
		{"max_per_hour = 0", Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 0}, false},
		{"max_fraction = 0, no floor", Budget{MaxPerPass: 3, MaxFraction: 0, MinPerPass: 0, MaxPerHour: 20}, false},
		{"max_fraction of this node's 1 Ready sandbox is 0, no floor", Budget{MaxPerPass: 3, MaxFraction: 0.5, MinPerPass: 0, MaxPerHour: 20}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Now: now, Policy: policy()}
			in.Policy.Budget = tc.budget
			in.Oracle = present("live")
			in.Sandboxes = append(in.Sandboxes, sb("slive", "live", true, time.Hour), sb("sgone", "gone", false, time.Hour))
			in.PodLogDirs = append(in.PodLogDirs, logDir("gone"))
			in.EligibleSince = map[string]time.Time{"pod-log-dir/" + logDir("gone").Path: now.Add(-time.Hour)}
			r := Plan(in)
			if removals, logDirs := countKinds(r, RemoveSandbox), countKinds(r, RemovePodLogDir); removals != 1 || logDirs != 0 {
				t.Fatalf("%d sandbox removals, %d log dirs; want the sandbox removed (not budgeted) and the log dir held", removals, logDirs)
			}
			if !tc.trips {
				// A step taken this hour and retried is held too: an
				// emergency brake must hold what is already under way.
				retried := in
				retried.BudgetAdmitted = map[string]bool{ClassPodLogDir + "/pod-log-dir/" + logDir("gone").Path: true}
				if n := countKinds(Plan(retried), RemovePodLogDir); n != 0 {
					t.Fatalf("a pod log dir removal taken this hour is due again (%d), though budgeted steps are disabled", n)
				}
			}
			if got := len(r.Trips) > 0; got != tc.trips {
				t.Fatalf("trips %+v, want a trip: %v", r.Trips, tc.trips)
			}
			var why string
			for _, d := range r.Deferred {
				if d.Kind == RemovePodLogDir {
					why = d.Why()
				}
			}
			if disabled := strings.Contains(why, "disables every budgeted step"); disabled == tc.trips {
				t.Fatalf("the log dir held for %q; want it said disabled: %v", why, !tc.trips)
			}
		})
	}
}

// TestAFailingOrphanStopDoesNotTripItsClassWithEachNewerOne: orphan stops
// are all or nothing as a surge of new ones; one that failed at its last
// try, counted again when its hour is over, waits for the places left, or
// with each newer orphan the class would trip, nothing would run, and the
// same input would come again every pass for as long as it fails. New
// orphans over the budget still trip it.
func TestAFailingOrphanStopDoesNotTripItsClassWithEachNewerOne(t *testing.T) {
	var sandboxes []cri.Sandbox
	for i := range 20 {
		sandboxes = append(sandboxes, sb(fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i), true, time.Hour))
	}
	pol := policy()
	pol.StopOrphans = true
	pol.Budget = Budget{MaxPerPass: 3, MaxFraction: 0.1, MinPerPass: 1, MaxPerHour: 20} // 20 Ready: 2 a pass
	stopped := func(r Result, uid string) bool {
		return slices.ContainsFunc(r.Actions, func(a Action) bool { return a.Rule == RuleOrphanStop && a.Pod.UID == uid })
	}
	for _, tc := range []struct {
		name    string
		gone    []string        // orphans: no pod dir
		failing map[string]bool // BudgetFailing
		stops   []string        // want stopped
		trip    bool
	}{
		{"a failing one and two newer ones: the newer ones", []string{"u0", "u1", "u2"}, map[string]bool{ClassOrphanStop + "/u0": true}, []string{"u1", "u2"}, false},
		{"a failing one and a newer one: both", []string{"u0", "u1"}, map[string]bool{ClassOrphanStop + "/u0": true}, []string{"u0", "u1"}, false},
		{"three new ones over the budget: none", []string{"u0", "u1", "u2"}, map[string]bool{}, nil, true},
		{"three new ones and a failing one: none", []string{"u0", "u1", "u2", "u3"}, map[string]bool{ClassOrphanStop + "/u0": true}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var live []string
			for i := range 20 {
				if uid := fmt.Sprintf("u%d", i); !slices.Contains(tc.gone, uid) {
					live = append(live, uid)
				}
			}
			r := Plan(Input{Now: now, Policy: pol, Oracle: present(live...), Sandboxes: sandboxes,
				BudgetAdmitted: map[string]bool{}, BudgetFailing: tc.failing})
			for _, uid := range tc.gone {
				if want := slices.Contains(tc.stops, uid); stopped(r, uid) != want {
					t.Errorf("orphan %s stopped: %v, want %v (trips %+v)", uid, stopped(r, uid), want, r.Trips)
				}
			}
			if tripped := len(r.Trips) > 0; tripped != tc.trip {
				t.Errorf("tripped: %v, want %v (%+v)", tripped, tc.trip, r.Trips)
			}
			// One held for the others says why.
			held := 0
			for _, d := range r.Deferred {
				if d.Rule != RuleOrphanStop || tc.trip {
					continue
				}
				held++
				if !strings.Contains(d.Why(), "failed at its last try: the others go first") {
					t.Errorf("%s held: %q, want it to say it failed before and the others go first", d.Key, d.Why())
				}
			}
			if !tc.trip && held == 0 && len(tc.stops) < len(tc.gone) {
				t.Errorf("no orphan stop held, want those not stopped held")
			}
		})
	}
}
