package gc

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// The reference model: kubelet v1.37.2's container GC, transcribed from
// pkg/kubelet/kuberuntime/kuberuntime_gc.go (GarbageCollect with
// allSourcesReady = true and evictNonDeletedPods = false, the periodic
// pass), kubelet's names kept. Its removals are then filtered by the
// plugin's documented stricter safety (kubeletFilter), and the planner must
// propose exactly what is left: no more, no less.

// kubeletGCPolicy is kubecontainer.GCPolicy.
type kubeletGCPolicy struct {
	MinAge             time.Duration
	MaxPerPodContainer int
	MaxContainers      int
}

// kubeletContainer is what kubelet's GC reads of a runtimeapi.Container.
type kubeletContainer struct {
	Id, PodSandboxId string
	Name             string // Metadata.Name
	PodUID           string // getContainerInfoFromLabels: the io.kubernetes.pod.uid label, "" when missing
	State            cri.ContainerState
	CreatedAt        time.Time
}

// kubeletSandbox is what kubelet's GC reads of a runtimeapi.PodSandbox.
type kubeletSandbox struct {
	Id        string
	Uid       string // Metadata.Uid
	Ready     bool   // State == SANDBOX_READY
	CreatedAt time.Time
}

// containerGCInfo, sandboxGCInfo, evictUnit, containersByEvictUnit and
// sandboxesByPodUID are kuberuntime_gc.go's types.
type containerGCInfo struct {
	id         string
	name       string
	createTime time.Time
	unknown    bool
}

type sandboxGCInfo struct {
	id         string
	createTime time.Time
	active     bool
}

type evictUnit struct {
	uid  string
	name string
}

type containersByEvictUnit map[evictUnit][]containerGCInfo

type sandboxesByPodUID map[string][]sandboxGCInfo

func (cu containersByEvictUnit) NumContainers() int {
	num := 0
	for key := range cu {
		num += len(cu[key])
	}
	return num
}

func (cu containersByEvictUnit) NumEvictUnits() int { return len(cu) }

// sortByCreated is kubelet's sort.Sort(byCreated(...)), newest first.
// kubelet leaves equal creation times to an unstable sort; the model
// breaks such ties by ID, as the planner does (newestFirst), so that the
// two can be compared as sets.
func sortByCreated(containers []containerGCInfo) {
	sort.Slice(containers, func(i, j int) bool { return containers[i].id < containers[j].id })
	sort.SliceStable(containers, func(i, j int) bool { return containers[i].createTime.After(containers[j].createTime) })
}

// sortSandboxByCreated is sort.Sort(sandboxByCreated(...)), ties as above.
func sortSandboxByCreated(sandboxes []sandboxGCInfo) {
	sort.Slice(sandboxes, func(i, j int) bool { return sandboxes[i].id < sandboxes[j].id })
	sort.SliceStable(sandboxes, func(i, j int) bool { return sandboxes[i].createTime.After(sandboxes[j].createTime) })
}

// containerGC is kubelet's containerGC: the removals it makes are recorded
// instead of made (removeContainer, removeSandbox, RemoveAll of a pod log
// dir), each taken to succeed, as removeOldestN assumes.
type containerGC struct {
	now time.Time
	// ShouldPodContentBeRemoved is the pod workers' answer (podStateProvider).
	ShouldPodContentBeRemoved func(uid string) bool

	removedContainers, removedSandboxes, removedLogDirs map[string]bool
}

// enforceMaxContainersPerEvictUnit is kubelet's, literally.
func (cgc *containerGC) enforceMaxContainersPerEvictUnit(evictUnits containersByEvictUnit, MaxContainers int) {
	for key := range evictUnits {
		toRemove := len(evictUnits[key]) - MaxContainers
		if toRemove > 0 {
			evictUnits[key] = cgc.removeOldestN(evictUnits[key], toRemove)
		}
	}
}

