// Package housekeeping runs the plugin's periodic pass: take a fresh CRI
// listing, reconcile the pod state with it, read the node's pod dirs and log
// files, plan (package gc) and execute what is due. All runtime calls happen
// here, never in an NRI handler.
package housekeeping

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/bootclock"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// Runtime is what a pass needs from the container runtime.
type Runtime interface {
	// Snapshot is one complete listing.
	Snapshot(ctx context.Context) (cri.Snapshot, error)
	// SandboxExists asks for one sandbox by ID: a sandbox NRI holds live
	// that a listing lacks is only dropped when the runtime does not know
	// it either.
	SandboxExists(ctx context.Context, id string) (bool, error)
	// ListPod lists what the runtime has of one pod UID: the re-check right
	// before a node step.
	ListPod(ctx context.Context, uid string) (cri.PodObjects, error)
}

// Executor carries out due actions (package executor).
type Executor interface {
	Execute(ctx context.Context, actions []gc.Action, now time.Time, recheck executor.Recheck) []executor.Outcome
	Forget(proposed map[string]time.Time)
}

// Options configure a Loop.
type Options struct {
	Period          time.Duration // between passes
	SlowPassWarning time.Duration // warn when a pass takes longer
	// Debounce delays a pass after Wake so that a burst of stop/remove events
	// (a node draining) costs one listing, not one per event.
	Debounce time.Duration
	// WakeInterval is the least time from one pass's start to a pass an
	// event wakes (default WakeIntervalFor(Period, Debounce)). A wake only
	// starts leak_grace clocks a little sooner; under pod churn it must not
	// turn every stop into a pass.
	WakeInterval time.Duration
	// StartupDelay: no action before this long after the loop started.
	StartupDelay time.Duration
	Policy       gc.Policy
	// OracleDisabled is pods.source = "none"; else KubeletRoot's pod dirs
	// tell which pods still exist.
	OracleDisabled bool
	KubeletRoot    string
	// PodDirMountsUnseen says why this process may not see the mounts
	// kubelet makes in its pods dir, "" when it sees them
	// (PodDirMountsUnseenBy); nil: taken as seen (tests).
	PodDirMountsUnseen func(ctx context.Context) string
	// Cgroups, when set, is where pod cgroups are looked for
	// (cgroups.enabled); nil leaves pod cgroups alone.
	Cgroups *podcgroups.Options
	// Synchronized reports whether NRI has synchronized since the last
	// (re)connect; nil means there is no NRI side (the once command).
	Synchronized func() bool
	// Network, when set, is the network side (network.enabled): the
	// network's leaks are looked for and reclaimed; nil leaves them alone.
	Network *Network
	// Executor carries out due actions; nil plans only (the report command).
	Executor Executor
	// Observer hears what every pass found and did (metrics); nil: nobody.
	Observer Observer
	// StateFile is where the pods seen torn down and the budgeted steps of
	// the last hour are kept across restarts (housekeeping.state_file; see
	// Restore); "" keeps nothing. StateReadOnly reads it but never writes
	// it (the report and once commands, beside a running plugin).
	StateFile     string
	StateReadOnly bool
	// OneShot: the loop runs one pass whose report is printed (report,
	// once): what a running plugin says for the passes to come is not said.
	OneShot bool
	// BootClock dates the state file's entries in a way no wall clock step
	// moves (package bootclock); nil dates them on the wall clock only, as
	// after a reboot.
	BootClock func() (bootclock.Reading, error)
	// CompareBirthTimes: a torn-down pod's dir, volume dir or leftover born
	// (statx) after the pod's removal is evidence of a re-add. Birth times
	// are on the node's wall clock: so must the loop's clock and podstate's
	// event times be, as they are in the plugin (tests that fake them
	// leave this off).
	CompareBirthTimes bool
}

// Observer is told about every pass (package metrics implements it).
type Observer interface {
	ObservePass(result string, duration time.Duration, at time.Time)
	SetTrackedPods(counts map[[2]string]int)
	SetLeaks(byKind map[string]int)
	// SetOldestLeaks says, by action kind, how long the oldest step the
	// plan proposed (due or not yet) has been proposed.
	SetOldestLeaks(byKind map[string]time.Duration)
	ObserveAction(kind, rule, result string)
	// ObserveBudgetTrips counts the classes the budget refused this pass,
	// and says which classes are paused now (tripped this pass).
	ObserveBudgetTrips(tripped []string)
	// SetUntrusted says whether the last pass distrusted a source
	// (SourceListing, SourceOracle).
	SetUntrusted(source string, untrusted bool)
	SetStuckTerminating(n int)
	// SetDegraded says whether a part of housekeeping (PartNetwork,
	// PartStateFile, PartCgroups) is failing while the rest goes on.
	SetDegraded(part string, degraded bool)
}

// Pass results, as counted by the Observer.
const (
	PassOK               = "ok"
	PassSkippedNotReady  = "skipped_not_ready"
	PassListingFailed    = "listing_failed"
	PassListingUntrusted = "listing_untrusted"
)

// Sources that a pass may distrust, as the Observer is told.
const (
	SourceListing = "runtime-listing" // the CRI listing disagrees with NRI
	SourceOracle  = "pod-oracle"      // kubelet's pod dirs disagree with the runtime
)

// Parts of housekeeping that can fail while the rest goes on, as the
// Observer is told: each failure is also said in the log while it lasts.
const (
	PartNetwork   = "network"    // the network side cannot read its sources: network leaks are not looked for
	PartStateFile = "state-file" // the state file cannot be written: a restart would forget what it should hold
	PartCgroups   = "cgroups"    // the pod cgroups cannot be listed, or cgroups.root is in no hierarchy: pod cgroups are not cleaned
)

// notLooked notes that this pass could not look for the leaks of what,
// and why (PassResult.NotLookedFor).
func (l *Loop) notLooked(what, why string) {
	l.notLookedFor = append(l.notLookedFor, what+" ("+why+")")
}

// setDegraded tells the Observer, if any, whether part is failing.
func (l *Loop) setDegraded(part string, degraded bool) {
	if l.opts.Observer != nil {
		l.opts.Observer.SetDegraded(part, degraded)
	}
}

