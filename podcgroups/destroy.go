package podcgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

const (
	// killPasses is how many rounds of killing Destroy does before giving
	// up (kubelet: 5). The first uses cgroup.kill where there is one.
	killPasses = 5
	// killPassDelay lets killed processes exit before the next look.
	// kubelet does not wait, so all its passes can run before one
	// process has died; the caller retries later in any case.
	killPassDelay = 100 * time.Millisecond
	// rmdir of a cgroup whose last process has just exited can fail with
	// EBUSY for a moment; containerd/cgroups retries the same way.
	rmdirAttempts   = 5
	rmdirFirstDelay = 10 * time.Millisecond
	// systemdStopTimeout bounds the wait for systemd's stop job; the file
	// system path runs after it either way.
	systemdStopTimeout = 10 * time.Second
	// minCPUShares is kubelet's MinShares, what ReduceCPULimits sets.
	minCPUShares = 2
	// systemdRunDir exists exactly when systemd is PID 1 (sd_booted(3)).
	systemdRunDir = "/run/systemd/system"
	// maxListed caps how many leftovers an error message names.
	maxListed = 10
)

// RefusedError means Destroy or ReduceCPU did nothing at all: the pod cgroup
// is not where kubelet puts that pod's cgroup, is not on a cgroup file
// system, or holds this process. Retrying does not help. A check that
// fails after Destroy acted (systemd stopped the slice, processes were
// killed) is no RefusedError: see partway.
type RefusedError struct {
	Path   string
	Reason string
	// Changed: the pod cgroup is not the one inspected any more (made
	// again, or a child made in it): a pod of that UID set up again, and
	// the next plan decides anew.
	Changed bool
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refusing to act on pod cgroup %s: %s", e.Path, e.Reason)
}

// ChangedSinceDecided reports whether the refusal is of a pod cgroup
// changed since the inspection: not a failure, as when the check right
// before the step finds it.
func (e *RefusedError) ChangedSinceDecided() bool { return e.Changed }

// Destroy kills every process in the pod's cgroups (the pod cgroup and all
// its descendants, in every hierarchy), then removes the cgroups bottom-up.
//
// With the systemd driver it first asks systemd to stop the pod's slice, if
// systemd is running and reachable; the file system steps follow in any case
// and remove whatever is left. Killing: cgroup.kill on cgroup2 where the
// kernel has it (one write kills the whole subtree, forks included), and
// SIGKILL to every PID in cgroup.procs otherwise and afterwards, re-reading
// until empty, up to killPasses rounds. Removal is rmdir only, so it can never
// delete a file, and it keeps going in the other hierarchies when one fails.
//
// It acts only on the pod cgroup inspected: each path must still have the
// inode number the inspection read, and hold no child cgroup it did not
// find (pod.Containers), checked before anything is done, before each kill
// pass (on the read that finds the processes) and before the removal; a
// RefusedError otherwise. kubelet reuses a pod cgroup that exists, and a
// pod of that UID set up again shows first as a new child cgroup.
//
// A nil error means every directory in pod.Paths is gone. Otherwise the error
// names the processes or directories left. Destroyed says what systemd did,
// also when the cgroups went without it. Destroy does not back off across
// calls: that is the caller's job.
func Destroy(ctx context.Context, pod PodCgroup) (Destroyed, error) {
	return realHost().destroy(ctx, pod)
}

// Destroyed is what Destroy asked of systemd (the systemd driver only).
type Destroyed struct {
	// Unit is the pod's slice unit when systemd was asked to stop it.
	Unit string
	// UnitErr is why systemd could not stop Unit. The cgroups were killed
	// and removed without it, so systemd may still hold the unit (as
	// kubelet's own fallback leaves it): it is the operator's to stop.
	// nil when systemd is not PID 1 or has no such unit: there is none.
	UnitErr error
}

// ReduceCPU sets the pod cgroup's CPU to kubelet's minimum, as kubelet's
// ReduceCPULimits does for an orphaned pod whose volumes still exist:
// cpu.shares = 2 on v1 (in the hierarchy that has the cpu controller) and
// cpu.weight = 1 on v2 (where the cpu controller is enabled for the pod).
// Containers are left as they are, as kubelet leaves them. A pod whose
// cgroups are all gone needs nothing and gives nil. It is refused, as
// Destroy is, for a path not the one inspected or with a child cgroup the
// inspection did not find.
func ReduceCPU(ctx context.Context, pod PodCgroup) error {
	return realHost().reduceCPU(ctx, pod)
}

