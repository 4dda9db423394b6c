package housekeeping

import (
	"strconv"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// observe reports one pass to the Observer.
func (l *Loop) observe(r PassResult, view *podstate.View) {
	o := l.opts.Observer
	if o == nil {
		return
	}
	finished := r.Started.Add(r.Duration)
	switch {
	case r.Err != nil:
		o.ObservePass(PassListingFailed, r.Duration, finished)
		return
	case r.Untrusted != "":
		o.ObservePass(PassListingUntrusted, r.Duration, finished)
	case r.Blocked != "":
		o.ObservePass(PassSkippedNotReady, r.Duration, finished)
	default:
		o.ObservePass(PassOK, r.Duration, finished)
	}
	o.SetUntrusted(SourceListing, r.Untrusted != "")
	if r.Untrusted != "" {
		// Nothing was planned, so nothing was checked: what the last
		// trusted pass found (its leaks, the oracle, the budget) stands.
		return
	}
	if r.Plan.NotReady == "" {
		observePlan(o, r)
	}
	// else nothing was planned (the pod oracle not ready): what the last
	// planned pass found stands. What NRI and the listing tell goes on.
	if view == nil {
		return
	}
	tracked := make(map[[2]string]int)
	stuck := 0
	for _, p := range view.Pods {
		tracked[[2]string{p.Phase.String(), strconv.FormatBool(p.Orphan)}]++
		if p.Phase == podstate.PhaseTerminating && r.Started.Sub(terminatingSince(p)) >= l.opts.Policy.LeakGrace {
			stuck++
		}
	}
	o.SetTrackedPods(tracked)
	o.SetStuckTerminating(stuck)
}

// observePlan reports what a pass planned and did.
func observePlan(o Observer, r PassResult) {
	o.SetUntrusted(SourceOracle, r.Plan.OracleUntrusted != "")
	o.SetLeaks(r.Plan.Leaks)
	o.SetOldestLeaks(oldestProposed(r))
	for _, out := range r.Outcomes {
		o.ObserveAction(string(out.Action.Kind), out.Action.Rule, string(out.Result))
	}
	var tripped []string
	for _, t := range r.Plan.Trips {
		tripped = append(tripped, t.Class)
	}
	o.ObserveBudgetTrips(tripped)
}

// terminatingSince estimates when a pod stopped running: when its newest
// sandbox left Ready (or when the pod was first seen, without a sandbox).
// That sandbox's StoppedAt, not its StateSince, which for a Removed one is
// its removal: kubelet's garbage collection removes a pod's older
// sandboxes while the pod lives, and an explicit removal may take the
// newest one before an older one; neither restarts or backdates the count
// of a pod stuck since its newest sandbox stopped.
func terminatingSince(p podstate.PodView) time.Time {
	var newest *podstate.Sandbox
	for i := range p.Sandboxes {
		if s := &p.Sandboxes[i]; newest == nil || newerSandbox(s, newest) {
			newest = s
		}
	}
	if newest == nil || newest.StoppedAt.IsZero() {
		return p.FirstSeen
	}
	return newest.StoppedAt
}

// newerSandbox reports whether a was made after b: by the runtime's creation
// time where both have one, then by kubelet's attempt, then by when each
// was first seen.
func newerSandbox(a, b *podstate.Sandbox) bool {
	switch {
	case !a.CreatedAt.IsZero() && !b.CreatedAt.IsZero() && !a.CreatedAt.Equal(b.CreatedAt):
		return a.CreatedAt.After(b.CreatedAt)
	case a.Attempt != b.Attempt:
		return a.Attempt > b.Attempt
	}
	return a.FirstSeen.After(b.FirstSeen)
}

// oldestProposed is, by action kind, how long the oldest step the plan
// proposed, due or not yet, has been proposed (its clock since it was first
// proposed, pass after pass; a condition that stopped holding started it
// again).
func oldestProposed(r PassResult) map[string]time.Duration {
	oldest := make(map[string]time.Duration)
	note := func(a gc.Action) {
		since, ok := r.Plan.EligibleSince[a.Key]
		if !ok {
			return
		}
		kind := string(a.Kind)
		oldest[kind] = max(oldest[kind], r.Snapshot.TakenAt.Sub(since))
	}
	for _, a := range r.Plan.Actions {
		note(a)
	}
	for _, d := range r.Plan.Deferred {
		note(d.Action)
	}
	return oldest
}