// Loop is the housekeeping loop. Create it with New, start it with Run.
type Loop struct {
	state   *podstate.State
	runtime Runtime
	opts    Options
	log     logrus.FieldLogger
	now     func() time.Time
	// inspectPodDir is nodefs.InspectPodDir, for the checks right before a
	// step (a pass's own look uses a nodefs.PodDirInspector); tests make it
	// fail as only an I/O error would.
	inspectPodDir func(ctx context.Context, kubeletRoot, uid string) (nodefs.PodDir, error)

	resync chan struct{}
	wake   chan struct{}

	started time.Time
	// stepStarted is when the pass under way last started a step (its
	// re-check): LastProgress.
	stepStarted atomic.Pointer[time.Time]

	mu       sync.Mutex
	last     PassResult
	passes   uint64
	failures int                       // consecutive failed listings
	phases   map[string]podstate.Phase // phase per pod UID at the last pass, for transition logs
	// phasesTaken: phases holds a pass's view. Before, every pod is new,
	// and its transition says nothing the first pass's summary does not.
	phasesTaken bool

	// Owned by the pass (one at a time):
	passEnded func() error         // the pass's context's Err while a pass runs (stopping)
	eligible  map[string]time.Time // gc.Result.EligibleSince of the last plan
	blocked   string               // why the last pass could not act ("" = it could)
	reported  map[string]bool      // orphaned live pods already reported, by UID
	// cgroups lists the pod cgroups pass after pass, reading every
	// hierarchy every podcgroups.FullScanEvery (nil: cgroups.enabled =
	// false).
	cgroups *podcgroups.Scanner
	// cgroupsPrimary is the hierarchy the last pass's Scanner read
	// between full scans, for saying when it changes.
	cgroupsPrimary string
	// warned has the problems (malformed entries, unreadable or unparsable
	// files) logged by the last listed pass; warning is what this pass
	// sees. A problem is logged once while it lasts, again if it comes
	// back, and the sets never hold more than one pass's problems.
	warned, warning map[string]bool
	// notLookedFor is what this pass could not look at while the rest went
	// on (PassResult.NotLookedFor).
	notLookedFor []string
	// tornDown are the pods this plugin saw torn down (podstate's
	// PodView.TornDown: removed with evidence) whose kubelet pod dir is
	// still there. podstate forgets Removed pods after its retention; this
	// remembers them for as long as the dir lasts and does not change,
	// since only they may have an orphaned pod dir (gc.Input.TornDown).
	tornDown map[string]*tornDownMark
	// dismissed are the pods whose mark was dropped while podstate still
	// has them torn down: kubelet set up a pod of that UID again, or its
	// dir was gone. Each maps to the mark's last life event; that
	// teardown never marks the pod again, only a newer one can (see
	// noteTeardown).
	dismissed map[string]time.Time
	// saidNotTornDown are the pods whose Removed line said them not seen
	// torn down: one marked later (NRI's removal delivered after the
	// listing that lacked the sandbox) is said again (noteTeardown).
	saidNotTornDown map[string]bool
	// confirmedSyncs is the NRI session (podstate.Syncs) a listing of which
	// shared a sandbox with NRI: runtime.endpoint answers for the
	// containerd NRI talks to. 0: none yet.
	confirmedSyncs uint64
	// spent are the budgeted steps taken in the last hour.
	spent []spent
	// failing are the budgeted units (as "class/unit") whose steps failed
	// at their last try, and when the plan last proposed them
	// (noteFailing): a pass takes other units of their class first. In
	// memory only.
	failing map[string]time.Time
	// budgetHeldUntil: every budgeted step is held until then, for
	// budgetHeldWhy (a state file could not be read; see Restore).
	budgetHeldUntil time.Time
	budgetHeldWhy   string
	// persisted is what the state file holds, as last written or read.
	persisted []byte
	// stateLock is this plugin's hold on the state file (nil: not held).
	// stateHeldBy says, while another plugin holds it (stateHeldByOther)
	// or it cannot be locked at all, why: until this one takes it, every
	// budgeted step is held and nothing is written.
	// restorePending: the file is read when the lock is taken.
	stateLock        *statefile.Lock
	stateHeldBy      string
	stateHeldByOther bool
	restorePending   bool
	// boot ties the loop's clock to the boot clock, once read (see
	// Options.BootClock).
	boot *bootAnchor
	// said holds what the last pass said once while it lasts: the listing
	// or oracle distrusted, each budget class tripped.
	said map[string]string
}

// PassResult says what one pass did.
type PassResult struct {
	Started  time.Time
	Duration time.Duration
	// Err is set when the listing failed: nothing was planned or changed then.
	Err error
	// Untrusted is set when the listing disagreed with NRI: nothing was
	// reconciled, planned or changed then.
	Untrusted string
	Reconcile podstate.ReconcileResult
	Listing   ListingStats
	Counts    podstate.Counts
	// Plan is what the rules decided; Blocked says why nothing was executed
	// ("" when the sources were ready).
	Plan     gc.Result
	Blocked  string
	Outcomes []executor.Outcome
	// NotLookedFor names the leaks this pass could not look for while the
	// rest went on, each with why (a pod cgroup listing that failed, the
	// network's files unreadable): the plan is silent on them, which is
	// not a clean node.
	NotLookedFor []string
	// Snapshot is the listing the plan was made from.
	Snapshot cri.Snapshot
}

// New returns a loop over state that lists through runtime.
func New(state *podstate.State, runtime Runtime, opts Options, log logrus.FieldLogger) *Loop {
	if opts.Debounce <= 0 {
		opts.Debounce = time.Second
	}
	if opts.WakeInterval <= 0 {
		opts.WakeInterval = WakeIntervalFor(opts.Period, opts.Debounce)
	}
	l := &Loop{
		state: state, runtime: runtime, opts: opts, log: log, now: time.Now, started: time.Now(),
		inspectPodDir: nodefs.InspectPodDir,
		resync:        make(chan struct{}, 1), wake: make(chan struct{}, 1),
		phases: make(map[string]podstate.Phase), reported: make(map[string]bool), tornDown: make(map[string]*tornDownMark),
		dismissed: make(map[string]time.Time), saidNotTornDown: make(map[string]bool),
		said: make(map[string]string),
	}
	if opts.Cgroups != nil {
		l.cgroups = podcgroups.NewScanner(*opts.Cgroups, podcgroups.FullScanEvery)
	}
	return l
}