// host is what Destroy and ReduceCPU need from the machine. Tests replace it
// to work on plain directories; nothing else does.
type host struct {
	cgroupVersion func(hierarchy, path string) (Version, error)
	stopUnit      func(ctx context.Context, unit string) error
	selfPid       int
}

func realHost() host {
	return host{cgroupVersion: cgroupVersion, stopUnit: stopUnit, selfPid: os.Getpid()}
}

// target is one checked, existing pod cgroup directory.
type target struct {
	path      string
	hierarchy string // path without rel: the hierarchy's mount
	rel       string // the pod cgroup relative to the hierarchy, with a leading "/"
	version   Version
}

// targets checks every path of pod before anything is done, and returns the
// ones that still exist. Each must be exactly <hierarchy>/<where kubelet puts
// this pod's cgroup>, a real directory, on a cgroup file system mounted at
// <hierarchy>, still the one inspected (its inode number), with no child
// cgroup the inspection did not find (unseenChild).
func (h host) targets(ctx context.Context, pod PodCgroup) ([]target, error) {
	rel, err := podRel(pod.Driver, pod.Root, pod.QOS, pod.UID)
	if err != nil {
		return nil, &RefusedError{Path: strings.Join(pod.Paths, ", "), Reason: err.Error()}
	}
	if len(pod.Paths) == 0 {
		return nil, &RefusedError{Path: rel, Reason: "no paths given"}
	}
	if len(pod.Inodes) != len(pod.Paths) {
		return nil, &RefusedError{Path: strings.Join(pod.Paths, ", "), Reason: fmt.Sprintf("%d inode numbers for %d paths: "+
			"not as inspected, so a cgroup made again there could not be told from the one inspected", len(pod.Inodes), len(pod.Paths))}
	}
	var out []target
	seen := map[string]bool{}
	for i, p := range pod.Paths {
		hierarchy, ok := strings.CutSuffix(p, "/"+rel)
		if !ok || hierarchy == "" || !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return nil, &RefusedError{Path: p, Reason: fmt.Sprintf("not <hierarchy>/%s, where kubelet puts the cgroup of %s pod %s", rel, pod.QOS, pod.UID)}
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pod cgroup %s: %w", p, err)
		}
		if !fi.IsDir() {
			return nil, &RefusedError{Path: p, Reason: fmt.Sprintf("not a directory (mode %s)", fi.Mode().Type())}
		}
		switch ino, err := inode(fi); {
		case err != nil:
			return nil, fmt.Errorf("pod cgroup %s: %w", p, err)
		case ino != pod.Inodes[i]:
			return nil, &RefusedError{Path: p, Changed: true, Reason: fmt.Sprintf("made again since it was inspected (inode %d, now %d): "+
				"kubelet may be setting up a pod of that UID again", pod.Inodes[i], ino)}
		}
		v, err := h.cgroupVersion(hierarchy, p)
		if err != nil {
			return nil, &RefusedError{Path: p, Reason: err.Error()}
		}
		children, _, err := subdirs(ctx, p, make([]byte, direntBufSize))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed since the lstat
		case err != nil:
			return nil, fmt.Errorf("pod cgroup %s cannot be read: %w", p, err)
		}
		for _, c := range children {
			if err := unseenChild(pod, p, p+"/"+c); err != nil {
				return nil, err
			}
		}
		out = append(out, target{path: p, hierarchy: hierarchy, rel: "/" + rel, version: v})
	}
	return out, nil
}

