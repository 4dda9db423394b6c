package housekeeping

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// Sources must agree (DESIGN.md §4): this file is the loop's part of it.
// The listing is checked against NRI before it is reconciled; a pod counts
// as torn down only on evidence, and only while its pod dir does not change;
// every node step is checked again right before it runs; and the budget's
// hour is counted here.

// maxConfirmPerPass bounds the sandboxes asked for by ID in one pass.
const maxConfirmPerPass = 16

// checkListing checks the listing against what NRI reported (nothing to
// check without NRI, or when it had not synchronized before the listing was
// taken: the gate keeps the pass from acting then). A sandbox NRI holds live that the listing lacks is asked for
// by ID, once this session's runtime is confirmed to be NRI's: containerd
// drops the NRI stop and removal of the pods it had before a restart, so a
// sandbox the runtime does not know any more is gone, though without
// evidence of a teardown. It returns what NRI said (for the plan) and why
// the listing is not trusted ("" when it is).
func (l *Loop) checkListing(ctx context.Context, snap cri.Snapshot, syncs uint64, synced bool) (*gc.NRIView, string) {
	if l.opts.Synchronized == nil || !synced {
		return nil, ""
	}
	nri := &gc.NRIView{Sandboxes: l.state.NRISandboxes(), Session: syncs, Confirmed: syncs > 0 && l.confirmedSyncs == syncs}
	c := gc.CheckListing(*nri, snap.Sandboxes, snap.Malformed, snap.TakenAt)
	if len(c.Missing) > 0 && (nri.Confirmed || c.Shared) {
		if gone := l.confirmGone(ctx, c.Missing); len(gone) > 0 {
			l.state.MarkGone(gone, snap.TakenAt)
			nri.Sandboxes = l.state.NRISandboxes()
			c = gc.CheckListing(*nri, snap.Sandboxes, snap.Malformed, snap.TakenAt)
		}
	}
	if c.Untrusted == "" && c.Shared {
		l.confirmedSyncs = syncs
	}
	return nri, c.Untrusted
}

// confirmGone asks the runtime for each missing sandbox by ID and returns
// those it does not know.
func (l *Loop) confirmGone(ctx context.Context, missing []podstate.NRISandbox) []string {
	var gone []string
	for i, m := range missing {
		if i == maxConfirmPerPass {
			break // the rest next pass
		}
		exists, err := l.runtime.SandboxExists(ctx, m.ID)
		if err != nil {
			// The listing stays untrusted; say why nothing is known of it.
			l.warnOnce("could not ask the runtime for a sandbox NRI reported live that the listing lacks: "+
				"the listing stays untrusted until it answers", fmt.Errorf("sandbox %s of pod %s: %w", m.ID, m.PodUID, err))
			continue
		}
		if exists {
			continue
		}
		gone = append(gone, m.ID)
		l.log.WithFields(logrus.Fields{logging.FieldSandboxID: m.ID, logging.FieldPodUID: m.PodUID}).
			Info("sandbox NRI reported live is gone from the runtime, without an NRI stop or removal " +
				"(containerd drops them for pods it had before a restart); not counted as a teardown")
	}
	return gone
}

// tornDownMark is a pod this plugin saw torn down.
type tornDownMark struct {
	at time.Time // when it was first seen torn down (a listing's time)
	// event is the pod's last life event in podstate when it was marked
	// (its last sandbox run or container start; at, for a mark restored
	// from the state file): a later one starts the mark over.
	event time.Time
	// removed is when the pod's last sandbox was removed (podstate's
	// RemovedSince; at, for a mark restored from the state file). kubelet
	// makes nothing in a pod's dir once its sandboxes are removed: its
	// container GC may remove them before the volumes are unmounted (a
	// deleted pod's once its containers stopped, kubelet v1.37.2
	// ShouldPodContentBeRemoved), but volume teardown only removes (the
	// emptyDir's is os.RemoveAll, the CSI one's removes vol_data.json
	// and the dir). What was born later was made for a pod of that UID
	// again (Options.CompareBirthTimes).
	removed time.Time
	// bornAhead are the identities (by path) whose birth time was after
	// the look that saw them: made under a wall clock since set back (an
	// RTC ahead until NTP corrected it), so their birth, then or at any
	// later look, tells nothing of whether they were made after the
	// removal.
	bornAhead map[string]string
	// pod names the pod in logs after podstate has forgotten it.
	pod gc.PodRef
	// dirSeen: a readable pods dir had the pod's dir since the mark (or
	// the mark was restored from the state file with its dir inspected). Only a readable pods dir
	// drops a mark (its dir gone); one it has never checked is dropped
	// with podstate's record of the pod while the pods dir cannot be read,
	// or such marks would only grow.
	dirSeen bool
	// seen are its pod dir's volume dirs, mount points and leftovers at the
	// first inspection after the mark; nil until then. More of them later
	// means kubelet is setting up a pod of that UID again.
	seen map[string]bool
	// made is what the pod dir and each of seen were at the last
	// inspection (nodefs.PodDir.Identities; not in the state file, so
	// learnt again at the first look after a restart). One with another
	// identity since was removed and made again between two looks: kubelet
	// is setting up a pod of that UID again.
	made map[string]string
	// cgroups are its pod cgroup's directories (path to inode number) at
	// the first inspection after the mark, empty when it had none; nil
	// until then. One made since (a new path, or one with another inode)
	// means kubelet is setting up a pod of that UID again: it makes the
	// pod cgroup before anything else, and a pod with no volumes of its
	// own (a static pod with hostPath volumes only) adds nothing to its
	// pod dir until its sandbox runs.
	cgroups map[string]uint64
	// cgroupsAssumed: cgroups is "none" because the state file it was
	// restored from had no baseline this run can use (another boot's, an
	// older version's): a pod cgroup found is not known to be made again,
	// only not known not to be, and is said so.
	cgroupsAssumed bool
}