// Resync asks for a pass now. It never blocks.
func (l *Loop) Resync() { notify(l.resync) }

// Wake asks for a pass soon (debounced). It never blocks.
func (l *Loop) Wake() { notify(l.wake) }

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // a pass is already pending
	}
}

// WakeIntervalFor is the default Options.WakeInterval: a third of the
// period, at most 10 s, at least the debounce. Actions wait leak_grace
// (minutes) anyway, and without events the next pass comes within a
// period: starting a clock up to 10 s later than the event changes no
// reclaim a user could tell from the period's own jitter, while a rollout's
// hundreds of stop events cost a pass every 10 s instead of every second.
func WakeIntervalFor(period, debounce time.Duration) time.Duration {
	return max(debounce, min(period/3, 10*time.Second))
}

// Run passes once at start, then a period after each pass and when woken,
// until ctx ends. After a failed listing it retries sooner (1s doubling up
// to the period): a pre-registered plugin starts before containerd serves
// CRI.
func (l *Loop) Run(ctx context.Context) error {
	ticker := time.NewTicker(l.opts.Period)
	defer ticker.Stop()
	var retry <-chan time.Time
	retryWait := time.Duration(0)
	for {
		started := time.Now()
		r := l.Pass(ctx)
		if r.Err != nil {
			retryWait = min(max(2*retryWait, time.Second), l.opts.Period)
			retry = time.After(retryWait)
		} else {
			retryWait, retry = 0, nil
		}
		// The period counts from the last pass, whatever started it: a pass
		// an event woke is not followed by a periodic one right after.
		ticker.Reset(l.opts.Period)
		earliest := started.Add(l.opts.WakeInterval)
		var due <-chan time.Time
		if at, ok := nextDue(r); ok && at.Before(started.Add(l.opts.Period)) {
			due = time.After(time.Until(maxTime(at, earliest)))
		}
		if !l.waitForTrigger(ctx, ticker.C, retry, due, earliest) {
			return nil
		}
	}
}

// nextDue is when a step this pass planned but did not take is due: when
// the first leak_grace runs out, a retry's backoff ends, or (a class
// throttled by its per-pass budget, after steps were taken) now. A pass then, rather than at the
// next period, reclaims a leak one leak_grace after it was found, not up to
// a period later; WakeInterval still bounds how often this starts a pass.
func nextDue(r PassResult) (time.Time, bool) {
	var at time.Time
	found := false
	note := func(t time.Time) {
		if !found || t.Before(at) {
			at, found = t, true
		}
	}
	if r.Err != nil || r.Untrusted != "" {
		return at, false
	}
	// A throttled class moves on only when steps of its own were taken
	// (not in a dry run, where the same steps stay first, nor when its
	// steps were all aborted by their checks, which give their units back:
	// the same steps would come first again).
	progressed := make(map[string]bool)
	for _, o := range r.Outcomes {
		if class, _ := gc.BudgetClass(o.Action); class != "" && o.Result == executor.Success {
			progressed[class] = true
		}
	}
	for _, d := range r.Plan.Deferred {
		switch {
		case d.GraceLeft > 0:
			note(r.Snapshot.TakenAt.Add(d.GraceLeft))
		case d.Throttled && progressed[d.Budget]:
			note(r.Snapshot.TakenAt)
		}
	}
	for _, o := range r.Outcomes {
		if (o.Result == executor.Error || o.Result == executor.Backoff) && !o.RetryAt.IsZero() {
			note(o.RetryAt)
		}
	}
	return at, found
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitForTrigger blocks until the next pass is due: the period, a resync, a
// retry, a step falling due, or the end of the debounce after a wake, but
// not before earliest (Options.WakeInterval after the last pass started)
// for a wake. It is false when ctx ends.
func (l *Loop) waitForTrigger(ctx context.Context, tick, retry, due <-chan time.Time, earliest time.Time) bool {
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-l.resync:
			return true
		case <-retry:
			return true
		case <-due:
			return true
		case <-debounce:
			return true
		case <-l.wake:
			if debounce == nil {
				debounce = time.After(max(l.opts.Debounce, time.Until(earliest)))
			}
		}
	}
}

// LastPassEnd returns when the last pass finished (zero before the first).
func (l *Loop) LastPassEnd() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.passes == 0 {
		return time.Time{}
	}
	return l.last.Started.Add(l.last.Duration)
}

// LastProgress returns when the loop last showed it is at work: the end of
// the last pass, or the start of the latest step of the pass under way. A
// pass reclaiming a mass leak takes minutes (thousands of RemovePodSandbox
// calls, each a few ms to tens of ms), and a liveness probe must not kill
// it half way, while a pass stuck on one step still stops making progress.
func (l *Loop) LastProgress() time.Time {
	end := l.LastPassEnd()
	if p := l.stepStarted.Load(); p != nil && p.After(end) {
		return *p
	}
	return end
}

// NotReady says why the loop cannot act, or not fully ("" when it can): the
// last listing failed or disagreed with NRI, a source is not ready, or the
// oracle is not trusted.
func (l *Loop) NotReady() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.passes == 0:
		return "no housekeeping pass has finished yet"
	case l.last.Err != nil:
		return "the last runtime listing failed: " + l.last.Err.Error()
	}
	var why []string
	for _, w := range []string{l.last.Blocked, l.last.Plan.OracleUntrusted} {
		if w != "" {
			why = append(why, w)
		}
	}
	return strings.Join(why, "; ")
}

// Passes returns how many passes finished, and the last one's result.
func (l *Loop) Passes() (uint64, PassResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.passes, l.last
}