func (h host) destroy(ctx context.Context, pod PodCgroup) (Destroyed, error) {
	var d Destroyed
	targets, err := h.targets(ctx, pod)
	if err != nil || len(targets) == 0 {
		return d, err
	}
	// Before systemd or cgroup.kill can kill anything: a pod cgroup that
	// holds this process is a misconfiguration, not a leak.
	procs, err := listProcs(ctx, pod, targets)
	if err != nil {
		return d, err
	}
	if err := h.notSelf(procs); err != nil {
		return d, err
	}
	if err := processesSince(pod, targets, procs); err != nil {
		return d, err
	}
	if pod.Driver == DriverSystemd {
		// kubelet's systemd cgroup manager stops the slice unit: systemd
		// then stops the pod's scopes and removes the cgroups it manages.
		// runc's manager removes the paths afterwards, and so does this:
		// it is all there is when systemd is not reachable or has no such
		// unit (e.g. after a systemd restart).
		unit := filepath.Base(targets[0].path)
		switch err := h.stopUnit(ctx, unit); {
		case errors.Is(err, errNoSystemd), errors.Is(err, errNoSuchUnit):
		case err != nil:
			d.Unit, d.UnitErr = unit, err
		default:
			d.Unit = unit
		}
	}
	// Asked, even if the stop job failed or its wait timed out: it may
	// have killed the slice's processes all the same.
	stopped := d.Unit != ""
	killed, err := h.kill(ctx, pod, targets)
	if err == nil {
		// Removed by path: each must still be the cgroup inspected.
		if targets, err = h.targets(ctx, pod); err == nil {
			err = remove(ctx, targets)
		}
	}
	err = partway(err, stopped, killed)
	if err != nil && d.UnitErr != nil {
		return d, errors.Join(err, fmt.Errorf("before that, systemd could not stop the unit: %w", d.UnitErr))
	}
	return d, err
}

// partway turns a refusal that came after Destroy acted into a failure: a
// refusal says nothing was done (the step is aborted, its budget unit given
// back, no backoff), which is not true once systemd stopped the slice or a
// kill pass ran. What was done is said.
func partway(err error, stopped, killed bool) error {
	var refused *RefusedError
	if !errors.As(err, &refused) || (!stopped && !killed) {
		return err
	}
	var done []string
	if stopped {
		done = append(done, "systemd was asked to stop the pod's slice")
	}
	if killed {
		done = append(done, "its processes were sent a kill")
	}
	// Not wrapped: it is no refusal any more.
	return fmt.Errorf("stopped partway (%s): %s", strings.Join(done, ", "), refused.Error())
}

// unseenChild refuses dir, below the pod cgroup top, when it is in a child
// cgroup of top the inspection did not find (PodCgroup.Containers): kubelet
// reuses a pod cgroup that exists, so a pod of that UID set up again (a
// static pod put back) keeps the inode number Destroy and ReduceCPU check,
// and containerd starts its pause in a new child cgroup before the sandbox
// is listed or NRI reports it. A child gone since is no change.
func unseenChild(pod PodCgroup, top, dir string) error {
	rel, ok := strings.CutPrefix(dir, top+"/")
	if !ok {
		return nil // top itself
	}
	child, _, _ := strings.Cut(rel, "/")
	if slices.Contains(pod.Containers, child) {
		return nil
	}
	return &RefusedError{Path: top + "/" + child, Changed: true, Reason: "a child cgroup made since the pod cgroup was inspected: " +
		"kubelet may be starting a pod of that UID again in the pod cgroup it keeps"}
}

// errNoSystemd and errNoSuchUnit: systemd has no unit to stop, so there is
// none the file system steps could leave behind.
var (
	errNoSystemd  = errors.New("systemd is not running")
	errNoSuchUnit = errors.New("systemd has no such unit")
)

// cgroupProcs are the PIDs in one cgroup directory.
type cgroupProcs struct {
	dir  string
	pids []int
}