// removeOldestN is kubelet's: an UNKNOWN container is killed first, with
// its pod's grace period, and then removed (the planner's StopFirst); the
// kill is taken to succeed. The filter drops those the plugin leaves to
// kubelet.
func (cgc *containerGC) removeOldestN(containers []containerGCInfo, toRemove int) []containerGCInfo {
	numToKeep := len(containers) - toRemove
	if numToKeep > 0 {
		sortByCreated(containers)
	}
	for i := len(containers) - 1; i >= numToKeep; i-- {
		cgc.removedContainers[containers[i].id] = true
	}
	return containers[:numToKeep]
}

// removeOldestNSandboxes is kubelet's: only inactive sandboxes go.
func (cgc *containerGC) removeOldestNSandboxes(sandboxes []sandboxGCInfo, toRemove int) {
	numToKeep := len(sandboxes) - toRemove
	if numToKeep > 0 {
		sortSandboxByCreated(sandboxes)
	}
	for i := len(sandboxes) - 1; i >= numToKeep; i-- {
		if !sandboxes[i].active {
			cgc.removedSandboxes[sandboxes[i].id] = true
		}
	}
}

// evictableContainers is kubelet's: not running, created at least minAge ago.
func (cgc *containerGC) evictableContainers(containers []kubeletContainer, minAge time.Duration) containersByEvictUnit {
	evictUnits := make(containersByEvictUnit)
	newestGCTime := cgc.now.Add(-minAge)
	for _, container := range containers {
		if container.State == cri.ContainerRunning {
			continue
		}
		createdAt := container.CreatedAt
		if newestGCTime.Before(createdAt) {
			continue
		}
		containerInfo := containerGCInfo{
			id:         container.Id,
			name:       container.Name,
			createTime: createdAt,
			unknown:    container.State == cri.ContainerUnknown,
		}
		key := evictUnit{uid: container.PodUID, name: containerInfo.name}
		evictUnits[key] = append(evictUnits[key], containerInfo)
	}
	return evictUnits
}

// evictContainers is kubelet's, with allSourcesReady = true and
// evictNonDeletedPods = false.
func (cgc *containerGC) evictContainers(containers []kubeletContainer, gcPolicy kubeletGCPolicy) {
	evictUnits := cgc.evictableContainers(containers, gcPolicy.MinAge)
	for key, unit := range evictUnits {
		if cgc.ShouldPodContentBeRemoved(key.uid) {
			cgc.removeOldestN(unit, len(unit)) // Remove all.
			delete(evictUnits, key)
		}
	}
	if gcPolicy.MaxPerPodContainer >= 0 {
		cgc.enforceMaxContainersPerEvictUnit(evictUnits, gcPolicy.MaxPerPodContainer)
	}
	if gcPolicy.MaxContainers >= 0 && evictUnits.NumContainers() > gcPolicy.MaxContainers {
		numContainersPerEvictUnit := gcPolicy.MaxContainers / evictUnits.NumEvictUnits()
		if numContainersPerEvictUnit < 1 {
			numContainersPerEvictUnit = 1
		}
		cgc.enforceMaxContainersPerEvictUnit(evictUnits, numContainersPerEvictUnit)
		numContainers := evictUnits.NumContainers()
		if numContainers > gcPolicy.MaxContainers {
			flattened := make([]containerGCInfo, 0, numContainers)
			for key := range evictUnits {
				flattened = append(flattened, evictUnits[key]...)
			}
			sortByCreated(flattened)
			cgc.removeOldestN(flattened, numContainers-gcPolicy.MaxContainers)
		}
	}
}

// evictSandboxes is kubelet's with evictNonDeletedPods = false. containers
// is the listing kubelet takes after evictContainers: what it removed is
// gone from it.
func (cgc *containerGC) evictSandboxes(containers []kubeletContainer, sandboxes []kubeletSandbox) {
	sandboxIDs := make(map[string]bool)
	for _, container := range containers {
		sandboxIDs[container.PodSandboxId] = true
	}
	sandboxesByPod := make(sandboxesByPodUID, len(sandboxes))
	for _, sandbox := range sandboxes {
		sandboxInfo := sandboxGCInfo{id: sandbox.Id, createTime: sandbox.CreatedAt}
		if sandbox.Ready || sandboxIDs[sandbox.Id] {
			sandboxInfo.active = true
		}
		sandboxesByPod[sandbox.Uid] = append(sandboxesByPod[sandbox.Uid], sandboxInfo)
	}
	for podUID, sandboxes := range sandboxesByPod {
		if cgc.ShouldPodContentBeRemoved(podUID) {
			cgc.removeOldestNSandboxes(sandboxes, len(sandboxes))
		} else {
			cgc.removeOldestNSandboxes(sandboxes, len(sandboxes)-1)
		}
	}
}