// noteTeardown keeps the torn-down mark of one pod in step with podstate: a
// pod removed with evidence of a teardown is marked; a pod that is not (it
// lives, or a removal was only an absence) is not; a life event after the
// mark starts it over. A teardown whose mark was dismissed does not mark
// the pod again: podstate keeps a removed pod for minutes, and a mark made
// afresh would take what kubelet has set up since for its baseline.
func (l *Loop) noteTeardown(p podstate.PodView, now time.Time) {
	mark := l.tornDown[p.UID]
	switch {
	case !p.TornDown:
		delete(l.tornDown, p.UID)
		delete(l.dismissed, p.UID)
	case mark == nil:
		if at, ok := l.dismissed[p.UID]; ok && !p.LastLifeEvent.After(at) {
			return
		}
		delete(l.dismissed, p.UID)
		l.tornDown[p.UID] = newTornDownMark(p, now)
		if l.saidNotTornDown[p.UID] {
			// Its Removed line said otherwise: the evidence came later.
			delete(l.saidNotTornDown, p.UID)
			l.log.WithFields(logrus.Fields{logging.FieldPodUID: p.UID, logging.FieldPodNamespace: p.Namespace, logging.FieldPodName: p.Name,
				"phase": p.Phase.String(), "torn_down": true}).
				Infof("pod %s/%s: seen torn down after all (NRI's removal came after the listing that lacked its sandbox): "+
					"its kubelet pod dir and pod cgroup, if left, are treated as orphaned", p.Namespace, p.Name)
		}
	case p.LastLifeEvent.After(mark.at):
		l.tornDown[p.UID] = newTornDownMark(p, now)
	}
}

// newTornDownMark is the mark of p, first seen torn down at now.
func newTornDownMark(p podstate.PodView, now time.Time) *tornDownMark {
	return &tornDownMark{at: now, event: p.LastLifeEvent, removed: cmp.Or(p.RemovedSince, now),
		pod: gc.PodRef{UID: p.UID, Namespace: p.Namespace, Name: p.Name}}
}

// dismissTeardown drops a pod's torn-down mark for good: only a newer
// teardown marks it again.
func (l *Loop) dismissTeardown(uid string) {
	if mark := l.tornDown[uid]; mark != nil {
		l.dismissed[uid] = mark.event
		delete(l.tornDown, uid)
	}
}

// compareWithTeardown drops the torn-down mark of a pod whose dir has grown
// since: new volume dirs or mount points are kubelet setting up a pod of
// the same UID again (a static pod back in its manifest dir), before any
// RunPodSandbox.
func (l *Loop) compareWithTeardown(d nodefs.PodDir) {
	mark := l.tornDown[d.UID]
	if mark == nil {
		return
	}
	now := podDirContents(d)
	grown := l.bornSinceRemoval(mark, d, l.now())
	if mark.seen == nil && len(grown) == 0 {
		mark.seen, mark.made = now, d.Identities
		return
	}
	if mark.seen != nil {
		grown = append(grown, append(newEntries(mark.seen, now), nodefs.RemadeSince(mark.made, d.Identities)...)...)
	}
	if len(grown) > 0 {
		l.dismissTeardown(d.UID)
		l.log.WithFields(logrus.Fields{logging.FieldPodUID: d.UID, "path": d.Path, "new": strings.Join(grown, ", ")}).
			Info("the pod dir of a pod seen torn down has grown since: kubelet may be adding a pod of that UID again; its dir and cgroup are no longer treated as orphaned")
		return
	}
	// What is gone since (kubelet's cleanup went on) leaves the baseline:
	// made again under the same name, it is growth (a static pod put back
	// with the same volume; kubelet reuses a pod cgroup the teardown left,
	// so nothing else may show it).
	for p := range mark.seen {
		if !now[p] {
			delete(mark.seen, p)
		}
	}
	mark.made = d.Identities
}