// kill kills every process in targets and their descendants, and returns
// nil once none is left; killed says whether it killed anything (a write
// of cgroup.kill, or a signal sent). Processes are found by path, so each pass first
// checks again that every path is the cgroup inspected, or gone: systemd's
// stop job can take seconds, and each pass waits for the last one's
// processes to exit; kubelet may have made a pod of that UID again since.
func (h host) kill(ctx context.Context, pod PodCgroup, targets []target) (killed bool, err error) {
	var killErrs []error
	for pass := 0; ; pass++ {
		if pass > 0 || pod.Driver == DriverSystemd {
			if targets, err = h.targets(ctx, pod); err != nil {
				return killed, err
			}
		}
		left, err := listProcs(ctx, pod, targets)
		if err != nil {
			return killed, err
		}
		if len(left) == 0 {
			return killed, nil
		}
		if err := h.notSelf(left); err != nil {
			return killed, err
		}
		if !killed {
			// Nothing killed yet: processes in a pod cgroup planned
			// empty are not this step's to kill (nor in its budget).
			if err := processesSince(pod, targets, left); err != nil {
				return killed, err
			}
		}
		if pass == killPasses {
			return killed, leftError(left, killErrs)
		}
		killErrs = nil
		written := false
		if pass == 0 {
			var errs []error
			written, errs = cgroupKill(targets)
			killErrs = append(killErrs, errs...)
		}
		if !written {
			sent, errs := signalAll(left)
			killErrs = append(killErrs, errs...)
			written = sent > 0
		}
		// Said only once a kill was written or sent: every PID listed may
		// have been gone already (then nothing was done, and a change
		// found next is a refusal, not a stop partway).
		killed = killed || written
		if err := sleep(ctx, killPassDelay); err != nil {
			return killed, fmt.Errorf("killing the processes of pod cgroup %s: %w", targets[0].path, err)
		}
	}
}

// notSelf refuses cgroups that hold this process.
func (h host) notSelf(procs []cgroupProcs) error {
	for _, cp := range procs {
		if containsInt(cp.pids, h.selfPid) {
			return &RefusedError{Path: cp.dir, Reason: fmt.Sprintf("this process (PID %d) is in it", h.selfPid)}
		}
	}
	return nil
}

// listProcs returns every cgroup directory under targets that has
// processes. The read that finds the processes to kill is checked too: a
// directory in a child cgroup of pod the inspection did not find refuses
// the whole list (unseenChild).
func listProcs(ctx context.Context, pod PodCgroup, targets []target) ([]cgroupProcs, error) {
	var out []cgroupProcs
	for _, t := range targets {
		dirs, err := cgroupDirs(ctx, t.path, nil)
		if err != nil {
			return nil, err
		}
		for _, d := range dirs {
			if err := unseenChild(pod, t.path, d); err != nil {
				return nil, err
			}
			pids, err := readPids(d)
			if err != nil {
				return nil, err
			}
			if len(pids) > 0 {
				out = append(out, cgroupProcs{dir: d, pids: pids})
			}
		}
	}
	return out, nil
}

