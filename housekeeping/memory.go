package housekeeping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/poduid"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// closeWriteTimeout bounds the state file's last write, at Close.
const closeWriteTimeout = 5 * time.Second

// budgetHold is how long every budgeted step is held after a state file
// could not be read: the steps taken in the hour before are unknown, and
// max_per_hour counts an hour.
const budgetHold = time.Hour

// Restore reads what an earlier run kept in Options.StateFile: the pods it
// saw torn down and the budgeted steps of the last hour. Call it once,
// before the first pass. An absent file is a first start. A file that
// cannot be read is kept aside as <file>.unreadable (not in read-only
// mode), the pods in it are forgotten (their dirs are reported, not
// removed) and every budgeted step is held for an hour, a hold the next
// write keeps across restarts. It logs what it did.
//
// Not in read-only mode, it first takes the file's lock (statefile.Lock):
// when another plugin holds it, this one reads nothing yet, writes nothing
// and holds every budgeted step until it can take the lock (it tries again
// after every pass), then reads the file as it is then. Release the lock
// with Close.
func (l *Loop) Restore(ctx context.Context) {
	path := l.opts.StateFile
	if path == "" {
		return
	}
	if !l.opts.StateReadOnly && !l.lockStateFile(ctx) && l.stateHeldBy != "" {
		l.restorePending = true
		return
	}
	l.restore(ctx)
}

