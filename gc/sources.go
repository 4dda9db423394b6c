package gc

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// Sources must agree (DESIGN.md §4). The plugin has three views of the
// node: NRI (what containerd told it happened), the CRI listing (what
// containerd holds now) and kubelet's pod dirs (what kubelet still wants).
// No one of them alone may justify a destructive step. This file holds the
// two checks between them; the third guard, re-checking right before a node
// step, is the loop's (package housekeeping).

// NRIView is what NRI reported about the node's sandboxes.
type NRIView struct {
	// Sandboxes are podstate.NRISandboxes, taken before the listing was
	// reconciled.
	Sandboxes []podstate.NRISandbox
	// Session is the current NRI session (podstate.Syncs): only what it
	// reported says what the runtime NRI talks to now has.
	Session uint64
	// Confirmed: a listing of this session shared one of its sandboxes, so
	// runtime.endpoint answers for the containerd NRI talks to. Until then
	// a listing must share one, unless both sides are empty.
	Confirmed bool
}

// ListingCheck is the verdict of CheckListing.
type ListingCheck struct {
	// Shared: the listing has a sandbox NRI reported.
	Shared bool
	// Missing are the sandboxes NRI holds live (reported Ready, no stop or
	// removal since) that the listing lacks, though they had time to reach
	// containerd's store.
	Missing []podstate.NRISandbox
	// Untrusted says why the listing must not be planned from ("" when it
	// may).
	Untrusted string
}

// CheckListing checks a successful listing taken at takenAt against NRI:
//   - a sandbox NRI holds live must be listed: reported by Synchronize
//     (from containerd's store), or by RunPodSandbox at least
//     podstate.SettleTime before the listing (containerd reports it before
//     storing the sandbox);
//   - until a listing of this NRI session shared a sandbox with NRI
//     (nri.Confirmed), this one must, when either side has any: a
//     runtime.endpoint that answers for another containerd shares none.
//
// Missing sandboxes make the listing untrusted; the caller may ask the
// runtime for each by ID, and drop those it does not know (containerd
// drops the NRI stop and removal of pods it had before a restart) before
// checking again.
func CheckListing(nri NRIView, sandboxes []cri.Sandbox, unreadable []cri.Malformed, takenAt time.Time) ListingCheck {
	listed := make(map[string]struct{}, len(sandboxes)+len(unreadable))
	managed := 0
	for _, s := range sandboxes {
		listed[s.ID] = struct{}{}
		if _, ok := podstate.KubeletPod(s.Labels); ok {
			managed++
		}
	}
	for _, m := range unreadable {
		if m.ID != "" {
			listed[m.ID] = struct{}{}
		}
	}
	var c ListingCheck
	settled := takenAt.Add(-podstate.SettleTime)
	reported := 0 // NRI sandboxes the listing should have
	for _, n := range nri.Sandboxes {
		if n.ReportedAt.After(takenAt) {
			continue // reported after the listing was taken
		}
		// Sharing is counted in this session's reports only: a sandbox an
		// earlier session reported says nothing of which containerd NRI
		// talks to now. Any session's live sandbox must be listed, though.
		current := n.Session == nri.Session
		if _, ok := listed[n.ID]; ok {
			c.Shared = c.Shared || current
			if current {
				reported++
			}
			continue
		}
		if !n.Synced && n.ReportedAt.After(settled) {
			continue // reported by RunPodSandbox: containerd may not have stored it yet
		}
		if current {
			reported++
		}
		if n.Live {
			c.Missing = append(c.Missing, n)
		}
	}
	switch {
	case !nri.Confirmed && !c.Shared && (reported > 0 || managed > 0):
		c.Untrusted = fmt.Sprintf("the CRI listing shares no sandbox with NRI: NRI reported %d sandbox(es) since it last synchronized, none of them listed, "+
			"and the listing has %d kubelet sandbox(es), none of them reported by NRI; runtime.endpoint may answer for another "+
			"containerd than the one NRI is connected to (check runtime.endpoint and nri.socket)", reported, managed)
	case len(c.Missing) > 0:
		c.Untrusted = fmt.Sprintf("the CRI listing lacks %d sandbox(es) NRI reported live with no stop or removal since (%s): "+
			"the listing or NRI is wrong about them", len(c.Missing), describeNRISandboxes(c.Missing, 3))
	}
	return c
}

func describeNRISandboxes(sandboxes []podstate.NRISandbox, n int) string {
	var parts []string
	for i, s := range sandboxes {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(sandboxes)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s of pod %s", short(s.ID), s.PodUID))
	}
	return strings.Join(parts, ", ")
}

// Oracle agreement. kubelet creates a pod's dir before its sandbox and
// removes it only once nothing of the pod runs, so a Ready sandbox whose pod
// dir is absent is either an orphaned live pod (rare: kubelet's own
// housekeeping is stuck) or a wrong oracle (a stale kubelet_root, a
// leftover bind mount). Beyond a few, it is the oracle.
const (
	// oracleMaxGone is how many settled Ready sandboxes may have no pod dir
	// before the oracle is untrusted whatever the node's size...
	oracleMaxGone = 2
	// ...or this share of them, on a larger node.
	oracleMaxGoneShare = 4 // one in four
)

// oracleClockMargin allows for coarse file system timestamps when a pod
// dir's absence is compared with the pods dir's modification time.
const oracleClockMargin = 2 * time.Second

