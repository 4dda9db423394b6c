package gc

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// Plan makes one plan. Rules propose candidate actions from the listing as
// it is now; then every candidate waits for leak_grace from when it was first
// proposed (or from its pod's last life event), an action runs only after
// the actions it depends on, and the blast-radius breaker refuses a pass that
// would stop too many live pods.
func Plan(in Input) Result {
	if in.NRI != nil {
		if c := CheckListing(*in.NRI, in.Sandboxes, in.Unreadable, in.Now); c.Untrusted != "" {
			return Result{Untrusted: c.Untrusted, ListingChecked: true, Leaks: map[string]int{}, EligibleSince: map[string]time.Time{}}
		}
	}
	if !in.Oracle.Ready() {
		why := "the pod oracle is not ready"
		if in.Oracle.PodDirs.Err != nil {
			why += ": " + in.Oracle.PodDirs.Err.Error()
		}
		return Result{NotReady: why, ListingChecked: in.NRI != nil, Leaks: map[string]int{}, EligibleSince: map[string]time.Time{}}
	}
	p := newPlanner(in)
	oracleUntrusted := p.checkOracle()
	if oracleUntrusted != "" {
		p.distrustOracle()
	}
	p.containerRules()
	p.orphanRules()
	p.sandboxRules()
	p.podLogDirRules()
	p.logLinkRules()
	p.nodeRules()
	p.networkRules()
	r := p.resolve()
	r.OracleUntrusted, r.ListingChecked, r.OracleChecked = oracleUntrusted, in.NRI != nil, !in.Oracle.Disabled
	return r
}

// distrustOracle makes the oracle say nothing this plan: no pod is gone,
// no pod dir is orphaned; only the keep-newest rules run (as with
// pods.source = "none").
func (p *planner) distrustOracle() {
	p.in.Oracle.Disabled = true
	for _, s := range p.sandboxes {
		s.gone = false
	}
	for _, c := range p.containers {
		c.gone = false
	}
}

// sandboxInfo is a managed sandbox with its pod and the oracle's verdict.
type sandboxInfo struct {
	*cri.Sandbox
	pod  PodRef
	gone bool
}

// containerInfo is a managed container with its pod and the oracle's verdict.
type containerInfo struct {
	*cri.Container
	pod  PodRef
	gone bool
}

type planner struct {
	in Input
	// netnsUnseenKept: Result.NetnsUnseenKept.
	netnsUnseenKept int
	// Managed objects only: those with kubelet's pod labels.
	sandboxes  []*sandboxInfo
	containers []*containerInfo
	// sandboxesByUID groups sandboxes by CRI metadata UID, as kubelet does;
	// uids lists its keys in listing order.
	sandboxesByUID map[string][]*sandboxInfo
	uids           []string
	// unmanagedByUID has the sandboxes without kubelet labels that still
	// claim a UID: a pod's log dir stays while any sandbox claims it.
	unmanagedByUID map[string][]*cri.Sandbox
	// labelledByUID has the sandboxes whose pod UID label names a UID
	// they are not grouped under (their CRI metadata names another, or
	// none): they claim that pod too.
	labelledByUID map[string][]*cri.Sandbox
	// refs lists, per sandbox ID that is not Ready, every container
	// referencing it: managed or not, in any state (kubelet's "active" test).
	refs map[string][]*cri.Container
	// unreadable describes, by sandbox ID and by pod UID, the listed
	// entries that could not be read: they keep what they belong to. A
	// container naming no sandbox holds every sandbox of its pod
	// (unreadablePodSandboxes).
	unreadableBySandbox    map[string]string
	unreadableByUID        map[string]string
	unreadablePodSandboxes map[string]string
	unreadableByID         map[string]string
	// containerByID indexes every listed container; built on first use.
	containerByID map[string]*cri.Container
	// removal is the key of the candidate that removes (or first stops) a
	// container or sandbox, by object ID.
	removal map[string]string
	// logDirRemoval is the key of the candidate that removes a pod log
	// dir, by its path: the links into it dangle once it is gone.
	logDirRemoval map[string]string
	// logFilesRemoval is the key of the candidate that removes a container
	// with its log files, by container ID: its link dangles once it is gone.
	logFilesRemoval map[string]string
	// startsWith is, by key, when a candidate's grace clock starts at the
	// latest: a condition that holds since another's did (see clock).
	startsWith map[string]time.Time

	candidates []Action
	kept       []Kept
	clocks     map[string]time.Time // grace clocks of this plan, by key
	// containerUIDs are the pod UIDs of all listed containers; built on
	// first use (see listed).
	containerUIDs map[string]struct{}
	// logDirNames are the pods named by pod log dirs, by UID; built on
	// first use (see podRef).
	logDirNames map[string]PodRef
	leaks       map[string]int
	// skipped are the pods with a life event after the listing, by UID.
	skipped map[string]PodRef
}

