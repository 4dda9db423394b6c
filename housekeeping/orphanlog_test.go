package housekeeping

import (
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// TestAnOrphanedLivePodIsAWarningWhateverOrphansActionSays: README "Orphaned
// live pods are warnings", said once while the pod stays one: reported
// (orphans.action = "report"), or, with "stop", waiting out leak_grace,
// stopped now, or held.
func TestAnOrphanedLivePodIsAWarningWhateverOrphansActionSays(t *testing.T) {
	pod := gc.PodRef{UID: "u1", Namespace: "ns", Name: "web"}
	stop := gc.Action{Kind: gc.StopSandbox, Rule: gc.RuleOrphanStop, Pod: pod, Key: "stop-sandbox/s1", SandboxID: "s1"}
	for _, tc := range []struct {
		name     string
		plan     gc.Result
		outcomes []executor.Outcome
		want     string
	}{
		{"report", gc.Result{Kept: []gc.Kept{{Object: "live pod ns/web", Pod: pod,
			Reason: `orphaned live pod (1 Ready sandbox(es), 0 running container(s)) whose pod is gone: reported only (orphans.action = "report")`}}},
			nil, `reported only (orphans.action = \"report\")`},
		{"stop, waiting out leak_grace", gc.Result{Deferred: []gc.Deferred{{Action: stop, GraceLeft: time.Minute}}},
			nil, `stopped (orphans.action = \"stop\") once due`},
		{"stop, stopped", gc.Result{Actions: []gc.Action{stop}}, []executor.Outcome{{Action: stop, Result: executor.Success}},
			`stopped (orphans.action = \"stop\") now`},
		{"stop, a dry run", gc.Result{Actions: []gc.Action{stop}}, []executor.Outcome{{Action: stop, Result: executor.Would}},
			"were it not a dry run (dry_run = true): nothing was done"},
		{"stop, due and not run (report)", gc.Result{Actions: []gc.Action{stop}}, nil, `due to be stopped (orphans.action = \"stop\")`},
		{"stop, held", gc.Result{Kept: []gc.Kept{{Object: "sandbox s1", Pod: pod,
			Reason: "orphaned live sandbox not stopped: StopPodSandbox would kill container c9 (debug, RUNNING), which this plan does not stop first"}}},
			nil, "orphaned live sandbox not stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, buf := testLogger()
			loop := New(podstate.New(0), &fakeRuntime{}, Options{Period: time.Hour}, log)
			for range 3 {
				loop.logPlan(PassResult{Plan: tc.plan, Outcomes: tc.outcomes})
			}
			var warnings []string
			for _, line := range strings.Split(buf.String(), "\n") {
				if strings.Contains(line, "level=warning") {
					warnings = append(warnings, line)
				}
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], "orphaned live pod") || !strings.Contains(warnings[0], tc.want) ||
				!strings.Contains(warnings[0], "pod_uid=u1") {
				t.Fatalf("warnings in 3 passes:\n%s\nwant one naming the pod and saying %q", strings.Join(warnings, "\n"), tc.want)
			}
			loop.logPlan(PassResult{}) // the pod is no orphan any more
			loop.logPlan(PassResult{Plan: tc.plan, Outcomes: tc.outcomes})
			if n := strings.Count(buf.String(), "level=warning"); n != 2 {
				t.Errorf("%d warnings, want the orphan said again when it is one again", n)
			}
		})
	}
}

// TestAnUnknownContainerLeftToKubeletIsAWarningSaidOnce: a container the
// plan leaves to kubelet (README: an unreadable grace annotation, a grace
// over 2 minutes) has no step that could persist and be alerted on; where
// kubelet's GC is what is stuck, it holds its pod for good. Said once while
// it stays kept, again if kept anew.
func TestAnUnknownContainerLeftToKubeletIsAWarningSaidOnce(t *testing.T) {
	pod := gc.PodRef{UID: "u1", Namespace: "ns", Name: "web"}
	plan := gc.Result{Kept: []gc.Kept{{Object: "container c1 (app)", Pod: pod,
		Reason: "state UNKNOWN (it may run), not stopped as kubelet would stop it: its pod's grace period (1h0m0s) is longer than the 2m0s a stop of the plugin waits; left to kubelet"}}}
	log, buf := testLogger()
	loop := New(podstate.New(0), &fakeRuntime{}, Options{Period: time.Hour}, log)
	for range 3 {
		loop.logPlan(PassResult{Plan: plan})
	}
	if n := strings.Count(buf.String(), "level=warning"); n != 1 || !strings.Contains(buf.String(), "container c1 (app): state UNKNOWN") || !strings.Contains(buf.String(), "pod_uid=u1") {
		t.Fatalf("%d warnings in 3 passes, want one naming the container and its pod:\n%s", n, buf.String())
	}
	loop.logPlan(PassResult{})
	loop.logPlan(PassResult{Plan: plan})
	if n := strings.Count(buf.String(), "level=warning"); n != 2 {
		t.Errorf("%d warnings, want it said again when kept anew", n)
	}
}
