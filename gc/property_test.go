package gc

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// randomInput builds a random node: pods with several sandbox attempts and
// container instances in every state, unmanaged objects, a random oracle,
// log dirs (some outside the root), log links, grace clocks and policies.
func randomInput(seed int64, pods int) Input {
	rng := rand.New(rand.NewSource(seed))
	in := Input{Now: now, LastLifeEvent: map[string]time.Time{}, EligibleSince: map[string]time.Time{}, TornDown: map[string]bool{}}
	in.Policy = Policy{
		LeakGrace:          time.Duration(rng.Intn(3)) * time.Minute,
		MinAge:             time.Duration(rng.Intn(2)) * time.Minute,
		MaxPerPodContainer: rng.Intn(4) - 1,
		MaxContainers:      rng.Intn(pods*2) - 1,
		StopOrphans:        rng.Intn(2) == 0,
		StopTimeout:        time.Second,
		PodLogsDir:         podLogs,
		ContainerLogsDir:   ctrLogs,
		OracleSettle:       time.Duration(rng.Intn(2)) * 5 * time.Minute,
	}
	in.Policy.Budget.MaxPerPass = rng.Intn(5)
	in.Policy.Budget.MaxFraction = rng.Float64()
	in.Policy.Budget.MinPerPass = rng.Intn(in.Policy.Budget.MaxPerPass + 1)
	in.Policy.Budget.MaxPerHour = rng.Intn(12)
	if rng.Intn(8) == 0 {
		in.BudgetHeld = "the steps of the last hour are unknown"
	}
	in.BudgetAdmitted = map[string]bool{}
	for _, class := range BudgetClasses { // steps taken earlier this hour
		if rng.Intn(3) == 0 {
			for i := range rng.Intn(12) {
				in.BudgetAdmitted[fmt.Sprintf("%s/earlier-%d", class, i)] = true
			}
		}
	}
	dirs := nodefs.PodDirs{Ready: rng.Intn(10) != 0, UIDs: map[string]struct{}{}}
	if rng.Intn(2) == 0 { // the pods dir last changed some minutes ago
		dirs.ModTime = now.Add(-time.Duration(rng.Intn(900)) * time.Second)
	}
	if rng.Intn(3) == 0 { // the file system keeps birth times; a few in the future
		dirs.Born = now.Add(time.Duration(rng.Intn(900)-850) * time.Second)
	}
	in.Oracle = Oracle{Disabled: rng.Intn(10) == 0, PodDirs: dirs}
	states := []cri.ContainerState{cri.ContainerCreated, cri.ContainerRunning, cri.ContainerExited, cri.ContainerUnknown}
	id := 0
	next := func(kind string) string { id++; return fmt.Sprintf("%s%04d", kind, id) }
	age := func() time.Duration { return time.Duration(rng.Intn(600)) * time.Second }
	for i := range pods {
		uid := fmt.Sprintf("uid-%d", i)
		if rng.Intn(2) == 0 {
			dirs.UIDs[uid] = struct{}{}
		}
		switch rng.Intn(8) {
		case 0, 1:
			in.LastLifeEvent[uid] = now.Add(-age())
		case 2: // arrived after the listing was taken
			in.LastLifeEvent[uid] = now.Add(time.Duration(1+rng.Intn(5)) * time.Second)
		}
		var sandboxIDs []string
		for range 1 + rng.Intn(3) {
			s := sb(next("s"), uid, rng.Intn(3) == 0, age())
			if rng.Intn(15) == 0 {
				s.Labels = nil // not kubelet's
			}
			in.Sandboxes = append(in.Sandboxes, s)
			sandboxIDs = append(sandboxIDs, s.ID)
		}
		for range rng.Intn(6) {
			sandboxID := sandboxIDs[rng.Intn(len(sandboxIDs))]
			if rng.Intn(20) == 0 {
				sandboxID = "missing-sandbox"
			}
			c := ctr(next("c"), sandboxID, uid, fmt.Sprintf("n%d", rng.Intn(2)), states[rng.Intn(len(states))], age())
			if rng.Intn(15) == 0 {
				c.Labels = nil
			}
			switch rng.Intn(6) { // the pod's grace, from the container's annotations
			case 0:
				c.Kill.Unreadable = "annotation io.kubernetes.pod.terminationGracePeriod = \"x\" is not a number"
			case 1:
				c.Kill.Grace = UnknownStopMaxGrace + time.Duration(rng.Intn(2)+1)*time.Second
			case 2, 3:
				c.Kill.Grace = time.Duration(rng.Intn(5)) * 30 * time.Second // 0 to 2m
			}
			c.Kill.PreStop = rng.Intn(3) == 0
			if rng.Intn(12) == 0 { // listed, but unreadable (containerd's UNKNOWN with no creation time)
				m := cri.Malformed{Kind: "container", ID: c.ID, Reason: "no creation time", SandboxID: c.SandboxID, PodUID: uid}
				if rng.Intn(4) == 0 {
					m.SandboxID = ""
				}
				in.Unreadable = append(in.Unreadable, m)
				continue
			}
			in.Containers = append(in.Containers, c)
			if rng.Intn(3) == 0 {
				l := nodefs.ContainerLogLink{Path: ctrLogs + "/pod_ns_x-" + c.ID + ".log", ContainerID: c.ID, Dangling: rng.Intn(2) == 0}
				if !l.Dangling || rng.Intn(2) == 0 {
					l.TargetLogDir = filepath.Join(podLogs, "ns_pod-"+uid+"_"+uid)
				}
				in.ContainerLogLinks = append(in.ContainerLogLinks, l)
			}
		}
		if rng.Intn(2) == 0 {
			root := podLogs
			if rng.Intn(10) == 0 {
				root = "/elsewhere"
			}
			name := "ns_pod-" + uid + "_" + uid
			in.PodLogDirs = append(in.PodLogDirs, nodefs.PodLogDir{Path: filepath.Join(root, name), Name: name, Namespace: "ns", PodName: "pod-" + uid, UID: uid})
		}
	}
	// Pod cgroups and pod dirs, for listed pods and for pods with nothing
	// listed, some with volumes left or blockers.
	in.Policy.RemoveOrphanedPodDirs = rng.Intn(2) == 0
	if rng.Intn(5) != 0 {
		cgs := &podcgroups.Listing{Ready: rng.Intn(10) != 0, Pods: map[string]podcgroups.PodCgroup{}}
		for i := range pods + 10 {
			uid := fmt.Sprintf("uid-%d", i)
			if rng.Intn(2) == 0 {
				cgs.Pods[uid] = podcgroups.PodCgroup{UID: uid, Paths: []string{"/sys/fs/cgroup/memory/kubepods/pod" + uid},
					Procs: rng.Intn(3), CPUReduced: rng.Intn(3) == 0, Inspected: rng.Intn(8) != 0}
			}
			if i >= pods && rng.Intn(2) == 0 {
				dirs.UIDs[uid] = struct{}{}
			}
			if rng.Intn(2) == 0 {
				in.TornDown[uid] = true // seen torn down (listed pods too: the listing wins)
			}
		}
		in.PodCgroups = cgs
	}
	for uid := range dirs.UIDs {
		d := nodefs.PodDir{UID: uid, Path: "/var/lib/kubelet/pods/" + uid}
		if rng.Intn(3) == 0 {
			d.VolumeDirs = []string{d.Path + "/volumes/x/y"}
		}
		if rng.Intn(4) == 0 {
			d.Blockers = []string{"volumes/x/y is a mount point"}
		}
		in.PodDirs = append(in.PodDirs, d)
	}
	if rng.Intn(4) == 0 {
		in.PodDirMountsUnseen = "this process may not see the mounts kubelet makes in /var/lib/kubelet/pods"
	}
	for range rng.Intn(5) {
		in.ContainerLogLinks = append(in.ContainerLogLinks, nodefs.ContainerLogLink{
			Path: ctrLogs + "/gone_ns_x-" + next("dead") + ".log", ContainerID: next("dead"), Dangling: true})
	}
	// Half the time the network side is on.
	if rng.Intn(2) == 0 {
		in.Policy.NetworkMinAge = time.Duration(rng.Intn(3)) * 30 * time.Second
		in.Network = randomNetwork(rng, in)
	}
	// Some steps were taken already this hour (retries).
	first := Plan(in)
	candidates := first.Actions
	for _, d := range first.Deferred {
		candidates = append(candidates, d.Action)
	}
	// Some failed at their last try (taken this hour or before).
	in.BudgetFailing = map[string]bool{}
	for _, a := range candidates {
		if class, unit := BudgetClass(a); class != "" {
			switch rng.Intn(8) {
			case 0:
				in.BudgetAdmitted[class+"/"+unit] = true
			case 1:
				in.BudgetAdmitted[class+"/"+unit] = true
				in.BudgetFailing[class+"/"+unit] = true
			case 2, 3:
				in.BudgetFailing[class+"/"+unit] = true
			}
		}
	}
	// Half the time NRI reported on the node too: what it says may agree
	// with the listing, lack some of it, hold sandboxes live that the
	// listing lacks (recently reported or not), or be another runtime's.
	if rng.Intn(2) == 0 {
		in.NRI = randomNRI(rng, in.Sandboxes)
	}
	// Half of the candidates have been waiting a while already.
	if rng.Intn(2) == 0 {
		first := Plan(in)
		for k := range first.EligibleSince {
			if rng.Intn(2) == 0 {
				in.EligibleSince[k] = now.Add(-time.Duration(rng.Intn(300)) * time.Second)
			}
		}
	}
	return in
}