func newPlanner(in Input) *planner {
	p := &planner{
		in:              in,
		sandboxesByUID:  make(map[string][]*sandboxInfo, len(in.Sandboxes)),
		unmanagedByUID:  make(map[string][]*cri.Sandbox),
		labelledByUID:   make(map[string][]*cri.Sandbox),
		refs:            make(map[string][]*cri.Container),
		removal:         make(map[string]string),
		logDirRemoval:   make(map[string]string),
		logFilesRemoval: make(map[string]string),
		leaks:           make(map[string]int),
		clocks:          make(map[string]time.Time, len(in.EligibleSince)),
	}
	// One allocation each for the managed objects, one oracle lookup per
	// object: the planner is linear in the node's size.
	sandboxes := make([]sandboxInfo, 0, len(in.Sandboxes))
	for i := range in.Sandboxes {
		s := &in.Sandboxes[i]
		id, ok := podstate.KubeletPod(s.Labels)
		uid := s.UID
		if ok && uid == "" {
			uid = id.UID
		}
		if label := s.Labels[podstate.LabelPodUID]; label != "" && label != uid {
			p.labelledByUID[label] = append(p.labelledByUID[label], s)
		}
		if !ok {
			if s.UID != "" {
				p.unmanagedByUID[s.UID] = append(p.unmanagedByUID[s.UID], s)
			}
			continue
		}
		sandboxes = append(sandboxes, sandboxInfo{Sandbox: s, pod: PodRef{UID: uid, Namespace: id.Namespace, Name: id.Name}, gone: in.Oracle.gone(uid)})
		si := &sandboxes[len(sandboxes)-1]
		p.sandboxes = append(p.sandboxes, si)
		if _, ok := p.sandboxesByUID[uid]; !ok {
			p.uids = append(p.uids, uid)
		}
		p.sandboxesByUID[uid] = append(p.sandboxesByUID[uid], si)
	}
	// Only a sandbox that is not Ready can ever be removed, so only those
	// need their referencing containers: a small map on a healthy node.
	for _, s := range in.Sandboxes {
		if !s.Ready {
			p.refs[s.ID] = nil
		}
	}
	p.unreadableBySandbox, p.unreadableByUID = map[string]string{}, map[string]string{}
	p.unreadablePodSandboxes, p.unreadableByID = map[string]string{}, map[string]string{}
	for _, m := range in.Unreadable {
		what := fmt.Sprintf("%s %s that the runtime listed but that could not be read (%s)", m.Kind, short(m.ID), m.Reason)
		if m.ID != "" {
			p.unreadableByID[m.ID] = what
		}
		if m.Kind == "container" && m.SandboxID != "" {
			p.unreadableBySandbox[m.SandboxID] = what
		}
		if m.PodUID != "" {
			p.unreadableByUID[m.PodUID] = what
			if m.Kind == "container" && m.SandboxID == "" {
				p.unreadablePodSandboxes[m.PodUID] = what
			}
		}
	}
	containers := make([]containerInfo, 0, len(in.Containers))
	for i := range in.Containers {
		c := &in.Containers[i]
		if refs, ok := p.refs[c.SandboxID]; ok {
			p.refs[c.SandboxID] = append(refs, c)
		}
		if id, ok := podstate.KubeletPod(c.Labels); ok {
			containers = append(containers, containerInfo{Container: c, pod: PodRef(id), gone: in.Oracle.gone(id.UID)})
			p.containers = append(p.containers, &containers[len(containers)-1])
		}
	}
	return p
}

func (p *planner) gone(uid string) bool { return p.in.Oracle.gone(uid) }

// propose adds a candidate, unless its pod had a life event (a new sandbox,
// a container start) after the listing was taken: the listing is older than
// what is known of that pod, so none of its actions is planned this pass.
// It reports whether the candidate was added: only then may another step
// depend on it.
func (p *planner) propose(a Action) bool {
	if p.lifeAfterListing(a.Pod) {
		return false
	}
	p.candidates = append(p.candidates, a)
	return true
}

// lifeAfterListing reports whether the pod had a life event after the
// listing, and notes it once as skipped.
func (p *planner) lifeAfterListing(pod PodRef) bool {
	if pod.UID == "" || !p.in.LastLifeEvent[pod.UID].After(p.in.Now) {
		return false
	}
	if _, noted := p.skipped[pod.UID]; !noted {
		if p.skipped == nil {
			p.skipped = make(map[string]PodRef)
		}
		p.skipped[pod.UID] = pod
		p.keep("pod "+pod.UID, pod, "a life event (new sandbox or container start) arrived after the listing: none of its actions is planned this pass")
	}
	return true
}

func (p *planner) keep(object string, pod PodRef, format string, args ...any) {
	p.kept = append(p.kept, Kept{Object: object, Pod: pod, Reason: fmt.Sprintf(format, args...)})
}

