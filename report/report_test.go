package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

const id64 = "fa9e36d77fba08a94a399b57a6a1897d330f1d6afa2379b4b6b0900b14501130"

func plan() (cri.Snapshot, gc.Result) {
	snap := cri.Snapshot{
		Sandboxes:  []cri.Sandbox{{ID: id64, Ready: false}, {ID: "live", Ready: true}},
		Containers: []cri.Container{{ID: "c1", State: cri.ContainerExited}, {ID: "c2", State: cri.ContainerRunning}},
	}
	pod := gc.PodRef{UID: "u1", Namespace: "demo", Name: "batch"}
	r := gc.Result{
		Leaks:   map[string]int{gc.LeakSandbox: 1, gc.LeakContainer: 1, gc.LeakLogLink: 0},
		Actions: []gc.Action{{Kind: gc.RemoveSandbox, Rule: gc.RuleSandboxPodGone, Pod: pod, SandboxID: id64, Reason: "its pod is gone"}},
		Deferred: []gc.Deferred{{Action: gc.Action{Kind: gc.RemoveContainer, Rule: gc.RuleContainerPodGone, Pod: pod,
			ContainerID: "c1", ContainerName: "app", Reason: "its pod is gone", EligibleSince: now}, GraceLeft: 90 * time.Second}},
		Kept: []gc.Kept{{Object: "sandbox " + id64, Pod: pod, Reason: "newest sandbox of a live pod"}},
	}
	return snap, r
}

func TestTextShowsEverySectionWithReasons(t *testing.T) {
	snap, r := plan()
	var buf bytes.Buffer
	if err := Text(&buf, Build(now, snap, r, "NRI has not synchronized")); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"runtime: 2 sandboxes (1 ready), 2 containers (1 exited, 1 running)",
		"NOT ACTING: NRI has not synchronized",
		"leaks detected: 1 container, 1 sandbox",
		"DUE NOW (1)", "sandbox fa9e36d77fba0", "sandboxes.pod-gone",
		"NOT DUE YET (1)", "container c1 (app)", "not yet: waiting for leak_grace", "1m30s left",
		"KEPT (1)", "newest sandbox of a live pod", "demo/batch",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, id64) {
		t.Error("a 64-digit ID was not shortened in the table")
	}
}

func TestJSONCarriesTheSameAndFullIDs(t *testing.T) {
	snap, r := plan()
	var buf bytes.Buffer
	if err := JSON(&buf, Build(now, snap, r, "")); err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	if len(got.Actions) != 1 || len(got.Deferred) != 1 || len(got.Kept) != 1 || got.Leaks["sandbox"] != 1 {
		t.Fatalf("report = %+v", got)
	}
	if got.Actions[0].Object != "sandbox "+id64 || got.Runtime.ContainersState["RUNNING"] != 1 || got.Blocked != "" {
		t.Fatalf("report = %+v", got)
	}
}

func TestAnUnreadyOracleIsShownAsNotActing(t *testing.T) {
	rep := Build(now, cri.Snapshot{}, gc.Result{NotReady: "the pod oracle is not ready: /var/lib/kubelet/pods does not exist"}, "")
	if !strings.Contains(rep.Blocked, "/var/lib/kubelet/pods") {
		t.Fatalf("blocked = %q", rep.Blocked)
	}
	if rep.Actions == nil || rep.Kept == nil || rep.Deferred == nil {
		t.Fatal("empty sections must be [] in JSON, not null")
	}
}

// The report shows what the plan distrusted and which budget classes it
// paused, in both forms.
func TestTheReportShowsDistrustedSourcesAndPausedClasses(t *testing.T) {
	snap, r := plan()
	r.OracleUntrusted = "the kubelet pods dir is empty while the runtime runs 1 Ready sandbox(es)"
	r.ListingChecked, r.OracleChecked = true, true
	r.Trips = []gc.Trip{{Class: gc.ClassPodLogDir, Due: 5, Allowed: 3, Message: "blast-radius budget: this pass would take 5 pod-log-dir step(s)"}}
	r.Skipped = []gc.PodRef{{UID: "u9", Namespace: "ns", Name: "back"}}
	rep := Build(now, snap, r, "")
	var text, js bytes.Buffer
	if err := Text(&text, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"sources: runtime listing trusted; kubelet pod dirs NOT TRUSTED (the kubelet pods dir is empty",
		"BUDGET: pod-log-dir PAUSED: blast-radius budget: this pass would take 5 pod-log-dir step(s)",
		"SKIPPED: pod ns/back (u9): a life event arrived after the listing",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text has no %q:\n%s", want, text.String())
		}
	}
	if err := JSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Sources.Listing.Trusted || got.Sources.Oracle.Trusted || got.Sources.Oracle.Why == "" ||
		len(got.Budget) != 1 || got.Budget[0].Class != gc.ClassPodLogDir || len(got.Skipped) != 1 {
		t.Fatalf("JSON report = %+v", got)
	}
	// An untrusted listing blocks everything; the report says why.
	rep = Build(now, snap, gc.Result{Untrusted: "the CRI listing shares no sandbox with NRI", ListingChecked: true}, "the CRI listing shares no sandbox with NRI")
	if rep.Sources.Listing.Trusted || !rep.Sources.Listing.Checked || rep.Blocked == "" {
		t.Fatalf("untrusted listing report = %+v", rep)
	}
}