// randomNetwork draws the network's objects: attachments and reservations
// of listed sandboxes and containers, of IDs only containerd's records or
// an unreadable entry know, of sandboxes NRI may report, and of nobody;
// network namespaces recorded, named by attachments, in use, or not.
func randomNetwork(rng *rand.Rand, in Input) *NetworkInput {
	n := &NetworkInput{Records: cri.Records{Sandboxes: map[string]cri.SandboxRecord{}, Containers: map[string]string{}}, NetnsDir: "/run/netns"}
	var owners []string
	for _, s := range in.Sandboxes {
		owners = append(owners, s.ID)
	}
	for _, c := range in.Containers {
		if rng.Intn(4) == 0 {
			owners = append(owners, c.ID)
		}
	}
	for _, m := range in.Unreadable {
		owners = append(owners, m.ID, m.SandboxID)
	}
	if rng.Intn(2) == 0 { // a sandbox only a listed container names
		owners = append(owners, "missing-sandbox")
	}
	for i := range 2 + rng.Intn(6) {
		id := fmt.Sprintf("gone%d", i) // nobody knows these
		if i%3 == 0 {
			id = fmt.Sprintf("unlisted%d", i) // randomNRI may report these
		}
		owners = append(owners, id)
	}
	for i := range rng.Intn(3) {
		id := fmt.Sprintf("record%d", i)
		n.Records.Sandboxes[id] = cri.SandboxRecord{Namespace: "k8s.io", NetNSPath: fmt.Sprintf("/run/netns/cni-%08d-0000-4000-8000-000000000001", i)}
		owners = append(owners, id)
	}
	for i := range rng.Intn(3) {
		id := fmt.Sprintf("nerdctl%d", i)
		n.Records.Containers[id] = "default"
		owners = append(owners, id)
	}
	if rng.Intn(8) == 0 {
		n.Records.Unreadable = []string{"sandbox x in namespace k8s.io: bad metadata"}
	}
	netns := func() string {
		name := fmt.Sprintf("cni-%08d-0000-4000-8000-000000000000", rng.Intn(6))
		switch rng.Intn(12) {
		case 0:
			return ""
		case 1:
			return "/proc/42/ns/net" // another runtime's
		case 2: // containerd's name, another containerd's dir
			return "/run/containerd/netns/" + name
		case 3: // a dir that only shares the netns dir's prefix
			return n.NetnsDir + "-other/" + name
		case 4: // nested under the netns dir
			return n.NetnsDir + "/sub/" + name
		case 5: // CRI-O's: the netns dir, without the "cni-"
			return n.NetnsDir + "/" + strings.TrimPrefix(name, "cni-")
		}
		return n.NetnsDir + "/" + name
	}
	// modTime: unknown, well past network.min_age, just made, or ahead of
	// the clock.
	modTime := func() time.Time {
		switch rng.Intn(5) {
		case 0:
			return time.Time{}
		case 1:
			return now.Add(-time.Duration(rng.Intn(60)) * time.Second)
		case 2:
			return now.Add(time.Duration(1+rng.Intn(60)) * time.Second)
		}
		return now.Add(-time.Duration(60+rng.Intn(3600)) * time.Second)
	}
	ip := 0
	for _, owner := range owners {
		if owner == "" {
			continue
		}
		network := []string{"pods", "other"}[rng.Intn(2)]
		if rng.Intn(3) != 0 {
			// Its cached result: an address of its own, one an earlier
			// attachment had (a freed address handed out again, a fixed
			// IP), loopback.
			var ips []string
			switch rng.Intn(4) {
			case 0:
				ips = []string{fmt.Sprintf("10.1.0.%d", 1+rng.Intn(4)), "127.0.0.1"}
			case 1, 2:
				ips = []string{fmt.Sprintf("10.2.0.%d", len(n.Listing.Attachments))}
			}
			n.Listing.Attachments = append(n.Listing.Attachments, podnet.Attachment{Network: network, ContainerID: owner, IfName: "eth0",
				NetNS: netns(), CacheFile: "/var/lib/cni/results/" + network + "-" + owner + "-eth0", ModTime: modTime(), IPs: ips})
		}
		if rng.Intn(2) == 0 {
			ip++
			n.Listing.Reservations = append(n.Listing.Reservations, podnet.Reservation{Network: network, IP: fmt.Sprintf("10.0.0.%d", ip),
				Path: fmt.Sprintf("/var/lib/cni/networks/%s/10.0.0.%d", network, ip), Owner: owner, IfName: "eth0", ModTime: modTime()})
		}
		if rng.Intn(10) == 0 {
			n.Listing.Unreadable = append(n.Listing.Unreadable, podnet.Unreadable{Kind: "cni-attachment", Path: "/var/lib/cni/results/x-" + owner, Owner: owner})
		}
	}
	if rng.Intn(10) == 0 {
		n.Listing.Unreadable = append(n.Listing.Unreadable, podnet.Unreadable{Kind: "cni-attachment", Path: "/var/lib/cni/results/garbled"})
	}
	for i := range 6 {
		if rng.Intn(4) == 0 {
			continue // not mounted here: gone, or not seen from here
		}
		n.Listing.Netns = append(n.Listing.Netns, podnet.Netns{Path: fmt.Sprintf("/run/netns/cni-%08d-0000-4000-8000-000000000000", i), Inode: uint64(4026530000 + i), InUse: rng.Intn(3) == 0,
			ModTime: modTime()})
	}
	if rng.Intn(3) == 0 {
		n.NetnsUnseen = "this process may not see the namespaces containerd mounts"
	}
	for i := range 3 {
		n.Listing.Netns = append(n.Listing.Netns, podnet.Netns{Path: fmt.Sprintf("/run/netns/cni-%08d-0000-4000-8000-000000000001", i), Inode: uint64(4026531000 + i),
			ModTime: modTime()})
	}
	return n
}