// newestFirst orders by creation time, newest first; ties by ID so plans
// are deterministic.
func newestFirst[T any](s []T, created func(T) time.Time, id func(T) string) {
	sort.SliceStable(s, func(i, j int) bool {
		ci, cj := created(s[i]), created(s[j])
		if !ci.Equal(cj) {
			return ci.After(cj)
		}
		return id(s[i]) < id(s[j])
	})
}

func containerCreated(c *containerInfo) time.Time { return c.CreatedAt }
func containerID(c *containerInfo) string         { return c.ID }

// containerRules is kubelet's evictContainers: evict units of (pod UID,
// container name); gone pods lose all their dead containers, others keep
// the newest max_per_pod_container, then the node is capped at
// max_containers (per-unit share first, then oldest first).
func (p *planner) containerRules() {
	// Units are visited in listing order (deterministic for a given input,
	// and cheaper than sorting thousands of keys).
	units := make(map[string][]*containerInfo)
	var keys []string
	liveGone := p.liveGonePods()
	for _, c := range p.containers {
		if c.State == cri.ContainerRunning {
			continue // never evicted; a running container of a gone pod is an orphan
		}
		if c.State == cri.ContainerUnknown && c.gone && liveGone[c.pod.UID] != nil {
			// It may run, in a pod that still runs: the pod's, and so
			// orphans.action's (reported, or stopped with the pod and
			// under its breaker), not the dead containers' rule, which
			// would stop it whatever orphans.action says.
			if !p.in.Policy.StopOrphans || !liveGone[c.pod.UID][c.SandboxID] {
				p.keep(containerObject(*c.Container), c.pod, "state UNKNOWN (it may run) in an orphaned live pod whose pod is gone: "+
					"left with the pod to orphans.action (%q), removed once stopped", orphansAction(p.in.Policy.StopOrphans))
			}
			continue
		}
		if age := p.in.Now.Sub(c.CreatedAt); age < p.in.Policy.MinAge {
			p.keep(containerObject(*c.Container), c.pod, "younger than containers.min_age (%s < %s)", round(age), p.in.Policy.MinAge)
			continue
		}
		key := c.pod.UID + "/" + c.Name
		if _, ok := units[key]; !ok {
			keys = append(keys, key)
		}
		units[key] = append(units[key], c)
	}
	live := make([]string, 0, len(keys))
	for _, key := range keys {
		unit := units[key]
		newestFirst(unit, containerCreated, containerID)
		if unit[0].gone {
			for _, c := range unit {
				p.evictContainer(c, RuleContainerPodGone, "its pod is gone from the node (no kubelet pod dir)")
			}
			delete(units, key)
			continue
		}
		live = append(live, key)
		if n := p.in.Policy.MaxPerPodContainer; n >= 0 && len(unit) > n {
			for _, c := range unit[n:] {
				p.evictContainer(c, RuleContainerMaxPerPod,
					fmt.Sprintf("%d newer dead instance(s) of %q are kept (containers.max_per_pod_container = %d)", n, c.Name, n))
			}
			units[key] = unit[:n]
		}
	}
	p.capContainers(units, live)
	// Said once max_containers took its share: what it removes is not kept.
	for _, key := range live {
		for _, c := range units[key] {
			p.keep(containerObject(*c.Container), c.pod, "newest dead instance(s) of %q in a live pod (containers.max_per_pod_container = %d)",
				c.Name, p.in.Policy.MaxPerPodContainer)
		}
	}
}

// liveGonePods maps each gone pod that still has a Ready sandbox or a
// running container (an orphaned live pod, see orphanRules) to the IDs of
// its Ready sandboxes.
func (p *planner) liveGonePods() map[string]map[string]bool {
	live := make(map[string]map[string]bool)
	for _, s := range p.sandboxes {
		if s.Ready && s.gone {
			if live[s.pod.UID] == nil {
				live[s.pod.UID] = make(map[string]bool)
			}
			live[s.pod.UID][s.ID] = true
		}
	}
	for _, c := range p.containers {
		if c.State == cri.ContainerRunning && c.gone && live[c.pod.UID] == nil {
			live[c.pod.UID] = make(map[string]bool)
		}
	}
	return live
}

func orphansAction(stop bool) string {
	if stop {
		return "stop"
	}
	return "report"
}

// capContainers applies max_containers to the units of live pods, leaving
// in units what it keeps.
func (p *planner) capContainers(units map[string][]*containerInfo, live []string) {
	maxN := p.in.Policy.MaxContainers
	total := 0
	for _, key := range live {
		total += len(units[key])
	}
	if maxN < 0 || total <= maxN || len(live) == 0 {
		return
	}
	reason := fmt.Sprintf("the node keeps at most %d dead containers (containers.max_containers)", maxN)
	share := max(1, maxN/len(live))
	for _, key := range live {
		if unit := units[key]; len(unit) > share {
			for _, c := range unit[share:] {
				p.evictContainer(c, RuleContainerMaxContainers, reason+fmt.Sprintf("; %d per container name", share))
				total--
			}
			units[key] = unit[:share]
		}
	}
	if total <= maxN {
		return
	}
	var flat []*containerInfo
	for _, key := range live {
		flat = append(flat, units[key]...)
	}
	newestFirst(flat, containerCreated, containerID)
	evicted := make(map[string]bool, len(flat)-maxN)
	for _, c := range flat[maxN:] {
		p.evictContainer(c, RuleContainerMaxContainers, reason+"; oldest first")
		evicted[c.ID] = true
	}
	for _, key := range live {
		units[key] = slices.DeleteFunc(units[key], func(c *containerInfo) bool { return evicted[c.ID] })
	}
}