// compareCgroupsWithTeardown drops the torn-down mark of a pod whose pod
// cgroup was made since the first inspection after the mark (see
// tornDownMark.cgroups), and takes that first look for the others. A
// listing that is not ready tells nothing; neither does a pod found by
// name only (it has listed objects, and is not treated as orphaned).
func (l *Loop) compareCgroupsWithTeardown(cgs podcgroups.Listing) {
	if !cgs.Ready {
		return
	}
	for uid, mark := range l.tornDown {
		pod, found := cgs.Pods[uid]
		if found && !pod.Inspected {
			continue
		}
		now := cgroupDirsOf(pod)
		if mark.cgroups == nil {
			mark.cgroups = now
			continue
		}
		if made := cgroupsMadeSince(mark.cgroups, now); len(made) > 0 {
			assumed := mark.cgroupsAssumed
			l.dismissTeardown(uid)
			entry := l.log.WithFields(logrus.Fields{logging.FieldPodUID: uid, "made": strings.Join(made, ", ")})
			if assumed {
				entry.Info("a pod seen torn down, restored from a state file that does not show its pod cgroup (another boot's, an older version's), " +
					"has one: it may be one kubelet made for a pod of that UID again; its dir and cgroup are no longer treated as orphaned")
				continue
			}
			entry.Info("the pod cgroup of a pod seen torn down was made again since: kubelet may be adding a pod of that UID again; its dir and cgroup are no longer treated as orphaned")
			continue
		}
		mark.cgroupsAssumed = false // this look is one of this run's
	}
}

// cgroupDirsOf is pod's cgroup dirs, path to inode number (empty for a pod
// with none).
func cgroupDirsOf(pod podcgroups.PodCgroup) map[string]uint64 {
	dirs := make(map[string]uint64, len(pod.Paths))
	for i, p := range pod.Paths {
		if i < len(pod.Inodes) {
			dirs[p] = pod.Inodes[i]
		}
	}
	return dirs
}

// cgroupsMadeSince are the dirs of now that are not before's: new paths,
// and paths with another inode (removed and made again).
func cgroupsMadeSince(before, now map[string]uint64) []string {
	var made []string
	for p, ino := range now {
		if old, ok := before[p]; !ok || old != ino {
			made = append(made, p)
		}
	}
	sort.Strings(made)
	return made
}

func podDirContents(d nodefs.PodDir) map[string]bool {
	seen := make(map[string]bool)
	for _, list := range [][]string{d.VolumeDirs, d.MountPoints, d.Leftovers} {
		for _, p := range list {
			seen[p] = true
		}
	}
	return seen
}

// bornSinceRemoval are the paths of d (the pod dir, its volume dirs and
// the leftovers above them: nodefs.PodDir.Identities) born after mark's pod
// was removed: made for a pod of that UID again. Unlike a changed identity,
// this needs no look before the re-add: it holds for a pod put back before
// the first pass after its teardown, or while the plugin was down. A path
// with no birth time (an old kernel, a file system that keeps none) tells
// nothing; neither does one born after now, the time of this look (kept in
// mark.bornAhead for the later looks): the wall clock was set back since
// it was made, and it may have been made before the removal.
func (l *Loop) bornSinceRemoval(mark *tornDownMark, d nodefs.PodDir, now time.Time) []string {
	if !l.opts.CompareBirthTimes || mark.removed.IsZero() {
		return nil
	}
	var made []string
	for p, id := range d.Identities {
		born, ok := birthTime(id)
		switch {
		case !ok:
		case born.After(now) || mark.bornAhead[p] == id:
			if mark.bornAhead == nil {
				mark.bornAhead = make(map[string]string)
			}
			mark.bornAhead[p] = id
		case born.After(mark.removed):
			made = append(made, fmt.Sprintf("%s (made %s, after the pod's removal at %s)",
				p, born.UTC().Format(time.RFC3339Nano), mark.removed.UTC().Format(time.RFC3339Nano)))
		}
	}
	sort.Strings(made)
	return made
}