// evictPodLogsDirectories is kubelet's, with allSourcesReady = true: a dir
// goes when its pod's content may be removed (parsePodUIDFromLogsDirectory:
// the UID is the last "_" field). The legacy log link part is not compared
// here.
func (cgc *containerGC) evictPodLogsDirectories(podLogsDirectory string, dirs []string) {
	for _, name := range dirs {
		parts := strings.Split(name, "_")
		podUID := parts[len(parts)-1]
		if !cgc.ShouldPodContentBeRemoved(podUID) {
			continue
		}
		cgc.removedLogDirs[filepath.Join(podLogsDirectory, name)] = true
	}
}

// kubeletFilter is the plugin's stricter safety, each rule as documented,
// applied to what kubelet removes: the planner may remove less than
// kubelet for these reasons only.
type kubeletFilter struct {
	in Input
}

// planned reports whether the plugin plans anything at all: README
// "Stricter than kubelet, always": no action before every source is ready
// (the oracle readable), and none unless the sources agree (NRI and the
// listing, "Sources must agree").
func (f kubeletFilter) planned() bool {
	return f.in.Oracle.Ready() && !listingDisagrees(f.in)
}

// gone is kubelet's ShouldPodContentBeRemoved as the plugin reads it
// (DESIGN.md §4 "Pod gone"): the oracle says the pod dir is absent, and the
// oracle is trusted (README "The oracle must agree with the runtime": else
// no pod-gone rule of any kind runs, only keep-newest). pods.source =
// "none" calls no pod gone.
func (f kubeletFilter) gone(uid string) bool {
	return f.in.Oracle.gone(uid) && !oracleDisagrees(f.in)
}

// skipped: README "a life event of the pod ... that arrives after the
// listing skips the pod for that pass".
func (f kubeletFilter) skipped(uid string) bool {
	return uid != "" && f.in.LastLifeEvent[uid].After(f.in.Now)
}

// container keeps kubelet's removal of a container only if the container
// has kubelet's labels (README: "only objects with kubelet's labels ...
// are ever touched"), its pod is not skipped, and it is not an UNKNOWN
// container of an orphaned live pod (README: "left with the pod to
// orphans.action") or one whose pod's grace period cannot be read or is
// longer than UnknownStopMaxGrace (README: "left to kubelet").
func (f kubeletFilter) container(c cri.Container) bool {
	id, ok := podstate.KubeletPod(c.Labels)
	if c.State == cri.ContainerUnknown && (c.Kill.Unreadable != "" || c.Kill.Grace > UnknownStopMaxGrace) {
		return false
	}
	return ok && !f.skipped(id.UID) && !(c.State == cri.ContainerUnknown && f.liveGone(id.UID))
}

// liveGone: the pod is gone but still has a Ready sandbox (of kubelet's, its
// pod UID the CRI metadata's, else the label's) or a running container.
func (f kubeletFilter) liveGone(uid string) bool {
	if !f.gone(uid) {
		return false
	}
	for _, s := range f.in.Sandboxes {
		id, ok := podstate.KubeletPod(s.Labels)
		if ok && s.Ready && cmp.Or(s.UID, id.UID) == uid {
			return true
		}
	}
	for _, c := range f.in.Containers {
		if id, ok := podstate.KubeletPod(c.Labels); ok && c.State == cri.ContainerRunning && id.UID == uid {
			return true
		}
	}
	return false
}

// sandbox keeps kubelet's removal of a sandbox only if it has kubelet's
// labels, its pod is not skipped, and no listed entry that could not be
// read holds it (types.go Input.Unreadable and README: such an entry is
// never acted on and "still holds its sandbox (or, naming none, every
// sandbox of its pod)").
func (f kubeletFilter) sandbox(s cri.Sandbox) bool {
	if _, ok := podstate.KubeletPod(s.Labels); !ok || f.skipped(s.UID) {
		return false
	}
	for _, m := range f.in.Unreadable {
		if m.Kind == "container" && (m.SandboxID == s.ID || m.SandboxID == "" && m.PodUID != "" && m.PodUID == s.UID) {
			return false
		}
	}
	return true
}