// UnknownStopTimeout is the least stop timeout of an UNKNOWN container:
// kubelet's minimum grace period (minimumGracePeriodInSeconds).
const UnknownStopTimeout = 2 * time.Second

// UnknownStopMaxGrace is the longest grace an UNKNOWN container's stop is
// given; one whose pod asks for more is left to kubelet (a step that long
// would hold a pass, and a slot of it, for as long).
const UnknownStopMaxGrace = 2 * time.Minute

// unknownStopGrace is the grace kubelet's container GC gives an UNKNOWN
// container (killContainer with no pod object: the pod's deletion grace
// period, else its termination grace period, from the container's
// annotations, at least 2 s), or why the plugin does not stop it.
// Kubelet's GC also runs the container's preStop hook again first; the
// plugin does not (an exec in it, an HTTP call to the pod): the container
// is dead to kubelet, which stopped it, hook and all, when its pod was
// deleted or the container restarted, and a stop that did not finish is
// what leaves a container UNKNOWN. Its grace period is still given.
func unknownStopGrace(k cri.KillSpec) (time.Duration, string) {
	switch {
	case k.Unreadable != "":
		return 0, k.Unreadable
	case k.Grace > UnknownStopMaxGrace:
		return 0, fmt.Sprintf("its pod's grace period (%s) is longer than the %s a stop of the plugin waits", k.Grace, UnknownStopMaxGrace)
	}
	return max(k.Grace, UnknownStopTimeout), ""
}

// evictContainer proposes removing a dead container. One in state UNKNOWN
// may still have processes: as kubelet's container GC does, it is stopped
// (with its pod's grace period) and removed right after, in one step.
func (p *planner) evictContainer(c *containerInfo, rule, reason string) {
	a := Action{Kind: RemoveContainer, Rule: rule, Reason: reason, Pod: c.pod,
		Key: "container/" + c.ID, SandboxID: c.SandboxID, ContainerID: c.ID, ContainerName: c.Name,
		RemoveLogFiles: rule != RuleContainerPodGone}
	if a.RemoveLogFiles {
		a.Reason += "; its log file and rotations go first, as kubelet removes them"
	}
	if c.State == cri.ContainerUnknown {
		p.leaks[LeakUnknownCtr]++
		grace, why := unknownStopGrace(c.Kill)
		if why != "" {
			p.keep(containerObject(*c.Container), c.pod, "state UNKNOWN (it may run), not stopped as kubelet would stop it: %s; left to kubelet", why)
			return
		}
		a.StopFirst, a.Timeout = true, grace
		a.Reason += fmt.Sprintf("; state UNKNOWN: stopped first (%s grace, its pod's, as kubelet gives it), then removed", grace)
		if c.Kill.PreStop {
			a.Reason += "; its preStop hook is not run again (kubelet ran it when it stopped the container)"
		}
	} else {
		p.leaks[LeakContainer]++
	}
	if !p.propose(a) {
		return
	}
	p.removal[c.ID] = a.Key
	if a.RemoveLogFiles {
		p.logFilesRemoval[c.ID] = a.Key
	}
}

