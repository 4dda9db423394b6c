package soak

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/gc"
)

func TestParseLineReadsLogrusTextLines(t *testing.T) {
	f, ok := ParseLine(`time="2026-11-23T01:02:03.456+00:00" level=info msg="stopped and removed sandbox" action=remove-sandbox pod_uid=u reason="its pod is gone (no \"dir\")" took=6.28ms`)
	if !ok || f["msg"] != "stopped and removed sandbox" || f["action"] != "remove-sandbox" || f["reason"] != `its pod is gone (no "dir")` || f["took"] != "6.28ms" {
		t.Fatalf("%v %v", ok, f)
	}
	if _, ok := ParseLine("goroutine 1 [running]:"); ok {
		t.Fatal("a stack trace line parsed")
	}
}

// A small world: a live pod, a pod deleted with the #107730 leak, and
// plugin lines acting on both.
func TestCheckLogFindsActionsOnLiveObjects(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tr := NewTruth()
	live := &Pod{Name: "live", NS: "soak", UID: "uid-live", LogDir: "/logs/soak_live_uid-live", PodDir: "/k/pods/uid-live", Admitted: at(0)}
	gone := &Pod{Name: "gone", NS: "soak", UID: "uid-gone", LogDir: "/logs/soak_gone_uid-gone", PodDir: "/k/pods/uid-gone", Admitted: at(0),
		Deleted: at(10), Dead: at(10.5), Leak: Leak107730, LeakMade: at(11)}
	tr.AddPod(live)
	tr.AddPod(gone)
	liveSb := tr.AddObject(&Object{ID: "sb-live", Kind: KindSandbox, Pod: live, Born: at(0), Started: at(1)})
	tr.AddObject(&Object{ID: "c-live", Kind: KindContainer, Pod: live, Name: "app0", Sandbox: liveSb, Born: at(1), Started: at(2)})
	goneSb := tr.AddObject(&Object{ID: "sb-gone", Kind: KindSandbox, Pod: gone, Born: at(0), Started: at(1), Dead: at(10.5)})
	goneC := tr.AddObject(&Object{ID: "c-gone", Kind: KindContainer, Pod: gone, Name: "app0", Sandbox: goneSb, Born: at(1), Started: at(2), Dead: at(10)})
	tr.AddLink(&Link{Path: "/links/gone_soak_app0-c-gone.log", Container: goneC})

	line := func(s float64, level, msg, fields string) string {
		return `time="` + at(s).Format(logTimeLayout) + `" level=` + level + ` msg="` + msg + `" ` + fields
	}
	log := strings.Join([]string{
		line(0, "info", "nri-housekeeper starting", ""),
		// Legit: the leak's sandbox and container, 6 s after they died.
		line(16.6, "info", "stopped and removed sandbox", "action=remove-sandbox rule=sandboxes.pod-gone pod_uid=uid-gone sandbox_id=sb-gone took=10ms"),
		line(16.6, "info", "removed container with its sandbox", "action=remove-container rule=containers.pod-gone container_id=c-gone pod_uid=uid-gone took=10ms with_sandbox=sb-gone"),
		line(16.7, "info", "housekeeping pass", "took=200ms"),
		// False: the live pod's log dir and its running container.
		line(20.1, "info", "removed pod log dir", "action=remove-pod-log-dir rule=logs.pod-log-dir path=/logs/soak_live_uid-live pod_uid=uid-live took=1ms"),
		line(20.1, "warning", "failed to remove container", "action=remove-container rule=containers.pod-gone container_id=c-live pod_uid=uid-live retry_at=2026-11-23T01:00:30Z"),
		// The re-check stopped a cgroup removal of the live pod.
		line(20.1, "warning", "not done: checked again right before it: destroy", "action=remove-pod-cgroup rule=cgroups.pod-gone pod_uid=uid-live"),
		// A network step on the live sandbox: false; on the gone one, after
		// the plugin removed it: fine.
		line(20.15, "info", "deleted CNI attachment", "action=remove-cni-attachment rule=network.attachment-unowned container_id=sb-live path=/var/lib/cni/results/x took=1ms"),
		line(20.15, "info", "deleted CNI attachment", "action=remove-cni-attachment rule=network.attachment-unowned container_id=sb-gone path=/var/lib/cni/results/y took=1ms"),
		line(20.2, "info", "housekeeping pass", "took=300ms"),
		// The leak's link, before any pass line of a new run: window of its own.
		line(30, "info", "removed container log link", "action=remove-log-link rule=logs.dangling-link path=/links/gone_soak_app0-c-gone.log took=1ms"),
		line(31, "info", "nri-housekeeper starting", ""),
		line(32, "info", "removed orphaned pod dir", "action=remove-pod-dir rule=pod-dirs.orphaned pod_uid=uid-unknown took=1ms"),
	}, "\n")
	entries, other, err := ParseLog(strings.NewReader(log + "\npanic: boom\ngoroutine 7 [running]:\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := CheckLog(entries, other, tr)
	if len(c.FalseEvictions) != 3 {
		t.Fatalf("false evictions: %d, want 3 (log dir, container, CNI attachment):\n%v", len(c.FalseEvictions), c.FalseEvictions)
	}
	for i, want := range []string{"pod log dir of soak/live", "container c-live", "network object"} {
		if !strings.Contains(c.FalseEvictions[i].Target, want) {
			t.Errorf("false eviction %d is %q, want %q", i, c.FalseEvictions[i].Target, want)
		}
	}
	if len(c.AbortedOnLive) != 1 || len(c.Unknown) != 1 {
		t.Errorf("aborted on live %d, unknown %d; want 1, 1", len(c.AbortedOnLive), len(c.Unknown))
	}
	for _, key := range []string{ReclaimKey("sandbox", "sb-gone"), ReclaimKey("container", "c-gone"), ReclaimKey("link", "/links/gone_soak_app0-c-gone.log")} {
		if _, ok := c.Reclaimed[key]; !ok {
			t.Errorf("%s not reclaimed", key)
		}
	}
	if _, ok := c.RetryAt[ReclaimKey("container", "c-live")]; ok {
		t.Error("a failed action on a live object counted as a reclaim attempt")
	}
	if len(c.Panics) != 2 || c.Runs != 2 {
		t.Errorf("panics %d, runs %d; want 2, 2", len(c.Panics), c.Runs)
	}
	if n := c.Actions[ActionKey{"remove-container", "containers.pod-gone", "error"}]; n != 1 {
		t.Errorf("failed remove-container actions: %d", n)
	}
}

func TestSummaryStringHasEveryLine(t *testing.T) {
	s := Summary{Format: SummaryFormat, Verdict: "PASS", Seed: 1, Duration: 2 * time.Minute, Leaks: map[string]int{"107730": 3},
		Faults:  []FaultCount{{Kind: "containerd-kill", Planned: 2, Done: 2}},
		Actions: []ActionCount{{Kind: "remove-sandbox", Rule: "sandboxes.pod-gone", Result: "success", N: 3}},
		Reclaim: ReclaimSummary{LastFault: time.Now()}, Plugin: PluginSummary{ByResult: map[string]int{"ok": 10}, Healthz: 200}}
	out := s.String()
	for _, name := range []string{"verdict", "seed", "schedule", "duration", "config", "plugin build", "pod log fs", "pods", "stand-in lag", "leaks made",
		"faults", "actions", "false evictions", "lost live objects", "aborted on live", "unknown objects", "orphan reports", "reclaim",
		"worst reclaim", "network leftovers", "plugin runs", "plugin RSS", "goroutines", "flat", "CPU per pass", "passes", "/healthz", "failures"} {
		if !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("no line %q in:\n%s", name, out)
		}
	}
}

// A pod-dir leak must be reclaimed once any plugin run saw its pod torn
// down (that run kept it in the state file), not only the last run; one no
// run saw go is left by design.
func TestAPodDirIsExpectedBackOnceAnyRunSawItTornDown(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	starts := []time.Time{t0, t0.Add(time.Minute), t0.Add(2 * time.Minute)} // runs 1, 2, 3
	pod := &Pod{UID: "u", TeardownFrom: t0.Add(90 * time.Second)}
	for _, tc := range []struct {
		name    string
		removed []int
		want    bool
	}{
		{"seen by the run it was torn down under, which was killed since", []int{2}, true},
		{"seen by the last run, which started before the teardown", []int{2, 3}, true},
		{"logged Removed only by a run that started after the teardown", []int{3}, false},
		{"never logged Removed", nil, false},
	} {
		c := &Check{Removed: map[string][]int{"u": tc.removed}}
		if got := sawTornDown(c, pod, starts); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A pod the plugin logged Removed without seeing it torn down (its sandbox
// went while NRI's stop and removal were lost: a plugin pause) has its pod
// dir left by design: only a Removed line with torn_down=true marks it.
func TestOnlyARemovalSeenAsATeardownExpectsThePodDirBack(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 23, 15, 0, 0, time.UTC)
	line := func(uid, tornDown string) string {
		return `time="` + t0.Add(40*time.Second).Format(logTimeLayout) + `" level=info msg="pod soak/p: Running -> Removed" phase=Removed pod_uid=` +
			uid + ` previous_phase=Running torn_down=` + tornDown
	}
	log := strings.Join([]string{
		`time="` + t0.Format(logTimeLayout) + `" level=info msg="nri-housekeeper starting"`,
		line("seen", "true"), line("unseen", "false"),
	}, "\n")
	entries, other, err := ParseLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	c := CheckLog(entries, other, NewTruth())
	starts := []time.Time{t0}
	for uid, want := range map[string]bool{"seen": true, "unseen": false} {
		if got := sawTornDown(c, &Pod{UID: uid, TeardownFrom: t0.Add(35 * time.Second)}, starts); got != want {
			t.Errorf("pod %s: seen torn down %v, want %v (runs that logged it Removed: %v)", uid, got, want, c.Removed[uid])
		}
	}
}

// TestAnObjectGoneWithNoActionLoggedIsTimedByTheListings: a plugin run
// killed right after a step, before it logged it, leaves an object gone
// with no action logged. Its time is the first complete listing after the
// last one that showed it, not the settle's first look; an object listed
// to the end, or never listed, is left to the settle.
func TestAnObjectGoneWithNoActionLoggedIsTimedByTheListings(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 17, 8, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	lt := &listedTimes{last: map[string]time.Time{"gone": at(2), "back": at(4), "still": at(5)},
		polls: []time.Time{at(1), at(2), at(3), at(4), at(5)}}
	gone, back, still, never, path := &leakObj{id: "gone"}, &leakObj{id: "back"}, &leakObj{id: "still"}, &leakObj{id: "never"}, &leakObj{}
	lt.markGone([]*leakObj{gone, back, still, never, path})
	if !gone.goneAt.Equal(at(3)) || !back.goneAt.Equal(at(5)) {
		t.Fatalf("gone at %v and %v; want the first listings without them, %v and %v", gone.goneAt, back.goneAt, at(3), at(5))
	}
	for _, o := range []*leakObj{still, never, path} {
		if !o.goneAt.IsZero() {
			t.Fatalf("%q: gone at %v; want it left to the settle", o.id, o.goneAt)
		}
	}
}

// A network step is judged against the sandbox whose object it removes: a
// netns by its path (a remove-netns may name no owner, or the owner of an
// attachment that ran in it), a CNI attachment or reservation by its owner
// (a container's is its sandbox's). One the checker cannot resolve, or an
// action kind it does not know, fails the run: it could have hit a live
// sandbox unseen.
func TestNetworkStepsAreJudgedByTheirNetnsAndUnjudgedOnesFailTheRun(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tr := NewTruth()
	live := &Pod{Name: "live", NS: "soak", UID: "uid-live", Network: true, LogDir: "/logs/soak_live_uid-live", PodDir: "/k/pods/uid-live", Admitted: at(0)}
	gone := &Pod{Name: "gone", NS: "soak", UID: "uid-gone", Network: true, LogDir: "/logs/soak_gone_uid-gone", PodDir: "/k/pods/uid-gone", Admitted: at(0),
		Deleted: at(10), Dead: at(10.5)}
	tr.AddPod(live)
	tr.AddPod(gone)
	liveSb := tr.AddObject(&Object{ID: "sb-live", Kind: KindSandbox, Pod: live, Born: at(0), Started: at(1)})
	tr.SetNetns(liveSb, "/var/run/netns/cni-11111111-0000-4000-8000-000000000001")
	tr.AddObject(&Object{ID: "c-live", Kind: KindContainer, Pod: live, Name: "app0", Sandbox: liveSb, Born: at(1), Started: at(2)})
	goneSb := tr.AddObject(&Object{ID: "sb-gone", Kind: KindSandbox, Pod: gone, Born: at(0), Started: at(1), Dead: at(10.5), Removed: at(11)})
	tr.SetNetns(goneSb, "/var/run/netns/cni-22222222-0000-4000-8000-000000000002")

	line := func(s float64, msg, fields string) string {
		return `time="` + at(s).Format(logTimeLayout) + `" level=info msg="` + msg + `" ` + fields
	}
	const liveNetns, goneNetns = "/run/netns/cni-11111111-0000-4000-8000-000000000001", "/run/netns/cni-22222222-0000-4000-8000-000000000002"
	log := strings.Join([]string{
		line(0, "nri-housekeeper starting", ""),
		// False: the live sandbox's netns, named by path only (the plugin
		// lists /run/netns, containerd's metadata says /var/run/netns) ...
		line(20, "removed network namespace", "action=remove-netns rule=network.netns-unused path="+liveNetns+" took=1ms"),
		// ... or with the gone sandbox as the owner of an attachment that
		// ran in it: the netns is still the live sandbox's.
		line(20, "removed network namespace", "action=remove-netns rule=network.netns-unused container_id=sb-gone path="+liveNetns+" took=1ms"),
		// False: an attachment named by the live pod's container.
		line(20, "deleted CNI attachment", "action=remove-cni-attachment rule=network.attachment-unowned container_id=c-live path=/var/lib/cni/results/pods-c-live-eth0 took=1ms"),
		// Fine: the removed sandbox's netns, owner named or not.
		line(20, "removed network namespace", "action=remove-netns rule=network.netns-unused path="+goneNetns+" took=1ms"),
		// Unjudged: a netns and an owner the stand-in never made, and an
		// action kind the checker does not know.
		line(20, "removed network namespace", "action=remove-netns rule=network.netns-unused path=/run/netns/cni-33333333-0000-4000-8000-000000000003 took=1ms"),
		line(20, "released IP reservation", "action=release-ip rule=network.reservation-unowned container_id=stranger path=/var/lib/cni/networks/pods/10.0.0.9 took=1ms"),
		line(20, "did something new", "action=frobnicate rule=new.rule pod_uid=uid-live took=1ms"),
		// Unknown, but informational: a pod dir of a pod never made.
		line(20, "removed orphaned pod dir", "action=remove-pod-dir rule=pod-dirs.orphaned pod_uid=uid-unknown took=1ms"),
		line(20.1, "housekeeping pass", "took=300ms"),
	}, "\n")
	entries, other, err := ParseLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	c := CheckLog(entries, other, tr)
	if len(c.FalseEvictions) != 3 {
		t.Fatalf("false evictions: %d, want 3 (the live netns twice, the live pod's attachment):\n%v", len(c.FalseEvictions), c.FalseEvictions)
	}
	for i, v := range c.FalseEvictions {
		if !strings.Contains(v.Target, "sandbox sb-live") {
			t.Errorf("false eviction %d is on %q, want the live sandbox's network", i, v.Target)
		}
	}
	if len(c.Unknown) != 4 || len(c.Unjudged) != 3 {
		t.Fatalf("unknown %d, unjudged %d; want 4, 3:\nunknown %v\nunjudged %v", len(c.Unknown), len(c.Unjudged), c.Unknown, c.Unjudged)
	}
	for i, want := range []string{"action=remove-netns", "action=release-ip", "action=frobnicate"} {
		if !strings.Contains(c.Unjudged[i].Entry.Raw, want) {
			t.Errorf("unjudged %d is %q, want the %s line", i, c.Unjudged[i].Entry.Raw, want)
		}
	}

	// They fail the run, each with why.
	s := &Summary{Leaks: map[string]int{}}
	evaluate(s, Plan{}, tr, c, nil, nil, time.Time{}, nil, &Driver{}, &PluginProc{}, nil)
	var unjudged []string
	for _, f := range s.Failures {
		if strings.HasPrefix(f, "unjudged action: ") {
			unjudged = append(unjudged, f)
		}
	}
	if len(unjudged) != 3 || !strings.Contains(unjudged[0], "owner (container_id) and netns (path) name no sandbox") ||
		!strings.Contains(unjudged[2], "an action kind the checker does not know") {
		t.Fatalf("failures for the unjudged actions: %q, want 3 with why (all failures: %q)", unjudged, s.Failures)
	}
	if !slices.ContainsFunc(s.Failures, func(f string) bool { return strings.Contains(f, "3 false eviction(s)") }) {
		t.Errorf("the false evictions do not fail the run: %q", s.Failures)
	}
}

// Every kind the planner has is one the checker resolves: a new kind would
// otherwise be "unknown" (and now fail every soak it appears in).
func TestTheCheckerKnowsEveryActionKind(t *testing.T) {
	for _, k := range gc.Kinds {
		if !checkedKinds[string(k)] {
			t.Errorf("kind %s is not one the log checker resolves", k)
		}
	}
	for _, k := range []gc.Kind{gc.RemoveCNIAttachment, gc.ReleaseIPReservation, gc.RemoveNetns} {
		if !networkKinds[string(k)] {
			t.Errorf("kind %s is not counted as a network kind", k)
		}
	}
}

// A pod-dir leak the plugin did not see torn down is by design only when a
// fault came near its teardown; with none, the plugin missed a teardown it
// was there to see, and the leak is missing (a plugin that never marks a pod
// torn down would otherwise pass every soak).
func TestAnUnseenTeardownIsByDesignOnlyNearAFault(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	pod := &Pod{UID: "u", TeardownFrom: t0, TeardownUntil: t0.Add(6 * time.Second)}
	at := func(from, until time.Duration) FaultRecord {
		return FaultRecord{Kind: FaultPluginKill, Start: t0.Add(from), End: t0.Add(until)}
	}
	for _, tc := range []struct {
		name   string
		faults []FaultRecord
		want   bool
	}{
		{"no fault", nil, false},
		{"a plugin kill during the teardown", []FaultRecord{at(2*time.Second, 4*time.Second)}, true},
		{"one that ended just before the stop", []FaultRecord{at(-20*time.Second, -5*time.Second)}, true},
		{"one before the pass that logs the removal", []FaultRecord{at(6*time.Second+Period, 30*time.Second)}, true},
		{"one long before", []FaultRecord{at(-time.Minute, -faultShadow-time.Second)}, false},
		{"one long after", []FaultRecord{at(6*time.Second+Period+faultShadow+time.Second, time.Minute)}, false},
	} {
		if _, got := faultDuringTeardown(tc.faults, pod); got != tc.want {
			t.Errorf("%s: disturbed %v, want %v", tc.name, got, tc.want)
		}
	}
	// A fault long before the teardown, when an earlier sandbox of the pod
	// was stopped (a sandbox restart), may have lost that sandbox's stop
	// and removal: it went by absence, no evidence of a teardown.
	restarted := &Pod{UID: "r", TeardownFrom: t0, TeardownUntil: t0.Add(6 * time.Second),
		Sandboxes: []*Object{{ID: "old", Dead: t0.Add(-5 * time.Minute)}, {ID: "new", Dead: t0}}}
	if _, got := faultDuringTeardown([]FaultRecord{at(-5*time.Minute-time.Second, -5*time.Minute+time.Second)}, restarted); !got {
		t.Errorf("a fault at an earlier sandbox's stop: not disturbed, want disturbed")
	}
	if _, got := faultDuringTeardown([]FaultRecord{at(-3*time.Minute, -2*time.Minute)}, restarted); got {
		t.Errorf("a fault away from every stop: disturbed, want not")
	}
}
