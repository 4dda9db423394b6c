package metrics

// Every label of this package takes its values from a fixed set: a value
// outside the set is recorded as Other. Series count is then bounded by
// construction, whatever a caller passes (a pod name, a UID or a container
// ID can never become a label value).

// Other replaces a label value outside its label's fixed set.
const Other = "other"

// Label names.
const (
	labelPhase  = "phase"
	labelOrphan = "orphan"
	labelKind   = "kind"
	labelRule   = "rule"
	labelResult = "result"
	labelMethod = "method"
	labelEvent  = "event"
	labelClass  = "class"
	labelSource = "source"
	labelPart   = "part"
)

// Pass results (ObservePass).
const (
	PassOK              = "ok"                // planned and executed
	PassSkippedNotReady = "skipped_not_ready" // planned, but the readiness gate was closed: nothing executed
	PassListingFailed   = "listing_failed"    // no fresh CRI listing: no plan
	// PassListingUntrusted: the listing disagreed with NRI: no reconcile,
	// no plan.
	PassListingUntrusted = "listing_untrusted"
)

// knownValues are the fixed sets, one per label. They mirror the names of
// other packages (podstate phases, gc kinds, rules and leak kinds, executor
// results, cri and plugin calls) without importing them, so this package
// stays a leaf. A function, not a package variable: no shared mutable
// state, and every caller gets its own copy.
type knownValues struct {
	phases        []string // podstate.Phase.String()
	orphan        []string // whether the pod was learned from a listing, not from NRI
	leakKinds     []string // gc Result.Leaks keys
	actionKinds   []string // gc.Kind
	rules         []string // gc Rule* constants
	actionResults []string // executor.Result
	passResults   []string
	criMethods    []string // CRI calls of package cri
	nriEvents     []string // NRI events of package plugin
	classes       []string // gc.BudgetClasses
	sources       []string // the sources a pass may distrust (housekeeping.Source*)
	parts         []string // the parts of housekeeping that can fail alone (housekeeping.Part*)
	// actionPairs are the (kind, rule) pairs the planner proposes; actions
	// are zero-filled for these only (every kind × rule would be mostly
	// impossible series).
	actionPairs [][2]string
}

func known() knownValues {
	return knownValues{
		phases: []string{"Running", "Terminating", "Terminated", "Removed"},
		orphan: []string{"true", "false"},
		leakKinds: []string{"sandbox", "container", "unknown-container", "pod-log-dir", "log-link", "orphaned-live-pod", "pod-cgroup", "pod-dir",
			"cni-attachment", "ip-reservation", "netns"},
		actionKinds: []string{
			"stop-container", "remove-container", "stop-sandbox", "remove-sandbox", "remove-pod-log-dir", "remove-log-link",
			"remove-pod-cgroup", "reduce-pod-cgroup-cpu", "remove-pod-dir",
			"remove-cni-attachment", "release-ip", "remove-netns",
		},
		rules: []string{
			"containers.pod-gone", "containers.max-per-pod-container", "containers.max-containers",
			"sandboxes.pod-gone", "sandboxes.not-newest",
			"logs.pod-log-dir", "logs.dangling-link",
			"orphans.stop",
			"cgroups.pod-gone", "cgroups.orphaned-pod", "cgroups.volumes-remain", "pod-dirs.orphaned",
			"network.attachment-unowned", "network.reservation-unowned", "network.netns-unused",
		},
		actionResults: []string{"success", "error", "would", "backoff", "skipped", "aborted"},
		passResults:   []string{PassOK, PassSkippedNotReady, PassListingFailed, PassListingUntrusted},
		criMethods: []string{"ListPodSandbox", "ListContainers", "PodSandboxStatus", "ContainerStatus", "StopContainer", "RemoveContainer", "StopPodSandbox",
			"RemovePodSandbox", "Version", "Status", "List", "Get"},
		nriEvents: []string{"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer", "Synchronize"},
		classes:   []string{"orphan-stop", "unknown-stop", "cgroup-kill", "cgroup-cpu", "pod-dir", "pod-log-dir", "network"},
		sources:   []string{"runtime-listing", "pod-oracle"},
		parts:     []string{"network", "state-file", "cgroups"},
		actionPairs: [][2]string{
			// An UNKNOWN container is stopped and removed under the rule
			// that evicts it (remove-container).
			{"stop-container", "orphans.stop"},
			{"remove-container", "containers.pod-gone"},
			{"remove-container", "containers.max-per-pod-container"},
			{"remove-container", "containers.max-containers"},
			{"stop-sandbox", "orphans.stop"},
			{"remove-sandbox", "sandboxes.pod-gone"},
			{"remove-sandbox", "sandboxes.not-newest"},
			{"remove-pod-log-dir", "logs.pod-log-dir"},
			{"remove-log-link", "logs.dangling-link"},
			{"remove-pod-cgroup", "cgroups.pod-gone"},
			{"remove-pod-cgroup", "cgroups.orphaned-pod"},
			{"reduce-pod-cgroup-cpu", "cgroups.volumes-remain"},
			{"remove-pod-dir", "pod-dirs.orphaned"},
			{"remove-cni-attachment", "network.attachment-unowned"},
			{"release-ip", "network.reservation-unowned"},
			{"remove-netns", "network.netns-unused"},
		},
	}
}

// AllowedLabelValues returns, for every metric of this package that has
// labels, the fixed set of values of each label; Other is allowed in
// addition. nri_housekeeper_build_info is not listed: its labels are
// constant for the life of the process (one series). The result is a fresh
// copy.
func AllowedLabelValues() map[string]map[string][]string {
	k := known()
	return map[string]map[string][]string{
		nameTrackedPods:   {labelPhase: k.phases, labelOrphan: k.orphan},
		nameLeakedObjects: {labelKind: k.leakKinds},
		nameOldestLeak:    {labelKind: k.actionKinds},
		nameActions:       {labelKind: k.actionKinds, labelRule: k.rules, labelResult: k.actionResults},
		namePasses:        {labelResult: k.passResults},
		nameCRIDuration:   {labelMethod: k.criMethods},
		nameCRIErrors:     {labelMethod: k.criMethods},
		nameNRIEvents:     {labelEvent: k.nriEvents},
		nameBreakerTrips:  {labelClass: k.classes},
		nameBudgetPaused:  {labelClass: k.classes},
		nameUntrusted:     {labelSource: k.sources},
		nameDegraded:      {labelPart: k.parts},
	}
}

// valueSet maps a caller's value to itself when it is known, else to Other.
type valueSet map[string]struct{}

func newValueSet(values []string) valueSet {
	s := make(valueSet, len(values))
	for _, v := range values {
		s[v] = struct{}{}
	}
	return s
}

func (s valueSet) pick(v string) string {
	if _, ok := s[v]; ok {
		return v
	}
	return Other
}

// withOther is values followed by Other: the full domain of a label.
func withOther(values []string) []string {
	return append(append([]string(nil), values...), Other)
}