// Pass runs one pass: a fresh listing, its check against NRI, reconcile,
// plan, and - once every source is ready - execute what is due, each node
// step checked again right before it runs. A failed listing, or one that
// disagrees with NRI, changes nothing.
func (l *Loop) Pass(ctx context.Context) PassResult {
	l.passEnded = ctx.Err
	defer func() { l.passEnded = nil }()
	r := PassResult{Started: l.now()}
	startSeq := l.state.Seq()
	// Read once, before the listing: the check of the listing against NRI
	// and the gate must agree on it, or a Synchronize in between would open
	// the gate for a listing nobody checked. The session is read after it:
	// a reconnect completing in between makes a new session, which must
	// then share a sandbox with the listing.
	synced := l.opts.Synchronized == nil || l.opts.Synchronized()
	syncs := l.state.Syncs()
	// The network's objects are read before the listing (gc.NetworkInput).
	netListing, netErr := l.listNetwork(ctx, r.Started)
	snap, err := l.runtime.Snapshot(ctx)
	if err != nil && ctx.Err() != nil {
		// Stopped (a signal, the NRI connection lost) while listing: no
		// failure of the runtime, and the process is ending.
		r.Err = err
		r.Duration = l.now().Sub(r.Started)
		l.log.WithError(err).Debug("housekeeping pass stopped during the runtime listing")
		return r
	}
	if err != nil {
		r.Err = err
		// Nothing is reconciled, but NRI goes on recording: what podstate
		// would have forgotten is forgotten all the same, or it would grow
		// for as long as the listing fails (a wrong runtime.endpoint).
		r.Reconcile.Forgotten = l.state.Forget(r.Started)
		r.Duration = l.now().Sub(r.Started)
		l.finish(r, nil)
		return r
	}
	r.Snapshot = snap
	l.warning = make(map[string]bool)
	defer func() { l.warned, l.warning = l.warning, nil }()
	listing, stats := ToListing(startSeq, snap)
	r.Listing = stats
	if len(snap.Malformed) > 0 {
		// Said once per distinct set, not every pass.
		l.warnOnce(fmt.Sprintf("runtime listed %d malformed entries; they are never acted on, and keep the sandboxes and pods they name", len(snap.Malformed)),
			errors.New(summarize(snap.Malformed, 5)))
	}
	nri, untrusted := l.checkListing(ctx, snap, syncs, synced)
	l.sayWhileItLasts("listing", untrusted, "the CRI listing is not trusted: no reconcile, no plan, no action this pass",
		"the CRI listing agrees with NRI again")
	if untrusted != "" {
		// Every grace clock starts over once the listing is trusted again.
		// What podstate would have forgotten is forgotten all the same.
		r.Untrusted, r.Blocked = untrusted, untrusted
		r.Reconcile.Forgotten = l.state.Forget(snap.TakenAt)
		r.Plan = gc.Result{Untrusted: untrusted, Leaks: map[string]int{}, EligibleSince: map[string]time.Time{}}
		l.eligible = r.Plan.EligibleSince
		// What was said once while it lasts, and the steps' backoffs, are
		// kept: this pass looked at nothing, so nothing ended. (Forgotten,
		// a listing that flaps between trusted and not repeated every
		// notice, and retried a failing step without its backoff.)
		for problem := range l.warned {
			l.warning[problem] = true
		}
		r.Duration = l.now().Sub(r.Started)
		l.finish(r, nil)
		return r
	}
	l.notLookedFor = nil
	r.Reconcile = l.state.Reconcile(listing, snap.TakenAt)
	view := l.state.View()
	r.Counts = view.Counts()

	in := l.planInput(ctx, snap, view)
	in.NRI = nri
	in.Network = l.networkInput(ctx, in, netListing, netErr)
	r.Plan = gc.Plan(in)
	l.eligible = r.Plan.EligibleSince
	if in.Network != nil { // a pass without the network side says nothing of it
		unseen := ""
		if r.Plan.NetnsUnseenKept > 0 {
			unseen = in.Network.NetnsUnseen
		}
		l.sayWhileItLasts("netns-unseen", unseen,
			"unowned CNI attachments whose netns is not mounted here are kept: this process may not see the namespaces containerd mounts",
			"no unowned CNI attachment is kept any more for a netns this process may not see")
	}
	r.Blocked = l.gate(in.Now, r.Plan, synced)
	if l.opts.Executor != nil {
		if r.Blocked == "" {
			// The budgeted units are written before their steps run: a
			// plugin killed during the pass (containerd kills a
			// pre-registered plugin when it stops it; the OOM killer)
			// must not start the hour's budget afresh. Those that did not
			// run are given back after.
			ahead := l.spendAhead(in.Now, r.Plan.Actions)
			if len(ahead) > 0 {
				if err := l.persist(ctx, in.Now); err != nil {
					var held []gc.Deferred
					r.Plan.Actions, held = l.holdUnrecorded(r.Plan.Actions, err)
					r.Plan.Deferred = append(r.Plan.Deferred, held...)
				}
			}
			r.Outcomes = l.opts.Executor.Execute(ctx, r.Plan.Actions, in.Now, l.recheck(snap.TakenAt, syncs, in.Oracle.PodDirs))
			l.settleSpent(in.Now, ahead, r.Outcomes)
			l.noteFailing(in.Now, r.Plan, r.Outcomes)
		}
		if r.Plan.NotReady == "" {
			// A pass that planned nothing ended nothing: the backoffs
			// stand, as after an untrusted listing.
			l.opts.Executor.Forget(r.Plan.EligibleSince)
		}
	}
	_ = l.persist(ctx, in.Now) // said while it fails
	r.NotLookedFor = l.notLookedFor
	r.Duration = l.now().Sub(r.Started)
	l.finish(r, &view)
	return r
}