// restore reads the state file into the loop (see Restore): what it holds
// is added to what the loop holds.
func (l *Loop) restore(ctx context.Context) {
	path := l.opts.StateFile
	now := l.now()
	s, err := statefile.Load(ctx, path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.log.WithField("path", path).Info("no state file yet: no pod seen torn down and no budgeted step taken before this start")
		return
	case err != nil && ctx.Err() != nil:
		// Stopped while it read (a SIGTERM at start): the file says
		// nothing about itself, and is left as it is for the next start.
		// Any write after this one (Close's) reads it first, as after a
		// lock taken over: what it holds is kept, not written over.
		l.restorePending = true
		return
	case err != nil:
		l.budgetHeldUntil = now.Add(budgetHold)
		// The end of the hold is said where it is read (budgetHeld): a
		// restart ages it by the boot clock, or caps it.
		l.budgetHeldWhy = fmt.Sprintf("the state file could not be read at %s, so the budgeted steps of the hour before are unknown", now.Format(time.RFC3339))
		fields := logrus.Fields{"path": path, "held_until": l.budgetHeldUntil.Format(time.RFC3339)}
		advice := "to start afresh at once, stop the plugin, remove the file and start it again"
		switch {
		case errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0:
			// Nothing may be wrong with the file: this reader may not
			// read it (a report run by another user than the plugin's).
			advice = "permission denied: run this as the user the plugin runs as (root)"
		case errors.Is(err, fs.ErrPermission):
			advice = "permission denied to root: a security module (SELinux, AppArmor), a root-squashed NFS, or capabilities dropped " +
				"(CAP_DAC_OVERRIDE, a user namespace) refuse it; let the plugin read and write housekeeping.state_file"
		case l.opts.StateReadOnly:
			advice = "the file is left as it is (nothing is written by this command)"
		}
		if fi, lerr := os.Lstat(path); lerr == nil && !fi.Mode().IsRegular() {
			// Not a file the plugin wrote (a directory such as the chart's
			// stateDir, a symlink): it is not moved.
			fields["left_in_place"] = fmt.Sprintf("it is not a regular file (mode %s): check housekeeping.state_file, which names the file, not its directory", fi.Mode().Type())
		} else if !l.opts.StateReadOnly {
			aside := path + ".unreadable"
			if _, err := os.Lstat(aside); err == nil {
				// One kept from an earlier start is evidence too.
				aside += "." + now.UTC().Format("20060102T150405Z")
			}
			if rerr := os.Rename(path, aside); rerr != nil {
				// Written over by the next write: say so now.
				fields["rename_error"] = rerr.Error()
			} else {
				fields["kept_as"] = aside
			}
		}
		if l.opts.StateReadOnly {
			// report, a dry-run once: nothing is held or forgotten by the
			// plugin; only this command's view lacks what the file keeps.
			l.log.WithError(err).WithFields(fields).Warn("cannot read the state file: this command does not know the pods seen torn down " +
				"(their orphaned pod dirs are shown as kept) or the hour's budgeted steps, and holds every budgeted step of its plan; " +
				"the running plugin is not affected; " + advice)
			return
		}
		l.log.WithError(err).WithFields(fields).Error("cannot read the state file: the pods seen torn down before this start are forgotten " +
			"(their pod dirs are reported, not removed) and every budgeted step is held for an hour; " + advice)
		// The hold is written now, not at the first pass that lists the
		// node: a plugin killed before (containerd not up yet, a crash
		// loop) would find no file at its next start, and no hold.
		l.persist(ctx, now)
		return
	}
	// Each time is aged by the boot clock when the file was written in
	// this boot: a wall clock hours ahead (an RTC before NTP corrected it)
	// would otherwise age the last hour's steps out at once, and one set
	// back would keep them for hours.
	clock := l.restoreClock(s, now)
	for _, t := range s.TornDown {
		if l.tornDown[t.UID] != nil {
			continue // seen torn down by this run too: its own mark stands
		}
		if _, ok := l.dismissed[t.UID]; ok {
			continue // this run dropped it: kubelet set up a pod of that UID again
		}
		at := clock.at(t.At, t.AtBoot)
		// Inspected stands for dirSeen, which the file does not hold: a
		// pod dir is inspected in the first pass that reads it with the
		// pod unlisted. One restored unchecked goes, as it would have
		// gone, with podstate's record while the pods dir cannot be read
		// (a listed pod is in podstate's view again after the restart);
		// restored as checked, every restart would keep it for good.
		mark := &tornDownMark{at: at, event: at, removed: at, pod: gc.PodRef{UID: t.UID, Namespace: t.Namespace, Name: t.Name}, dirSeen: t.Inspected,
			cgroups: restoredCgroups(t, clock), cgroupsAssumed: !t.CgroupsInspected || clock.boot == nil}
		if t.Inspected {
			mark.seen = make(map[string]bool, len(t.Seen))
			for _, p := range t.Seen {
				mark.seen[p] = true
			}
		}
		l.tornDown[t.UID] = mark
	}
	// A set of what the loop holds: a file of tens of thousands of steps
	// (a busy hour's network steps) is merged in linear time.
	type step struct {
		at          int64
		class, unit string
	}
	have := make(map[step]bool, len(l.spent)+len(s.Spent))
	for _, o := range l.spent {
		have[step{o.at.UnixNano(), o.class, o.unit}] = true
	}
	for _, sp := range s.Spent {
		// A step dated after now (on the wall clock: written under a clock
		// since set back) counts as taken now, for an hour, not until an
		// hour after a date that may be years ahead.
		at := clock.at(sp.At, sp.AtBoot)
		if k := (step{at.UnixNano(), sp.Class, sp.Unit}); !have[k] {
			have[k] = true
			l.spent = append(l.spent, spent{at: at, class: sp.Class, unit: sp.Unit})
		}
	}
	hour := len(l.budgetSpent(now))
	held := clock.until(s.BudgetHeldUntil, s.BudgetHeldUntilSinceBoot)
	if limit := now.Add(budgetHold); held.After(limit) {
		// A hold is for an hour (budgetHold): one reaching further was
		// written under a clock since set back.
		held = limit
	}
	if now.Before(held) && held.After(l.budgetHeldUntil) {
		// A file an older version wrote says the hold's end in its why,
		// as it was then: that is said anew.
		why, _, _ := strings.Cut(s.BudgetHeldWhy, ": every budgeted step is held until ")
		l.budgetHeldUntil, l.budgetHeldWhy = held, why
	}
	// The first pass writes the file even when nothing changed: a path it
	// cannot be written to (a symlink, which is read through but never
	// written; a read-only mount) is said then, not at the first change of
	// what the file keeps, which a restart may lose first; and a file this
	// boot's clock could not age (an older version's, one of the boot
	// before) is written on this boot's clock.
	l.persisted = nil
	f := l.log.WithFields(logrus.Fields{"path": path, "torn_down": len(l.tornDown), "budgeted_last_hour": hour, "aged_by": clock.why})
	if !l.budgetHeldUntil.IsZero() {
		f = f.WithField("held_until", l.budgetHeldUntil.Format(time.RFC3339))
	}
	f.Info("restored the pods seen torn down and the budgeted steps of the last hour from the state file")
}