// randomNRI draws what NRI reported, against the listed sandboxes.
func randomNRI(rng *rand.Rand, listed []cri.Sandbox) *NRIView {
	nri := &NRIView{Confirmed: rng.Intn(2) == 0, Session: uint64(1 + rng.Intn(2))}
	session := func() uint64 { // mostly this session's report, sometimes an earlier one's
		if rng.Intn(4) == 0 {
			return nri.Session - 1
		}
		return nri.Session
	}
	reported := func() time.Time {
		switch rng.Intn(4) {
		case 0: // just now: containerd may not have stored it yet
			return now.Add(-time.Duration(rng.Intn(5000)) * time.Millisecond)
		case 1: // after the listing was taken
			return now.Add(time.Duration(1+rng.Intn(3)) * time.Second)
		}
		return now.Add(-time.Duration(10+rng.Intn(600)) * time.Second)
	}
	otherRuntime := rng.Intn(6) == 0
	if !otherRuntime {
		for _, s := range listed {
			if s.Labels == nil || rng.Intn(5) == 0 {
				continue
			}
			nri.Sandboxes = append(nri.Sandboxes, podstate.NRISandbox{ID: s.ID, PodUID: s.UID, ReportedAt: reported(), Synced: rng.Intn(3) == 0,
				Session: session(), Live: s.Ready && rng.Intn(3) != 0})
		}
	}
	for i := range rng.Intn(3) {
		nri.Sandboxes = append(nri.Sandboxes, podstate.NRISandbox{ID: fmt.Sprintf("unlisted%d", i), PodUID: fmt.Sprintf("uid-x%d", i),
			ReportedAt: reported(), Synced: rng.Intn(3) == 0, Session: session(), Live: rng.Intn(2) == 0})
	}
	return nri
}