// birthTime reads a nodefs.PodDir identity of kind "born".
func birthTime(id string) (time.Time, bool) {
	kind, value, _ := strings.Cut(id, " ")
	sec, nsec, ok := strings.Cut(value, ".")
	if kind != "born" || !ok {
		return time.Time{}, false
	}
	s, err1 := strconv.ParseInt(sec, 10, 64)
	ns, err2 := strconv.ParseInt(nsec, 10, 64)
	if err1 != nil || err2 != nil || ns < 0 || ns >= 1e9 {
		return time.Time{}, false
	}
	return time.Unix(s, ns), true
}

func newEntries(before, now map[string]bool) []string {
	var grown []string
	for p := range now {
		if !before[p] {
			grown = append(grown, p)
		}
	}
	sort.Strings(grown)
	return grown
}

// recheck returns the check run right before each step of a Rechecked kind
// of the plan made from a listing taken at taken. A CRI step of a pod-gone
// rule (and an orphan stop) rests on the pod being gone: no life event
// since the listing, its pod dir still absent; the other CRI rules rest on
// newer instances of the pod, which only grow. A node step rests on the pod
// being gone (its pod dir absent) or orphaned (seen torn down, its dir
// unchanged), and on nothing of the pod running: podstate's life events
// since the listing, a CRI listing filtered by the pod UID and the pod dir
// are read again. A network step rests on no source knowing its owner.
// Every step rests on the NRI session the pass's gate saw (syncs): lost or
// renewed since (containerd restarting), a life event since the listing may
// not have been told, and the step waits for a pass on the new session.
// A pod's step reads its life events and the session again after its
// other reads (an RPC, a pod dir's inspection): NRI is told of a new
// sandbox before containerd stores it, so one told during them is in no
// listing yet. podsDir is the pods dir the plan read (nodefs.PodDirs).
func (l *Loop) recheck(taken time.Time, syncs uint64, podsDir nodefs.PodDirs) executor.Recheck {
	sameSession := func() error {
		if l.opts.Synchronized != nil && (!l.opts.Synchronized() || l.state.Syncs() != syncs) {
			return errors.New("the NRI connection was lost or made anew since the pass began: a life event since may not have been told; the step waits for a pass on the new connection")
		}
		return nil
	}
	noLifeEvent := func(uid string) error {
		if p, ok := l.state.Pod(uid); ok && p.LastLifeEvent.After(taken) {
			return fmt.Errorf("pod %s had a life event (new sandbox or container start) at %s, after the listing the plan was made from",
				uid, p.LastLifeEvent.Format(time.RFC3339Nano))
		}
		return nil
	}
	return func(ctx context.Context, a gc.Action) error {
		at := l.now()
		l.stepStarted.Store(&at)
		if err := sameSession(); err != nil {
			return err
		}
		switch a.Rule {
		case gc.RuleNetworkAttachment, gc.RuleNetworkReservation:
			return l.recheckUnowned(ctx, a.ContainerID)
		case gc.RuleNetworkNetns:
			return l.recheckNetnsUnused(ctx, a.Path)
		case gc.RuleContainerMaxPerPod, gc.RuleContainerMaxContainers, gc.RuleSandboxNotNewest:
			return nil
		}
		uid := a.Pod.UID
		if uid == "" {
			return errors.New("the action names no pod to check")
		}
		// First as the cheapest, and again last.
		if err := noLifeEvent(uid); err != nil {
			return err
		}
		if err := l.recheckPod(ctx, a, uid, podsDir); err != nil {
			return err
		}
		if err := noLifeEvent(uid); err != nil {
			return err
		}
		return sameSession()
	}
}

