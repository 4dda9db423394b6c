// Package gc plans housekeeping: given one fresh listing of the runtime, the
// pod oracle and the node's log files, it returns the actions to take, each
// with its rule and a human reason, and the suspicious objects it keeps with
// why. It is pure: no I/O, no clock, no randomness; the same input gives the
// same plan. Policy is data (evict units and rules as in kubelet's
// kuberuntime_gc.go), so every rule is testable table by table.
package gc

import (
	"fmt"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// Policy is the configuration of the rules (DESIGN.md §4, §6).
type Policy struct {
	LeakGrace          time.Duration // every action waits until its object was eligible this long
	MinAge             time.Duration // containers younger than this are never evicted
	MaxPerPodContainer int           // dead containers kept per (pod, container name); < 0: no limit
	MaxContainers      int           // dead containers kept on the node; < 0: no limit
	StopOrphans        bool          // orphans.action = "stop" (else "report")
	StopTimeout        time.Duration // orphans.stop_timeout
	// Budget limits every step that can hurt a live workload or user data.
	Budget Budget
	// OracleSettle: Ready sandboxes younger than this do not count when the
	// oracle is checked against the runtime (0: all count).
	OracleSettle time.Duration
	// PodLogsDir and ContainerLogsDir are the roots file removals stay in:
	// a listed path that is not directly inside its root is never touched.
	PodLogsDir       string
	ContainerLogsDir string
	// RemoveOrphanedPodDirs is pod_dirs.remove_orphaned: remove orphaned
	// kubelet pod dirs (with kubelet's rules) instead of only reporting them.
	RemoveOrphanedPodDirs bool
	// NetworkMinAge is network.min_age: a netns, reservation or cache
	// entry whose file is younger is kept, whatever LeakGrace says.
	NetworkMinAge time.Duration
}

// Budget is the blast-radius budget ([budget]). Each class of step that can
// hurt a live workload or user data (BudgetClasses) is counted on its own,
// with these limits: a pass may take max(MinPerPass, min(MaxPerPass,
// ⌊MaxFraction × Ready sandboxes⌋)) steps of a class, and no more than what
// is left of MaxPerHour. A pass with more orphan stops due than that takes
// none of them (the class trips); of the other classes it takes what is
// allowed and leaves the rest for later passes (see planner.budget).
type Budget struct {
	MaxPerPass  int
	MaxFraction float64
	MinPerPass  int // the floor: one orphan on a small or drained node is handled
	MaxPerHour  int
}

// Oracle says which pods kubelet still has on the node.
type Oracle struct {
	// Disabled (pods.source = "none"): no pod is ever gone; only the
	// keep-newest rules apply.
	Disabled bool
	// PodDirs is kubelet's pod directory listing (pods.source = "kubelet-dir").
	PodDirs nodefs.PodDirs
}

// Ready reports whether the oracle can be trusted this pass.
func (o Oracle) Ready() bool { return o.Disabled || o.PodDirs.Ready }

// gone reports whether the oracle says the pod no longer exists on the node.
func (o Oracle) gone(uid string) bool {
	return !o.Disabled && o.PodDirs.Ready && !o.PodDirs.Present(uid)
}

// Input is everything one plan is made from.
type Input struct {
	Now    time.Time
	Policy Policy
	// Sandboxes and Containers are one fresh, complete CRI listing.
	Sandboxes  []cri.Sandbox
	Containers []cri.Container
	// Unreadable are the listing's entries that could not be read
	// (cri.Snapshot.Malformed). They are never acted on, but a container
	// still holds the sandbox it names (or, naming none, every sandbox of
	// its pod), and any of them holds its pod's log dir, cgroup and dir.
	Unreadable []cri.Malformed
	Oracle     Oracle
	// LastLifeEvent is the last RunPodSandbox/StartContainer per pod UID
	// (from podstate): a life event restarts the grace of the pod's actions.
	LastLifeEvent map[string]time.Time
	// EligibleSince is Result.EligibleSince of the previous plan: when each
	// proposed action was first proposed. nil on the first pass.
	EligibleSince map[string]time.Time
	// PodLogDirs and ContainerLogLinks are the node's log files (nodefs).
	PodLogDirs        []nodefs.PodLogDir
	ContainerLogLinks []nodefs.ContainerLogLink
	// PodCgroups is the pod cgroup listing; nil when cgroups.enabled = false.
	PodCgroups *podcgroups.Listing
	// PodDirs are the kubelet pod dirs of pods with no sandbox and no
	// container listed, inspected (nodefs.InspectPodDir).
	PodDirs []nodefs.PodDir
	// PodDirMountsUnseen says why this process may not see the mounts
	// kubelet makes in its pods dir ("" when it sees them: the node's
	// mount namespace, or a mount that receives the node's). A mount point
	// it cannot see is no blocker to it, so then no orphaned pod dir is
	// removed and an orphaned pod's cgroup is only CPU-reduced ("cannot
	// tell" is "volumes may be mounted", as for kubelet).
	PodDirMountsUnseen string
	// NRI is what NRI reported about the node's sandboxes, taken before the
	// listing was reconciled; nil when there is no NRI side (the report and
	// once commands). A listing it disagrees with is not planned from.
	NRI *NRIView
	// BudgetAdmitted are the budgeted units (pods for orphan stops,
	// objects otherwise) taken in the last hour, as "class/unit"; the loop
	// keeps them. They count against the class's max_per_hour, and one
	// taken already (and failed, so retried) is not counted against a pass
	// again: a step that keeps failing does not pause its class for good.
	BudgetAdmitted map[string]bool
	// BudgetFailing are the budgeted units ("class/unit") whose steps
	// failed at their last try; the loop keeps them. They are counted as
	// any other, but a pass that may take only some of a class's steps
	// takes those of other units first: once their hour is over each is
	// counted again, and max_per_hour steps that keep failing would else
	// take every hour's budget first (eligible longest), and a newer step
	// of their class would never run.
	BudgetFailing map[string]bool
	// BudgetHeld, when set, says why the steps taken in the last hour are
	// not known (the loop's state file could not be read): every budgeted
	// class is held, whatever max_per_hour allows, and trips with this.
	BudgetHeld string
	// TornDown are the pods this plugin saw torn down (every sandbox and
	// container removed while it watched) whose pod dir is still there.
	// Only such a pod dir can be orphaned: a pod dir with nothing listed is
	// also what a pod kubelet has not started yet looks like (waiting for a
	// volume, the network or an image), and its cgroup and dir are live.
	TornDown map[string]bool
	// Network is the network side (network.enabled); nil leaves the
	// network's objects alone.
	Network *NetworkInput
	// PodNames are the namespace and name of pods this plugin has known,
	// by UID (podstate, and the torn-down pods it remembers). Only for logs
	// and the report: a cgroup or a pod dir names its pod by UID alone, and
	// an SRE looks for the pod by namespace/name. Nothing is decided by them.
	PodNames map[string]PodRef
}

// Kind is what an action does.
type Kind string

const (
	StopContainer          Kind = "stop-container"        // CRI StopContainer
	RemoveContainer        Kind = "remove-container"      // CRI RemoveContainer
	StopSandbox            Kind = "stop-sandbox"          // CRI StopPodSandbox (orphaned live pods)
	RemoveSandbox          Kind = "remove-sandbox"        // CRI StopPodSandbox then RemovePodSandbox
	RemovePodLogDir        Kind = "remove-pod-log-dir"    // <pod_logs_dir>/<ns>_<name>_<uid>
	RemoveContainerLogLink Kind = "remove-log-link"       // <container_logs_dir>/<...>.log symlink
	RemovePodCgroup        Kind = "remove-pod-cgroup"     // kill its processes, remove its cgroups bottom-up
	ReducePodCgroupCPU     Kind = "reduce-pod-cgroup-cpu" // CPU to the minimum (kubelet's ReduceCPULimits)
	RemovePodDir           Kind = "remove-pod-dir"        // <kubelet_root>/pods/<uid>, kubelet's rules
	RemoveCNIAttachment    Kind = "remove-cni-attachment" // CNI DEL through the network's chain (veth, portmap, IPAM)
	ReleaseIPReservation   Kind = "release-ip"            // a host-local reservation file, under host-local's lock
	RemoveNetns            Kind = "remove-netns"          // unmount and remove a network namespace containerd made
)

// Kinds lists every kind in execution order: an action only depends on
// actions of earlier kinds.
var Kinds = []Kind{StopContainer, StopSandbox, RemoveContainer, RemoveSandbox, RemovePodLogDir, RemoveContainerLogLink,
	RemovePodDir, RemovePodCgroup, ReducePodCgroupCPU, RemoveCNIAttachment, ReleaseIPReservation, RemoveNetns}

// Rules, named for logs, metrics and the report.
const (
	RuleContainerPodGone       = "containers.pod-gone"
	RuleContainerMaxPerPod     = "containers.max-per-pod-container"
	RuleContainerMaxContainers = "containers.max-containers"
	RuleSandboxPodGone         = "sandboxes.pod-gone"
	RuleSandboxNotNewest       = "sandboxes.not-newest"
	RulePodLogDir              = "logs.pod-log-dir"
	RuleDanglingLogLink        = "logs.dangling-link"
	RuleOrphanStop             = "orphans.stop"
	RuleCgroupPodGone          = "cgroups.pod-gone"
	RuleCgroupOrphaned         = "cgroups.orphaned-pod"
	RuleCgroupVolumesRemain    = "cgroups.volumes-remain"
	RuleOrphanedPodDir         = "pod-dirs.orphaned"
	RuleNetworkAttachment      = "network.attachment-unowned"
	RuleNetworkReservation     = "network.reservation-unowned"
	RuleNetworkNetns           = "network.netns-unused"
)

// Rules lists every rule, for metrics and tests.
var Rules = []string{RuleContainerPodGone, RuleContainerMaxPerPod, RuleContainerMaxContainers, RuleSandboxPodGone,
	RuleSandboxNotNewest, RulePodLogDir, RuleDanglingLogLink, RuleOrphanStop, RuleCgroupPodGone, RuleCgroupOrphaned,
	RuleCgroupVolumesRemain, RuleOrphanedPodDir, RuleNetworkAttachment, RuleNetworkReservation, RuleNetworkNetns}

// PodRef names the pod an object belongs to.
type PodRef struct {
	UID, Namespace, Name string
}

// Action is one thing to do, with why.
type Action struct {
	Kind   Kind
	Rule   string
	Reason string
	Pod    PodRef
	// Key identifies the action across passes (grace, backoff).
	Key           string
	SandboxID     string
	ContainerID   string
	ContainerName string
	Path          string
	// Timeout is the StopContainer timeout.
	Timeout time.Duration
	// StopFirst: a RemoveContainer that stops the container first (with
	// Timeout), as kubelet does with an UNKNOWN container: it may still run.
	StopFirst bool
	// RemoveLogFiles: a RemoveContainer that removes the container's log
	// file and its rotations first, as kubelet's removeContainer does
	// (removeContainerLog), and keeps the container when that fails. Set
	// for containers of live pods: a gone pod's go with its pod log dir.
	RemoveLogFiles bool
	// Cgroup is the pod cgroup of RemovePodCgroup and ReducePodCgroupCPU.
	Cgroup *podcgroups.PodCgroup
	// PodDir is the pod dir of RemovePodDir as the plan saw it: the removal
	// takes nothing that inspection did not find.
	PodDir *nodefs.PodDir
	// Attachment, Reservation and Netns are the objects of the network
	// kinds.
	Attachment  *podnet.Attachment
	Reservation *podnet.Reservation
	Netns       *podnet.Netns
	// DependsOn lists keys of actions that must succeed first.
	DependsOn []string
	// EligibleSince is when the action was first proposed (or the pod's
	// last life event, if later).
	EligibleSince time.Time
}

// Kept is a suspicious object the plan leaves alone, and why.
type Kept struct {
	Object string // "sandbox <id>", "container <id> (<name>)", "pod log dir <path>", ...
	Pod    PodRef
	Reason string
}

// Trip is the budget's verdict on a class the pass refuses: orphan stops
// over the pass's budget, or any class whose hour is spent. The pass takes
// none of its steps.
type Trip struct {
	Class        string // a BudgetClasses entry
	Due          int    // steps of the class due this pass (for orphan stops: pods)
	Allowed      int    // what the pass may take: the per-pass limit, capped by what is left of the hour
	PerPass      int    // the per-pass limit for this node
	HourSpent    int    // steps of the class taken in the last hour
	MaxPerHour   int
	ReadySandbox int // Ready sandboxes on the node
	Refused      int // actions held back
	AffectedPods []PodRef
	Message      string
}

// Result is one plan.
type Result struct {
	// Actions are due now, in execution order (Kinds), each after its deps.
	Actions []Action
	// Deferred are proposed but not due: waiting for leak_grace, for an
	// action they depend on, or refused by the breaker.
	Deferred []Deferred
	Kept     []Kept
	// Trips are the budget classes this pass refused, by class order.
	Trips []Trip
	// Leaks counts leaked objects detected, by kind of object.
	Leaks map[string]int
	// EligibleSince is to be passed as Input.EligibleSince next pass: only
	// actions proposed this pass are in it, so a condition that stops
	// holding restarts its clock.
	EligibleSince map[string]time.Time
	// NotReady is set when the oracle could not be read: no plan is made.
	NotReady string
	// Untrusted is set when the listing disagrees with NRI (CheckListing):
	// no plan is made.
	Untrusted string
	// ListingChecked: the listing was checked against NRI (Input.NRI was
	// set); the report and once commands have no NRI side.
	ListingChecked bool
	// OracleChecked: the oracle was read and checked against the runtime
	// (not pods.source = "none", and ready).
	OracleChecked bool
	// OracleUntrusted is set when the oracle calls live pods gone beyond
	// the threshold (checkOracle): no pod-gone rule runs.
	OracleUntrusted string
	// Skipped are the pods with a life event after the listing: none of
	// their actions was planned this pass.
	Skipped []PodRef
	// NetnsUnseenKept counts the unowned attachments kept because their
	// namespace is not mounted here and this process may not see what
	// containerd mounts (NetworkInput.NetnsUnseen).
	NetnsUnseenKept int
}

// Deferred is a proposed action that is not due yet. Exactly one of the
// reasons is set.
type Deferred struct {
	Action
	// GraceLeft is how much of leak_grace is left.
	GraceLeft time.Duration
	// WaitsFor is the key of an action this one depends on that is not due.
	WaitsFor string
	// Budget is the budget class that held it back this pass.
	Budget string
	// Throttled: the class took what the budget allows this pass, the steps
	// eligible longest; this one waits for a later pass (the class is not
	// paused).
	Throttled bool
	// FailedBefore: throttled, its unit failed at its last try
	// (Input.BudgetFailing), so the class's other steps went first.
	FailedBefore bool
	// Disabled: budget.max_per_pass or budget.max_per_hour is 0 (or
	// max_fraction with min_per_pass), which
	// disables every budgeted step (no class trips).
	Disabled bool
	// Held says why the loop held back, after the plan, a step the plan
	// found due (the state file could not be written before it).
	Held string
}

// Why says in words why the action is not due.
func (d Deferred) Why() string {
	switch {
	case d.Held != "":
		return d.Held
	case d.Disabled:
		return "not taken: budget.max_per_pass or budget.max_per_hour is 0, or budget.max_fraction with budget.min_per_pass, " +
			"which disables every budgeted step (" + d.Budget + ")"
	case d.Throttled && d.FailedBefore:
		return "waits for a later pass: the blast-radius budget takes only so many " + d.Budget + " steps a pass, and this one failed at its last try: the others go first"
	case d.Throttled:
		return "waits for a later pass: the blast-radius budget takes only so many " + d.Budget + " steps a pass"
	case d.Budget != "":
		return "refused by the blast-radius budget (" + d.Budget + ")"
	case d.WaitsFor != "":
		return "waits for " + d.WaitsFor
	}
	return fmt.Sprintf("waiting for leak_grace: eligible since %s, %s left", d.EligibleSince.Format(time.RFC3339), d.GraceLeft.Round(time.Second))
}

// Leak kinds counted in Result.Leaks.
const (
	LeakSandbox    = "sandbox"
	LeakContainer  = "container"
	LeakPodLogDir  = "pod-log-dir"
	LeakLogLink    = "log-link"
	LeakOrphanPod  = "orphaned-live-pod"
	LeakUnknownCtr = "unknown-container"
	LeakPodCgroup  = "pod-cgroup"
	LeakPodDir     = "pod-dir"
	// The network's leaks.
	LeakCNIAttachment = "cni-attachment"
	LeakIPReservation = "ip-reservation"
	LeakNetns         = "netns"
)