// orphanRules finds live pods whose pod is gone: a Ready sandbox or a
// running container (kubelet's "kill orphaned runtime pods"). They are
// reported, or stopped with orphans.action = "stop".
func (p *planner) orphanRules() {
	type orphan struct {
		pod        PodRef
		sandboxes  []*sandboxInfo
		containers []*containerInfo
	}
	byUID := make(map[string]*orphan)
	get := func(pod PodRef) *orphan {
		o, ok := byUID[pod.UID]
		if !ok {
			o = &orphan{pod: pod}
			byUID[pod.UID] = o
		}
		return o
	}
	for _, s := range p.sandboxes {
		if s.Ready && s.gone {
			o := get(s.pod)
			o.sandboxes = append(o.sandboxes, s)
		}
	}
	for _, c := range p.containers {
		if c.State == cri.ContainerRunning && c.gone {
			o := get(c.pod)
			o.containers = append(o.containers, c)
		}
	}
	for _, uid := range sortedKeys(byUID) {
		o := byUID[uid]
		p.leaks[LeakOrphanPod]++
		what := fmt.Sprintf("%d Ready sandbox(es), %d running container(s)", len(o.sandboxes), len(o.containers))
		if !p.in.Policy.StopOrphans {
			p.keep("live pod "+o.pod.Namespace+"/"+o.pod.Name, o.pod,
				"orphaned live pod (%s) whose pod is gone: reported only (orphans.action = \"report\")", what)
			continue
		}
		stops := make(map[string][]string) // sandbox ID -> its container stop keys
		// StopPodSandbox SIGKILLs every container of the sandbox: one the
		// plan does not stop gracefully first holds the sandbox's stop. An
		// UNKNOWN container (it may run) is stopped first, as kubelet's GC
		// stops it; an entry that cannot be read is never acted on.
		for _, c := range p.containers {
			if c.State == cri.ContainerUnknown && c.gone && slices.ContainsFunc(o.sandboxes, func(s *sandboxInfo) bool { return s.ID == c.SandboxID }) {
				o.containers = append(o.containers, c)
			}
		}
		stopped := make(map[string]bool, len(o.containers))
		for _, c := range o.containers {
			key := "stop-container/" + c.ID
			stops[c.SandboxID] = append(stops[c.SandboxID], key)
			stopped[c.ID] = true
			reason := "running container of a pod that is gone from the node (orphans.action = \"stop\")"
			if c.State == cri.ContainerUnknown {
				reason = "container in state UNKNOWN (it may run) of a pod that is gone from the node, stopped before its sandbox (orphans.action = \"stop\")"
			}
			p.propose(Action{Kind: StopContainer, Rule: RuleOrphanStop, Pod: o.pod, Key: key,
				SandboxID: c.SandboxID, ContainerID: c.ID, ContainerName: c.Name, Timeout: p.in.Policy.StopTimeout,
				Reason: reason})
		}
		for _, s := range o.sandboxes {
			if what := p.unstoppedIn(s.ID, stopped); what != "" {
				p.keep(sandboxObject(*s.Sandbox), o.pod, "orphaned live sandbox not stopped: StopPodSandbox would kill %s, which this plan does not stop first", what)
				continue
			}
			if what, ok := p.unreadableBySandbox[s.ID]; ok {
				p.keep(sandboxObject(*s.Sandbox), o.pod, "orphaned live sandbox not stopped: StopPodSandbox would kill %s", what)
				continue
			}
			if what, ok := p.unreadablePodSandboxes[o.pod.UID]; ok {
				p.keep(sandboxObject(*s.Sandbox), o.pod, "orphaned live sandbox not stopped: StopPodSandbox may kill %s", what)
				continue
			}
			p.propose(Action{Kind: StopSandbox, Rule: RuleOrphanStop, Pod: o.pod, Key: "stop-sandbox/" + s.ID,
				SandboxID: s.ID, DependsOn: stops[s.ID],
				Reason: "Ready sandbox of a pod that is gone from the node (orphans.action = \"stop\")"})
		}
	}
}

// unstoppedIn names a running or UNKNOWN container of sandbox id that is
// not in stopped (one without kubelet's labels, or another pod's), or "":
// StopPodSandbox would kill it at once.
func (p *planner) unstoppedIn(id string, stopped map[string]bool) string {
	for i := range p.in.Containers {
		c := &p.in.Containers[i]
		if c.SandboxID != id || stopped[c.ID] || (c.State != cri.ContainerRunning && c.State != cri.ContainerUnknown) {
			continue
		}
		return fmt.Sprintf("container %s (%s, %s)", short(c.ID), cmp.Or(c.Name, "no name"), c.State)
	}
	return ""
}

// sandboxRules is kubelet's evictSandboxes: a sandbox is active while Ready
// or referenced by any container; of a gone pod every inactive sandbox goes,
// of a live pod all inactive ones but the newest. A sandbox whose containers
// this plan removes becomes inactive once they are gone: it depends on them.
func (p *planner) sandboxRules() {
	for _, uid := range p.uids {
		group := p.sandboxesByUID[uid]
		newestFirst(group, func(s *sandboxInfo) time.Time { return s.CreatedAt }, func(s *sandboxInfo) string { return s.ID })
		gone := group[0].gone
		considered, rule, reason := group, RuleSandboxPodGone, "its pod is gone from the node (no kubelet pod dir)"
		if !gone {
			considered, rule = group[1:], RuleSandboxNotNewest
			reason = fmt.Sprintf("not the newest sandbox of its pod (newest: %s)", short(group[0].ID))
			if !group[0].Ready {
				p.keep(sandboxObject(*group[0].Sandbox), group[0].pod, "newest sandbox of a live pod (kubelet may still use it)")
			}
		}
		for _, s := range considered {
			if s.Ready {
				continue // a live sandbox; of a gone pod, orphanRules handles it
			}
			deps, blocker := p.dependencies(s)
			if blocker != "" {
				p.keep(sandboxObject(*s.Sandbox), s.pod, "%s", blocker)
				continue
			}
			p.leaks[LeakSandbox]++
			key := "sandbox/" + s.ID
			if p.propose(Action{Kind: RemoveSandbox, Rule: rule, Reason: reason, Pod: s.pod, Key: key,
				SandboxID: s.ID, DependsOn: deps}) {
				p.removal[s.ID] = key
			}
		}
	}
}