// listingDisagrees restates, independently of CheckListing, when a listing
// must not be planned from: NRI holds a sandbox live that the listing lacks,
// synchronized or reported by RunPodSandbox long enough before the listing; or no listing of this NRI
// session has shared a sandbox with NRI yet, this one shares none, and
// either side has any.
func listingDisagrees(in Input) bool {
	if in.NRI == nil {
		return false
	}
	listed := map[string]bool{}
	managed := 0
	for _, s := range in.Sandboxes {
		listed[s.ID] = true
		if s.Labels != nil {
			managed++
		}
	}
	for _, m := range in.Unreadable {
		listed[m.ID] = true
	}
	shared, known := false, 0
	for _, n := range in.NRI.Sandboxes {
		current := n.Session == in.NRI.Session
		if n.ReportedAt.After(in.Now) {
			continue
		}
		if listed[n.ID] {
			if current {
				shared = true
				known++
			}
			continue
		}
		if !n.Synced && in.Now.Sub(n.ReportedAt) < podstate.SettleTime {
			continue
		}
		if current {
			known++
		}
		if n.Live {
			return true
		}
	}
	return !in.NRI.Confirmed && !shared && (known > 0 || managed > 0)
}

// oracleDisagrees restates when the oracle is not to be believed: an empty
// pods dir made after a sandbox was created, a pod dir absent from a pods
// dir unchanged since the pod's sandbox was created, or too many Ready
// sandboxes' pods called gone.
func oracleDisagrees(in Input) bool {
	if in.Oracle.Disabled || !in.Oracle.PodDirs.Ready {
		return false
	}
	if born := in.Oracle.PodDirs.Born; !born.IsZero() && len(in.Oracle.PodDirs.UIDs) == 0 && !born.After(in.Now) {
		for _, s := range in.Sandboxes {
			if s.Labels != nil && born.Sub(s.CreatedAt) > 2*time.Second {
				return true
			}
		}
	}
	if mt := in.Oracle.PodDirs.ModTime; !mt.IsZero() {
		for _, s := range in.Sandboxes {
			if s.Labels != nil && !in.Oracle.PodDirs.Present(s.UID) && s.CreatedAt.Sub(mt) > 2*time.Second && !s.CreatedAt.After(in.Now) {
				return true
			}
		}
	}
	ready, settled, gone := 0, 0, 0
	for _, s := range in.Sandboxes {
		if s.Labels == nil || !s.Ready {
			continue
		}
		ready++
		if age := in.Now.Sub(s.CreatedAt); age < in.Policy.OracleSettle && age >= 0 {
			continue
		}
		settled++
		if !in.Oracle.PodDirs.Present(s.UID) {
			gone++
		}
	}
	if ready > 0 && len(in.Oracle.PodDirs.UIDs) == 0 {
		return true
	}
	return gone > 0 && (gone == settled || gone > max(2, settled/4))
}

// graceClock restates, from the input alone, the earliest an action's
// leak_grace clock can have started: when its key was first proposed
// (in.EligibleSince; now when absent or in the future); for a pod cgroup
// (removed or CPU-reduced), no later than its orphaned pod dir's clock,
// whose condition it shares; and never before the pod's last life event,
// which restarts the clock.
func graceClock(in Input, a Action) time.Time {
	first := func(key string) time.Time {
		since, ok := in.EligibleSince[key]
		if !ok || since.After(in.Now) {
			return in.Now
		}
		return since
	}
	since := first(a.Key)
	if a.Kind == RemovePodCgroup || a.Kind == ReducePodCgroupCPU {
		if dir := first("pod-dir/" + a.Pod.UID); dir.Before(since) {
			since = dir
		}
	}
	if life := in.LastLifeEvent[a.Pod.UID]; a.Pod.UID != "" && life.After(since) {
		since = life
	}
	return since
}

// podGoneRules are the rules that rest on the oracle.
var podGoneRules = map[string]bool{RuleContainerPodGone: true, RuleSandboxPodGone: true, RulePodLogDir: true, RuleOrphanStop: true,
	RuleCgroupPodGone: true, RuleCgroupOrphaned: true, RuleCgroupVolumesRemain: true, RuleOrphanedPodDir: true}