// logDir keeps kubelet's removal of a pod log dir only if it is directly in
// pod_logs_dir (README: "file removal stays under the configured roots"),
// its pod is not skipped, and nothing of the pod is left listed: README "A
// pod log dir stays while any sandbox or container of the pod is listed, in
// any state" (rule logs.pod-log-dir: "or every one removed first in the
// same pass"); a sandbox is the pod's by its CRI metadata UID or its pod
// UID label, a container by its label, an unreadable entry by its UID.
func (f kubeletFilter) logDir(path, uid string, removedContainers, removedSandboxes map[string]bool) bool {
	if !directlyIn(path, f.in.Policy.PodLogsDir) || f.skipped(uid) {
		return false
	}
	for _, s := range f.in.Sandboxes {
		if (s.UID == uid || s.Labels[podstate.LabelPodUID] == uid) && !removedSandboxes[s.ID] {
			return false
		}
	}
	for _, c := range f.in.Containers {
		if c.Labels[podstate.LabelPodUID] == uid && !removedContainers[c.ID] {
			return false
		}
	}
	for _, m := range f.in.Unreadable {
		if m.PodUID == uid {
			return false
		}
	}
	return true
}

// kubeletRemovals runs kubelet's GC over the plan's input, each step's
// removals filtered before the next step reads the listing: kubelet's
// evictSandboxes lists the containers afresh, and a container the plugin
// does not remove still holds its sandbox. The result is the set of
// "kind id" the planner must propose.
func kubeletRemovals(in Input) []string {
	f := kubeletFilter{in: in}
	if !f.planned() {
		return nil
	}
	// kubelet's pod workers never know a pod of UID "" (an object without
	// the pod UID label): for an unknown UID ShouldPodContentBeRemoved is
	// podsSynced, true (pod_workers.go; kubelet-reference.md §2.3). So
	// kubelet removes such dead containers before it counts max_containers;
	// the filter then drops those removals (no kubelet labels).
	shouldPodContentBeRemoved := func(uid string) bool { return uid == "" || f.gone(uid) }
	cgc := &containerGC{now: in.Now, ShouldPodContentBeRemoved: shouldPodContentBeRemoved,
		removedContainers: map[string]bool{}, removedSandboxes: map[string]bool{}, removedLogDirs: map[string]bool{}}
	// kubelet lists every container. One that could not be read (no name,
	// no creation time) is left out of the evict units: the plugin never
	// acts on it, and its place in kubelet's ranking is unknown; it still
	// names its sandbox below.
	var containers []kubeletContainer
	for _, c := range in.Containers {
		containers = append(containers, kubeletContainer{Id: c.ID, PodSandboxId: c.SandboxID, Name: c.Name,
			PodUID: c.Labels[podstate.LabelPodUID], State: c.State, CreatedAt: c.CreatedAt})
	}
	cgc.evictContainers(containers, kubeletGCPolicy{MinAge: in.Policy.MinAge,
		MaxPerPodContainer: in.Policy.MaxPerPodContainer, MaxContainers: in.Policy.MaxContainers})
	for _, c := range in.Containers {
		if cgc.removedContainers[c.ID] && !f.container(c) {
			delete(cgc.removedContainers, c.ID)
		}
	}

	var left []kubeletContainer
	for _, c := range containers {
		if !cgc.removedContainers[c.Id] {
			left = append(left, c)
		}
	}
	for _, m := range in.Unreadable {
		if m.Kind == "container" {
			left = append(left, kubeletContainer{Id: m.ID, PodSandboxId: m.SandboxID, PodUID: m.PodUID, State: cri.ContainerUnknown})
		}
	}
	// The plugin's rules are over managed objects (DESIGN.md §4: "Managed
	// objects: sandboxes with kubelet's labels ... Anything else is never
	// touched"): a live pod keeps the newest of its kubelet sandboxes. kubelet
	// groups every listed sandbox by its metadata UID, so a newer one without
	// kubelet's labels (a crictl runp) would be its keeper instead, and
	// kubelet's own newest would go; the plugin keeps it.
	var sandboxes []kubeletSandbox
	for _, s := range in.Sandboxes {
		if _, ok := podstate.KubeletPod(s.Labels); ok {
			sandboxes = append(sandboxes, kubeletSandbox{Id: s.ID, Uid: s.UID, Ready: s.Ready, CreatedAt: s.CreatedAt})
		}
	}
	cgc.evictSandboxes(left, sandboxes)
	for _, s := range in.Sandboxes {
		if cgc.removedSandboxes[s.ID] && !f.sandbox(s) {
			delete(cgc.removedSandboxes, s.ID)
		}
	}

	// kubelet reads the pod log dirs of its own root; the plugin's listing
	// may name others, which the filter drops.
	uidOf := map[string]string{}
	byRoot := map[string][]string{}
	for _, d := range in.PodLogDirs {
		root, name := filepath.Dir(d.Path), filepath.Base(d.Path)
		byRoot[root] = append(byRoot[root], name)
		uidOf[d.Path] = d.UID
	}
	for root, names := range byRoot {
		cgc.evictPodLogsDirectories(root, names)
	}
	for path := range cgc.removedLogDirs {
		if !f.logDir(path, uidOf[path], cgc.removedContainers, cgc.removedSandboxes) {
			delete(cgc.removedLogDirs, path)
		}
	}

	var out []string
	for id := range cgc.removedContainers {
		out = append(out, string(RemoveContainer)+" "+id)
	}
	for id := range cgc.removedSandboxes {
		out = append(out, string(RemoveSandbox)+" "+id)
	}
	for path := range cgc.removedLogDirs {
		out = append(out, string(RemovePodLogDir)+" "+path)
	}
	sort.Strings(out)
	return out
}