// dependencies returns the removal keys of the containers referencing a
// sandbox, or why the sandbox is still in use.
func (p *planner) dependencies(s *sandboxInfo) ([]string, string) {
	if what, ok := p.unreadableBySandbox[s.ID]; ok {
		return nil, "in use: referenced by " + what
	}
	if what, ok := p.unreadablePodSandboxes[s.pod.UID]; ok {
		return nil, "in use, maybe: the pod has " + what + ", which names no sandbox"
	}
	var deps []string
	for _, c := range p.refs[s.ID] {
		key, ok := p.removal[c.ID]
		if !ok {
			return nil, fmt.Sprintf("in use: referenced by container %s (%s, %s)", short(c.ID), c.Name, c.State)
		}
		deps = append(deps, key)
	}
	sort.Strings(deps)
	return deps, ""
}

// podLogDirRules is kubelet's evictPodLogsDirectories, stricter: a pod log
// dir goes when its pod is gone and no sandbox of the pod is left (or all of
// them are removed first by this plan).
func (p *planner) podLogDirRules() {
	var dirs []nodefs.PodLogDir
	for _, d := range p.in.PodLogDirs {
		if p.gone(d.UID) && directlyIn(d.Path, p.in.Policy.PodLogsDir) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return
	}
	names := make([]string, len(dirs))
	for i, d := range dirs {
		names[i] = d.UID
	}
	uids := p.containersOf(names)
	for _, d := range dirs {
		pod := PodRef{UID: d.UID, Namespace: d.Namespace, Name: d.PodName}
		deps, left := p.podRemovals(d.UID, uids[d.UID])
		if left != "" {
			p.keep("pod log dir "+d.Path, pod, "%s", left)
			continue
		}
		p.leaks[LeakPodLogDir]++
		key := "pod-log-dir/" + d.Path
		if p.propose(Action{Kind: RemovePodLogDir, Rule: RulePodLogDir, Pod: pod, Key: key,
			Path: d.Path, DependsOn: deps, Reason: "log dir of a pod that is gone from the node, with no sandbox left"}) {
			p.logDirRemoval[d.Path] = key
		}
	}
}

// podRemovals returns the keys of the candidates that remove every listed
// sandbox and container of a pod (containers: the pod's listed ones), or
// what this plan leaves of the pod. A pod's log dir and cgroup go in the
// same pass as the last of its objects, after them: one leak_grace for the
// whole pod, not one per stage.
func (p *planner) podRemovals(uid string, containers []*cri.Container) (deps []string, left string) {
	if len(p.unmanagedByUID[uid]) > 0 {
		return nil, fmt.Sprintf("sandbox %s without kubelet labels claims the pod's UID", short(p.unmanagedByUID[uid][0].ID))
	}
	if what, ok := p.unreadableByUID[uid]; ok {
		return nil, "the pod has " + what
	}
	for _, s := range p.sandboxesByUID[uid] {
		key, ok := p.removal[s.ID]
		if !ok {
			return nil, fmt.Sprintf("sandbox %s of the pod still exists (%s)", short(s.ID), readyWord(s.Ready))
		}
		deps = append(deps, key)
	}
	for _, s := range p.labelledByUID[uid] {
		key, ok := p.removal[s.ID]
		if !ok {
			return nil, fmt.Sprintf("sandbox %s, labelled with the pod's UID (its CRI metadata names pod %q), still exists (%s)",
				short(s.ID), s.UID, readyWord(s.Ready))
		}
		deps = append(deps, key)
	}
	// A container of the pod holds its logs and cgroup too, even when its
	// sandbox is not listed: it may be running.
	for _, c := range containers {
		key, ok := p.removal[c.ID]
		if !ok {
			return nil, fmt.Sprintf("container %s (%s) of the pod is still listed (%s)", short(c.ID), c.Name, c.State)
		}
		deps = append(deps, key)
	}
	return deps, ""
}

// containersOf returns the listed containers of each of uids, found in one
// scan: on a large node the candidates are few and the containers many.
func (p *planner) containersOf(uids []string) map[string][]*cri.Container {
	held := make(map[string][]*cri.Container, len(uids))
	for _, uid := range uids {
		held[uid] = nil
	}
	for i := range p.in.Containers {
		c := &p.in.Containers[i]
		if list, ok := held[c.Labels[podstate.LabelPodUID]]; ok {
			held[c.Labels[podstate.LabelPodUID]] = append(list, c)
		}
	}
	return held
}

