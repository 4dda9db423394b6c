package gc

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// nodeRules handles what kubelet's housekeeping cleans besides the runtime:
// orphaned kubelet pod dirs and orphaned pod cgroups. Both only ever concern
// pods with no sandbox and no container in the listing, but for the cgroup
// of a gone pod whose last objects this plan removes.
func (p *planner) nodeRules() {
	if p.in.PodCgroups == nil && len(p.in.PodDirs) == 0 {
		return
	}
	orphanDirs := p.orphanedPodDirRules()
	p.podCgroupRules(orphanDirs)
}

// listed reports whether a pod has any sandbox or container in the listing,
// managed or not, readable or not: its cgroups and pod dirs are never
// touched. Sandboxes answer nearly every question; the containers' pod UIDs
// are only collected (once) for a UID no sandbox claims.
func (p *planner) listed(uid string) bool {
	if len(p.sandboxesByUID[uid]) > 0 || len(p.unmanagedByUID[uid]) > 0 || len(p.labelledByUID[uid]) > 0 || p.unreadableByUID[uid] != "" {
		return true
	}
	if p.containerUIDs == nil {
		p.containerUIDs = make(map[string]struct{})
		for i := range p.in.Containers {
			if u := p.in.Containers[i].Labels[podstate.LabelPodUID]; u != "" {
				p.containerUIDs[u] = struct{}{}
			}
		}
	}
	_, ok := p.containerUIDs[uid]
	return ok
}

// orphanedPodDirRules: a kubelet pod dir whose pod this plugin saw torn
// down, and that has had no sandbox and no container for leak_grace (and no
// life event in that time) is an orphan, kubelet's "orphaned pod". It is
// reported with what keeps kubelet from removing it, and removed with
// pod_dirs.remove_orphaned = true when nothing does. It returns the
// orphaned dirs by UID.
func (p *planner) orphanedPodDirRules() map[string]orphanedPodDir {
	orphans := make(map[string]orphanedPodDir)
	dirs := append([]nodefs.PodDir(nil), p.in.PodDirs...)
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].UID < dirs[j].UID })
	for _, d := range dirs {
		if p.listed(d.UID) || p.in.Oracle.Disabled || !p.in.Oracle.PodDirs.Present(d.UID) {
			continue
		}
		pod := p.podRef(d.UID)
		object := "pod dir " + d.Path
		if !p.in.TornDown[d.UID] {
			p.keep(object, pod, "no sandbox or container listed, but this plugin did not see the pod torn down: "+
				"it may be a pod kubelet has not started yet (waiting for a volume, the network or an image); its dir and cgroup are left alone")
			continue
		}
		if p.lifeAfterListing(pod) {
			continue
		}
		key := "pod-dir/" + d.UID
		since, left := p.clock(key, d.UID)
		if left > 0 {
			p.keep(object, pod, "no sandbox or container since %s: an orphaned pod dir if that lasts another %s (leak_grace)",
				since.Format("15:04:05"), round(left))
			continue
		}
		orphans[d.UID] = orphanedPodDir{PodDir: d, since: since}
		p.leaks[LeakPodDir]++
		switch {
		case len(d.Blockers) > 0:
			p.keep(object, pod, "orphaned pod dir that kubelet could not remove: %s", strings.Join(d.Blockers, "; "))
		case !p.in.Policy.RemoveOrphanedPodDirs:
			p.keep(object, pod, "orphaned pod dir with nothing mounted: reported only (pod_dirs.remove_orphaned = false)")
		case p.in.PodDirMountsUnseen != "":
			p.keep(object, pod, "orphaned pod dir with nothing mounted that this process sees, kept: %s", p.in.PodDirMountsUnseen)
		default:
			if p.propose(Action{Kind: RemovePodDir, Rule: RuleOrphanedPodDir, Pod: pod, Key: key, Path: d.Path, PodDir: &d,
				Reason: "kubelet pod dir of a pod with no sandbox or container for leak_grace, nothing mounted in it"}) {
				o := orphans[d.UID]
				o.removal = key
				orphans[d.UID] = o
			}
		}
	}
	return orphans
}

// orphanedPodDir is a pod dir found orphaned, since when its pod has had
// no sandbox and no container, and the key of its removal ("" when it is
// not removed).
type orphanedPodDir struct {
	nodefs.PodDir
	since   time.Time
	removal string
}