// gcRemovals are a plan's removals of the kinds kubelet's GC makes, as
// "kind id", sorted: of actions and deferred ones too when proposed is set
// (leak_grace, dependencies and the budget only defer a removal).
func gcRemovals(r Result, proposed bool) []string {
	actions := r.Actions
	if proposed {
		actions = append(append([]Action(nil), r.Actions...), deferredActions(r)...)
	}
	var out []string
	for _, a := range actions {
		switch a.Kind {
		case RemoveContainer, RemoveSandbox, RemovePodLogDir:
			out = append(out, describe(a))
		}
	}
	sort.Strings(out)
	return out
}

// diffSets says what only one side of a comparison has.
func diffSets(plan, model []string) string {
	inPlan := map[string]bool{}
	for _, s := range plan {
		inPlan[s] = true
	}
	inModel := map[string]bool{}
	for _, s := range model {
		inModel[s] = true
	}
	var b strings.Builder
	for _, s := range plan {
		if !inModel[s] {
			fmt.Fprintf(&b, "\n  planned, kubelet would not: %s", s)
		}
	}
	for _, s := range model {
		if !inPlan[s] {
			fmt.Fprintf(&b, "\n  kubelet would, not planned: %s", s)
		}
	}
	return b.String()
}

// TestThePlanRemovesWhatKubeletsGCRemoves compares, on random nodes, the
// containers, sandboxes and pod log dirs the planner proposes with what
// kubelet's GC removes, filtered by the plugin's documented stricter
// safety. Then the same node with leak_grace 0 and a budget that allows
// everything: what is due is exactly that set (grace, budget and
// dependencies only defer).
func TestThePlanRemovesWhatKubeletsGCRemoves(t *testing.T) {
	// About half a second (two under -race); GC_MODEL_SEEDS=30000 runs a
	// longer campaign (about 40 s).
	seeds := int64(400)
	if n, err := strconv.Atoi(os.Getenv("GC_MODEL_SEEDS")); err == nil {
		seeds = int64(n)
	}
	for seed := int64(1); seed <= seeds; seed++ {
		in := kubeletNode(seed)
		want := kubeletRemovals(in)
		if got := gcRemovals(Plan(in), true); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("seed %d: the plan proposes other removals than kubelet's GC, filtered:%s", seed, diffSets(got, want))
		}
		in.Policy.LeakGrace = 0
		in.Policy.Budget = Budget{MaxPerPass: 1 << 30, MaxFraction: 1, MinPerPass: 1 << 30, MaxPerHour: 1 << 30}
		in.BudgetHeld = ""
		want = kubeletRemovals(in)
		if got := gcRemovals(Plan(in), false); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("seed %d, no leak_grace, no budget: the plan's due removals are not kubelet's, filtered:%s", seed, diffSets(got, want))
		}
	}
}