// planInput gathers what a plan is made from: the listing, the pod oracle,
// the log files, the pods' last life events and the grace clocks.
func (l *Loop) planInput(ctx context.Context, snap cri.Snapshot, view podstate.View) gc.Input {
	in := gc.Input{
		Now: snap.TakenAt, Policy: l.opts.Policy, Sandboxes: snap.Sandboxes, Containers: snap.Containers, Unreadable: snap.Malformed,
		Oracle:        gc.Oracle{Disabled: l.opts.OracleDisabled},
		LastLifeEvent: make(map[string]time.Time, len(view.Pods)),
		EligibleSince: l.eligible,
		PodNames:      make(map[string]gc.PodRef),
	}
	in.BudgetAdmitted = l.budgetSpent(snap.TakenAt)
	in.BudgetFailing = make(map[string]bool, len(l.failing))
	for unit := range l.failing {
		in.BudgetFailing[unit] = true
	}
	in.BudgetHeld = l.budgetHeld(snap.TakenAt)
	listed := listedUIDs(snap)
	inView := make(map[string]bool, len(view.Pods))
	for _, p := range view.Pods {
		inView[p.UID] = true
		if !p.LastLifeEvent.IsZero() {
			in.LastLifeEvent[p.UID] = p.LastLifeEvent
		}
		// Only a pod with nothing left can own a cgroup or dir the plan
		// names by UID: its name is kept for the log.
		if p.Phase == podstate.PhaseRemoved {
			in.PodNames[p.UID] = gc.PodRef{UID: p.UID, Namespace: p.Namespace, Name: p.Name}
		}
		// Without an oracle no pod dir is ever orphaned: no mark to keep.
		if !l.opts.OracleDisabled {
			l.noteTeardown(p, snap.TakenAt)
		}
	}
	for uid := range l.dismissed {
		if !inView[uid] {
			delete(l.dismissed, uid) // podstate forgot the teardown: it cannot mark the pod again
		}
	}
	for uid := range l.saidNotTornDown {
		if !inView[uid] {
			delete(l.saidNotTornDown, uid)
		}
	}
	if !l.opts.OracleDisabled {
		in.Oracle.PodDirs = nodefs.ListPodDirs(ctx, l.opts.KubeletRoot)
	}
	var err error
	var skipped []nodefs.Skipped
	if in.PodLogDirs, skipped, err = nodefs.ListPodLogDirs(ctx, l.opts.Policy.PodLogsDir); err != nil {
		l.warnOnce("pod log dirs are not cleaned this pass", err)
		l.notLooked("pod log dirs", err.Error())
	}
	l.noteSkipped(skipped)
	if in.ContainerLogLinks, skipped, err = nodefs.ListContainerLogLinks(ctx, l.opts.Policy.ContainerLogsDir, l.opts.Policy.PodLogsDir,
		listedRunning(snap).lacksLink); err != nil {
		l.warnOnce("container log links are not cleaned this pass", err)
		l.notLooked("container log links", err.Error())
	}
	l.noteSkipped(skipped)
	if l.opts.Cgroups != nil {
		// Looked into: pods with nothing listed, and gone pods with nothing
		// running, whose cgroup the plan may remove right after their last
		// sandboxes and containers.
		quiet := quietUIDs(snap)
		inspect := func(uid string) bool {
			return listed.lacks(uid) || (quiet.has(uid) && in.Oracle.PodDirs.Ready && !in.Oracle.PodDirs.Present(uid) && !l.opts.OracleDisabled)
		}
		cgs := l.cgroups.Discover(ctx, in.Now, inspect)
		if !cgs.Ready {
			l.warnOnce("pod cgroups are not cleaned this pass", cgs.Err)
			l.notLooked("pod cgroups", fmt.Sprint(cgs.Err))
		}
		if p := l.cgroups.Primary(); p != "" && p != l.cgroupsPrimary && len(cgs.Hierarchies) > 1 {
			l.log.WithFields(logrus.Fields{"hierarchy": p, "hierarchies": len(cgs.Hierarchies), "full_scan_every": podcgroups.FullScanEvery}).
				Info("pod cgroups: between full scans of every hierarchy, passes list the pods of this one (it has the most pod cgroups) and look up the rest by name")
		}
		l.cgroupsPrimary = l.cgroups.Primary()
		for _, s := range cgs.Skipped {
			l.noteSkipped([]nodefs.Skipped{{Path: s.Path, Reason: s.Reason}})
		}
		for uid, pod := range cgs.Pods {
			if pod.Unreadable != "" && l.firstSeen("pod cgroup "+uid+": "+pod.Unreadable) {
				l.log.WithFields(logrus.Fields{logging.FieldPodUID: uid, logging.FieldReason: pod.Unreadable}).
					Warn("pod cgroup left alone: its tree cannot be read (the node's other pod cgroups are cleaned as usual)")
			}
		}
		rootMissing := l.cgroupsRootMissing(cgs, snap)
		l.sayWhileItLasts("cgroups-root", rootMissing,
			"no pod cgroup can be found where cgroups.root says: pod cgroups are not cleaned",
			"cgroups.root is found again: pod cgroups are cleaned")
		if rootMissing != "" {
			l.notLooked("pod cgroups", rootMissing)
		}
		l.setDegraded(PartCgroups, !cgs.Ready || rootMissing != "")
		l.compareCgroupsWithTeardown(cgs)
		in.PodCgroups = &cgs
	}
	in.PodDirs = l.inspectPodDirs(ctx, in.Oracle.PodDirs, listed)
	if len(in.PodDirs) > 0 && l.opts.PodDirMountsUnseen != nil && (l.opts.Policy.RemoveOrphanedPodDirs || in.PodCgroups != nil) {
		// Asked only with a candidate, and when it decides something (a
		// pod dir's removal, a pod cgroup's destroy): a node without one
		// pays nothing, and a plugin that acts on neither says nothing.
		in.PodDirMountsUnseen = l.opts.PodDirMountsUnseen(ctx)
		level := logrus.ErrorLevel
		if strings.Contains(in.PodDirMountsUnseen, containerdProcessNotFound) {
			// containerd restarting (an upgrade): routine, and nothing
			// to do but wait; the CRI side says it too.
			level = logrus.InfoLevel
		}
		l.sayWhileItLastsAt(level, "pod-dir-mounts-unseen", in.PodDirMountsUnseen,
			"orphaned pod dirs are kept and their pod cgroups only CPU-reduced: this process may not see the mounts kubelet makes in them",
			"this process sees the mounts kubelet makes in its pods dir again")
	}
	// A torn-down pod whose dir is gone needs remembering no longer; a dir
	// made later is kubelet setting up a pod of that UID again. While the
	// pods dir cannot be read, a mark none has checked goes with
	// podstate's record of the pod: nothing else would drop it.
	for uid, mark := range l.tornDown {
		switch {
		case !in.Oracle.PodDirs.Ready:
			// Not when the pass is being stopped (SIGTERM while the pods
			// dir is read): that is no unreadable dir, and the state file
			// written at the stop would lose the mark.
			if ctx.Err() == nil && !mark.dirSeen && !inView[uid] {
				delete(l.tornDown, uid)
				if l.opts.OracleDisabled {
					continue // no pod dir is ever orphaned: nothing to say
				}
				l.log.WithFields(podFields(mark.pod)).WithField(logging.FieldReason, in.Oracle.PodDirs.Err).
					Info("forgot a pod seen torn down whose pod dir was never checked (restored from the state file, or podstate forgot it): " +
						"kubelet's pods dir cannot be read; its pod dir, if any, is reported as orphaned, never removed")
			}
		case in.Oracle.PodDirs.Present(uid):
			mark.dirSeen = true
		default:
			l.dismissTeardown(uid)
		}
	}
	in.TornDown = make(map[string]bool, len(l.tornDown))
	for uid, mark := range l.tornDown {
		in.TornDown[uid] = true
		if _, ok := in.PodNames[uid]; !ok && mark.pod.Name != "" {
			in.PodNames[uid] = mark.pod
		}
	}
	return in
}