// restoredCgroups is the pod cgroup baseline of a restored mark: the one
// the file holds when it was written in this boot, and none otherwise. The
// first look after a restart must not take what is there then for the
// baseline: kubelet may have made the pod cgroup again while the plugin
// was down (a static pod put back), and nothing else would show it for a
// pod with no volumes of its own. So a pod cgroup found at that look
// drops the mark unless the file shows it was there before: after a reboot
// every pod cgroup is new (and inode numbers mean nothing), and a file
// with no baseline (an older version's, or written before the first look)
// cannot show it. The cost: such a mark's leftovers are reported, not
// removed.
func restoredCgroups(t statefile.TornDown, clock restoredClock) map[string]uint64 {
	baseline := map[string]uint64{} // never nil: nil is "not looked at yet"
	if t.CgroupsInspected && clock.boot != nil {
		maps.Copy(baseline, t.Cgroups)
	}
	return baseline
}

// bootAnchor ties the loop's clock to the boot clock: a time t of this run
// is bootAnchor.since + t.Sub(wall) after boot. Go's times carry the
// monotonic clock, which no wall clock step moves either, so the mapping
// holds for every time this run took.
type bootAnchor struct {
	wall  time.Time
	id    string
	since time.Duration
}

// bootClock returns the anchor, reading the boot clock on the first call;
// nil when there is none (Options.BootClock nil, or it failed: said once).
func (l *Loop) bootClock() *bootAnchor {
	if l.boot != nil || l.opts.BootClock == nil {
		return l.boot
	}
	wall := l.now()
	r, err := l.opts.BootClock()
	if err != nil {
		l.log.WithError(err).Warn("cannot read the boot clock: the state file's times are on the wall clock only, " +
			"so a restart under a clock set forward ages the budgeted steps of the last hour out at once")
		l.opts.BootClock = nil
		return nil
	}
	l.boot = &bootAnchor{wall: wall, id: r.BootID, since: r.Since}
	return l.boot
}

// sinceBoot is t as the time since boot; at least 1 ns: a time before this
// boot (a step restored on the wall clock after a reboot) is written as at
// the boot, which makes it no older than it is: a step counts longer, a
// pod's leak_grace starts later.
func (b *bootAnchor) sinceBoot(t time.Time) statefile.SinceBoot {
	return statefile.SinceBoot(max(b.since+t.Sub(b.wall), 1))
}

// restoredClock turns the state file's times into this run's.
type restoredClock struct {
	now  time.Time
	boot *bootAnchor // nil: the wall clock only
	why  string      // which clock, and why
}

// restoreClock says how the times of s are aged at now.
func (l *Loop) restoreClock(s statefile.State, now time.Time) restoredClock {
	b := l.bootClock()
	switch {
	case b == nil:
		return restoredClock{now: now, why: "the wall clock: the boot clock cannot be read"}
	case s.BootID == "":
		return restoredClock{now: now, why: "the wall clock: the file has no boot clock times (written by an older nri-housekeeper, or one that could not read the clock)"}
	case s.BootID != b.id:
		return restoredClock{now: now, why: "the wall clock: the node booted again since the file was written"}
	}
	return restoredClock{now: now, boot: b, why: "the boot clock: the file was written in this boot"}
}

// at is a past time of the file in this run; never after now.
func (c restoredClock) at(wall time.Time, since statefile.SinceBoot) time.Time {
	t := c.until(wall, since)
	if t.After(c.now) {
		return c.now
	}
	return t
}

// until is a time of the file, past or future, in this run.
func (c restoredClock) until(wall time.Time, since statefile.SinceBoot) time.Time {
	if wall.IsZero() {
		return wall
	}
	if c.boot == nil {
		// Anchored to now, the time carries now's monotonic reading: a
		// wall clock stepped later in this run (NTP after a reboot) does
		// not age the restored steps out early, as it does not this run's.
		return c.now.Add(wall.Sub(c.now))
	}
	return c.now.Add(time.Duration(since - c.boot.sinceBoot(c.now)))
}