// checkOracle says why the oracle must not be trusted this pass, or "". It
// is untrusted
//   - when a listed sandbox's pod dir is absent although the pods dir has
//     not changed since the sandbox was created: kubelet made that dir
//     before the sandbox, and removing it would have changed the pods dir,
//     so this is not the dir kubelet writes to (one such sandbox is proof,
//     in any state: a completed pod counts too);
//   - when the pods dir is wholly empty while any Ready sandbox is listed,
//     or was made after any listed sandbox was created;
//   - when it calls every settled Ready sandbox's pod gone, or more of them
//     than max(oracleMaxGone, a quarter of them).
//
// Sandboxes younger than Policy.OracleSettle do not count in the last rule.
func (p *planner) checkOracle() string {
	o := p.in.Oracle
	if o.Disabled || !o.PodDirs.Ready {
		return ""
	}
	if why := p.unchangedSince(); why != "" {
		return why
	}
	if why := p.emptyAndBornAfter(); why != "" {
		return why
	}
	ready, settled, n := 0, 0, 0
	for _, s := range p.sandboxes {
		if !s.Ready {
			continue
		}
		ready++
		if p.settled(s) {
			settled++
			if s.gone {
				n++
			}
		}
	}
	switch {
	case ready > 0 && len(o.PodDirs.UIDs) == 0:
		return fmt.Sprintf("the kubelet pods dir is empty while the runtime runs %d Ready sandbox(es): pods.kubelet_root is not the root kubelet uses "+
			"(a moved --root-dir, a stale mount?); no pod-gone rule runs", ready)
	case n > 0 && (n == settled || n > max(oracleMaxGone, settled/oracleMaxGoneShare)):
		return fmt.Sprintf("the kubelet pods dir lacks the pods of %d of %d Ready sandbox(es) (%s), more than an orphaned pod explains "+
			"(kubelet never calls a pod gone while the runtime runs it): pods.kubelet_root may not be the root kubelet uses; no pod-gone rule runs",
			n, settled, p.goneReady(3))
	}
	return ""
}

// emptyAndBornAfter finds a sandbox created before an empty pods dir was
// made: kubelet made that sandbox's pod dir before it, so not in this dir
// (a root made where kubelet's volume is not mounted yet, after a reboot
// that left every sandbox NotReady, so that no Ready one gives it away). A
// pods dir with entries is left to the other rules: a root kubelet uses
// again once its volume is back, or copied to a new disk, holds the live
// pods' dirs, and a leak from before the copy is still a leak.
func (p *planner) emptyAndBornAfter() string {
	d := p.in.Oracle.PodDirs
	if d.Born.IsZero() || len(d.UIDs) > 0 || d.Born.After(p.in.Now) {
		return "" // no birth time, not empty, or a clock stepped back
	}
	for _, s := range p.sandboxes {
		if d.Born.After(s.CreatedAt.Add(oracleClockMargin)) {
			return fmt.Sprintf("the kubelet pods dir is empty and was made %s, after sandbox %s of pod %s/%s was created (%s): kubelet makes a pod's dir "+
				"before its sandbox, so not in this dir; pods.kubelet_root is not the root kubelet uses (its volume not mounted yet?), or kubelet's root "+
				"was made afresh (then the old sandboxes are the runtime's to remove, crictl rmp, or wait for the first pod); no pod-gone rule runs",
				d.Born.UTC().Format(time.RFC3339), short(s.ID), s.pod.Namespace, s.pod.Name, s.CreatedAt.UTC().Format(time.RFC3339))
		}
	}
	return ""
}

// unchangedSince finds a sandbox whose pod dir is absent from a pods dir
// that has not changed since the sandbox was created.
func (p *planner) unchangedSince() string {
	mt := p.in.Oracle.PodDirs.ModTime
	if mt.IsZero() {
		return ""
	}
	for _, s := range p.sandboxes {
		// A creation time after the listing (the clock stepped back) says
		// nothing about the order of events.
		if s.gone && s.CreatedAt.After(mt.Add(oracleClockMargin)) && !s.CreatedAt.After(p.in.Now) {
			return fmt.Sprintf("the kubelet pods dir has not changed since %s, yet sandbox %s of pod %s/%s, created %s, has no pod dir there: "+
				"kubelet makes a pod's dir before its sandbox, and removing it would have changed the pods dir; pods.kubelet_root is not "+
				"the root kubelet writes to (a stale copy or mount?); no pod-gone rule runs",
				mt.Format(time.RFC3339), short(s.ID), s.pod.Namespace, s.pod.Name, s.CreatedAt.Format(time.RFC3339))
		}
	}
	return ""
}

// settled reports whether a sandbox is old enough to count in checkOracle;
// one created after the listing (the clock stepped back) counts.
func (p *planner) settled(s *sandboxInfo) bool {
	age := p.in.Now.Sub(s.CreatedAt)
	return age >= p.in.Policy.OracleSettle || age < 0
}

// goneReady names up to n of the settled Ready sandboxes' pods the oracle
// calls gone.
func (p *planner) goneReady(n int) string {
	var names []string
	for _, s := range p.sandboxes {
		if s.Ready && s.gone && p.settled(s) {
			names = append(names, s.pod.Namespace+"/"+s.pod.Name)
		}
	}
	sort.Strings(names)
	if len(names) > n {
		names = append(names[:n], fmt.Sprintf("and %d more", len(names)-n))
	}
	return strings.Join(names, ", ")
}
