package gc

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Budget classes: every step that can hurt a live workload or user data
// belongs to one, and each class is counted against the budget on its own.
const (
	ClassOrphanStop  = "orphan-stop"  // stopping an orphaned live pod (counted in pods)
	ClassUnknownStop = "unknown-stop" // stopping (then removing) an UNKNOWN container: it may still run
	ClassCgroupKill  = "cgroup-kill"  // destroying a pod cgroup with processes in it
	ClassCgroupCPU   = "cgroup-cpu"   // reducing a pod cgroup's CPU to the minimum
	ClassPodDir      = "pod-dir"      // removing an orphaned kubelet pod dir
	ClassPodLogDir   = "pod-log-dir"  // removing a pod's log dir
	ClassNetwork     = "network"      // a CNI DEL, a reservation release or a netns removal: wrong, it cuts a live pod off
)

// BudgetClasses lists the classes in the order trips are reported.
var BudgetClasses = []string{ClassOrphanStop, ClassUnknownStop, ClassCgroupKill, ClassCgroupCPU, ClassPodDir, ClassPodLogDir, ClassNetwork}

// BudgetClass returns the budget class of an action and the unit it is
// counted in (the pod for orphan stops, the object otherwise), or "" for an
// action the budget does not limit: removing what is dead (exited
// containers, NotReady sandboxes, dangling links, empty cgroups).
func BudgetClass(a Action) (class, unit string) {
	switch {
	case a.Rule == RuleOrphanStop:
		return ClassOrphanStop, a.Pod.UID
	case a.Kind == RemoveContainer && a.StopFirst, a.Kind == StopContainer:
		return ClassUnknownStop, a.Key
	case a.Kind == RemovePodCgroup && a.Cgroup != nil && a.Cgroup.Procs > 0:
		return ClassCgroupKill, a.Key
	case a.Kind == ReducePodCgroupCPU:
		return ClassCgroupCPU, a.Key
	case a.Kind == RemovePodDir:
		return ClassPodDir, a.Key
	case a.Kind == RemovePodLogDir:
		return ClassPodLogDir, a.Key
	case a.Kind == RemoveCNIAttachment, a.Kind == ReleaseIPReservation, a.Kind == RemoveNetns:
		// One leaked sandbox is one unit: its attachments (the pod
		// network's and containerd's loopback), its reservation and its
		// netns. A netns no attachment names is a unit of its own.
		if a.ContainerID != "" {
			return ClassNetwork, a.ContainerID
		}
		return ClassNetwork, a.Key
	}
	return "", ""
}

// PerPass is what the budget lets one pass take of each class on a node
// with ready Ready sandboxes: max(MinPerPass, min(MaxPerPass,
// ⌊MaxFraction × ready⌋)).
func (b Budget) PerPass(ready int) int {
	byFraction := int(math.Floor(b.MaxFraction * float64(ready)))
	return max(b.MinPerPass, min(b.MaxPerPass, byFraction))
}

// budget holds back, class by class, the steps over what the budget allows
// this pass. Orphan stops are all or nothing: a pass that would stop more
// live pods than allowed stops none (a surge of them is what a wrong source
// looks like). Every other class takes up to what is allowed, the steps
// eligible longest first, and leaves the rest for later passes: two pods
// leaking at once on a small node are reclaimed one a pass, not paused for
// good. A class trips when it may take nothing (its hour is spent), or, for
// orphan stops, when the pass is over its budget: every due action of it is
// held and the trip returned (those that failed at their last try are not
// counted as the surge: they wait for places left). A unit taken already this hour
// (Input.BudgetAdmitted: a step that failed and is retried) is neither
// counted nor held: it was within the budget when first taken. The classes
// are decided in budgetOrder, each after what the earlier ones held is
// applied to the steps resting on it.
func (p *planner) budget(sorted []*Action, notDue map[string]waiting) []Trip {
	ready := 0
	for _, s := range p.sandboxes {
		if s.Ready {
			ready++
		}
	}
	b := p.in.Policy.Budget
	perPass := b.PerPass(ready)
	spentByClass := make(map[string]int)
	for unit := range p.in.BudgetAdmitted {
		if class, _, ok := strings.Cut(unit, "/"); ok {
			spentByClass[class]++
		}
	}
	// A cap of 0 configured is a choice, not a surge: the budgeted steps
	// are disabled, held with that reason, and no class trips (a trip is
	// an alert that something looked wrong). So is max_fraction = 0 with
	// no floor: 0 a pass on every node, whatever its size.
	disabled := b.MaxPerPass == 0 || b.MaxPerHour == 0 || (b.MaxFraction == 0 && b.MinPerPass == 0)
	var trips []Trip
	for _, class := range budgetOrder {
		// What an earlier class held holds what rests on it: a step
		// waiting for a refused one must not take one of this class's
		// places, or a step that could run waits for as long as the
		// refusal lasts.
		holdDependents(sorted, notDue)
		if disabled {
			// Every step of the class, also one taken this hour and
			// retried: disabling is an emergency brake too.
			for _, a := range sorted {
				if _, held := notDue[a.Key]; !held {
					if c, _ := BudgetClass(*a); c == class {
						notDue[a.Key] = waiting{budget: class, disabled: true}
					}
				}
			}
			continue
		}
		units, actions := p.dueInClass(class, sorted, notDue)
		spent := spentByClass[class]
		allowed := min(perPass, max(0, b.MaxPerHour-spent))
		if p.in.BudgetHeld != "" {
			allowed = 0
		}
		if units <= allowed {
			continue
		}
		if allowed > 0 && (!allOrNothing(class) || p.unitsNotFailing(class, actions) <= allowed) {
			// Orphan stops are all or nothing as a surge of new ones
			// (what a wrong source looks like); those that failed at
			// their last try were taken within the budget before, and
			// wait for the places left, or a failing one, counted again
			// when its hour is over, would trip the class with each newer
			// one, for as long as it keeps failing.
			p.throttle(actions, allowed, notDue, class)
			continue
		}
		t := Trip{Class: class, Due: units, Allowed: allowed, PerPass: perPass, HourSpent: spent,
			MaxPerHour: b.MaxPerHour, ReadySandbox: ready, Refused: len(actions)}
		pods := make(map[string]PodRef)
		for _, a := range actions {
			pods[a.Pod.UID] = a.Pod
		}
		for _, uid := range sortedKeys(pods) {
			t.AffectedPods = append(t.AffectedPods, pods[uid])
		}
		why := fmt.Sprintf("over the %d a pass may take on a node with %d Ready sandbox(es) (budget.max_per_pass %d, max_fraction %g, min_per_pass %d)",
			perPass, ready, b.MaxPerPass, b.MaxFraction, b.MinPerPass)
		switch {
		case p.in.BudgetHeld != "":
			why = p.in.BudgetHeld
		case allowed < perPass:
			why = fmt.Sprintf("over the %d left of budget.max_per_hour = %d (%d taken in the last hour)", allowed, b.MaxPerHour, spent)
		}
		t.Message = fmt.Sprintf("blast-radius budget: this pass would take %d %s step(s), %s; taking none of them (the %s class is paused while that lasts)",
			t.Due, class, why, class)
		for _, a := range actions {
			notDue[a.Key] = waiting{budget: class}
		}
		trips = append(trips, t)
	}
	slices.SortStableFunc(trips, func(x, y Trip) int {
		return slices.Index(BudgetClasses, x.Class) - slices.Index(BudgetClasses, y.Class)
	})
	return trips
}