// podUIDs is a set of pod UIDs.
type podUIDs map[string]struct{}

func (u podUIDs) has(uid string) bool   { _, ok := u[uid]; return ok }
func (u podUIDs) lacks(uid string) bool { return !u.has(uid) }

// cgroupsRootMissing says why cgroups.root looks wrong ("" when it does
// not): kubelet makes it at its start, so a node with Ready sandboxes and no
// such cgroup in any hierarchy has it elsewhere (a typo, kubelet's
// --cgroup-root, the driver) or has none (--cgroups-per-qos=false). Safe
// either way (nothing is found, nothing is done), but not silent.
func (l *Loop) cgroupsRootMissing(cgs podcgroups.Listing, snap cri.Snapshot) string {
	if !cgs.Ready || !cgs.RootMissing {
		return ""
	}
	ready := 0
	for _, sb := range snap.Sandboxes {
		if sb.Ready {
			ready++
		}
	}
	if ready == 0 {
		return ""
	}
	return fmt.Sprintf("cgroups.root %q (driver %s) is in none of the %d cgroup hierarchies under %s, though the runtime lists %d Ready sandbox(es): "+
		"set cgroups.root to kubelet's kubepods cgroup (under its --cgroup-root) and cgroups.driver to its cgroup driver, "+
		"or cgroups.enabled = false if kubelet runs with --cgroups-per-qos=false",
		l.opts.Cgroups.Root, cgs.Driver, len(cgs.Hierarchies), l.opts.Cgroups.Mountpoint, ready)
}

// listedUIDs are the pods with any sandbox or container in the listing,
// managed or not, readable or not: the planner never touches their pod
// cgroups and dirs, so those are never looked into (gc's listed).
func listedUIDs(snap cri.Snapshot) podUIDs {
	listed := make(podUIDs, len(snap.Sandboxes))
	for _, s := range snap.Sandboxes {
		listed[s.UID] = struct{}{}
		if uid := s.Labels[podstate.LabelPodUID]; uid != "" {
			listed[uid] = struct{}{}
		}
	}
	for _, c := range snap.Containers {
		listed[c.Labels[podstate.LabelPodUID]] = struct{}{}
	}
	for _, m := range snap.Malformed {
		listed[m.PodUID] = struct{}{}
	}
	return listed
}

// quietUIDs are the listed pods with nothing running: every sandbox of
// theirs NotReady, no container running, no entry that could not be read.
// The plan removes the created and UNKNOWN containers of such a pod too
// (the latter stopped first), so its pod cgroup is looked into in the same
// pass: one leak_grace for the pod, not one more for its cgroup.
func quietUIDs(snap cri.Snapshot) podUIDs {
	quiet, busy := make(podUIDs), make(podUIDs)
	note := func(uid string, running bool) {
		if running {
			busy[uid] = struct{}{}
		} else {
			quiet[uid] = struct{}{}
		}
	}
	for _, s := range snap.Sandboxes {
		note(s.UID, s.Ready)
		if uid := s.Labels[podstate.LabelPodUID]; uid != "" {
			note(uid, s.Ready)
		}
	}
	for _, c := range snap.Containers {
		note(c.Labels[podstate.LabelPodUID], c.State == cri.ContainerRunning)
	}
	for _, m := range snap.Malformed {
		note(m.PodUID, true)
	}
	for uid := range busy {
		delete(quiet, uid)
	}
	return quiet
}

// runningContainers are the IDs of the listed running containers.
type runningContainers map[string]struct{}

// listedRunning are the listing's running containers: the plan never
// removes one in a pass, and keeps its log link whatever the link's target
// (log rotation leaves a target missing briefly), so those links need not
// be examined. Created and UNKNOWN containers may be removed by the plan
// (their pod gone, or an older instance over max_per_pod_container): their
// links are examined, to go in the same pass (the plan keeps those of
// containers it does not remove).
func listedRunning(snap cri.Snapshot) runningContainers {
	ids := make(runningContainers, len(snap.Containers))
	for _, c := range snap.Containers {
		if c.State == cri.ContainerRunning {
			ids[c.ID] = struct{}{}
		}
	}
	return ids
}

// lacksLink is false for the link of a listed running container. A
// truncated name may be a prefix of any ID: always examined.
func (r runningContainers) lacksLink(l nodefs.ContainerLogLink) bool {
	if l.Truncated {
		return true
	}
	_, ok := r[l.ContainerID]
	return !ok
}