// logLinkRules is kubelet's legacy log link cleanup: a dangling link whose
// container is exited or not listed at all. A link to a container that is
// not exited is kept: log rotation briefly leaves the target missing. A
// link into a pod log dir this plan removes dangles once that dir is gone:
// it goes in the same pass, right after the dir (kubelet's GC would find it
// dangling at its next run), not one more leak_grace later. So does the link
// of a container this plan removes with its log files: kubelet's
// removeContainer removes the link with them.
func (p *planner) logLinkRules() {
	for _, l := range p.in.ContainerLogLinks {
		if !directlyIn(l.Path, p.in.Policy.ContainerLogsDir) {
			continue
		}
		var deps []string
		why := "dangling link of a container the runtime no longer lists"
		if !l.Dangling {
			if key, ok := p.logDirRemoval[l.TargetLogDir]; ok {
				deps = []string{key}
				why = "link into the pod log dir " + l.TargetLogDir + ", which this plan removes first"
			} else if key := p.logFilesRemovalOf(l); key != "" {
				deps = []string{key}
				why = "link of a container this plan removes with its log files first"
			} else {
				continue
			}
		}
		pod := PodRef{UID: l.PodUID, Namespace: l.Namespace, Name: l.PodName}
		if what := p.unreadableLinked(l); what != "" {
			p.keep("log link "+l.Path, pod, "its container is %s", what)
			continue
		}
		c, listed, ambiguous := p.linkedContainer(l)
		if ambiguous {
			p.keep("log link "+l.Path, pod, "its truncated container ID %s matches several listed containers", l.ContainerID)
			continue
		}
		if listed {
			if uid := c.Labels[podstate.LabelPodUID]; uid != "" {
				pod.UID = uid
			}
			if l.Dangling {
				why = "dangling link of an exited container"
			}
			if c.State != cri.ContainerExited {
				removal, removing := p.removal[c.ID]
				if !removing {
					p.keep("log link "+l.Path, pod, "its container %s is %s (log rotation can leave the target missing briefly)", short(c.ID), c.State)
					continue
				}
				if l.Dangling {
					why = "dangling link of a container this plan removes"
				}
				if !slices.Contains(deps, removal) {
					deps = append(deps, removal)
				}
			}
		}
		p.leaks[LeakLogLink]++
		p.propose(Action{Kind: RemoveContainerLogLink, Rule: RuleDanglingLogLink, Pod: pod, Key: "log-link/" + l.Path,
			Path: l.Path, ContainerID: l.ContainerID, ContainerName: l.ContainerName, Reason: why, DependsOn: deps})
	}
}

// logFilesRemovalOf is the key of the removal of a link's container with
// its log files, or "".
func (p *planner) logFilesRemovalOf(l nodefs.ContainerLogLink) string {
	c, listed, ambiguous := p.linkedContainer(l)
	if !listed || ambiguous {
		return ""
	}
	return p.logFilesRemoval[c.ID]
}

// unreadableLinked describes the unreadable entry a link's container ID (or
// its truncated prefix) names, or returns "".
func (p *planner) unreadableLinked(l nodefs.ContainerLogLink) string {
	what, _, ambiguous := byLinkedID(p.unreadableByID, l)
	if ambiguous {
		return "one of several entries the runtime listed but that could not be read, by its truncated ID " + l.ContainerID
	}
	return what
}

// linkedContainer finds a link's container. kubelet truncates link names to
// 255 bytes, cutting the ID; containerd resolves such a prefix, so do we.
func (p *planner) linkedContainer(l nodefs.ContainerLogLink) (c *cri.Container, listed, ambiguous bool) {
	if p.containerByID == nil {
		p.containerByID = make(map[string]*cri.Container, len(p.in.Containers))
		for i := range p.in.Containers {
			p.containerByID[p.in.Containers[i].ID] = &p.in.Containers[i]
		}
	}
	return byLinkedID(p.containerByID, l)
}

// byLinkedID looks a link's container ID up in m: exactly, or as the prefix
// a truncated link name keeps, which is ambiguous when it matches several.
func byLinkedID[V any](m map[string]V, l nodefs.ContainerLogLink) (v V, found, ambiguous bool) {
	if v, ok := m[l.ContainerID]; ok || !l.Truncated {
		return v, ok, false
	}
	for id, candidate := range m {
		if strings.HasPrefix(id, l.ContainerID) {
			if found {
				var zero V
				return zero, false, true
			}
			v, found = candidate, true
		}
	}
	return v, found, false
}

