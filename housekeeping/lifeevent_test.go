package housekeeping

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// TestAPodWithALifeEventAfterTheListingHasNoStepPlanned: the loop hands
// podstate's last life event of each pod to the plan (gc.Input.LastLifeEvent),
// so a pod NRI saw start again (a new sandbox) after the listing was taken
// has none of its steps planned that pass: the listing is older than what is
// known of the pod. gc's tests check the rule on a given Input; this one
// checks the wiring, through a real pass whose executor runs whatever it is
// handed (no re-check behind it to hide a missing rule). The event arrives
// while the listing is taken, as it would in a race with kubelet.
func TestAPodWithALifeEventAfterTheListingHasNoStepPlanned(t *testing.T) {
	// restarted has the event; other never has one and shows the pass acts.
	restarted, other := testUID(700), testUID(701)
	for _, tc := range []struct {
		rule    string
		eventAt time.Duration // after the listing's time
		skipped bool
	}{
		{"a life event before the listing: its steps are planned", -time.Second, false},
		{"a life event at the listing's time: not after it, its steps are planned", 0, false},
		{"a life event after the listing: none of its steps is planned", time.Second, true},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			// Both pods' sandboxes are NotReady and their pod dirs gone: with
			// no leak_grace their removal is due at once.
			rt := &fakeRuntime{}
			rt.set(cri.Snapshot{TakenAt: now, Sandboxes: []cri.Sandbox{
				{ID: "sb-restarted", UID: restarted, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(restarted)},
				{ID: "sb-other", UID: other, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(other)},
			}}, nil)
			state := podstate.New(0)
			rt.onSnapshot = func() {
				if err := state.Apply(podstate.Event{Kind: podstate.RunPodSandbox, At: now.Add(tc.eventAt), Pod: ident(restarted),
					SandboxID: "sb-new"}); err != nil {
					t.Error(err)
				}
			}
			exec := &fakeExecutor{}
			log, _ := testLogger()
			loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: podDirs(t), Executor: exec,
				Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			loop.started = now.Add(-time.Hour)
			r := loop.Pass(context.Background())
			if r.Err != nil || r.Blocked != "" {
				t.Fatalf("pass failed (%v) or blocked (%q): the test proves nothing", r.Err, r.Blocked)
			}
			if p, _ := state.Pod(restarted); !p.LastLifeEvent.Equal(now.Add(tc.eventAt)) {
				t.Fatalf("podstate's last life event of the pod is %v, want %v: the test proves nothing", p.LastLifeEvent, now.Add(tc.eventAt))
			}

			rm := string(gc.RemoveSandbox) + " sandbox/"
			want := []string{rm + "sb-other"}
			if !tc.skipped {
				want = append(want, rm+"sb-restarted")
			}
			got := executedActions(exec)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("executed %q, want %q", got, want)
			}
			// Skipped, not merely deferred: nothing of the pod waits for a
			// later pass either, and the plan says why.
			for _, d := range r.Plan.Deferred {
				if d.Action.Pod.UID == restarted {
					t.Errorf("deferred %s (%s): a skipped pod has no step at all", d.Action.Key, d.Why())
				}
			}
			skipped := slices.ContainsFunc(r.Plan.Skipped, func(p gc.PodRef) bool { return p.UID == restarted })
			kept := slices.ContainsFunc(r.Plan.Kept, func(k gc.Kept) bool {
				return k.Object == "pod "+restarted && strings.Contains(k.Reason, "life event")
			})
			if skipped != tc.skipped || kept != tc.skipped {
				t.Errorf("the plan lists the pod as skipped: %v, kept for its life event: %v; want %v (skipped %v, kept %+v)",
					skipped, kept, tc.skipped, r.Plan.Skipped, r.Plan.Kept)
			}
		})
	}
}