// report and once have no NRI side, and an oracle that is not ready is not
// checked: the report says "not checked", never "trusted".
func TestTheReportDoesNotCallAnUncheckedSourceTrusted(t *testing.T) {
	snap, _ := plan()
	var text bytes.Buffer
	if err := Text(&text, Build(now, snap, gc.Result{NotReady: "the pod oracle is not ready: no pods dir"}, "")); err != nil {
		t.Fatal(err)
	}
	if want := "sources: runtime listing not checked (no NRI side"; !strings.Contains(text.String(), want) ||
		!strings.Contains(text.String(), "kubelet pod dirs not checked (the pod oracle is not ready") {
		t.Fatalf("text:\n%s", text.String())
	}
}

func TestAPodKnownByUIDAloneIsShownByItsUID(t *testing.T) {
	snap, r := plan()
	r.Actions = append(r.Actions, gc.Action{Kind: gc.RemovePodCgroup, Rule: gc.RuleCgroupPodGone, Pod: gc.PodRef{UID: "u9"},
		Path: "/sys/fs/cgroup/kubepods/podu9", Reason: "its pod is gone"})
	var buf bytes.Buffer
	if err := Text(&buf, Build(now, snap, r, "")); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "uid u9") || strings.Contains(out, " / ") {
		t.Errorf("the cgroup's pod is not shown by its UID:\n%s", out)
	}
}

// TestJSONKeysAreSnakeCaseAtEveryLevel: the JSON form is read by scripts;
// every key is snake_case, nested ones too (a pod, a budget trip), so that
// no Go field name of the planner is part of it.
func TestJSONKeysAreSnakeCaseAtEveryLevel(t *testing.T) {
	snap, r := plan()
	r.Trips = []gc.Trip{{Class: gc.ClassPodLogDir, Due: 5, Allowed: 3, AffectedPods: []gc.PodRef{{UID: "u2", Namespace: "ns", Name: "x"}}, Message: "m"}}
	r.Skipped = []gc.PodRef{{UID: "u9", Namespace: "ns", Name: "back"}}
	var js bytes.Buffer
	if err := JSON(&js, Build(now, snap, r, "")); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				// leaks and containers_by_state are keyed by data (kinds,
				// states), not by field names.
				if k != strings.ToLower(k) && !strings.HasSuffix(path, ".leaks") && !strings.HasSuffix(path, ".containers_by_state") {
					t.Errorf("key %s.%s is not snake_case", path, k)
				}
				walk(path+"."+k, child)
			}
		case []any:
			for _, child := range v {
				walk(path+"[]", child)
			}
		}
	}
	walk("", doc)
	for _, want := range []string{`"affected_pods"`, `"uid": "u2"`, `"skipped_pods"`, `"pod": {`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("JSON has no %s:\n%s", want, js.String())
		}
	}
}

// Only IDs are shortened in the table: a path of 64 characters (a pod log
// dir /var/log/pods/<ns>_<name>_<uid> often is) is shown whole, not as
// "/var/log/pods".
func TestATableShortensIDsButNotPathsOf64Characters(t *testing.T) {
	path := "/var/log/pods/default_nginx_7b88465b-12fb-4fef-863c-3de5d3fab50d"
	if len(path) != 64 {
		t.Fatalf("the path has %d characters, want 64: the test proves nothing", len(path))
	}
	snap, r := plan()
	r.Actions = append(r.Actions, gc.Action{Kind: gc.RemovePodLogDir, Rule: gc.RulePodLogDir, Path: path, Reason: "its pod is gone"})
	var buf bytes.Buffer
	if err := Text(&buf, Build(now, snap, r, "")); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, path) || strings.Contains(out, id64) || !strings.Contains(out, id64[:13]) {
		t.Fatalf("want the path whole and the sandbox ID shortened:\n%s", out)
	}
}