// resolve applies leak_grace, the breaker and dependencies to the candidates.
func (p *planner) resolve() Result {
	r := Result{Kept: p.kept, Leaks: p.leaks, EligibleSince: p.clocks, NetnsUnseenKept: p.netnsUnseenKept}
	// Keys are unique, so an unstable sort is deterministic. Each
	// candidate's kind rank is looked up once, not in every comparison,
	// and sorting small entries avoids moving the large Action values.
	type entry struct {
		rank int
		a    *Action
	}
	entries := make([]entry, len(p.candidates))
	for i := range p.candidates {
		entries[i] = entry{rank: slices.Index(Kinds, p.candidates[i].Kind), a: &p.candidates[i]}
	}
	slices.SortFunc(entries, func(x, y entry) int {
		if d := x.rank - y.rank; d != 0 {
			return d
		}
		return strings.Compare(x.a.Key, y.a.Key)
	})
	sorted := make([]*Action, len(entries))
	for i, e := range entries {
		sorted[i] = e.a
	}
	// notDue holds every candidate that is not due, with why: first
	// leak_grace and what depends on it, then the budget (over what is due
	// otherwise) and what depends on that.
	notDue := make(map[string]waiting)
	for _, a := range sorted {
		since, left := p.clock(a.Key, a.Pod.UID)
		a.EligibleSince = since
		if left > 0 {
			notDue[a.Key] = waiting{graceLeft: left}
		}
	}
	holdDependents(sorted, notDue)
	r.Trips = p.budget(sorted, notDue)
	holdDependents(sorted, notDue)
	r.Deferred = make([]Deferred, 0, len(notDue))
	r.Actions = make([]Action, 0, len(sorted)-len(notDue))
	for _, a := range sorted {
		if w, deferred := notDue[a.Key]; deferred {
			r.Deferred = append(r.Deferred, Deferred{Action: *a, GraceLeft: w.graceLeft, WaitsFor: w.waitsFor, Budget: w.budget, Throttled: w.throttled, FailedBefore: w.failed, Disabled: w.disabled})
			continue
		}
		r.Actions = append(r.Actions, *a)
	}
	for _, uid := range sortedKeys(p.skipped) {
		r.Skipped = append(r.Skipped, p.skipped[uid])
	}
	return r
}

// holdDependents marks not due every action that depends on one that is
// not due. An action only depends on actions of earlier kinds, which come
// first in sorted, so one pass in order is enough.
func holdDependents(sorted []*Action, notDue map[string]waiting) {
	for _, a := range sorted {
		if _, held := notDue[a.Key]; held {
			continue
		}
		for _, dep := range a.DependsOn {
			if _, blocked := notDue[dep]; blocked {
				notDue[a.Key] = waiting{waitsFor: dep}
				break
			}
		}
	}
}

// clock returns since when a condition (an action's, or an orphaned pod
// dir's) holds: since it was first seen (or since startsWith says it held),
// or since the pod's last life event if later; and how much of leak_grace
// is left. It remembers the clock for the next plan.
func (p *planner) clock(key, uid string) (since time.Time, left time.Duration) {
	since, ok := p.in.EligibleSince[key]
	if !ok || since.After(p.in.Now) {
		since = p.in.Now
	}
	if start, ok := p.startsWith[key]; ok && start.Before(since) {
		since = start
	}
	// A life event after the listing never gets here (lifeAfterListing).
	if life := p.in.LastLifeEvent[uid]; life.After(since) {
		since = life
	}
	p.clocks[key] = since
	return since, p.in.Policy.LeakGrace - p.in.Now.Sub(since)
}

// startClockWith makes key's grace clock start no later than since: its
// condition has held since then, under another key's clock.
func (p *planner) startClockWith(key string, since time.Time) {
	if p.startsWith == nil {
		p.startsWith = make(map[string]time.Time)
	}
	p.startsWith[key] = since
}

// waiting is why a candidate is not due.
type waiting struct {
	graceLeft time.Duration
	waitsFor  string
	budget    string // the budget class that holds it back
	throttled bool   // ... until a later pass, the class not paused
	failed    bool   // ... and, throttled, its unit failed at its last try
	disabled  bool   // ... for as long as the budget's configured cap is 0
}

// directlyIn reports whether path is a direct child of root (both clean
// and absolute): removals never reach outside the configured roots.
func directlyIn(path, root string) bool {
	return root != "" && filepath.IsAbs(path) && path == filepath.Clean(path) &&
		filepath.Dir(path) == filepath.Clean(root) && filepath.Base(path) != ".."
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func round(d time.Duration) time.Duration { return d.Round(time.Second) }

func readyWord(ready bool) string {
	if ready {
		return "Ready"
	}
	return "NotReady"
}

func sandboxObject(s cri.Sandbox) string { return "sandbox " + s.ID }

func containerObject(c cri.Container) string {
	return fmt.Sprintf("container %s (%s)", c.ID, c.Name)
}

// Summary is a one-line count of a result, for logs.
func (r Result) Summary() string {
	var parts []string
	for _, k := range Kinds {
		n := 0
		for _, a := range r.Actions {
			if a.Kind == k {
				n++
			}
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n))
		}
	}
	if len(parts) == 0 {
		return "nothing due"
	}
	return strings.Join(parts, " ")
}

// LeakSummary says the leaks detected in words: "1 container, 1 sandbox", or "none".
func (r Result) LeakSummary() string {
	var parts []string
	for k, n := range r.Leaks {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
