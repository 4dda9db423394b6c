package housekeeping

import (
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
)

// logPlan says what a plan means for the node: the gate opening or closing,
// the breaker, newly found orphaned live pods, and deferred actions.
func (l *Loop) logPlan(r PassResult) {
	if r.Blocked != l.blocked {
		switch {
		case r.Untrusted != "":
			// The listing's distrust is said as an error (Pass): this is
			// only the gate closing.
			l.log.WithField(logging.FieldReason, r.Blocked).Info("housekeeping neither plans nor acts while the listing is not trusted")
		case r.Blocked != "":
			l.log.WithField(logging.FieldReason, r.Blocked).Info("housekeeping plans but does not act yet")
		default:
			l.log.Info("all sources ready: housekeeping acts on what is due from now on")
		}
		l.blocked = r.Blocked
	}
	if r.Untrusted != "" || r.Plan.NotReady != "" {
		// Nothing was planned, so nothing was checked: the oracle, the
		// budget and the orphans found stand as the last plan said them,
		// and are not said again (nor said to be over) meanwhile.
		return
	}
	l.sayWhileItLasts("oracle", r.Plan.OracleUntrusted, "kubelet's pod dirs are not trusted: no pod-gone rule runs",
		"kubelet's pod dirs agree with the runtime again: the pod-gone rules run")
	// A budget trip is an error when a class trips, or trips over other
	// pods; while it lasts unchanged, every pass says it at debug level.
	tripped := make(map[string]bool)
	for _, t := range r.Plan.Trips {
		tripped[t.Class] = true
		key, affected := "budget/"+t.Class, podList(t.AffectedPods)
		entry := l.log.WithFields(logrus.Fields{"class": t.Class, "due": t.Due, "allowed": t.Allowed, "per_pass": t.PerPass,
			"hour_spent": t.HourSpent, "ready_sandboxes": t.ReadySandbox, "affected": affected})
		if l.said[key] == affected {
			entry.Debug(t.Message)
			continue
		}
		entry.Error(t.Message)
		l.said[key] = affected
	}
	for _, class := range gc.BudgetClasses {
		if _, was := l.said["budget/"+class]; was && !tripped[class] {
			delete(l.said, "budget/"+class)
			l.log.WithField("class", class).Info("blast-radius budget: the class is within its budget again")
		}
	}
	for _, p := range r.Plan.Skipped {
		l.log.WithFields(podFields(p)).Debug("a life event arrived after the listing: the pod's actions wait for the next pass")
	}
	// Orphans are said once, when first found: those the plan leaves alone,
	// and, with orphans.action = "stop", those it stops (now, once they
	// waited out leak_grace, or not while a sandbox's stop is held).
	seen := make(map[string]bool)
	// key is the rule, or the rule and what else sets the message apart.
	say := func(pod gc.PodRef, key, msg string) {
		rule, _, _ := strings.Cut(key, "/")
		key += "/" + pod.UID
		if !seen[key] && !l.reported[key] {
			l.log.WithFields(podFields(pod)).WithField(logging.FieldRule, rule).Warn(msg)
		}
		seen[key] = true
	}
	for _, k := range r.Plan.Kept {
		switch {
		case strings.HasPrefix(k.Object, "container ") && strings.Contains(k.Reason, "state UNKNOWN (it may run), not stopped"):
			// Left to kubelet for good if kubelet's GC is what is stuck:
			// said once, as nothing is proposed for it to persist.
			key := "unknown-kept/" + k.Object + "/" + k.Pod.UID
			if !seen[key] && !l.reported[key] {
				l.log.WithFields(podFields(k.Pod)).Warn(k.Object + ": " + k.Reason)
			}
			seen[key] = true
		case strings.HasPrefix(k.Object, "live pod "):
			say(k.Pod, gc.RuleOrphanStop, "orphaned live pod: "+k.Reason)
		case strings.HasPrefix(k.Reason, "orphaned live sandbox not stopped"):
			say(k.Pod, gc.RuleOrphanStop, "orphaned live pod: "+k.Object+": "+k.Reason)
		case strings.HasPrefix(k.Object, "pod dir ") && strings.HasPrefix(k.Reason, "orphaned pod dir"):
			say(k.Pod, gc.RuleOrphanedPodDir, k.Object+": "+k.Reason)
		}
	}
	const stopping = "orphaned live pod whose pod is gone from the node: stopped (orphans.action = \"stop\")"
	ran := make(map[string]executor.Result, len(r.Outcomes))
	for _, o := range r.Outcomes {
		ran[o.Action.Key] = o.Result
	}
	for _, a := range r.Plan.Actions {
		// "now" only of a stop that ran; what did not is said as what it
		// is, keyed apart, so that "now" is said when it runs.
		switch {
		case a.Rule != gc.RuleOrphanStop:
		case ran[a.Key] == executor.Success:
			say(a.Pod, gc.RuleOrphanStop, stopping+" now")
		case ran[a.Key] == executor.Would:
			say(a.Pod, gc.RuleOrphanStop+"/dry-run", stopping+" now, were it not a dry run (dry_run = true): nothing was done")
		case r.Blocked != "":
			say(a.Pod, gc.RuleOrphanStop+"/gate", stopping+" once housekeeping acts: "+r.Blocked)
		default:
			// Due, and not stopped this pass: report (which takes no
			// step), or a stop that failed or backs off (the executor
			// says why).
			say(a.Pod, gc.RuleOrphanStop+"/due", "orphaned live pod whose pod is gone from the node: due to be stopped (orphans.action = \"stop\")")
		}
	}
	for _, d := range r.Plan.Deferred {
		switch {
		case d.Action.Rule == gc.RuleOrphanStop && d.Disabled:
			say(d.Action.Pod, gc.RuleOrphanStop, "orphaned live pod whose pod is gone from the node: not stopped while "+
				"budget.max_per_pass or budget.max_per_hour is 0, or budget.max_fraction with budget.min_per_pass, which disables every budgeted step")
		case d.Action.Rule == gc.RuleOrphanStop:
			say(d.Action.Pod, gc.RuleOrphanStop, stopping+" once due: "+d.Why())
		}
	}
	l.reported = seen
	for _, d := range r.Plan.Deferred {
		l.log.WithFields(actionFields(d.Action)).Debug("not due: " + d.Why())
	}
}

func podFields(p gc.PodRef) logrus.Fields {
	return logrus.Fields{logging.FieldPodUID: p.UID, logging.FieldPodNamespace: p.Namespace, logging.FieldPodName: p.Name}
}

func actionFields(a gc.Action) logrus.Fields {
	f := podFields(a.Pod)
	f[logging.FieldAction], f[logging.FieldRule], f[logging.FieldReason] = string(a.Kind), a.Rule, a.Reason
	if a.SandboxID != "" {
		f[logging.FieldSandboxID] = a.SandboxID
	}
	if a.ContainerID != "" {
		f[logging.FieldContainerID] = a.ContainerID
	}
	if a.Path != "" {
		f["path"] = a.Path
	}
	return f
}

func podList(pods []gc.PodRef) string {
	var s []string
	for _, p := range pods {
		s = append(s, fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, p.UID))
	}
	return strings.Join(s, ", ")
}