// TestANameCannotForgeALineOfTheTable: why a pod dir is kept names the
// leftover files in it, which a workload names; a newline or a tab in a
// name is written escaped, so the table keeps one line per object.
func TestANameCannotForgeALineOfTheTable(t *testing.T) {
	snap, r := plan()
	forged := "x\nremove-sandbox      sandboxes.pod-gone  kube-system/etcd\tsandbox 1234"
	r.Kept = append(r.Kept, gc.Kept{Object: "pod dir /var/lib/kubelet/pods/u1", Pod: gc.PodRef{UID: "u1"},
		Reason: "orphaned pod dir that kubelet could not remove: leftover file volumes/kubernetes.io~empty-dir/c/" + forged})
	r.Skipped = append(r.Skipped, gc.PodRef{Namespace: "ns", Name: "p\nBUDGET: orphan-stop PAUSED: forged", UID: "u2"})
	var buf bytes.Buffer
	if err := Text(&buf, Build(now, snap, r, "not ready:\nSKIPPED: pod forged")); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, forged := range []string{"\nBUDGET: orphan-stop PAUSED: forged", "\nSKIPPED: pod forged"} {
		if strings.Contains(out, forged) {
			t.Errorf("a line was forged: %q in\n%s", forged, out)
		}
	}
	if strings.Contains(out, "\nremove-sandbox      sandboxes.pod-gone  kube-system/etcd") || !strings.Contains(out, `c/x\nremove-sandbox`) || !strings.Contains(out, `etcd\tsandbox`) {
		t.Fatalf("the name was not escaped:\n%s", out)
	}
}

// A report whose plan looked for nothing (a source not ready) or not for
// everything (kubelet's pod dirs not trusted) must not say "none": that
// reads as a clean node.
func TestLeaksNotLookedForAreNotSaidNone(t *testing.T) {
	cgroups := []string{"pod cgroups (listing /sys/fs/cgroup: permission denied)"}
	for _, tc := range []struct {
		name      string
		plan      gc.Result
		notLooked []string // housekeeping.PassResult.NotLookedFor
		want      string
	}{
		{"the oracle not ready", gc.Result{NotReady: "the pod oracle is not ready: /k/pods does not exist", Leaks: map[string]int{}}, cgroups,
			"leaks detected: UNKNOWN: not looked for: every kind: nothing was planned (the pod oracle is not ready: /k/pods does not exist)\n"},
		{"kubelet's pod dirs not trusted", gc.Result{OracleUntrusted: "it calls 9 of 10 live pods gone", Leaks: map[string]int{gc.LeakLogLink: 2}}, nil,
			"leaks detected: 2 log-link; NOT LOOKED FOR: those of gone pods: kubelet's pod dirs are not trusted (it calls 9 of 10 live pods gone)\n"},
		{"the pod cgroups not listed", gc.Result{Leaks: map[string]int{gc.LeakLogLink: 2}}, cgroups,
			"leaks detected: 2 log-link; NOT LOOKED FOR: pod cgroups (listing /sys/fs/cgroup: permission denied)\n"},
		{"both", gc.Result{OracleUntrusted: "it calls 9 of 10 live pods gone", Leaks: map[string]int{}}, cgroups,
			"leaks detected: none; NOT LOOKED FOR: those of gone pods: kubelet's pod dirs are not trusted (it calls 9 of 10 live pods gone); pod cgroups (listing /sys/fs/cgroup: permission denied)\n"},
		{"every source ready", gc.Result{Leaks: map[string]int{}}, nil, "leaks detected: none\n"},
	} {
		var buf bytes.Buffer
		rep := Build(now, cri.Snapshot{}, tc.plan, "")
		rep.AddNotLookedFor(tc.notLooked)
		rep.Command = "once"
		if err := Text(&buf, rep); err != nil {
			t.Fatal(err)
		}
		if out := buf.String(); !strings.Contains(out, tc.want) || !strings.HasPrefix(out, "nri-housekeeper once, ") {
			t.Errorf("%s: report has no %q, or is not said once's:\n%s", tc.name, tc.want, out)
		}
	}
}

// TestARowAboutNoPodHasNoPodInJSON: an IP reservation belongs to no pod
// the plan knows; its JSON row has no "pod" key, where it had "pod": {}
// (a script reading .pod.uid got an empty string, not a missing key).
func TestARowAboutNoPodHasNoPodInJSON(t *testing.T) {
	snap, r := plan()
	r.Actions = []gc.Action{{Kind: gc.ReleaseIPReservation, Rule: gc.RuleNetworkReservation, Reason: "no sandbox owns it"}}
	var js bytes.Buffer
	if err := JSON(&js, Build(now, snap, r, "")); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Actions []map[string]json.RawMessage `json:"actions"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Actions) != 1 {
		t.Fatalf("%d actions, want 1:\n%s", len(doc.Actions), js.String())
	}
	if p, ok := doc.Actions[0]["pod"]; ok {
		t.Fatalf("a row about no pod has \"pod\": %s", p)
	}
}