// cgroupKill writes cgroup.kill in every cgroup2 target that has it (Linux
// 5.14+): the kernel kills the whole subtree, including processes forked
// meanwhile, which a SIGKILL loop can miss. killed is true when at least one
// write succeeded. (cgroup2.Manager.Kill is not used: when the write fails it
// falls back to freezing the cgroup and waits for it to freeze with no
// bound, which a process stuck in the kernel, e.g. on a dead NFS mount,
// never allows.)
func cgroupKill(targets []target) (killed bool, errs []error) {
	for _, t := range targets {
		if t.version != V2 {
			continue
		}
		file := filepath.Join(t.path, "cgroup.kill")
		ok, err := isFile(file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		if err := writeExisting(file, "1"); err != nil {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", t.path, err))
			continue
		}
		killed = true
	}
	return killed, errs
}

// processesSince refuses, as changed since the inspection, a pod cgroup
// the inspection found no process in (pod.Procs, what the plan budgets a
// kill by) that has some now: a process moved in, or a pod of that UID
// started again in a child the inspection saw.
func processesSince(pod PodCgroup, targets []target, procs []cgroupProcs) error {
	if pod.Procs > 0 || len(procs) == 0 {
		return nil
	}
	n := 0
	for _, cp := range procs {
		n += len(cp.pids)
	}
	return &RefusedError{Path: targets[0].path, Changed: true, Reason: fmt.Sprintf(
		"%d process(es) in it now (%s first), none when it was inspected: not this step's to kill", n, procs[0].dir)}
}

// signalAll signals every process in left; sent is how many SIGKILLs
// were delivered.
func signalAll(left []cgroupProcs) (sent int, errs []error) {
	for _, cp := range left {
		n, e := signal(cp)
		sent += n
		errs = append(errs, e...)
	}
	return sent, errs
}

// signal sends SIGKILL to the processes listed in cp.dir, and never to an
// unrelated process that got a listed PID after the listed process exited.
//
// Each listed PID is first pinned with a pidfd (pidfd_open, Linux 5.3+), then
// the directory is read again: a PID still listed after pinning is the pinned
// process, and pidfd_send_signal reaches that process or, if it has exited
// since, nobody. A PID whose pidfd_open says ESRCH is gone and skipped.
//
// Only where pidfds are not available (ENOSYS: a kernel before 5.3; EPERM or
// EACCES: a seccomp filter or security module that denies the call) does a
// PID fall back to kill(2). That fallback narrows the PID-reuse race, since
// the PID is re-read right before the kill, but cannot close it: the process
// can exit, be reaped and have its PID reused between the re-read and the
// kill. Any other pidfd_open error (EMFILE, ...) leaves the PID unsignalled
// for this pass and is reported. PID 0 is a process outside this PID
// namespace: it cannot be signalled from here and is reported as left.
//
// PIDs are pinned pinBatch at a time, each batch checked against a fresh
// read: a cgroup of a fork bomb would otherwise hold a descriptor per
// process at once, and take the process's file limit from everything else.
func signal(cp cgroupProcs) (sent int, errs []error) {
	for start := 0; start < len(cp.pids); start += pinBatch {
		n, e := signalPinned(cp.dir, cp.pids[start:min(start+pinBatch, len(cp.pids))])
		sent += n
		errs = append(errs, e...)
	}
	return sent, errs
}

// pinBatch is how many pidfds signal holds at once.
const pinBatch = 1024

// signalPinned is signal for pids, listed in dir.
func signalPinned(dir string, pids []int) (sent int, errs []error) {
	type proc struct {
		pid int
		fd  int // its pidfd, or -1 to signal it by PID
	}
	var procs []proc
	defer func() {
		for _, p := range procs {
			if p.fd >= 0 {
				unix.Close(p.fd)
			}
		}
	}()
	for _, pid := range pids {
		if pid <= 0 {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			procs = append(procs, proc{pid: pid, fd: fd})
		case errors.Is(err, unix.ESRCH):
			// No process has this PID any more: nothing to kill.
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			procs = append(procs, proc{pid: pid, fd: -1})
		default:
			errs = append(errs, fmt.Errorf("pidfd_open PID %d in cgroup %s: %w", pid, dir, err))
		}
	}
	listed, err := readPids(dir)
	if err != nil {
		return 0, append(errs, err)
	}
	still := make(map[int]bool, len(listed))
	for _, pid := range listed {
		still[pid] = true
	}
	for _, p := range procs {
		if !still[p.pid] {
			continue
		}
		var err error
		if p.fd >= 0 {
			err = unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
		} else {
			err = unix.Kill(p.pid, unix.SIGKILL)
		}
		switch {
		case err == nil:
			sent++
		case !errors.Is(err, unix.ESRCH): // ESRCH: it exited meanwhile
			errs = append(errs, fmt.Errorf("SIGKILL PID %d in cgroup %s: %w", p.pid, dir, err))
		}
	}
	return sent, errs
}

// leftError names the processes still alive after every pass, and why the
// last kills failed when they did.
func leftError(left []cgroupProcs, killErrs []error) error {
	var names []string
	for _, cp := range left {
		for _, pid := range cp.pids {
			names = append(names, fmt.Sprintf("PID %d in %s", pid, cp.dir))
		}
	}
	if len(names) > maxListed {
		names = append(names[:maxListed], fmt.Sprintf("and %d more", len(names)-maxListed))
	}
	err := fmt.Errorf("pod cgroup processes still running after %d kill passes: %s", killPasses, strings.Join(names, ", "))
	if len(killErrs) > maxListed {
		killErrs = killErrs[:maxListed]
	}
	return errors.Join(append([]error{err}, killErrs...)...)
}

// remove removes the targets and everything below them, children first, in
// every hierarchy even when one fails.
func remove(ctx context.Context, targets []target) error {
	var errs []error
	for _, t := range targets {
		dirs, err := cgroupDirs(ctx, t.path, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdir(ctx, dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > maxListed {
		errs = errs[:maxListed]
	}
	return errors.Join(errs...)
}

// rmdir removes one cgroup directory (rmdir(2) only: a directory with a
// regular file in it stays), retrying EBUSY a few times.
func rmdir(ctx context.Context, dir string) error {
	delay := rmdirFirstDelay
	for attempt := 1; ; attempt++ {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || attempt == rmdirAttempts {
			return fmt.Errorf("cgroup %s not removed: %w", dir, err)
		}
		if err := sleep(ctx, delay); err != nil {
			return fmt.Errorf("cgroup %s not removed: %w", dir, err)
		}
		delay *= 2
	}
}

func (h host) reduceCPU(ctx context.Context, pod PodCgroup) error {
	targets, err := h.targets(ctx, pod)
	if err != nil || len(targets) == 0 {
		return err
	}
	written := 0
	for _, t := range targets {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reducing the CPU of pod cgroup %s: %w", t.path, err)
		}
		switch t.version {
		case V1:
			file := filepath.Join(t.path, "cpu.shares")
			ok, err := isFile(file)
			if err != nil {
				return err
			}
			if !ok {
				continue // a hierarchy without the cpu controller
			}
			// Written directly: cgroup1's Update recreates the
			// cgroup (MkdirAll) when it has been removed meanwhile.
			if err := writeExisting(file, fmt.Sprint(minCPUShares)); err != nil {
				return fmt.Errorf("pod cgroup %s: %w", t.path, err)
			}
		case V2:
			ok, err := isFile(filepath.Join(t.path, "cpu.weight"))
			if err != nil {
				return err
			}
			if !ok {
				continue // cpu controller not enabled for this cgroup
			}
			m, err := cgroup2.Load(t.rel, cgroup2.WithMountpoint(t.hierarchy))
			if err != nil {
				return fmt.Errorf("pod cgroup %s: %w", t.path, err)
			}
			// kubelet converts MinShares the same way: weight 1.
			weight := cgroup2.ConvertCPUSharesToCgroupV2Value(minCPUShares)
			if err := m.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{Weight: &weight}}); err != nil {
				return fmt.Errorf("pod cgroup %s: setting cpu.weight: %w", t.path, err)
			}
		}
		written++
	}
	if written == 0 {
		return fmt.Errorf("pod cgroup %s: none of its cgroups has cpu.shares (v1) or cpu.weight (v2); is the cpu controller enabled for them?", targets[0].path)
	}
	return nil
}

// writeExisting writes value to a file that must already exist: cgroup
// control files are never created, and a missing one is an error.
func writeExisting(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(value); err != nil {
		f.Close()
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return f.Close()
}

// stopUnit asks systemd to stop unit and waits for the job. It fails fast
// when systemd is not PID 1 (errNoSystemd) or cannot be reached, and with
// errNoSuchUnit when systemd has no such unit loaded.
func stopUnit(ctx context.Context, unit string) error {
	if _, err := os.Lstat(systemdRunDir); err != nil {
		return fmt.Errorf("%w (%w)", errNoSystemd, err)
	}
	ctx, cancel := context.WithTimeout(ctx, systemdStopTimeout)
	defer cancel()
	conn, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return fmt.Errorf("systemd is not reachable over D-Bus: %w", err)
	}
	defer conn.Close()
	// Buffered: go-systemd sends the job result while holding a lock and
	// would block forever if this function had already given up.
	done := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, unit, "replace", done); err != nil {
		var dbusErr dbus.Error
		if errors.As(err, &dbusErr) && dbusErr.Name == "org.freedesktop.systemd1.NoSuchUnit" {
			return fmt.Errorf("systemd StopUnit %s: %w: %w", unit, errNoSuchUnit, err)
		}
		return fmt.Errorf("systemd StopUnit %s: %w", unit, err)
	}
	select {
	case result := <-done:
		if result != "done" {
			return fmt.Errorf("systemd StopUnit %s: job %s", unit, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd StopUnit %s: %w", unit, ctx.Err())
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func containsInt(list []int, n int) bool {
	for _, l := range list {
		if l == n {
			return true
		}
	}
	return false
}