// containerdProcessNotFound is in what PodDirMountsUnseenBy says while
// containerd's process cannot be found: the loop says that at info.
const containerdProcessNotFound = "cannot be told while containerd's process cannot be found"

// PodDirMountsUnseenBy is Options.PodDirMountsUnseen for kubeletRoot's pods
// dir, compared with the mount namespace of containerd (peerPID finds it):
// the node's, where kubelet mounts too.
func PodDirMountsUnseenBy(peerPID func(ctx context.Context) (int, error), kubeletRoot string) func(ctx context.Context) string {
	pods := filepath.Join(kubeletRoot, "pods")
	return func(ctx context.Context) string {
		pid, err := peerPID(ctx)
		if err != nil {
			// containerd restarting, say: nothing to change but to wait.
			return fmt.Sprintf("whether this process sees the mounts kubelet makes in %s %s (%v)", pods, containerdProcessNotFound, err)
		}
		why := nodefs.MountsUnseen(pid, pods)
		if why == "" {
			return ""
		}
		return fmt.Sprintf("this process may not see the mounts kubelet makes in %s: %s: run the plugin in the node's mount namespace, "+
			"or mount the pods dir with HostToContainer (rslave) propagation and give it the node's PID namespace", pods, why)
	}
}

// inspectPodDirs looks into the kubelet pod dirs of pods with no sandbox and
// no container listed: the candidates for orphaned pod dirs. Pods with
// listed objects (nearly all) cost nothing here.
func (l *Loop) inspectPodDirs(ctx context.Context, dirs nodefs.PodDirs, listed podUIDs) []nodefs.PodDir {
	if !dirs.Ready || len(dirs.UIDs) == 0 {
		return nil
	}
	var out []nodefs.PodDir
	var inspector *nodefs.PodDirInspector // made at the first candidate
	var tableErr error
	for uid := range dirs.UIDs {
		if listed.has(uid) {
			continue
		}
		if inspector == nil && tableErr == nil {
			inspector, tableErr = nodefs.NewPodDirInspector(l.opts.KubeletRoot)
		}
		var d nodefs.PodDir
		err := tableErr
		if err == nil {
			d, err = inspector.Inspect(ctx, uid)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed since it was listed
		case err != nil:
			// Unreadable: kubelet treats that as volumes possibly mounted.
			d.UID = uid
			d.Blockers = append(d.Blockers, "cannot inspect: "+err.Error())
		default:
			l.compareWithTeardown(d)
		}
		out = append(out, d)
	}
	return out
}

// gate says why the pass may not act yet, or "" when every source is ready:
// NRI synchronized, a fresh listing (this pass has one), the pod oracle, and
// startup_delay elapsed. Stricter than kubelet: no action on partial data.
func (l *Loop) gate(now time.Time, plan gc.Result, synced bool) string {
	var why []string
	if !synced {
		why = append(why, "NRI has not synchronized since the last (re)connect")
	}
	if plan.NotReady != "" {
		why = append(why, plan.NotReady)
	}
	if end := l.started.Add(l.opts.StartupDelay); now.Before(end) {
		// The same words every pass while it lasts: the gate's line is
		// said when they change, not at every pass of the delay.
		why = append(why, fmt.Sprintf("housekeeping.startup_delay (%s) has not passed since the plugin started: acting from %s",
			l.opts.StartupDelay, end.UTC().Format(time.RFC3339)))
	}
	return strings.Join(why, "; ")
}

// firstSeen records a problem of this pass and reports whether it is new:
// not seen by the last listed pass, nor earlier in this one.
func (l *Loop) firstSeen(problem string) bool {
	seen := l.warned[problem] || l.warning[problem]
	l.warning[problem] = true
	return !seen
}

// stopping reports whether the pass under way was stopped (SIGTERM: its
// context ended): what it could not read since is no problem of a source,
// and is said at debug level only, and not remembered as said.
func (l *Loop) stopping() bool { return l.passEnded != nil && l.passEnded() != nil }

func (l *Loop) warnOnce(what string, err error) {
	if l.stopping() {
		l.log.WithError(err).Debug(what)
		return
	}
	if l.firstSeen(err.Error()) {
		l.log.WithError(err).Warn(what)
	}
}

func (l *Loop) noteSkipped(skipped []nodefs.Skipped) {
	for _, s := range skipped {
		if l.firstSeen(s.Path + ": " + s.Reason) {
			l.log.WithFields(logrus.Fields{"path": s.Path, logging.FieldReason: s.Reason}).
				Info("left alone: not a name kubelet writes")
		}
	}
}