// checkContract fails on any plan that breaks DESIGN.md §4.
func checkContract(t *testing.T, in Input, r Result) {
	t.Helper()
	sandboxes := map[string]cri.Sandbox{}
	for _, s := range in.Sandboxes {
		sandboxes[s.ID] = s
	}
	containers := map[string]cri.Container{}
	for _, c := range in.Containers {
		containers[c.ID] = c
	}
	due := map[string]Action{}
	stoppedPods := map[string]bool{}
	listedUID := map[string]bool{}
	for _, s := range in.Sandboxes {
		listedUID[s.UID] = true
	}
	for _, c := range in.Containers {
		listedUID[c.Labels["io.kubernetes.pod.uid"]] = true
	}
	// Unreadable entries are listed too: they hold their sandbox (or, naming
	// none, every sandbox of their pod), their pod and their log link.
	heldSandbox, heldPodSandboxes, unreadableID, unreadableUID := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, m := range in.Unreadable {
		listedUID[m.PodUID] = true
		unreadableUID[m.PodUID] = true
		heldSandbox[m.SandboxID] = true
		heldPodSandboxes[m.PodUID] = heldPodSandboxes[m.PodUID] || m.SandboxID == ""
		unreadableID[m.ID] = true
	}
	if listingDisagrees(in) && (len(r.Actions) > 0 || r.Untrusted == "") {
		t.Fatalf("NRI and the listing disagree, yet the plan has %d action(s) (untrusted %q)", len(r.Actions), r.Untrusted)
	}
	oracleUntrusted := oracleDisagrees(in)
	blocked, volumes := map[string]bool{}, map[string]bool{}
	for _, d := range in.PodDirs {
		blocked[d.UID] = len(d.Blockers) > 0
		volumes[d.UID] = nodefs.PodVolumesExist(d)
	}
	for i, a := range r.Actions {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("action %d %s %s: %s", i, a.Kind, a.Key, fmt.Sprintf(format, args...))
		}
		gone := in.Oracle.gone(a.Pod.UID) && !oracleUntrusted
		// leak_grace, restated from the input, not from the plan's own
		// EligibleSince: every kind waits for it.
		since := graceClock(in, a)
		if in.Now.Sub(since) < in.Policy.LeakGrace {
			fail("due before leak_grace: its clock runs since %s (%s ago), leak_grace %s", since.Format(time.RFC3339), in.Now.Sub(since), in.Policy.LeakGrace)
		}
		if a.EligibleSince.Before(since) {
			fail("eligible since %s, before its clock can have started (%s)", a.EligibleSince.Format(time.RFC3339), since.Format(time.RFC3339))
		}
		if in.Now.Sub(a.EligibleSince) < in.Policy.LeakGrace {
			fail("due before leak_grace by its own clock")
		}
		if oracleUntrusted && podGoneRules[a.Rule] {
			fail("a pod-gone rule runs on an oracle that calls Ready sandboxes' pods gone beyond the threshold")
		}
		if life := in.LastLifeEvent[a.Pod.UID]; a.Pod.UID != "" && life.After(in.Now) {
			fail("acts on a pod with a life event after the listing")
		}
		for _, dep := range a.DependsOn {
			if _, ok := due[dep]; !ok {
				fail("depends on %s, which is not due before it", dep)
			}
		}
		switch a.Kind {
		case RemoveContainer, StopContainer:
			c, ok := containers[a.ContainerID]
			if !ok || c.Labels == nil {
				fail("not a listed kubelet container")
			}
			if a.Rule != RuleOrphanStop && in.Now.Sub(c.CreatedAt) < in.Policy.MinAge {
				fail("evicts a container younger than containers.min_age")
			}
			if c.State == cri.ContainerRunning && !(a.Kind == StopContainer && in.Policy.StopOrphans && gone) {
				fail("touches a RUNNING container (stop orphans %v, pod gone %v)", in.Policy.StopOrphans, gone)
			}
			if a.Kind == RemoveContainer && c.State == cri.ContainerUnknown {
				// kubelet's GC stops it with its pod's grace (at least 2 s);
				// one whose grace cannot be read, or is longer than a stop of
				// the plugin waits, is left to kubelet.
				switch {
				case c.Kill.Unreadable != "" || c.Kill.Grace > UnknownStopMaxGrace:
					fail("removes an UNKNOWN container whose grace is %s (unreadable %q): it is left to kubelet", c.Kill.Grace, c.Kill.Unreadable)
				case !a.StopFirst || a.Timeout != max(c.Kill.Grace, 2*time.Second):
					fail("removes an UNKNOWN container stopped first %v with %s, its pod's grace %s (at least 2s)", a.StopFirst, a.Timeout, c.Kill.Grace)
				}
			}
			if a.Kind == RemoveContainer && a.RemoveLogFiles == gone {
				// kubelet's removeContainer removes a container's log files
				// first; a gone pod's go with its pod log dir.
				fail("removes its log files %v, its pod gone %v", a.RemoveLogFiles, gone)
			}
			if a.Rule == RuleOrphanStop {
				stoppedPods[a.Pod.UID] = true
			}
		case RemoveSandbox, StopSandbox:
			s, ok := sandboxes[a.SandboxID]
			if !ok || s.Labels == nil {
				fail("not a listed kubelet sandbox")
			}
			if s.Ready && !(a.Kind == StopSandbox && in.Policy.StopOrphans && gone) {
				fail("touches a Ready sandbox")
			}
			if a.Kind == RemoveSandbox && (heldSandbox[s.ID] || heldPodSandboxes[a.Pod.UID]) {
				fail("still held by a listed container that could not be read")
			}
			if a.Kind == RemoveSandbox {
				for _, c := range in.Containers {
					if c.SandboxID == s.ID {
						if _, ok := due["container/"+c.ID]; !ok {
							fail("still referenced by container %s (%s), not removed before it", c.ID, c.State)
						}
					}
				}
			}
			if a.Rule == RuleOrphanStop {
				stoppedPods[a.Pod.UID] = true
			}
		case RemovePodLogDir:
			if filepath.Dir(a.Path) != in.Policy.PodLogsDir {
				fail("path outside pod_logs_dir")
			}
			if !gone {
				fail("log dir of a pod that is not gone")
			}
			if unreadableUID[a.Pod.UID] {
				fail("log dir of a pod with a listed entry that could not be read")
			}
			for _, s := range in.Sandboxes {
				if s.UID == a.Pod.UID {
					if _, ok := due["sandbox/"+s.ID]; !ok {
						fail("sandbox %s of the pod is left", s.ID)
					}
				}
			}
			for _, c := range in.Containers {
				if c.Labels["io.kubernetes.pod.uid"] == a.Pod.UID {
					if _, ok := due["container/"+c.ID]; !ok {
						fail("container %s (%s) of the pod is left", c.ID, c.State)
					}
				}
			}
		case RemovePodCgroup, ReducePodCgroupCPU, RemovePodDir:
			// Of a pod with listed objects, only a gone pod's cgroup, after
			// every one of them.
			if listedUID[a.Pod.UID] && (a.Kind != RemovePodCgroup || !gone || unreadableUID[a.Pod.UID]) {
				fail("touches the cgroup or pod dir of a pod with a listed sandbox or container")
			}
			if listedUID[a.Pod.UID] {
				for _, s := range in.Sandboxes {
					if s.UID == a.Pod.UID && !slices.Contains(a.DependsOn, "sandbox/"+s.ID) {
						fail("the cgroup of a pod whose sandbox %s it does not go after", s.ID)
					}
				}
				for _, c := range in.Containers {
					if c.Labels["io.kubernetes.pod.uid"] == a.Pod.UID && !slices.Contains(a.DependsOn, "container/"+c.ID) {
						fail("the cgroup of a pod whose container %s (%s) it does not go after", c.ID, c.State)
					}
				}
			}
			if a.Kind != RemovePodDir && !in.PodCgroups.Pods[a.Pod.UID].Inspected {
				fail("acts on a pod cgroup that was not looked into")
			}
			if a.Kind == RemovePodDir && (!in.Policy.RemoveOrphanedPodDirs || blocked[a.Pod.UID]) {
				fail("removes a pod dir without pod_dirs.remove_orphaned or despite a blocker")
			}
			// Mounts out of this process's sight: no pod dir can be told
			// free of them, so none is removed, and a pod that is not
			// gone (an orphan, its dir present) keeps its cgroup.
			if in.PodDirMountsUnseen != "" && (a.Kind == RemovePodDir || a.Kind == RemovePodCgroup && !gone) {
				fail("removes a pod dir, or the cgroup of a pod whose dir stays, while kubelet's mounts are out of sight (%s)", in.PodDirMountsUnseen)
			}
			if a.Kind == RemovePodCgroup && in.Oracle.Disabled {
				fail("destroys a pod cgroup with the oracle disabled")
			}
			// A pod dir with nothing listed may be a pod not started yet:
			// only a gone pod, or one this plugin saw torn down, is touched.
			if !gone && !in.TornDown[a.Pod.UID] {
				fail("touches the cgroup or pod dir of a pod that is neither gone nor seen torn down")
			}
			// ... unless its pod dir (volume dirs empty, nothing mounted) is
			// removed before it, as kubelet's housekeeping does.
			_, dirFirst := due["pod-dir/"+a.Pod.UID]
			dirFirst = dirFirst && slices.Contains(a.DependsOn, "pod-dir/"+a.Pod.UID)
			if a.Kind == RemovePodCgroup && !gone && (blocked[a.Pod.UID] || volumes[a.Pod.UID] && !dirFirst) {
				fail("destroys the cgroup of a pod whose volume dirs remain or whose pod dir cannot be fully inspected")
			}
		case RemoveContainerLogLink:
			if filepath.Dir(a.Path) != in.Policy.ContainerLogsDir {
				fail("path outside container_logs_dir")
			}
			for _, l := range in.ContainerLogLinks {
				if l.Path != a.Path || l.Dangling || slices.Contains(a.DependsOn, "pod-log-dir/"+l.TargetLogDir) {
					continue
				}
				// Or right after its container goes with its log files
				// (kubelet's removeContainer removes the link with them).
				byFiles := false
				for _, dep := range a.DependsOn {
					d, ok := due[dep]
					byFiles = byFiles || ok && d.Kind == RemoveContainer && d.RemoveLogFiles && strings.HasPrefix(d.ContainerID, l.ContainerID) &&
						(l.Truncated || d.ContainerID == l.ContainerID)
				}
				if !byFiles {
					fail("a link that does not dangle, not after the removal of the log dir it points into or of its container with its log files")
				}
			}
			if unreadableID[a.ContainerID] {
				fail("link of a listed container that could not be read")
			}
			if c, ok := containers[a.ContainerID]; ok && c.State != cri.ContainerExited {
				if _, removing := due["container/"+c.ID]; !removing {
					fail("link of a %s container", c.State)
				}
			}
		}
		due[a.Key] = a
	}
	checkNetwork(t, in, r)
	checkBudget(t, in, r)
	if !in.Oracle.Ready() && len(r.Actions) > 0 {
		t.Fatal("actions while the oracle is not ready")
	}
}