// recheckPod is the check of a step that rests on its pod: gone (its pod
// dir absent from the pods dir the plan read) or orphaned, and nothing of
// it listed again.
func (l *Loop) recheckPod(ctx context.Context, a gc.Action, uid string, podsDir nodefs.PodDirs) error {
	switch a.Rule {
	case gc.RuleContainerPodGone, gc.RuleSandboxPodGone, gc.RuleOrphanStop:
		return l.recheckGone(uid, podsDir)
	}
	objs, err := l.runtime.ListPod(ctx, uid)
	if err != nil {
		return fmt.Errorf("cannot list the pod's sandboxes and containers again: %w", err)
	}
	if !objs.Empty() {
		return fmt.Errorf("the runtime lists %d sandbox(es) and %d container(s) of pod %s again (%s)",
			len(objs.Sandboxes), len(objs.Containers), uid, strings.Join(append(objs.Sandboxes, objs.Containers...), ", "))
	}
	switch a.Rule {
	case gc.RulePodLogDir:
		return l.recheckGone(uid, podsDir)
	case gc.RuleCgroupPodGone:
		if err := l.recheckGone(uid, podsDir); err != nil {
			return err
		}
		return l.recheckCgroupAsPlanned(ctx, a)
	case gc.RuleCgroupOrphaned, gc.RuleCgroupVolumesRemain, gc.RuleOrphanedPodDir:
		if a.Rule != gc.RuleCgroupVolumesRemain && l.opts.PodDirMountsUnseen != nil {
			// Both rest on nothing mounted in the pod dir, which only
			// a process that sees kubelet's mounts can tell.
			if why := l.opts.PodDirMountsUnseen(ctx); why != "" {
				return errors.New(why)
			}
		}
		return l.recheckOrphaned(ctx, a, uid)
	}
	return fmt.Errorf("rule %s is not one a node step rests on", a.Rule)
}

