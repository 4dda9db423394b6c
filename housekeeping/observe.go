package housekeeping

import (
	"strconv"
	"time"

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
	o.SetUntrusted(SourceOracle, r.Plan.OracleUntrusted != "")
	o.SetLeaks(r.Plan.Leaks)
	for _, out := range r.Outcomes {
		o.ObserveAction(string(out.Action.Kind), out.Action.Rule, string(out.Result))
	}
	var tripped []string
	for _, t := range r.Plan.Trips {
		tripped = append(tripped, t.Class)
	}
	o.ObserveBudgetTrips(tripped)
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

// terminatingSince estimates when a pod stopped running: when its last
// sandbox left Ready (or when it was first seen, without a sandbox).
func terminatingSince(p podstate.PodView) (since time.Time) {
	since = p.FirstSeen
	for _, s := range p.Sandboxes {
		if s.State != podstate.SandboxReady && s.StateSince.After(since) {
			since = s.StateSince
		}
	}
	return since
}