// checkNetwork fails on any network step whose object a source still
// knows: an attachment or reservation whose owner is listed (in any state,
// readable or not), reported by NRI, in containerd's records or named by an
// unreadable cache entry; a reservation whose owner has a cache entry; a
// netns in use, recorded or named by a known owner's attachment; any step
// while a listed entry that names no ID could be the owner.
func checkNetwork(t *testing.T, in Input, r Result) {
	t.Helper()
	var steps []Action
	for _, a := range append(append([]Action(nil), r.Actions...), deferredActions(r)...) {
		if a.Kind == RemoveCNIAttachment || a.Kind == ReleaseIPReservation || a.Kind == RemoveNetns {
			steps = append(steps, a)
		}
	}
	if len(steps) == 0 {
		return
	}
	if in.Network == nil {
		t.Fatalf("%d network step(s) planned with the network side off", len(steps))
	}
	known := map[string]bool{}
	for _, s := range in.Sandboxes {
		known[s.ID] = true
	}
	for _, c := range in.Containers {
		known[c.ID] = true
		known[c.SandboxID] = true // its sandbox lives while it is listed
	}
	anonymous := false
	for _, m := range in.Unreadable {
		known[m.ID], known[m.SandboxID] = true, true
		anonymous = anonymous || m.ID == ""
	}
	if in.NRI != nil {
		for _, s := range in.NRI.Sandboxes {
			known[s.ID] = true
		}
	}
	for id := range in.Network.Records.Sandboxes {
		known[id] = true
	}
	for id := range in.Network.Records.Containers {
		known[id] = true
	}
	cached, garbled := map[string]bool{}, false // cached: "<network>/<owner>", "*/<owner>" for an unreadable entry
	for _, u := range in.Network.Listing.Unreadable {
		known[u.Owner] = true
		cached["*/"+u.Owner] = true
		garbled = garbled || u.Owner == ""
	}
	usedNetns, foreign := map[string]bool{}, map[string]bool{}
	for _, a := range in.Network.Listing.Attachments {
		if filepath.Dir(a.NetNS) != in.Network.NetnsDir || !podnet.IsNetnsName(filepath.Base(a.NetNS)) {
			foreign[a.Network] = true
		}
		cached[a.Network+"/"+a.ContainerID] = true
		if known[a.ContainerID] {
			usedNetns[a.NetNS] = true
		}
	}
	for _, s := range in.Network.Records.Sandboxes {
		usedNetns[s.NetNSPath] = true
	}
	planned := map[string]bool{}
	for _, a := range steps {
		planned[a.Key] = true
	}
	// young: made less than network.min_age ago, or dated ahead of the
	// clock (its age cannot be told).
	young := func(modTime time.Time) bool {
		return in.Policy.NetworkMinAge > 0 && !modTime.IsZero() && in.Now.Sub(modTime) < in.Policy.NetworkMinAge
	}
	for _, a := range steps {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("network step %s %s: %s", a.Kind, a.Key, fmt.Sprintf(format, args...))
		}
		if anonymous {
			fail("planned while a listed entry naming no ID could be the owner")
		}
		if budgetClassOf(a) != ClassNetwork {
			fail("not counted against the network budget")
		}
		switch a.Kind {
		case RemoveCNIAttachment:
			if a.Attachment == nil || known[a.Attachment.ContainerID] {
				fail("the attachment's owner is known")
			}
			if filepath.Dir(a.Attachment.NetNS) != in.Network.NetnsDir || !podnet.IsNetnsName(filepath.Base(a.Attachment.NetNS)) {
				fail("the attachment ran in a netns containerd did not make")
			}
			if usedNetns[a.Attachment.NetNS] {
				fail("the attachment ran in the netns of a sandbox a source knows")
			}
			if in.Network.NetnsUnseen != "" && !slices.ContainsFunc(in.Network.Listing.Netns, func(ns podnet.Netns) bool { return ns.Path == a.Attachment.NetNS }) {
				fail("its netns is not mounted here, and this process may not see containerd's mounts")
			}
			if young(a.Attachment.ModTime) {
				fail("its cache entry, of %s, is younger than network.min_age %s", a.Attachment.ModTime.Format(time.RFC3339), in.Policy.NetworkMinAge)
			}
			// Its DEL passes its cached result on: none of its addresses
			// may be a known sandbox's, or a newer attachment's.
			for _, b := range in.Network.Listing.Attachments {
				if b.ContainerID != a.Attachment.ContainerID && (known[b.ContainerID] || podnet.Newer(b, *a.Attachment)) {
					if ip := podnet.SharedAddress(*a.Attachment, b); ip != "" {
						fail("its address %s is in the result of %s's attachment (known %v)", ip, b.ContainerID, known[b.ContainerID])
					}
				}
			}
		case ReleaseIPReservation:
			if a.Reservation == nil || known[a.Reservation.Owner] {
				fail("the reservation's owner is known")
			}
			if cached[a.Reservation.Network+"/"+a.Reservation.Owner] || cached["*/"+a.Reservation.Owner] || garbled {
				fail("released by hand while a cache entry may still name its owner")
			}
			if foreign[a.Reservation.Network] {
				fail("released by hand on a network another runtime uses")
			}
			if young(a.Reservation.ModTime) {
				fail("reserved at %s, younger than network.min_age %s", a.Reservation.ModTime.Format(time.RFC3339), in.Policy.NetworkMinAge)
			}
		case RemoveNetns:
			if a.Netns == nil || a.Netns.InUse || usedNetns[a.Path] {
				fail("the netns is in use, recorded or named by a known owner's attachment")
			}
			if len(in.Network.Records.Unreadable) > 0 {
				fail("removed while containerd has records whose netns cannot be read")
			}
			if young(a.Netns.ModTime) {
				fail("made at %s, younger than network.min_age %s", a.Netns.ModTime.Format(time.RFC3339), in.Policy.NetworkMinAge)
			}
			// Every attachment that ran in it is DEL'd first: one kept
			// keeps its namespace.
			for _, b := range in.Network.Listing.Attachments {
				del := fmt.Sprintf("cni-attachment/%s/%s/%s", b.Network, b.ContainerID, b.IfName)
				if b.NetNS == a.Path && (!planned[del] || !slices.Contains(a.DependsOn, del)) {
					fail("attachment %s ran in it, and its DEL is not planned before (planned %v)", del, planned[del])
				}
			}
		}
	}
}

