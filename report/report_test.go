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
		"NOT ACTING YET: NRI has not synchronized",
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