// lockStateFile takes the state file's lock if this loop does not hold it
// yet, and says whether it holds it now. When another plugin holds it, or
// the lock cannot be taken at all (its name is a directory or a symlink,
// a file system without flock), stateHeldBy says so until the lock is
// taken: a plugin that cannot lock cannot tell that it is alone, and two
// plugins on one file would each take a whole budget.
func (l *Loop) lockStateFile(ctx context.Context) bool {
	if l.stateLock != nil {
		return true
	}
	lock, err := statefile.TryLock(ctx, l.opts.StateFile)
	var held *statefile.HeldError
	switch {
	case errors.As(err, &held):
		l.stateHeldBy, l.stateHeldByOther = err.Error(), true
		l.setDegraded(PartStateFile, true)
		l.sayWhileItLasts("state-file", l.stateHeldBy, "another nri-housekeeper holds the state file: "+
			"this one holds every budgeted step and writes nothing until it can take the file (a plugin tries after every pass, once at its end); "+
			"run one nri-housekeeper per node: the pre-registered plugin, the systemd service or the DaemonSet; "+
			"beside a running one, once takes no budgeted step (the running one takes them)",
			"the state file is written again")
		return false
	case err != nil && ctx.Err() != nil:
		// Stopping (a signal during start-up or a pass): no failure of the
		// file. Close takes the lock with a context of its own.
		return false
	case err != nil:
		l.stateHeldBy, l.stateHeldByOther = fmt.Sprintf("cannot lock the state file %s: %v", l.opts.StateFile, err), false
		l.setDegraded(PartStateFile, true)
		l.sayWhileItLasts("state-file", l.stateHeldBy, "cannot lock the state file, so another nri-housekeeper could take the same budget: "+
			"this one holds every budgeted step and writes nothing until it can (it tries after every pass); check housekeeping.state_file and its directory",
			"the state file is written again")
		return false
	}
	if l.stateHeldBy != "" {
		if l.stateHeldByOther {
			l.log.WithField("path", l.opts.StateFile).Info("took the state file over: the other nri-housekeeper let it go")
		} else {
			l.log.WithField("path", l.opts.StateFile).Info("locked the state file: budgeted steps are counted here again")
		}
	}
	l.stateLock, l.stateHeldBy, l.stateHeldByOther = lock, "", false
	// Under the lock no other plugin writes: a temp file beside the state
	// file is a write that never finished (one per crash, for ever).
	removed, err := statefile.RemoveTempFiles(l.opts.StateFile)
	if len(removed) > 0 {
		l.log.WithFields(logrus.Fields{"path": l.opts.StateFile, "removed": removed}).
			Info("removed the temp files of state file writes that never finished (a crash or a kill during a write)")
	}
	if err != nil {
		l.log.WithError(err).Warn("could not remove every temp file an unfinished state file write left; the state file itself is not affected")
	}
	return true
}

// Close writes the state file if what it holds changed since the last
// write, and gives up its lock (a plugin that exits drops it anyway). The
// loop must not run passes after it.
func (l *Loop) Close() error {
	// A pass that ended with its context (SIGTERM, the NRI connection of a
	// pre-registered plugin lost) could not write what it did: write it now,
	// with a context of its own, before the lock goes.
	ctx, cancel := context.WithTimeout(context.Background(), closeWriteTimeout)
	defer cancel()
	l.persist(ctx, l.now())
	err := l.stateLock.Release()
	l.stateLock = nil
	return err
}

// budgetHeld says why every budgeted step is held at now ("" when none is).
func (l *Loop) budgetHeld(now time.Time) string {
	if l.stateHeldBy != "" {
		return l.stateHeldBy + "; budgeted steps taken through another plugin would not be counted here, so every budgeted step is held until this one can take the file"
	}
	if now.Before(l.budgetHeldUntil) {
		return fmt.Sprintf("%s: every budgeted step is held until %s", l.budgetHeldWhy, l.budgetHeldUntil.Format(time.RFC3339))
	}
	return ""
}