// budgetClassOf is BudgetClass without the unit.
func budgetClassOf(a Action) string { c, _ := BudgetClass(a); return c }

// checkBudget fails when a plan takes more steps of a budget class than the
// budget allows: max(min_per_pass, min(max_per_pass, ⌊max_fraction × Ready⌋))
// per pass, and what is left of max_per_hour.
func checkBudget(t *testing.T, in Input, r Result) {
	t.Helper()
	ready := 0
	for _, s := range in.Sandboxes {
		if s.Ready && s.Labels != nil {
			ready++
		}
	}
	b := in.Policy.Budget
	perPass := max(b.MinPerPass, min(b.MaxPerPass, int(b.MaxFraction*float64(ready))))
	units := map[string]map[string]bool{}
	for _, a := range r.Actions {
		class := ""
		unit := a.Key
		switch {
		case a.Rule == RuleOrphanStop:
			class, unit = ClassOrphanStop, a.Pod.UID
		case a.Kind == StopContainer || (a.Kind == RemoveContainer && a.StopFirst):
			class = ClassUnknownStop
		case a.Kind == RemovePodCgroup && a.Cgroup.Procs > 0:
			class = ClassCgroupKill
		case a.Kind == ReducePodCgroupCPU:
			class = ClassCgroupCPU
		case a.Kind == RemovePodDir:
			class = ClassPodDir
		case a.Kind == RemovePodLogDir:
			class = ClassPodLogDir
		case a.Kind == RemoveCNIAttachment || a.Kind == ReleaseIPReservation || a.Kind == RemoveNetns:
			class = ClassNetwork
			if a.ContainerID != "" {
				unit = a.ContainerID // a leaked sandbox: its attachments, reservation and netns
			}
		default:
			continue
		}
		if in.BudgetAdmitted[class+"/"+unit] {
			continue // a retry of a unit taken this hour: not counted again
		}
		if units[class] == nil {
			units[class] = map[string]bool{}
		}
		units[class][unit] = true
	}
	spent := map[string]int{}
	for unit := range in.BudgetAdmitted {
		spent[strings.SplitN(unit, "/", 2)[0]]++
	}
	for class, u := range units {
		if n := len(u); n > 0 && in.BudgetHeld != "" {
			t.Fatalf("a pass takes %d %s step(s) while the budget is held (%s)", n, class, in.BudgetHeld)
		}
		if n := len(u); n > perPass || n > b.MaxPerHour-spent[class] {
			t.Fatalf("a pass takes %d %s step(s): over the budget (%d per pass on %d Ready; %d of %d left this hour)",
				n, class, perPass, ready, b.MaxPerHour-spent[class], b.MaxPerHour)
		}
	}
	for _, trip := range r.Trips {
		if len(units[trip.Class]) > 0 {
			t.Fatalf("class %s tripped, yet the pass takes %d of its steps", trip.Class, len(units[trip.Class]))
		}
	}
	// A class that takes only some of its steps takes those of units that
	// did not fail at their last try first: failing ones, counted again
	// each hour, would else take it every hour.
	for _, d := range r.Deferred {
		class, unit := BudgetClass(d.Action)
		if !d.Throttled || in.BudgetFailing[class+"/"+unit] {
			continue
		}
		// New orphan stops are all or nothing: a pass takes every one
		// or none, and only those that failed before wait for places.
		if class == ClassOrphanStop {
			t.Fatalf("orphan stop %s, which did not fail at its last try, is held for a later pass while others are stopped", unit)
		}
		for taken := range units[class] {
			if in.BudgetFailing[class+"/"+taken] {
				t.Fatalf("class %s takes %s, which failed at its last try, and holds %s, which did not", class, taken, unit)
			}
		}
	}
}

func TestEveryPlanKeepsTheSafetyContract(t *testing.T) {
	for seed := int64(1); seed <= 2000; seed++ {
		in := randomInput(seed, 1+int(seed%40))
		checkContract(t, in, Plan(in))
	}
}

func FuzzPlanKeepsTheSafetyContract(f *testing.F) {
	for _, seed := range []int64{1, 7, 99, 12345} {
		f.Add(seed, uint8(10))
	}
	f.Fuzz(func(t *testing.T, seed int64, pods uint8) {
		in := randomInput(seed, 1+int(pods%64))
		checkContract(t, in, Plan(in))
	})
}