// podCgroupRules is kubelet's cleanupOrphanedPodCgroups: the cgroup of a pod
// with no sandbox or container in the listing and whose pod is gone has its
// processes killed and is removed; while the pod's volume dirs remain (an
// orphaned pod dir) its CPU is only reduced to the minimum. The cgroup of a
// gone pod whose every listed sandbox and container this plan removes goes
// in the same pass, after them; an orphaned pod's cgroup is due with its
// dir: each condition has held since the pod's objects were gone.
func (p *planner) podCgroupRules(orphanDirs map[string]orphanedPodDir) {
	l := p.in.PodCgroups
	if l == nil {
		return
	}
	if !l.Ready {
		p.keep("pod cgroups", PodRef{}, "not planned this pass: %v", l.Err)
		return
	}
	uids := make([]string, 0, len(l.Pods))
	var listedGone []string
	for uid, cg := range l.Pods {
		uids = append(uids, uid)
		if cg.Inspected && p.listed(uid) && p.gone(uid) {
			listedGone = append(listedGone, uid)
		}
	}
	sort.Strings(uids)
	var containers map[string][]*cri.Container
	if len(listedGone) > 0 {
		containers = p.containersOf(listedGone)
	}
	for _, uid := range uids {
		cg := l.Pods[uid]
		pod := p.podRef(uid)
		if cg.Unreadable != "" {
			p.keep("pod cgroup "+uid, pod, "its cgroup tree cannot be read, so nothing is known to act on: %s", cg.Unreadable)
			continue
		}
		if p.listed(uid) {
			if _, ok := containers[uid]; !ok {
				continue // not gone, or not looked into: its pod had running objects then
			}
			deps, left := p.podRemovals(uid, containers[uid])
			if left != "" {
				continue // said for its log dir and its objects
			}
			if id, ok := podstate.KubeletPod(firstLabels(containers[uid])); ok && pod.Name == "" {
				pod = PodRef{UID: uid, Namespace: id.Namespace, Name: id.Name}
			}
			p.proposeCgroup(cg, pod, RemovePodCgroup, RuleCgroupPodGone, deps,
				fmt.Sprintf("pod cgroup with %d process(es) of a pod that is gone from the node, whose last sandboxes and containers this plan removes first", cg.Procs))
			continue
		}
		if !cg.Inspected {
			// Found by name only: whoever listed the cgroups took the pod
			// for a listed one. Nothing is known to act on.
			p.keep("pod cgroup "+uid, pod, "not looked into this pass (its pod had listed objects when the cgroups were listed)")
			continue
		}
		dir, orphanDir := orphanDirs[uid]
		if orphanDir {
			p.startClockWith("pod-cgroup/"+uid, dir.since)
			p.startClockWith("pod-cgroup-cpu/"+uid, dir.since)
		}
		switch {
		case p.gone(uid):
			p.proposeCgroup(cg, pod, RemovePodCgroup, RuleCgroupPodGone, nil,
				fmt.Sprintf("pod cgroup with %d process(es) of a pod that is gone from the node, with no sandbox left", cg.Procs))
		case orphanDir && dir.removal != "":
			// kubelet's housekeeping removes orphaned pod dirs, then
			// destroys the cgroups of pods whose volumes no longer exist:
			// the dir (its volume dirs empty, nothing mounted) goes first.
			p.proposeCgroup(cg, pod, RemovePodCgroup, RuleCgroupOrphaned, []string{dir.removal},
				fmt.Sprintf("pod cgroup with %d process(es) of an orphaned pod (no sandbox, no container) whose pod dir this plan removes first", cg.Procs))
		case orphanDir && (nodefs.PodVolumesExist(dir.PodDir) || len(dir.Blockers) > 0 || p.in.PodDirMountsUnseen != ""):
			// kubelet treats "cannot tell" as "volumes may be mounted": any
			// blocker (a pod dir that cannot be inspected, a symlink where a
			// volume dir belongs), or mounts out of this process's sight,
			// allows a CPU reduction only.
			why := fmt.Sprintf("its volume dirs remain (%d)", len(dir.VolumeDirs)+len(dir.MountPoints)+len(dir.Leftovers))
			switch {
			case nodefs.PodVolumesExist(dir.PodDir):
			case len(dir.Blockers) > 0:
				why = "its pod dir may still hold volumes: " + strings.Join(dir.Blockers, "; ")
			default:
				why = "its pod dir may hold volumes mounted out of this process's sight: " + p.in.PodDirMountsUnseen
			}
			if cg.CPUReduced {
				p.keep("pod cgroup "+uid, pod, "CPU already at the minimum; %s", why)
				continue
			}
			p.proposeCgroup(cg, pod, ReducePodCgroupCPU, RuleCgroupVolumesRemain, nil,
				"pod cgroup of an orphaned pod; "+why+": CPU reduced to the minimum, not destroyed (kubelet's ReduceCPULimits)")
		case orphanDir:
			p.proposeCgroup(cg, pod, RemovePodCgroup, RuleCgroupOrphaned, nil,
				fmt.Sprintf("pod cgroup with %d process(es) of an orphaned pod (no sandbox, no container, no volume)", cg.Procs))
		}
	}
}

// podRef names the pod of a UID, for logs and the report: from its listed
// sandboxes, else from what this plugin knew of the pod, else from the
// pod's log dir (<ns>_<name>_<uid>), else by UID alone.
func (p *planner) podRef(uid string) PodRef {
	if group := p.sandboxesByUID[uid]; len(group) > 0 {
		return group[0].pod
	}
	if ref, ok := p.in.PodNames[uid]; ok && ref.Name != "" {
		ref.UID = uid
		return ref
	}
	if p.logDirNames == nil {
		p.logDirNames = make(map[string]PodRef, len(p.in.PodLogDirs))
		for _, d := range p.in.PodLogDirs {
			if d.PodName != "" {
				p.logDirNames[d.UID] = PodRef{UID: d.UID, Namespace: d.Namespace, Name: d.PodName}
			}
		}
	}
	if ref, ok := p.logDirNames[uid]; ok {
		return ref
	}
	return PodRef{UID: uid}
}

func (p *planner) proposeCgroup(cg podcgroups.PodCgroup, pod PodRef, kind Kind, rule string, deps []string, reason string) {
	p.leaks[LeakPodCgroup]++
	key := "pod-cgroup/" + cg.UID
	if kind == ReducePodCgroupCPU {
		key = "pod-cgroup-cpu/" + cg.UID
	}
	path := ""
	if len(cg.Paths) > 0 {
		path = cg.Paths[0]
	}
	p.propose(Action{Kind: kind, Rule: rule, Reason: reason, Pod: pod, Key: key, Path: path, Cgroup: &cg, DependsOn: deps})
}

// firstLabels are the labels of the first of cs (nil when none).
func firstLabels(cs []*cri.Container) map[string]string {
	if len(cs) == 0 {
		return nil
	}
	return cs[0].Labels
}
