// Package executor carries out a housekeeping plan (package gc): it runs the
// actions kind by kind in gc.Kinds order, a bounded number at a time, skips
// those whose dependencies did not succeed, backs off from failing objects,
// and logs every action with its pod, object, rule and reason (DESIGN.md §4–5).
package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// Runtime is the CRI side (implemented by package cri's *Client; tests use a
// fake).
type Runtime interface {
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	StopPodSandbox(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
	// ContainerLogPaths is every container of a pod the runtime lists now,
	// by ID, with its log path (CRI ContainerStatus; "" for none).
	ContainerLogPaths(ctx context.Context, podUID string) (map[string]string, error)
}

// RemoveStopper is a Runtime that says whether its RemovePodSandbox stops
// the sandbox itself with the code of StopPodSandbox and removes nothing
// when that fails (cri.Client: containerd 2.x). Then a sandbox is removed
// with one RemovePodSandbox instead of StopPodSandbox + RemovePodSandbox:
// the same steps, one RPC less.
type RemoveStopper interface {
	RemoveStopsSandbox(ctx context.Context) bool
}

// Files is the node side: log files, kubelet pod dirs, pod cgroups and the
// pod network's objects (implemented over packages nodefs, podcgroups and
// podnet).
type Files interface {
	RemovePodLogDir(ctx context.Context, path string) error
	RemoveContainerLogLink(ctx context.Context, path string) error
	// RemoveContainerLogFiles removes a container's log file and its
	// rotations, none named in keep, and returns what it removed.
	RemoveContainerLogFiles(ctx context.Context, l nodefs.ContainerLog, keep []string) ([]string, error)
	// RemoveOrphanedPodDir removes the pod dir seen names, taking nothing
	// that inspection did not find (nodefs.RemoveOrphanedPodDir).
	RemoveOrphanedPodDir(ctx context.Context, seen nodefs.PodDir) error
	// DestroyPodCgroup kills and removes a pod cgroup, and says what
	// systemd did with its slice unit (the systemd driver).
	DestroyPodCgroup(ctx context.Context, pod podcgroups.PodCgroup) (podcgroups.Destroyed, error)
	ReducePodCgroupCPU(ctx context.Context, pod podcgroups.PodCgroup) error
	DeleteCNIAttachment(ctx context.Context, a podnet.Attachment) error
	ReleaseIPReservation(ctx context.Context, r podnet.Reservation) error
	RemoveNetns(ctx context.Context, n podnet.Netns) error
}

// Defaults of Options (DESIGN.md §5: "10 s doubling to 5 min, with jitter").
const (
	DefaultBackoffMin = 10 * time.Second
	DefaultBackoffMax = 5 * time.Minute
)

// maxJitter is the largest random addition to a backoff delay, as a fraction
// of it: failures of many objects at once (containerd restarting) do not all
// retry in the same pass.
const maxJitter = 0.2

// Log field names this package adds to those of package logging.
const (
	fieldPath     = "path"
	fieldTook     = "took"
	fieldAttempts = "attempts"
	fieldRetryAt  = "retry_at"
	fieldDepends  = "depends_on"
	fieldLogFiles = "log_files"
	// fieldLogFilesLeft: why a container's log files were not removed.
	fieldLogFilesLeft = "log_files_left"
	// fieldSystemdUnit: the slice unit systemd was asked to stop with a
	// pod cgroup; fieldSystemdUnitLeft: why systemd could not.
	fieldSystemdUnit     = "systemd_unit"
	fieldSystemdUnitLeft = "systemd_unit_left"
	// fieldSandboxRemoval: a container removed with its sandbox, whose
	// removal then failed.
	fieldSandboxRemoval = "sandbox_removal"
	// fieldWithSandbox: a container removed by its sandbox's removal.
	fieldWithSandbox = "with_sandbox"
)

// Options configure an Executor.
type Options struct {
	MaxParallel int           // at most this many calls in flight (housekeeping.max_parallel); < 1 counts as 1
	DryRun      bool          // execute nothing; log and report every action as "would"
	BackoffMin  time.Duration // first retry delay after a failure; 0 = DefaultBackoffMin
	BackoffMax  time.Duration // cap of the delay (before jitter); 0 = DefaultBackoffMax
}

// Result is what became of one action.
type Result string

const (
	Success Result = "success" // done
	Error   Result = "error"   // tried and failed: backing off until Outcome.RetryAt
	Would   Result = "would"   // dry run: nothing done
	Backoff Result = "backoff" // not tried: a previous attempt failed and Outcome.RetryAt is still ahead
	Skipped Result = "skipped" // not tried: a dependency did not succeed, or the context ended
	Aborted Result = "aborted" // not tried: checked again right before it, what the plan saw no longer holds
)

// Recheck checks, right before a step that cannot be undone, that what the
// plan saw still holds; an error says what changed, and the step is not
// taken (Aborted). nil means no check (tests).
type Recheck func(ctx context.Context, a gc.Action) error

// Rechecked lists the kinds checked again right before they run: every
// step but a log link's, which rests on its target being absent (or on the
// log dir, or its container with its log files, this call removed before
// it: a dependency). The CRI steps of a gone pod rest on the pod being gone (the
// others on newer instances, which only grow); the node steps run after
// every CRI call of the pass and rest on the pod being gone or orphaned;
// the network steps rest on no source knowing the owner.
var Rechecked = []gc.Kind{gc.StopContainer, gc.StopSandbox, gc.RemoveContainer, gc.RemoveSandbox,
	gc.RemovePodLogDir, gc.RemovePodCgroup, gc.ReducePodCgroupCPU, gc.RemovePodDir,
	gc.RemoveCNIAttachment, gc.ReleaseIPReservation, gc.RemoveNetns}

// Outcome is what became of one action, and how long it took.
type Outcome struct {
	Action gc.Action
	Result Result
	// Err is the failure (Error), the last failure (Backoff), or why the
	// action was not started (Skipped: the dependency, or ctx.Err()).
	Err  error
	Took time.Duration
	// RetryAt is when the key may be tried again (Error, Backoff).
	RetryAt time.Time
	// detail is what the step adds to its outcome's log line (the log
	// files a RemoveContainer removed first, or why it left them).
	detail logrus.Fields
	// carriedGone are the carried containers the runtime no longer lists
	// after a failed sandbox removal; carriedUnknown, why that could not be
	// asked.
	carriedGone    map[string]bool
	carriedUnknown error
}

// backoff is the retry state of one action key.
type backoff struct {
	failures int
	retryAt  time.Time
	lastErr  error
}

// Executor carries out plans. It remembers failures between calls for
// backoff. It is not safe for concurrent use: one housekeeping loop calls
// Execute and, between passes, Forget.
type Executor struct {
	rt    Runtime
	files Files
	opts  Options
	log   logrus.FieldLogger
	// backoffs is keyed by gc.Action.Key.
	backoffs map[string]*backoff
	// aborted is why each key was last aborted: said at warning level once
	// while the reason lasts, not every pass.
	aborted map[string]string
	// jitter returns the random part added to a delay d; tests replace it.
	jitter func(d time.Duration) time.Duration
	// since is how long ago a monotonic reading was (time.Since); tests
	// freeze it to check delays exactly.
	since func(time.Time) time.Duration
}

// New returns an Executor. A nil log discards log lines.
func New(rt Runtime, files Files, opts Options, log logrus.FieldLogger) *Executor {
	if opts.MaxParallel < 1 {
		opts.MaxParallel = 1
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = DefaultBackoffMin
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = opts.BackoffMin
	}
	if log == nil {
		discard := logrus.New()
		discard.SetOutput(io.Discard)
		log = discard
	}
	return &Executor{rt: rt, files: files, opts: opts, log: log, backoffs: make(map[string]*backoff), aborted: make(map[string]string),
		jitter: randomJitter, since: time.Since}
}

// randomJitter returns a random duration in [0, maxJitter·d].
func randomJitter(d time.Duration) time.Duration {
	return rand.N(time.Duration(float64(d)*maxJitter) + 1)
}

// Execute runs the actions and returns one Outcome per action, in input
// order. Actions run kind by kind in gc.Kinds order, each kind as one wave of
// concurrent calls (at most Options.MaxParallel in flight) that ends before
// the next begins; an action runs only if every key in its DependsOn
// succeeded in an earlier wave of this call, and one of a Rechecked kind
// only if recheck, called right before it, finds nothing changed. now is the
// pass's clock for backoff.
func (e *Executor) Execute(ctx context.Context, actions []gc.Action, now time.Time, recheck Recheck) []Outcome {
	out := make([]Outcome, len(actions))
	// done is the result of every key settled so far in this call.
	done := make(map[string]Result, len(actions))
	settle := func(i int, o Outcome) {
		out[i] = o
		// A key succeeds only if every action with that key did.
		if prev, seen := done[o.Action.Key]; !seen || prev == Success || prev == Would {
			done[o.Action.Key] = o.Result
		}
	}

	waves := make(map[gc.Kind][]int, len(gc.Kinds))
	for i, a := range actions {
		if !slices.Contains(gc.Kinds, a.Kind) {
			// A planner bug: no call can carry it out, and retrying will not help.
			err := fmt.Errorf("%s: unknown action kind %q", a.Key, a.Kind)
			e.entry(a).WithError(err).Warn("cannot execute action of unknown kind")
			settle(i, Outcome{Action: a, Result: Error, Err: err})
			continue
		}
		waves[a.Kind] = append(waves[a.Kind], i)
	}

	// Dead containers whose sandbox goes too are removed by its
	// RemovePodSandbox: they leave the RemoveContainer wave.
	carried := e.carriedBySandboxes(actions, now)
	if len(carried) > 0 {
		byOthers := make(map[int]bool)
		for _, cs := range carried {
			for _, c := range cs {
				byOthers[c] = true
			}
		}
		waves[gc.RemoveContainer] = slices.DeleteFunc(waves[gc.RemoveContainer], func(i int) bool { return byOthers[i] })
	}

	// One semaphore for the whole call: at most MaxParallel calls at once.
	sem := make(chan struct{}, e.opts.MaxParallel)
	w := wave{actions: actions, now: now, began: time.Now(), recheck: recheck, out: out, done: done, settle: settle, carried: carried}
	for _, kind := range gc.Kinds {
		e.runWave(ctx, sem, w, waves[kind])
	}
	return out
}

// carriedBySandboxes finds the whole-sandbox reclaims of a batch: a
// RemoveSandbox whose every dependency is the RemoveContainer of one of its
// own dead containers, due now. containerd's RemovePodSandbox (v2.4.2,
// internal/cri/server/sandbox_remove.go) stops the sandbox, then removes
// every container whose SandboxID is the sandbox's before removing it, so
// one StopPodSandbox + RemovePodSandbox does it all: one call per pod, not
// one per container more. It returns the RemoveContainer actions each such
// sandbox carries, by the sandbox action's index. Containers that must be
// stopped first (UNKNOWN), remove their log files first (RemovePodSandbox
// does not), depend on anything, or are backing off keep their own call,
// and so does a sandbox backing off. So does a container of another pod
// than the sandbox's (by its labels): the check right before the
// sandbox's removal is its pod's, not the container's. Dry runs carry
// nothing: every step is shown as it would run alone.
func (e *Executor) carriedBySandboxes(actions []gc.Action, now time.Time) map[int][]int {
	if e.opts.DryRun {
		return nil
	}
	backingOff := func(key string) bool { b := e.backoffs[key]; return b != nil && now.Before(b.retryAt) }
	byKey := make(map[string][]int, len(actions))
	for i, a := range actions {
		byKey[a.Key] = append(byKey[a.Key], i)
	}
	var carried map[int][]int
	taken := map[int]bool{}
	for si, s := range actions {
		if s.Kind != gc.RemoveSandbox || len(s.DependsOn) == 0 || backingOff(s.Key) || len(byKey[s.Key]) != 1 {
			continue
		}
		var containers []int
		named := map[string]bool{}
		for _, dep := range s.DependsOn {
			if named[dep] {
				continue // named twice: carried once
			}
			named[dep] = true
			idx := byKey[dep]
			if len(idx) != 1 {
				containers = nil
				break
			}
			c := actions[idx[0]]
			if c.Kind != gc.RemoveContainer || c.SandboxID != s.SandboxID || c.Pod.UID != s.Pod.UID || c.StopFirst || c.RemoveLogFiles ||
				len(c.DependsOn) > 0 || backingOff(c.Key) || taken[idx[0]] {
				containers = nil
				break
			}
			containers = append(containers, idx[0])
		}
		if containers == nil {
			continue
		}
		if carried == nil {
			carried = map[int][]int{}
		}
		carried[si] = containers
		for _, c := range containers {
			taken[c] = true
		}
	}
	return carried
}

// wave is what every wave of one Execute call shares.
type wave struct {
	actions []gc.Action
	now     time.Time
	// began is when Execute began (a monotonic reading): now plus the time
	// since is the pass's clock at a failure, for its backoff.
	began   time.Time
	recheck Recheck
	out     []Outcome
	done    map[string]Result
	settle  func(int, Outcome)
	carried map[int][]int // see carriedBySandboxes
}

// runWave runs the actions of one kind (indexes into actions) and settles
// each of them before returning.
func (e *Executor) runWave(ctx context.Context, sem chan struct{}, w wave, indexes []int) {
	actions, now, recheck, out, done, settle := w.actions, w.now, w.recheck, w.out, w.done, w.settle
	var wg sync.WaitGroup
	var started []int
	notStarted := 0
	// A sandbox's carried containers settle with it, whatever became of it.
	settleCarrying := func(i int, o Outcome) {
		settle(i, o)
		e.settleCarried(w, i, o)
	}
	for _, i := range indexes {
		a := actions[i]
		if err := ctx.Err(); err != nil {
			settleCarrying(i, Outcome{Action: a, Result: Skipped, Err: err})
			notStarted++
			continue
		}
		if e.opts.DryRun {
			// Nothing runs, so nothing fails: every dependency counts as
			// satisfied and the report shows the whole plan.
			e.entry(a).Info(verbsOf(a).would)
			settleCarrying(i, Outcome{Action: a, Result: Would})
			continue
		}
		if dep, res, ok := unsatisfied(a, done, w.carriedKeys(i)); !ok {
			var err error
			if res == "" {
				// Not in this run, or (a planner bug) not of an earlier kind.
				err = fmt.Errorf("%s: dependency %s has not run before it", a.Key, dep)
			} else {
				err = fmt.Errorf("%s: dependency %s did not succeed (%s)", a.Key, dep, res)
			}
			e.entry(a).WithField(fieldDepends, dep).Debugf("skipped: %s: dependency did not succeed", verbsOf(a).do)
			settleCarrying(i, Outcome{Action: a, Result: Skipped, Err: err})
			continue
		}
		if b := e.backoffs[a.Key]; b != nil && now.Before(b.retryAt) {
			e.entry(a).WithFields(logrus.Fields{fieldAttempts: b.failures, fieldRetryAt: b.retryAt.Format(time.RFC3339)}).
				Debugf("backing off: %s", verbsOf(a).do)
			err := fmt.Errorf("%s: backing off after %d failure(s): %w", a.Key, b.failures, b.lastErr)
			settleCarrying(i, Outcome{Action: a, Result: Backoff, Err: err, RetryAt: b.retryAt})
			continue
		}

		// Wait for a slot, unless the pass ends first.
		acquired := false
		select {
		case sem <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		if err := ctx.Err(); err != nil {
			// select picks at random when both are ready: give back a slot
			// taken after the context ended (only ours: the others belong to
			// running calls).
			if acquired {
				<-sem
			}
			settleCarrying(i, Outcome{Action: a, Result: Skipped, Err: err})
			notStarted++
			continue
		}
		started = append(started, i)
		wg.Go(func() {
			defer func() { <-sem }()
			start := time.Now()
			// Each goroutine writes only its own slot; settling (maps, logs)
			// happens below, after Wait.
			if recheck != nil && slices.Contains(Rechecked, a.Kind) {
				if err := recheck(ctx, a); err != nil {
					result := Aborted
					if ctx.Err() != nil {
						// The pass was stopped, not the step found changed.
						result, err = Skipped, fmt.Errorf("not started: %w", ctx.Err())
					}
					out[i] = Outcome{Action: a, Result: result, Err: err, Took: time.Since(start)}
					return
				}
			}
			if err := ctx.Err(); err != nil {
				// Stopped after the check (SIGTERM): the step was not
				// tried, and is no failure to back off from.
				out[i] = Outcome{Action: a, Result: Skipped, Err: fmt.Errorf("not started: %w", err), Took: time.Since(start)}
				return
			}
			detail, err := e.do(ctx, a)
			o := Outcome{Action: a, Err: err, Took: time.Since(start), detail: detail}
			if changedSinceDecided(err) {
				o.Result = Aborted // the step's own last look: nothing was done
			}
			if err != nil && len(w.carried[i]) > 0 {
				// containerd's RemovePodSandbox removes the containers one by
				// one before it fails late: ask which of them are gone. Also
				// when the pass was stopped (SIGTERM) during the call: what
				// containerd removed before is said now or never (the next
				// listing no longer has it); the runtime's own call timeout
				// bounds the question.
				o.carriedGone, o.carriedUnknown = e.carriedGone(context.WithoutCancel(ctx), w, i)
			}
			out[i] = o
		})
	}
	wg.Wait()

	// Settle in input order: logs and backoff updates stay deterministic and
	// need no lock.
	for _, i := range started {
		o := out[i]
		if o.Result == Skipped {
			e.entry(o.Action).WithError(o.Err).Debugf("not done: the pass was stopped before it: %s", verbsOf(o.Action).do)
			settleCarrying(i, o)
			continue
		}
		if o.Result == Aborted {
			// Not a failure: nothing was tried, and the next plan decides
			// again from a fresh listing.
			entry := e.entry(o.Action).WithError(o.Err)
			if e.aborted[o.Action.Key] == o.Err.Error() {
				entry.Debugf("not done: checked again right before it: %s", verbsOf(o.Action).do)
			} else {
				entry.Warnf("not done: checked again right before it: %s", verbsOf(o.Action).do)
				e.aborted[o.Action.Key] = o.Err.Error()
			}
			settleCarrying(i, o)
			continue
		}
		delete(e.aborted, o.Action.Key)
		if o.Err == nil {
			o.Result = Success
			delete(e.backoffs, o.Action.Key)
			e.entry(o.Action).WithFields(o.detail).WithField(fieldTook, o.Took).Info(doneVerb(o))
		} else {
			o.Result = Error
			// Counted from the end of the wave, not from the listing: a
			// call that ran into its timeout, or waited for a slot or for
			// earlier waves, must not be retried sooner than its backoff.
			b := e.fail(o.Action.Key, o.Err, now.Add(e.since(w.began)))
			o.RetryAt = b.retryAt
			e.entry(o.Action).WithError(o.Err).WithFields(o.detail).WithFields(logrus.Fields{
				fieldTook: o.Took, fieldAttempts: b.failures, fieldRetryAt: b.retryAt.Format(time.RFC3339),
			}).Warnf("failed to %s", verbsOf(o.Action).do)
		}
		settleCarrying(i, o)
	}
	if notStarted > 0 {
		e.log.WithError(ctx.Err()).Debugf("context ended: %d action(s) not started", notStarted)
	}
}

// changedSinceDecided reports whether err is a step's own last look, in
// the call that acts, finding what the plan saw no longer holds (a pod dir
// grown or a pod cgroup made again since, a CNI cache entry rewritten:
// nodefs', podcgroups' and podnet's RefusedError with Changed): nothing
// was done, and it is an abort, as when the check right before the step
// finds it, not a failure to back off from.
func changedSinceDecided(err error) bool {
	var c interface{ ChangedSinceDecided() bool }
	return errors.As(err, &c) && c.ChangedSinceDecided()
}

// unsatisfied returns the first dependency of a that has not succeeded in
// this run, with its result ("" when it is not in the run at all).
func unsatisfied(a gc.Action, done map[string]Result, carried map[string]bool) (dep string, res Result, ok bool) {
	for _, dep := range a.DependsOn {
		if carried[dep] {
			continue // carried out by a itself
		}
		if res := done[dep]; res != Success {
			return dep, res, false
		}
	}
	return "", "", true
}

// carriedKeys are the keys of the containers action i carries (nil: none).
func (w wave) carriedKeys(i int) map[string]bool {
	cs := w.carried[i]
	if len(cs) == 0 {
		return nil
	}
	keys := make(map[string]bool, len(cs))
	for _, c := range cs {
		keys[w.actions[c].Key] = true
	}
	return keys
}

// settleCarried settles the containers a sandbox action carried, after the
// sandbox: removed with it when it was removed; otherwise not started, for
// the next plan to decide again (a failure backs off the sandbox alone).
// Each keeps its own outcome, log line and metric.
func (e *Executor) settleCarried(w wave, i int, sandbox Outcome) {
	for _, c := range w.carried[i] {
		a := w.actions[c]
		o := Outcome{Action: a, Took: sandbox.Took}
		if sandbox.Result == Success || sandbox.carriedGone[a.ContainerID] {
			o.Result = Success
			delete(e.backoffs, a.Key)
			delete(e.aborted, a.Key)
			fields := logrus.Fields{fieldTook: sandbox.Took, fieldWithSandbox: a.SandboxID}
			if sandbox.Result != Success {
				// The runtime lists it no more, though its sandbox's removal
				// failed after removing it.
				fields[fieldSandboxRemoval] = "failed after it"
			}
			e.entry(a).WithFields(fields).Info(verbsOf(a).done + " with its sandbox")
		} else if sandbox.Result == Aborted {
			// The sandbox's check is its pod's, and so the container's
			// (it carries only its own pod's): what its own step would
			// have said, with the same warning, once.
			o.Result = Aborted
			o.Err = fmt.Errorf("to be removed with sandbox %s: %w", a.SandboxID, sandbox.Err)
			entry := e.entry(a).WithField(fieldWithSandbox, a.SandboxID).WithError(o.Err)
			if e.aborted[a.Key] == o.Err.Error() {
				entry.Debugf("not done: checked again right before it: %s", verbsOf(a).do)
			} else {
				entry.Warnf("not done: checked again right before it: %s", verbsOf(a).do)
				e.aborted[a.Key] = o.Err.Error()
			}
		} else if sandbox.carriedUnknown != nil {
			// containerd may have removed it before the sandbox's removal
			// failed: if it did, no later listing has it, and this is the
			// last word on it.
			o.Result = Skipped
			o.Err = fmt.Errorf("%s: to be removed with sandbox %s, whose removal failed (%v); whether containerd removed it first is unknown: %w",
				a.Key, a.SandboxID, sandbox.Err, sandbox.carriedUnknown)
			e.entry(a).WithField(fieldWithSandbox, a.SandboxID).WithError(o.Err).
				Warnf("not known whether done: %s: its sandbox's removal failed, and the pod's containers could not be listed after it; "+
					"if containerd removed it, the next listing no longer has it", verbsOf(a).do)
		} else {
			o.Result = Skipped
			o.Err = fmt.Errorf("%s: to be removed with sandbox %s, which was not (%s)", a.Key, a.SandboxID, sandbox.Result)
			e.entry(a).WithField(fieldWithSandbox, a.SandboxID).Debugf("skipped: %s: its sandbox was not removed", verbsOf(a).do)
		}
		w.settle(c, o)
	}
}

// carriedGone asks the runtime which containers sandbox action i carried
// it no longer lists (nil and why when it cannot tell).
func (e *Executor) carriedGone(ctx context.Context, w wave, i int) (map[string]bool, error) {
	listed, err := e.rt.ContainerLogPaths(ctx, w.actions[i].Pod.UID)
	if err != nil {
		return nil, fmt.Errorf("listing the containers of pod %s: %w", w.actions[i].Pod.UID, err)
	}
	gone := map[string]bool{}
	for _, c := range w.carried[i] {
		id := w.actions[c].ContainerID
		if _, ok := listed[id]; !ok {
			gone[id] = true
		}
	}
	return gone, nil
}

// fail records a failure of key and returns its backoff: the delay doubles
// from BackoffMin with every consecutive failure up to BackoffMax, plus
// jitter.
func (e *Executor) fail(key string, err error, now time.Time) *backoff {
	b := e.backoffs[key]
	if b == nil {
		b = &backoff{}
		e.backoffs[key] = b
	}
	b.failures++
	b.lastErr = err
	d := e.opts.BackoffMin
	// Stop doubling at the cap: no overflow however many failures.
	for n := 1; n < b.failures && d < e.opts.BackoffMax; n++ {
		d *= 2
	}
	d = min(d, e.opts.BackoffMax)
	b.retryAt = now.Add(d + e.jitter(d))
	return b
}

// Forget drops the backoff of every key not in proposed (pass
// gc.Result.EligibleSince): its object is gone or no longer proposed, and
// memory stays bounded by the current plan. A key proposed again later
// starts afresh.
func (e *Executor) Forget(proposed map[string]time.Time) {
	for key := range e.backoffs {
		if _, ok := proposed[key]; !ok {
			delete(e.backoffs, key)
		}
	}
	for key := range e.aborted {
		if _, ok := proposed[key]; !ok {
			delete(e.aborted, key)
		}
	}
}

// do carries out one action: the only place that calls Runtime and Files.
// detail is what the outcome's log line adds.
func (e *Executor) do(ctx context.Context, a gc.Action) (detail logrus.Fields, err error) {
	switch a.Kind {
	case gc.RemoveContainer:
		return e.removeContainer(ctx, a)
	case gc.RemovePodCgroup:
		return e.destroyPodCgroup(ctx, a)
	}
	return nil, e.doStep(ctx, a)
}

// destroyPodCgroup kills and removes a pod cgroup. With the systemd driver
// the step's line names the slice unit systemd was asked to stop, and one
// systemd could not stop is said apart: the cgroups are gone all the same,
// but systemd may still hold the unit (as kubelet's own fallback leaves
// it), and only a person can tell it to let go.
func (e *Executor) destroyPodCgroup(ctx context.Context, a gc.Action) (logrus.Fields, error) {
	if a.Cgroup == nil {
		return nil, fmt.Errorf("%s: no pod cgroup in the action", a.Key)
	}
	d, err := e.files.DestroyPodCgroup(ctx, *a.Cgroup)
	detail := logrus.Fields{}
	if d.Unit != "" {
		detail[fieldSystemdUnit] = d.Unit
	}
	if err != nil {
		return detail, fmt.Errorf("%s pod cgroup %s: %w", verbsOf(a).do, a.Path, err)
	}
	if d.UnitErr != nil {
		detail[fieldSystemdUnitLeft] = d.UnitErr.Error()
		// Said apart from the step's outcome (no action field), as a left
		// log file is: a person should look at the unit.
		e.log.WithFields(logrus.Fields{logging.FieldPodUID: a.Pod.UID, fieldPath: a.Path, fieldSystemdUnit: d.Unit}).WithError(d.UnitErr).
			Warnf("removed a pod cgroup systemd could not stop: systemd may still hold %s; 'systemctl stop %s' lets it go", d.Unit, d.Unit)
	}
	return detail, nil
}

// removeContainer is kubelet's removeContainer: an UNKNOWN container is
// stopped first (kubelet's container GC kills it; a failed stop leaves it
// for the next pass), a live pod's container's log files go next, and the
// container stays when they cannot be removed now (the runtime or the file
// system failed: retried). A file refused by the stricter rules of
// nodefs.RemoveContainerLogFiles is left, with a warning, and the
// container still goes: leaving a file is the safe direction, and holding
// the container for it would stop the keep-newest rules on a node whose
// logs.pod_logs_dir is not where the runtime's log paths are.
func (e *Executor) removeContainer(ctx context.Context, a gc.Action) (logrus.Fields, error) {
	if a.StopFirst {
		if err := e.rt.StopContainer(ctx, a.ContainerID, a.Timeout); err != nil {
			return nil, fmt.Errorf("stop container %s before removing it: %w", a.ContainerID, err)
		}
	}
	var detail logrus.Fields
	if a.RemoveLogFiles {
		var err error
		detail, err = e.removeContainerLogFiles(ctx, a)
		var refused *nodefs.RefusedError
		switch {
		case errors.As(err, &refused):
			if detail == nil {
				detail = logrus.Fields{}
			}
			detail[fieldLogFilesLeft] = err.Error()
			// Said apart from the step's outcome (no action field): a
			// person should look at the file.
			e.log.WithFields(logrus.Fields{logging.FieldPodUID: a.Pod.UID, logging.FieldContainerID: a.ContainerID, fieldPath: refused.Path}).
				WithError(err).Warn("left a log file of a container the plugin removes: it is not one it may remove; look at it")
		case err != nil:
			return detail, fmt.Errorf("remove the log files of container %s (it is removed after them): %w", a.ContainerID, err)
		}
	}
	if err := e.rt.RemoveContainer(ctx, a.ContainerID); err != nil {
		return detail, fmt.Errorf("remove container %s: %w", a.ContainerID, err)
	}
	return detail, nil
}

// doStep carries out one action of any other kind.
func (e *Executor) doStep(ctx context.Context, a gc.Action) error {
	switch a.Kind {
	case gc.StopContainer:
		if err := e.rt.StopContainer(ctx, a.ContainerID, a.Timeout); err != nil {
			return fmt.Errorf("stop container %s: %w", a.ContainerID, err)
		}
	case gc.StopSandbox:
		if err := e.rt.StopPodSandbox(ctx, a.SandboxID); err != nil {
			return fmt.Errorf("stop sandbox %s: %w", a.SandboxID, err)
		}
	case gc.RemoveSandbox:
		// kubelet's removeSandbox: stop first (network teardown, etc.); a
		// sandbox that could not be stopped is not removed this time. A
		// runtime whose RemovePodSandbox stops first itself, and removes
		// nothing when that fails, does both in one call.
		if rs, ok := e.rt.(RemoveStopper); !ok || !rs.RemoveStopsSandbox(ctx) {
			if err := e.rt.StopPodSandbox(ctx, a.SandboxID); err != nil {
				return fmt.Errorf("stop sandbox %s before removing it: %w", a.SandboxID, err)
			}
		}
		if err := e.rt.RemovePodSandbox(ctx, a.SandboxID); err != nil {
			return fmt.Errorf("remove sandbox %s: %w", a.SandboxID, err)
		}
	case gc.RemovePodLogDir:
		if err := e.files.RemovePodLogDir(ctx, a.Path); err != nil {
			return fmt.Errorf("remove pod log dir %s: %w", a.Path, err)
		}
	case gc.RemoveContainerLogLink:
		if err := e.files.RemoveContainerLogLink(ctx, a.Path); err != nil {
			return fmt.Errorf("remove container log link %s: %w", a.Path, err)
		}
	case gc.RemovePodDir:
		if a.PodDir == nil {
			return fmt.Errorf("%s: no pod dir in the action", a.Key)
		}
		if a.PodDir.UID != a.Pod.UID {
			return fmt.Errorf("%s: the action's pod dir is pod %s's, not pod %s's", a.Key, a.PodDir.UID, a.Pod.UID)
		}
		if err := e.files.RemoveOrphanedPodDir(ctx, *a.PodDir); err != nil {
			return fmt.Errorf("remove orphaned pod dir %s: %w", a.Path, err)
		}
	case gc.ReducePodCgroupCPU:
		if a.Cgroup == nil {
			return fmt.Errorf("%s: no pod cgroup in the action", a.Key)
		}
		if err := e.files.ReducePodCgroupCPU(ctx, *a.Cgroup); err != nil {
			return fmt.Errorf("%s pod cgroup %s: %w", verbsOf(a).do, a.Path, err)
		}
	case gc.RemoveCNIAttachment:
		if a.Attachment == nil {
			return fmt.Errorf("%s: no CNI attachment in the action", a.Key)
		}
		if err := e.files.DeleteCNIAttachment(ctx, *a.Attachment); err != nil {
			return fmt.Errorf("CNI DEL of %s on network %s: %w", a.Attachment.ContainerID, a.Attachment.Network, err)
		}
	case gc.ReleaseIPReservation:
		if a.Reservation == nil {
			return fmt.Errorf("%s: no IP reservation in the action", a.Key)
		}
		if err := e.files.ReleaseIPReservation(ctx, *a.Reservation); err != nil {
			return fmt.Errorf("release %s on network %s: %w", a.Reservation.IP, a.Reservation.Network, err)
		}
	case gc.RemoveNetns:
		if a.Netns == nil {
			return fmt.Errorf("%s: no network namespace in the action", a.Key)
		}
		if err := e.files.RemoveNetns(ctx, *a.Netns); err != nil {
			return fmt.Errorf("remove network namespace %s: %w", a.Path, err)
		}
	default:
		return fmt.Errorf("%s: unknown action kind %q", a.Key, a.Kind)
	}
	return nil
}

// removeContainerLogFiles removes the log file of a's container and its
// rotations, as kubelet's removeContainerLog does, with the log path the
// runtime reports for it now, and returns the fields that say so on the
// step's log line. A file another container of the pod logs to now (its
// log path, read in the same breath) is kept: a restart count kubelet had
// to start again from a lost runtime state can give a new container an old
// one's file. A container the runtime no longer lists, or that has no log
// path, has no file to remove here.
func (e *Executor) removeContainerLogFiles(ctx context.Context, a gc.Action) (logrus.Fields, error) {
	paths, err := e.rt.ContainerLogPaths(ctx, a.Pod.UID)
	if err != nil {
		return nil, fmt.Errorf("reading the log paths of pod %s's containers: %w", a.Pod.UID, err)
	}
	own, listed := paths[a.ContainerID]
	switch {
	case !listed:
		return logrus.Fields{fieldLogFilesLeft: "the runtime no longer lists the container"}, nil
	case own == "":
		return logrus.Fields{fieldLogFilesLeft: "the runtime reports no log path for the container"}, nil
	}
	var keep []string
	for id, p := range paths {
		if id == a.ContainerID || p == "" {
			continue
		}
		if filepath.Clean(p) == filepath.Clean(own) {
			return logrus.Fields{fieldLogFilesLeft: fmt.Sprintf("container %s of the pod logs to %s too", id, own)}, nil
		}
		keep = append(keep, p)
	}
	removed, err := e.files.RemoveContainerLogFiles(ctx, nodefs.ContainerLog{Path: own, PodUID: a.Pod.UID, ContainerName: a.ContainerName}, keep)
	if len(removed) == 0 {
		return nil, err
	}
	return logrus.Fields{fieldLogFiles: removed}, err
}

// doneVerb is what an action that succeeded did: a container removed
// without its log files does not say it removed them.
func doneVerb(o Outcome) string {
	a := o.Action
	if _, left := o.detail[fieldLogFilesLeft]; left && o.detail[fieldLogFiles] == nil {
		a.RemoveLogFiles = false
	}
	return verbsOf(a).done
}

// verbs are the words of one kind's log messages.
type verbs struct {
	done  string // "removed container"
	would string // "would remove container"
	do    string // "remove container" (in "failed to …", "backing off: …")
}

// verbsOf returns the words for an action: a RemoveContainer that stops
// first, or removes the container's log files, says so.
func verbsOf(a gc.Action) verbs {
	v := kindVerbs(a.Kind)
	if a.Kind == gc.RemoveContainer && a.StopFirst {
		v = verbs{"stopped and removed container", "would stop and remove container", "stop and remove container"}
	}
	if a.Kind == gc.RemoveContainer && a.RemoveLogFiles {
		v.done, v.would, v.do = v.done+" and its log files", v.would+" and its log files", v.do+" and its log files"
	}
	return v
}

func kindVerbs(kind gc.Kind) verbs {
	switch kind {
	case gc.StopContainer:
		return verbs{"stopped container", "would stop container", "stop container"}
	case gc.RemoveContainer:
		return verbs{"removed container", "would remove container", "remove container"}
	case gc.StopSandbox:
		return verbs{"stopped sandbox", "would stop sandbox", "stop sandbox"}
	case gc.RemoveSandbox:
		return verbs{"stopped and removed sandbox", "would stop and remove sandbox", "stop and remove sandbox"}
	case gc.RemovePodLogDir:
		return verbs{"removed pod log dir", "would remove pod log dir", "remove pod log dir"}
	case gc.RemoveContainerLogLink:
		return verbs{"removed container log link", "would remove container log link", "remove container log link"}
	case gc.RemovePodDir:
		return verbs{"removed orphaned pod dir", "would remove orphaned pod dir", "remove orphaned pod dir"}
	case gc.RemovePodCgroup:
		return verbs{"killed the processes of and removed pod cgroup", "would kill the processes of and remove pod cgroup", "destroy"}
	case gc.ReducePodCgroupCPU:
		return verbs{"reduced the CPU of pod cgroup", "would reduce the CPU of pod cgroup", "reduce the CPU of"}
	case gc.RemoveCNIAttachment:
		return verbs{"deleted CNI attachment", "would delete CNI attachment", "delete CNI attachment"}
	case gc.ReleaseIPReservation:
		return verbs{"released IP reservation", "would release IP reservation", "release IP reservation"}
	case gc.RemoveNetns:
		return verbs{"removed network namespace", "would remove network namespace", "remove network namespace"}
	}
	return verbs{"executed " + string(kind), "would execute " + string(kind), "execute " + string(kind)}
}

// entry returns a log entry with the action's fields: the pod and object
// fields that apply, the kind, rule and reason (DESIGN.md §4 rule 7).
func (e *Executor) entry(a gc.Action) *logrus.Entry {
	f := logrus.Fields{
		logging.FieldAction: string(a.Kind),
		logging.FieldRule:   a.Rule,
		logging.FieldReason: a.Reason,
	}
	for name, value := range map[string]string{
		logging.FieldPodUID:       a.Pod.UID,
		logging.FieldPodNamespace: a.Pod.Namespace,
		logging.FieldPodName:      a.Pod.Name,
		logging.FieldSandboxID:    a.SandboxID,
		logging.FieldContainerID:  a.ContainerID,
		fieldPath:                 a.Path,
	} {
		if value != "" {
			f[name] = value
		}
	}
	return e.log.WithFields(f)
}

// DryRun reports whether the executor only shows what it would do.
func (e *Executor) DryRun() bool { return e.opts.DryRun }