// kubeletNode is randomInput with more of what kubelet's rules turn on.
// Half the time the oracle is one kubelet could have: every pod with a
// Ready sandbox has its pod dir, so the oracle is trusted and the pod-gone
// rules run (randomInput's oracle mostly calls running pods gone, which
// untrusts it). Half the time more dead instances per evict unit and more
// names, creation times equal to another's (kubelet's sort leaves the order
// of ties open, see sortByCreated), after the listing (a clock stepped
// back) or exactly min_age ago, and containers in another pod's sandbox
// (any container holds the sandbox it names).
func kubeletNode(seed int64) Input {
	in := randomInput(seed, 1+int(seed%40))
	rng := rand.New(rand.NewSource(seed))
	if rng.Intn(2) == 0 {
		in.Oracle.PodDirs.UIDs = maps.Clone(in.Oracle.PodDirs.UIDs)
		in.Oracle.PodDirs.ModTime = time.Time{}
		for _, s := range in.Sandboxes {
			if s.Ready {
				in.Oracle.PodDirs.UIDs[s.UID] = struct{}{}
			}
		}
	}
	// Log dirs of pods with nothing listed (gone or not), and kubelet's
	// legacy <uid> name beside the current one.
	for i := range rng.Intn(4) {
		uid := fmt.Sprintf("uid-unlisted-%d", i)
		if rng.Intn(3) == 0 {
			in.Oracle.PodDirs.UIDs = maps.Clone(in.Oracle.PodDirs.UIDs)
			in.Oracle.PodDirs.UIDs[uid] = struct{}{}
		}
		name := "ns_pod-" + uid + "_" + uid
		in.PodLogDirs = append(in.PodLogDirs, nodefs.PodLogDir{Path: podLogs + "/" + name, Name: name, Namespace: "ns", PodName: "pod-" + uid, UID: uid})
	}
	for _, d := range slices.Clone(in.PodLogDirs) {
		if rng.Intn(4) == 0 {
			in.PodLogDirs = append(in.PodLogDirs, nodefs.PodLogDir{Path: podLogs + "/" + d.UID, Name: d.UID, UID: d.UID})
		}
	}
	if len(in.Containers) == 0 || rng.Intn(2) == 0 {
		return in
	}
	states := []cri.ContainerState{cri.ContainerCreated, cri.ContainerRunning, cri.ContainerExited, cri.ContainerUnknown}
	base := len(in.Containers)
	for i := range rng.Intn(3 * base) {
		c := in.Containers[rng.Intn(base)]
		c.ID = fmt.Sprintf("x%04d", i)
		c.State = states[rng.Intn(len(states))]
		c.Labels = maps.Clone(c.Labels)
		switch rng.Intn(6) {
		case 0: // the same creation time as another container
			c.CreatedAt = in.Containers[rng.Intn(len(in.Containers))].CreatedAt
		case 1: // created after the listing was taken
			c.CreatedAt = in.Now.Add(time.Duration(1+rng.Intn(60)) * time.Second)
		case 2: // exactly min_age ago
			c.CreatedAt = in.Now.Add(-in.Policy.MinAge)
		default:
			c.CreatedAt = in.Now.Add(-time.Duration(rng.Intn(3600)) * time.Second)
		}
		if rng.Intn(3) == 0 {
			c.Name = fmt.Sprintf("n%d", 2+rng.Intn(2))
		}
		if rng.Intn(10) == 0 && len(in.Sandboxes) > 0 { // in another pod's sandbox
			c.SandboxID = in.Sandboxes[rng.Intn(len(in.Sandboxes))].ID
		}
		in.Containers = append(in.Containers, c)
	}
	return in
}