// keep is what the state file holds now.
func (l *Loop) keep() statefile.State {
	var s statefile.State
	b := l.bootClock()
	since := func(t time.Time) statefile.SinceBoot {
		if b == nil {
			return 0
		}
		return b.sinceBoot(t)
	}
	if b != nil {
		s.BootID = b.id
	}
	for uid, mark := range l.tornDown {
		if !poduid.Valid(uid) {
			// A UID outside kubelet's grammar (a static pod's own
			// metadata.uid): Decode refuses it, and its dir is never
			// removed (nodefs refuses the name), so there is nothing to keep.
			continue
		}
		t := statefile.TornDown{UID: uid, Namespace: mark.pod.Namespace, Name: mark.pod.Name, At: mark.at, AtBoot: since(mark.at), Inspected: mark.seen != nil,
			CgroupsInspected: mark.cgroups != nil, Cgroups: maps.Clone(mark.cgroups)}
		for p := range mark.seen {
			t.Seen = append(t.Seen, p)
		}
		slices.Sort(t.Seen)
		s.TornDown = append(s.TornDown, t)
	}
	for _, sp := range l.spent {
		s.Spent = append(s.Spent, statefile.Spent{At: sp.at, AtBoot: since(sp.at), Class: sp.class, Unit: sp.unit})
	}
	if !l.budgetHeldUntil.IsZero() {
		s.BudgetHeldUntil, s.BudgetHeldUntilSinceBoot, s.BudgetHeldWhy = l.budgetHeldUntil, since(l.budgetHeldUntil), l.budgetHeldWhy
	}
	return s
}

// keepTooLarge is what the state file holds when what it should hold is
// too large (tooLarge): the boot, and a hold of an hour on budgeted steps.
func (l *Loop) keepTooLarge(now time.Time, tooLarge error) statefile.State {
	var s statefile.State
	until := now.Add(budgetHold)
	s.BudgetHeldUntil = until
	s.BudgetHeldWhy = fmt.Sprintf("the state was too large to keep at %s (%v), so the pods seen torn down and the budgeted steps of the hour before were not kept",
		now.Format(time.RFC3339), tooLarge)
	if b := l.bootClock(); b != nil {
		s.BootID, s.BudgetHeldUntilSinceBoot = b.id, b.sinceBoot(until)
	}
	return s
}

// persist writes the state file when what it holds changed, and returns
// the write's error. A write that fails is said (an error) while it lasts:
// the plugin goes on, but a restart then would forget what the file should
// hold.
func (l *Loop) persist(ctx context.Context, now time.Time) error {
	if l.opts.StateFile == "" || l.opts.StateReadOnly {
		return nil
	}
	if ctx.Err() != nil {
		// The loop is stopping (a pass cut short): nothing could be
		// written or locked with ctx, and that is no failure of the file.
		// Close writes it, with a context of its own.
		return nil
	}
	if !l.lockStateFile(ctx) && l.stateHeldBy != "" {
		return nil // another plugin holds it, and so every budgeted step
	}
	if l.restorePending {
		// Taken over: what the other plugin kept is added to what this
		// one learned meanwhile, and written below.
		l.restorePending = false
		l.restore(ctx)
		l.persisted = nil
	}
	l.budgetSpent(now) // forget the steps older than an hour
	if !l.budgetHeldUntil.IsZero() && !now.Before(l.budgetHeldUntil) {
		l.budgetHeldUntil, l.budgetHeldWhy = time.Time{}, ""
		l.log.Info("the hold on budgeted steps after an unreadable state file is over")
	}
	data, err := statefile.Encode(l.keep())
	if errors.Is(err, statefile.ErrTooLarge) {
		// Not written, the file before would stand, and a restart would
		// bring back what this run dropped since (a mark kubelet's re-add
		// dismissed). What fits is written instead: no pod seen torn down
		// (their dirs are then reported, not removed) and an hour's hold
		// on budgeted steps (the hour's steps are not kept either). The
		// error is still returned and said: this run holds its budgeted
		// steps while it lasts.
		if small, serr := statefile.Encode(l.keepTooLarge(now, err)); serr == nil && !bytes.Equal(small, l.persisted) {
			if werr := statefile.Write(ctx, l.opts.StateFile, small); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}
	if err == nil && bytes.Equal(data, l.persisted) {
		return nil
	}
	if err == nil {
		err = statefile.Write(ctx, l.opts.StateFile, data)
		if err != nil && ctx.Err() != nil {
			l.persisted = nil
			return nil // stopped while writing, as above: Close writes it
		}
	}
	problem := ""
	if err != nil {
		problem = err.Error()
	}
	l.setDegraded(PartStateFile, err != nil)
	l.sayWhileItLasts("state-file", problem,
		"cannot write the state file: a restart now would forget the pods seen torn down and the budgeted steps of the last hour; check housekeeping.state_file",
		"the state file is written again")
	if err == nil {
		l.persisted = data
	} else {
		// Written again next pass whatever the state is then: one equal
		// to the last written must still end the failure.
		l.persisted = nil
	}
	return err
}