// recheckGone checks that the pod's dir is still absent from a readable
// kubelet pods dir, the one the plan read (planned): one mounted over or
// put in its place since (empty, or holding other pods) says nothing of
// the pods the plan found gone.
func (l *Loop) recheckGone(uid string, planned nodefs.PodDirs) error {
	if l.opts.OracleDisabled {
		return errors.New("pods.source is \"none\": no pod is ever gone")
	}
	// The pods dir as the oracle read it: a symlink to it is followed.
	pods := filepath.Join(l.opts.KubeletRoot, "pods")
	fi, err := os.Stat(pods)
	switch {
	case err != nil:
		return fmt.Errorf("cannot check kubelet's pods dir again: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("kubelet's pods dir %s is not a directory any more", pods)
	}
	if dev, ino, ok := nodefs.DevIno(fi); planned.Ino != 0 && (!ok || dev != planned.Dev || ino != planned.Ino) {
		return fmt.Errorf("kubelet's pods dir %s is not the one the plan read (device %d:%d inode %d then, %d:%d inode %d now): mounted over or replaced since",
			pods, unix.Major(planned.Dev), unix.Minor(planned.Dev), planned.Ino, unix.Major(dev), unix.Minor(dev), ino)
	}
	switch _, err := os.Lstat(filepath.Join(pods, uid)); {
	case err == nil:
		return fmt.Errorf("kubelet's pod dir %s is back: the pod is not gone", filepath.Join(pods, uid))
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot check the pod dir again: %w", err)
	}
	return nil
}

// recheckOrphaned checks that the pod is still seen torn down, its dir
// unchanged and its pod cgroup not made again (looked up by name now); a
// cgroup destroy also needs the dir still free of volumes.
func (l *Loop) recheckOrphaned(ctx context.Context, a gc.Action, uid string) error {
	mark := l.tornDown[uid]
	if mark == nil {
		return fmt.Errorf("pod %s is no longer one seen torn down", uid)
	}
	d, err := l.inspectPodDir(ctx, l.opts.KubeletRoot, uid)
	switch {
	case errors.Is(err, fs.ErrNotExist) && a.Rule == gc.RuleCgroupOrphaned && slices.Contains(a.DependsOn, "pod-dir/"+uid):
		// This pass removed the dir before it (a dependency): the pod has
		// no volumes left, and is still seen torn down. Its pod cgroup is
		// still looked up: kubelet makes it before the pod dir, so a pod
		// of that UID set up again since shows there first.
		return l.recheckCgroupsNotMade(ctx, a, mark, uid)
	case err != nil && a.Rule == gc.RuleCgroupVolumesRemain && !errors.Is(err, fs.ErrNotExist):
		// "Cannot tell" is what a CPU reduction is for (kubelet's
		// ReduceCPULimits): the pod is still seen torn down and nothing of
		// it is listed or started. Its pod cgroup is still looked up: one
		// made again is a new pod's, whose CPU must not be cut.
		return l.recheckCgroupsNotMade(ctx, a, mark, uid)
	case err != nil:
		return fmt.Errorf("cannot inspect the pod dir again: %w", err)
	}
	grown := l.bornSinceRemoval(mark, d, l.now())
	if mark.seen != nil {
		grown = append(grown, append(newEntries(mark.seen, podDirContents(d)), nodefs.RemadeSince(mark.made, d.Identities)...)...)
	}
	if len(grown) > 0 {
		return fmt.Errorf("the pod dir has grown since the pod was torn down (%s): kubelet may be adding a pod of that UID again",
			strings.Join(grown, ", "))
	}
	if err := l.recheckCgroupsNotMade(ctx, a, mark, uid); err != nil {
		return err
	}
	if a.Rule == gc.RuleCgroupOrphaned && (nodefs.PodVolumesExist(d) || len(d.Blockers) > 0) {
		return errors.New("the pod dir holds volumes, or cannot be fully inspected, now: its cgroup may only have its CPU reduced")
	}
	return nil
}

// recheckCgroupsNotMade checks that the pod cgroup of a pod seen torn down
// was not made again since the first look after the mark (looked up by
// name now), and, for a step on the pod cgroup, that it has no child cgroup
// the plan did not see: kubelet keeps a pod cgroup that exists, and
// containerd starts a new pause in a new child before the sandbox is
// listed or NRI reports it.
func (l *Loop) recheckCgroupsNotMade(ctx context.Context, a gc.Action, mark *tornDownMark, uid string) error {
	if l.opts.Cgroups == nil {
		return nil
	}
	if mark.cgroups == nil {
		// No listing of the pod cgroups was ready since the mark: a pod
		// cgroup kubelet made again (the only early sign of a pod with no
		// volumes of its own being set up again) could not be told.
		return errors.New("the pod cgroups have not been listed since the pod was torn down (the listing fails): " +
			"a pod cgroup kubelet made again could not be told from the one left; held until a listing is ready")
	}
	pod, found, err := podcgroups.Find(ctx, *l.opts.Cgroups, uid)
	if err != nil {
		return fmt.Errorf("cannot look the pod's cgroup up again: %w", err)
	}
	if found && !pod.Inspected {
		// A tree that cannot be read ends the look at that pod: the
		// hierarchies after it are not in the answer, and a pod cgroup
		// made again there would go unseen.
		return fmt.Errorf("the pod cgroup cannot be read now (%s): a pod cgroup kubelet made again could not be told from the one left; held until it can be read",
			cmp.Or(pod.Unreadable, "not inspected"))
	}
	if made := cgroupsMadeSince(mark.cgroups, cgroupDirsOf(pod)); len(made) > 0 {
		return fmt.Errorf("the pod cgroup was made again since the pod was torn down (%s): kubelet may be adding a pod of that UID again",
			strings.Join(made, ", "))
	}
	if found && a.Cgroup != nil {
		if changed := cgroupChangedSince(*a.Cgroup, pod); len(changed) > 0 {
			return fmt.Errorf("the pod cgroup is not the one the plan saw (%s): kubelet may be starting a pod of that UID again in it",
				strings.Join(changed, ", "))
		}
	}
	return nil
}

// recheckCgroupAsPlanned checks that the pod cgroup of a step on it (a
// pod-gone pod's) is still the one the plan saw, looked up by name now:
// readable, and not changed since (cgroupChangedSince). One gone since
// needs nothing.
func (l *Loop) recheckCgroupAsPlanned(ctx context.Context, a gc.Action) error {
	if a.Cgroup == nil || l.opts.Cgroups == nil {
		return nil
	}
	pod, found, err := podcgroups.Find(ctx, *l.opts.Cgroups, a.Pod.UID)
	switch {
	case err != nil:
		return fmt.Errorf("cannot look the pod's cgroup up again: %w", err)
	case !found:
		return nil
	case !pod.Inspected:
		return fmt.Errorf("the pod cgroup cannot be read now (%s): a pod cgroup kubelet made again could not be told from the one planned on; held until it can be read",
			cmp.Or(pod.Unreadable, "not inspected"))
	}
	if changed := cgroupChangedSince(*a.Cgroup, pod); len(changed) > 0 {
		return fmt.Errorf("the pod cgroup is not the one the plan saw (%s): kubelet may be starting a pod of that UID again in it",
			strings.Join(changed, ", "))
	}
	return nil
}

// cgroupChangedSince lists what now, a pod cgroup looked up again, has that
// planned, the one the plan saw, did not: a directory in a hierarchy where
// it had none, one made again (another inode number), a child cgroup
// (kubelet keeps a pod cgroup that exists, and containerd starts a new
// pause in a new child). What is gone since is no change.
func cgroupChangedSince(planned, now podcgroups.PodCgroup) []string {
	var changed []string
	for i, p := range now.Paths {
		j := slices.Index(planned.Paths, p)
		switch {
		case j < 0:
			changed = append(changed, p+" (new)")
		case j < len(planned.Inodes) && i < len(now.Inodes) && planned.Inodes[j] != now.Inodes[i]:
			changed = append(changed, p+" (made again)")
		}
	}
	for _, c := range now.Containers {
		if !slices.Contains(planned.Containers, c) {
			changed = append(changed, "child cgroup "+c)
		}
	}
	return changed
}

// spent is one budgeted step taken.
type spent struct {
	at          time.Time
	class, unit string
}

// spendAhead counts the budgeted units of actions not already counted in
// the last hour as spent at now, before any of them runs, and returns them
// as "class/unit". A unit counts once an hour: retrying the same object is
// no more blast radius. A dry run spends nothing.
func (l *Loop) spendAhead(now time.Time, actions []gc.Action) map[string]bool {
	if d, ok := l.opts.Executor.(interface{ DryRun() bool }); ok && d.DryRun() {
		return nil
	}
	admitted := l.budgetSpent(now)
	ahead := make(map[string]bool)
	for _, a := range actions {
		class, unit := gc.BudgetClass(a)
		if class == "" || admitted[class+"/"+unit] {
			continue
		}
		admitted[class+"/"+unit] = true
		ahead[class+"/"+unit] = true
		l.spent = append(l.spent, spent{at: now, class: class, unit: unit})
	}
	return ahead
}

// heldWhileUnrecorded: the budget classes whose steps wait while the state
// file cannot be written before them, those that act on what may be a live
// workload. Counted in memory only, a restart (a crash loop, on the full
// disk that failed the write) would start their hour afresh each time. The
// others go on within the hour counted in memory: removing pod log dirs
// and pod dirs frees the disk that may be what failed the write. A CPU
// reduction frees no disk, and its pod cgroup may hold a live workload.
func heldWhileUnrecorded(class string) bool {
	switch class {
	case gc.ClassOrphanStop, gc.ClassUnknownStop, gc.ClassCgroupKill, gc.ClassCgroupCPU, gc.ClassNetwork:
		return true
	}
	return false
}

// holdUnrecorded leaves out of actions the steps heldWhileUnrecorded, when
// the write before them failed with err, and returns them as deferred, with
// that reason; their units are given back by settleSpent (none of their
// steps ran), and what rests on them is skipped.
func (l *Loop) holdUnrecorded(actions []gc.Action, err error) (kept []gc.Action, held []gc.Deferred) {
	kept = make([]gc.Action, 0, len(actions))
	for _, a := range actions {
		if class, _ := gc.BudgetClass(a); heldWhileUnrecorded(class) {
			held = append(held, gc.Deferred{Action: a, Held: "held while the state file cannot be written before it: " + err.Error()})
			continue
		}
		kept = append(kept, a)
	}
	if len(held) > 0 {
		l.warnOnce(fmt.Sprintf("%d budgeted step(s) that act on what may be a live workload (orphan stops, UNKNOWN container stops, "+
			"kills of pod cgroups with processes, CPU reductions, network steps) wait: the state file could not be written before them, and a restart "+
			"would forget them and take the hour's budget afresh; pod log dirs and pod dirs are still removed", len(held)), err)
	}
	return kept, held
}

// settleSpent gives back the units counted ahead none of whose steps ran:
// a unit is spent once one of its steps succeeded or failed (a failed step
// may have done part of its work), not when each was skipped, aborted by
// its check right before it, backing off, or only shown (dry run). A step
// skipped because a step it rests on failed (or backs off after failing)
// counts as taken too, as a failed step does: it is retried without
// counting against a pass again, and does not take its class's per-pass
// budget every pass while what it rests on keeps failing.
func (l *Loop) settleSpent(now time.Time, ahead map[string]bool, outcomes []executor.Outcome) {
	failing := failingSteps(outcomes)
	ran := make(map[string]bool)
	for _, o := range outcomes {
		taken := o.Result == executor.Success || o.Result == executor.Error ||
			(o.Result == executor.Skipped && slices.ContainsFunc(o.Action.DependsOn, failing))
		if !taken {
			continue
		}
		if class, unit := gc.BudgetClass(o.Action); class != "" {
			ran[class+"/"+unit] = true
		}
	}
	l.spent = slices.DeleteFunc(l.spent, func(s spent) bool {
		key := s.class + "/" + s.unit
		return s.at.Equal(now) && ahead[key] && !ran[key]
	})
}

// noteFailing keeps l.failing: the budgeted units whose steps failed at
// their last try (one of them failed, backs off, or was skipped for one
// that did), also while the budget holds them untried. A unit with
// outcomes none of which fails (a success, a refusal by its check) is no
// longer failing; nor is one the plan has not proposed for failingKept (a
// pass that did not look at its class, its source unreadable, proposes
// nothing of it, and must not make it new). A pass takes other units of a class first (gc.Input.BudgetFailing):
// each failing one is counted again when its hour is over, and max_per_hour
// steps that keep failing (a CNI DEL that fails for every leaked sandbox,
// pod cgroups held by D-state processes) would else take every hour's budget
// first, being eligible longest, and a newer step of their class never run.
func (l *Loop) noteFailing(at time.Time, plan gc.Result, outcomes []executor.Outcome) {
	failing := failingSteps(outcomes)
	proposed := make(map[string]bool, len(plan.Actions)+len(plan.Deferred))
	for _, a := range plan.Actions {
		if class, unit := gc.BudgetClass(a); class != "" {
			proposed[class+"/"+unit] = true
		}
	}
	for _, d := range plan.Deferred {
		if class, unit := gc.BudgetClass(d.Action); class != "" {
			proposed[class+"/"+unit] = true
		}
	}
	kept := make(map[string]time.Time)
	tried := make(map[string]bool)
	for _, o := range outcomes {
		class, unit := gc.BudgetClass(o.Action)
		if class == "" {
			continue
		}
		key := class + "/" + unit
		tried[key] = true
		if failing(o.Action.Key) {
			kept[key] = at
		}
	}
	for key, last := range l.failing {
		switch {
		case tried[key]:
		case proposed[key]:
			kept[key] = at // held, untried: as it was
		case at.Sub(last) < failingKept:
			kept[key] = last
		}
	}
	l.failing = kept
}

// failingKept is how long a unit that failed stays failing while the plan
// does not propose it: as long as a unit counts against the hour.
const failingKept = time.Hour

// failingSteps reports, by action key, whether a step of outcomes failed
// or backs off, or was skipped for one that did, through any chain of
// dependencies (outcomes come in the plan's order, not the waves').
func failingSteps(outcomes []executor.Outcome) func(key string) bool {
	result := make(map[string]executor.Result, len(outcomes))
	deps := make(map[string][]string, len(outcomes))
	for _, o := range outcomes {
		result[o.Action.Key], deps[o.Action.Key] = o.Result, o.Action.DependsOn
	}
	memo := make(map[string]bool)
	var failing func(key string) bool
	failing = func(key string) bool {
		if f, ok := memo[key]; ok {
			return f
		}
		memo[key] = false // a dependency cycle, which gc never plans, fails nothing
		f := false
		switch result[key] {
		case executor.Error, executor.Backoff:
			f = true
		case executor.Skipped:
			f = slices.ContainsFunc(deps[key], failing)
		}
		memo[key] = f
		return f
	}
	return failing
}

// budgetSpent returns the budgeted units taken in the hour before now, as
// "class/unit", and forgets older ones.
func (l *Loop) budgetSpent(now time.Time) map[string]bool {
	keep := l.spent[:0]
	admitted := make(map[string]bool)
	for _, s := range l.spent {
		if now.Sub(s.at) >= time.Hour {
			continue
		}
		keep = append(keep, s)
		admitted[s.class+"/"+s.unit] = true
	}
	l.spent = keep
	return admitted
}

// sayWhileItLasts logs a problem (an error) when it starts or changes, and
// its end (info), not every pass. A problem that changes only in its
// figures or in what it lists in parentheses (how many sandboxes, which
// ones: every pod start changes them) is the same problem: its new wording
// is said at debug level only.
func (l *Loop) sayWhileItLasts(key, problem, what, recovered string) {
	l.sayWhileItLastsAt(logrus.ErrorLevel, key, problem, what, recovered)
}

// sayWhileItLastsAt is sayWhileItLasts with the problem said at level.
func (l *Loop) sayWhileItLastsAt(level logrus.Level, key, problem, what, recovered string) {
	if problem != "" && l.stopping() {
		l.log.WithField(logging.FieldReason, problem).Debug(what)
		return
	}
	last, lasting := l.said[key]
	switch {
	case problem == "" && !lasting:
		return
	case problem == "":
		l.log.Info(recovered)
		delete(l.said, key)
	case lasting && gist(problem) == gist(last):
		if problem != last {
			l.log.WithField(logging.FieldReason, problem).Debug(what)
			l.said[key] = problem
		}
	default:
		l.log.WithField(logging.FieldReason, problem).Log(level, what)
		l.said[key] = problem
	}
}

// gist is a problem's wording without its figures and without what it
// lists in parentheses.
func gist(problem string) string {
	var b strings.Builder
	depth, digits := 0, false
	for _, r := range problem {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth > 0:
		case r >= '0' && r <= '9':
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		default:
			b.WriteRune(r)
		}
		digits = false
	}
	return b.String()
}