func (l *Loop) finish(r PassResult, view *podstate.View) {
	l.mu.Lock()
	l.passes++
	l.last = r
	l.last.Snapshot = cri.Snapshot{} // the listing can be large; callers of Pass get it
	failures := l.failures
	if r.Err != nil {
		l.failures++
	} else {
		l.failures = 0
	}
	var transitions []transition
	first := false
	if view != nil {
		first = !l.phasesTaken
		transitions = l.transitions(*view)
	}
	l.mu.Unlock()
	l.observe(r, view)
	if r.Err != nil {
		// Said once per outage, then every 20th attempt, not every retry.
		if failures%20 == 0 {
			l.log.WithError(r.Err).WithField("attempts", failures+1).
				Warn("housekeeping pass skipped: the runtime listing failed, nothing is changed on partial data " +
					"(while it lasts: is containerd running, and is runtime.endpoint its CRI socket?)")
		}
		return
	}
	if failures > 0 {
		l.log.WithField("failed_passes", failures).Info("runtime listing works again")
	}
	l.logPlan(r)
	byPhase := map[string]int{}
	for _, t := range transitions {
		fields := logrus.Fields{
			logging.FieldPodUID: t.pod.UID, logging.FieldPodNamespace: t.pod.Namespace, logging.FieldPodName: t.pod.Name,
			"phase": t.pod.Phase.String(), "previous_phase": t.from,
		}
		notTornDown := ""
		if t.pod.Phase != podstate.PhaseRemoved {
			delete(l.saidNotTornDown, t.pod.UID) // back: a later Removed line says it anew
		}
		if t.pod.Phase == podstate.PhaseRemoved {
			// Whether its pod dir may ever be reclaimed hangs on this:
			// say it where the pod is said gone.
			fields["torn_down"] = t.pod.TornDown
			if !t.pod.TornDown {
				l.saidNotTornDown[t.pod.UID] = true
				why := "a sandbox went from the runtime without an NRI stop or removal"
				if !slices.ContainsFunc(t.pod.Sandboxes, func(sb podstate.Sandbox) bool { return sb.Removal == podstate.RemovedByAbsence }) &&
					slices.ContainsFunc(t.pod.Sandboxes, func(sb podstate.Sandbox) bool { return sb.Removal == podstate.RemovedByRollback }) {
					why = "a sandbox never seen in the runtime's store was removed: a RunPodSandbox rolled back, which kubelet retries"
				}
				notTornDown = "; not seen torn down (" + why + "): its kubelet pod dir, and the pod cgroup while that stands, are left to kubelet"
			}
		}
		entry := l.log.WithFields(fields)
		if first {
			// Every pod of the node is new to the first pass (a report of
			// a 110-pod node would print 110 lines before its table): one
			// summary, each pod at debug.
			byPhase[t.pod.Phase.String()]++
			entry.Debugf("pod %s/%s: %s -> %s; %s%s", t.pod.Namespace, t.pod.Name, t.from, t.pod.Phase, describe(t.pod), notTornDown)
			continue
		}
		entry.Infof("pod %s/%s: %s -> %s; %s%s", t.pod.Namespace, t.pod.Name, t.from, t.pod.Phase, describe(t.pod), notTornDown)
	}
	if first {
		var phases []string
		for _, ph := range slices.Sorted(maps.Keys(byPhase)) {
			phases = append(phases, fmt.Sprintf("%d %s", byPhase[ph], ph))
		}
		summary := l.log.WithField("pods", len(transitions))
		if l.opts.OneShot {
			// report, once: one pass, whose report says the pods.
			summary.Debugf("%d pod(s) known (%s)", len(transitions), cmp.Or(strings.Join(phases, ", "), "none"))
		} else {
			summary.Infof("first pass: %d pod(s) known (%s); from now on, each pod's phase changes are logged",
				len(transitions), cmp.Or(strings.Join(phases, ", "), "none"))
		}
	}
	c := r.Counts
	// executed counts the steps tried, as once's summary does; the others
	// by their result.
	results := map[executor.Result]int{}
	for _, o := range r.Outcomes {
		results[o.Result]++
	}
	entry := l.log.WithFields(logrus.Fields{
		"pods": c.Pods, "running": c.ByPhase[podstate.PhaseRunning], "terminating": c.ByPhase[podstate.PhaseTerminating],
		"terminated": c.ByPhase[podstate.PhaseTerminated], "orphans": c.Orphans,
		"sandboxes": c.Sandboxes, "containers": c.Containers,
		"added": r.Reconcile.Added, "updated": r.Reconcile.Updated, "removed": r.Reconcile.Removed,
		"forgotten": r.Reconcile.Forgotten, "unmanaged": r.Listing.Unmanaged, "malformed": r.Listing.Malformed,
		"leaks": r.Plan.LeakSummary(), "due": len(r.Plan.Actions), "deferred": len(r.Plan.Deferred),
		"executed": results[executor.Success] + results[executor.Error] + results[executor.Would], "failed": results[executor.Error],
		"not_done": results[executor.Aborted] + results[executor.Skipped] + results[executor.Backoff],
		"took":     r.Duration.Round(time.Microsecond).String(),
	})
	changed := r.Reconcile.Added+r.Reconcile.Updated+r.Reconcile.Removed+r.Reconcile.Forgotten > 0 ||
		len(transitions) > 0 || len(r.Outcomes) > 0
	if changed {
		entry.Info("housekeeping pass")
	} else {
		entry.Debug("housekeeping pass")
	}
	if l.opts.SlowPassWarning > 0 && r.Duration > l.opts.SlowPassWarning {
		l.log.WithField("took", r.Duration.String()).Warnf("housekeeping pass slower than %s", l.opts.SlowPassWarning)
	}
}

type transition struct {
	pod  podstate.PodView
	from string // previous phase, or "new"
}

// transitions returns the pods whose phase changed since the last pass, and
// remembers the new phases. l.mu must be held.
func (l *Loop) transitions(v podstate.View) []transition {
	l.phasesTaken = true
	var out []transition
	seen := make(map[string]podstate.Phase, len(v.Pods))
	for _, p := range v.Pods {
		seen[p.UID] = p.Phase
		old, known := l.phases[p.UID]
		if known && old == p.Phase {
			continue
		}
		from := "new"
		if known {
			from = old.String()
		}
		out = append(out, transition{pod: p, from: from})
	}
	l.phases = seen
	return out
}

// describe lists a pod's records briefly: "sandboxes 1 Ready; containers app Running".
func describe(p podstate.PodView) string {
	var sb, ct []string
	for _, s := range p.Sandboxes {
		sb = append(sb, fmt.Sprintf("%s %s", short(s.ID), s.State))
	}
	for _, c := range p.Containers {
		ct = append(ct, fmt.Sprintf("%s/%s %s", c.Name, short(c.ID), c.State))
	}
	orphan := ""
	if p.Orphan {
		orphan = " (orphan: learned from the runtime listing, not from NRI)"
	}
	return fmt.Sprintf("sandboxes [%s] containers [%s]%s", strings.Join(sb, ", "), strings.Join(ct, ", "), orphan)
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func summarize(bad []cri.Malformed, n int) string {
	// In a fixed order: containerd lists from a map, so the same entries
	// come in another order each pass, and the summary is what a warning
	// is said once for.
	bad = slices.Clone(bad)
	slices.SortFunc(bad, func(x, y cri.Malformed) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.ID, y.ID), cmp.Compare(x.Reason, y.Reason))
	})
	var parts []string
	for i, m := range bad {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(bad)-n))
			break
		}
		parts = append(parts, m.String())
	}
	return strings.Join(parts, "; ")
}