// budgetOrder is the order budget decides the classes in: the order of the
// kinds they limit (Kinds). An action depends only on actions of earlier
// kinds, so what a class rests on is decided before it.
var budgetOrder = []string{ClassOrphanStop, ClassUnknownStop, ClassPodLogDir, ClassPodDir, ClassCgroupKill, ClassCgroupCPU, ClassNetwork}

// dueInClass returns the units and actions of class that are due (not in
// notDue), counted against the budget: neither unbudgeted nor taken
// already this hour (Input.BudgetAdmitted: a step that failed and is
// retried was within the budget when first taken).
func (p *planner) dueInClass(class string, sorted []*Action, notDue map[string]waiting) (units int, actions []*Action) {
	// Counted without a map, except for the classes of several actions a
	// unit (orphan stops: a pod; network steps: a sandbox): every other
	// unit is the action's own key, which is unique.
	var seenUnits map[string]bool
	if multiActionUnits(class) {
		seenUnits = make(map[string]bool)
	}
	for _, a := range sorted {
		if _, held := notDue[a.Key]; held {
			continue
		}
		c, unit := BudgetClass(*a)
		if c != class || p.in.BudgetAdmitted[class+"/"+unit] {
			continue
		}
		if seenUnits == nil || !seenUnits[unit] {
			units++
		}
		if seenUnits != nil {
			seenUnits[unit] = true
		}
		actions = append(actions, a)
	}
	return units, actions
}

// unitsNotFailing counts the units of actions, of class, that did not fail
// at their last try (Input.BudgetFailing).
func (p *planner) unitsNotFailing(class string, actions []*Action) int {
	units := make(map[string]bool)
	for _, a := range actions {
		if _, unit := BudgetClass(*a); !p.in.BudgetFailing[class+"/"+unit] {
			units[unit] = true
		}
	}
	return len(units)
}

// allOrNothing reports whether a pass over the budget of class takes none
// of its steps, rather than as many as allowed (see budget: but for those
// that failed at their last try).
func allOrNothing(class string) bool { return class == ClassOrphanStop }

// multiActionUnits reports whether a unit of class may have several
// actions (BudgetClass).
func multiActionUnits(class string) bool { return class == ClassOrphanStop || class == ClassNetwork }

// throttle keeps the allowed units, those that have not failed before
// first (Input.BudgetFailing), then those eligible longest (then by key),
// and holds the rest until a later pass. A unit's actions stay together: a
// unit is taken whole or not at all.
func (p *planner) throttle(actions []*Action, allowed int, notDue map[string]waiting, class string) {
	failed := func(a *Action) bool {
		_, unit := BudgetClass(*a)
		return p.in.BudgetFailing[class+"/"+unit]
	}
	byAge := slices.Clone(actions)
	slices.SortFunc(byAge, func(x, y *Action) int {
		if fx, fy := failed(x), failed(y); fx != fy {
			if fy {
				return -1
			}
			return 1
		}
		if c := x.EligibleSince.Compare(y.EligibleSince); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	taken := make(map[string]bool, allowed)
	for _, a := range byAge {
		_, unit := BudgetClass(*a)
		if !taken[unit] && len(taken) < allowed {
			taken[unit] = true
		}
		if !taken[unit] {
			notDue[a.Key] = waiting{budget: class, throttled: true, failed: failed(a)}
		}
	}
}
