package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// call is one call the fake received, with when it started and ended on the
// fake's own sequence clock.
type call struct {
	method, id string
	start, end int64
}

// fake implements Runtime and Files: it records calls, fails those listed in
// fail ("Method id"), sleeps delay in each call and tracks how many calls
// are in flight at once.
type fake struct {
	delay  time.Duration
	onCall func(method, id string) // runs at the start of every call

	mu    sync.Mutex
	fail  map[string]error
	calls []call
	// logPaths is what ContainerLogPaths answers (nil: an empty pod);
	// keptLogs records the keep argument of RemoveContainerLogFiles.
	logPaths map[string]string
	keptLogs [][]string
	// destroyed is what DestroyPodCgroup says systemd did, by pod UID.
	destroyed map[string]podcgroups.Destroyed
	// netArgs are the objects the network calls were given, in order.
	netArgs []any

	seq         atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

var errFake = errors.New("fake failure")

func newFake(fail ...string) *fake {
	f := &fake{fail: make(map[string]error)}
	for _, k := range fail {
		f.fail[k] = errFake
	}
	return f
}

func (f *fake) setFail(key string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, key)
		return
	}
	f.fail[key] = err
}

func (f *fake) do(method, id string) error {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxInFlight.Load()
		if n <= m || f.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	start := f.seq.Add(1)
	if f.onCall != nil {
		f.onCall(method, id)
	}
	time.Sleep(f.delay)
	end := f.seq.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{method: method, id: id, start: start, end: end})
	return f.fail[method+" "+id]
}

func (f *fake) StopContainer(_ context.Context, id string, _ time.Duration) error {
	return f.do("StopContainer", id)
}
func (f *fake) RemoveContainer(_ context.Context, id string) error {
	return f.do("RemoveContainer", id)
}
func (f *fake) StopPodSandbox(_ context.Context, id string) error { return f.do("StopPodSandbox", id) }
func (f *fake) RemovePodSandbox(_ context.Context, id string) error {
	return f.do("RemovePodSandbox", id)
}
func (f *fake) RemovePodLogDir(_ context.Context, path string) error {
	return f.do("RemovePodLogDir", path)
}
func (f *fake) RemoveContainerLogLink(_ context.Context, path string) error {
	return f.do("RemoveContainerLogLink", path)
}

func (f *fake) ContainerLogPaths(_ context.Context, uid string) (map[string]string, error) {
	err := f.do("ContainerLogPaths", uid)
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.logPaths), err
}

func (f *fake) RemoveContainerLogFiles(_ context.Context, l nodefs.ContainerLog, keep []string) ([]string, error) {
	err := f.do("RemoveContainerLogFiles", l.Path)
	f.mu.Lock()
	defer f.mu.Unlock()
	k := slices.Clone(keep)
	slices.Sort(k)
	f.keptLogs = append(f.keptLogs, k)
	if err != nil {
		return nil, err
	}
	return []string{l.Path}, nil
}

func (f *fake) RemoveOrphanedPodDir(_ context.Context, seen nodefs.PodDir) error {
	return f.do("RemoveOrphanedPodDir", seen.UID)
}

func (f *fake) DestroyPodCgroup(_ context.Context, pod podcgroups.PodCgroup) (podcgroups.Destroyed, error) {
	err := f.do("DestroyPodCgroup", pod.UID)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.destroyed[pod.UID], err
}

func (f *fake) ReducePodCgroupCPU(_ context.Context, pod podcgroups.PodCgroup) error {
	return f.do("ReducePodCgroupCPU", pod.UID)
}

func (f *fake) DeleteCNIAttachment(_ context.Context, a podnet.Attachment) error {
	f.noteNetArg(a)
	return f.do("DeleteCNIAttachment", a.ContainerID)
}

func (f *fake) ReleaseIPReservation(_ context.Context, r podnet.Reservation) error {
	f.noteNetArg(r)
	return f.do("ReleaseIPReservation", r.IP)
}

func (f *fake) RemoveNetns(_ context.Context, n podnet.Netns) error {
	f.noteNetArg(n)
	return f.do("RemoveNetns", n.Path)
}

func (f *fake) noteNetArg(arg any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.netArgs = append(f.netArgs, arg)
}

// called returns the calls as "Method id", in the order they ended.
func (f *fake) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s []string
	for _, c := range f.calls {
		s = append(s, c.method+" "+c.id)
	}
	return s
}

// has reports whether call ("Method id") was made.
func (f *fake) has(call string) bool {
	for _, c := range f.called() {
		if c == call {
			return true
		}
	}
	return false
}

// Action builders, keyed as the planner keys them.

var testPod = gc.PodRef{UID: "uid-1", Namespace: "ns", Name: "web"}

func stopCtr(id string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.StopContainer, Rule: gc.RuleOrphanStop, Reason: "why", Pod: testPod,
		Key: "stop-container/" + id, SandboxID: "sb", ContainerID: id, Timeout: time.Second, DependsOn: deps}
}

func rmCtr(id string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.RemoveContainer, Rule: gc.RuleContainerPodGone, Reason: "why", Pod: testPod,
		Key: "container/" + id, SandboxID: "sb", ContainerID: id, DependsOn: deps}
}

func stopSb(id string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.StopSandbox, Rule: gc.RuleOrphanStop, Reason: "why", Pod: testPod,
		Key: "stop-sandbox/" + id, SandboxID: id, DependsOn: deps}
}

func rmSb(id string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.RemoveSandbox, Rule: gc.RuleSandboxPodGone, Reason: "why", Pod: testPod,
		Key: "sandbox/" + id, SandboxID: id, DependsOn: deps}
}

func rmLogDir(path string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.RemovePodLogDir, Rule: gc.RulePodLogDir, Reason: "why", Pod: testPod,
		Key: "pod-log-dir/" + path, Path: path, DependsOn: deps}
}

func rmLink(path string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.RemoveContainerLogLink, Rule: gc.RuleDanglingLogLink, Reason: "why",
		Pod: gc.PodRef{Namespace: "ns", Name: "web"}, Key: "log-link/" + path, Path: path, DependsOn: deps}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// noJitter makes backoff delays exact.
func noJitter(time.Duration) time.Duration { return 0 }

// frozen makes the pass's clock stand still while it executes: backoff
// delays count exactly from now.
func frozen(time.Time) time.Duration { return 0 }

func newTest(f *fake, opts Options) *Executor {
	e := New(f, f, opts, nil)
	e.jitter, e.since = noJitter, frozen
	return e
}

// results maps each outcome's key to its result.
func results(out []Outcome) map[string]Result {
	m := make(map[string]Result, len(out))
	for _, o := range out {
		m[o.Action.Key] = o.Result
	}
	return m
}

func TestWavesRunKindByKindInGCKindsOrder(t *testing.T) {
	// Given in reverse order: execution still follows gc.Kinds, and outcomes
	// keep the input order.
	actions := []gc.Action{
		rmLink("/l/b"), rmLink("/l/a"),
		rmLogDir("/p/b"), rmLogDir("/p/a"),
		rmSb("sb-b"), rmSb("sb-a"),
		rmCtr("c-b"), rmCtr("c-a"),
		stopSb("sb-y"), stopSb("sb-x"),
		stopCtr("c-y"), stopCtr("c-x"),
	}
	f := newFake()
	f.delay = 2 * time.Millisecond
	out := newTest(f, Options{MaxParallel: 3}).Execute(context.Background(), actions, t0, nil)

	if len(out) != len(actions) {
		t.Fatalf("got %d outcomes, want %d", len(out), len(actions))
	}
	for i, o := range out {
		if o.Action.Key != actions[i].Key || o.Result != Success || o.Err != nil {
			t.Errorf("outcome %d: got %s %s %v, want %s success", i, o.Action.Key, o.Result, o.Err, actions[i].Key)
		}
	}

	// Every call of a kind ends before any call of a later kind starts.
	kindOf := map[string]gc.Kind{} // sandbox ID or path -> kind; container calls name their kind
	for _, a := range actions {
		if a.ContainerID == "" {
			kindOf[a.SandboxID+a.Path] = a.Kind
		}
	}
	order := map[gc.Kind]int{}
	for i, k := range gc.Kinds {
		order[k] = i
	}
	f.mu.Lock()
	calls := append([]call(nil), f.calls...)
	f.mu.Unlock()
	if len(calls) != 14 { // RemoveSandbox makes two calls
		t.Fatalf("got %d calls, want 14: %v", len(calls), f.called())
	}
	for _, a := range calls {
		for _, b := range calls {
			ka, kb := kindOfCall(a, kindOf), kindOfCall(b, kindOf)
			if order[ka] < order[kb] && a.end > b.start {
				t.Errorf("%s %s (%s) overlaps or follows %s %s (%s)", a.method, a.id, ka, b.method, b.id, kb)
			}
		}
	}
}

// kindOfCall maps a call back to the kind of the action that made it.
func kindOfCall(c call, kindOf map[string]gc.Kind) gc.Kind {
	switch c.method {
	case "StopContainer":
		return gc.StopContainer
	case "RemoveContainer":
		return gc.RemoveContainer
	}
	return kindOf[c.id]
}

func TestDependencyNotSucceededSkipsDependent(t *testing.T) {
	tests := []struct {
		name    string
		actions []gc.Action
		fail    []string
		backoff []string // keys failed in an earlier pass, still backing off
		want    map[string]Result
		errHas  map[string]string // key -> substring of Outcome.Err
		calls   []string          // calls that must not happen
	}{
		{
			name:    "dependency succeeded: dependent runs",
			actions: []gc.Action{rmCtr("c1"), rmSb("sb1", "container/c1")},
			want:    map[string]Result{"container/c1": Success, "sandbox/sb1": Success},
		},
		{
			name:    "dependency failed: dependent skipped",
			actions: []gc.Action{rmCtr("c1"), rmSb("sb1", "container/c1")},
			fail:    []string{"RemoveContainer c1"},
			want:    map[string]Result{"container/c1": Error, "sandbox/sb1": Skipped},
			errHas:  map[string]string{"sandbox/sb1": "dependency container/c1 did not succeed (error)"},
			calls:   []string{"StopPodSandbox sb1"},
		},
		{
			name:    "dependency backing off: dependent skipped",
			actions: []gc.Action{rmCtr("c1"), rmSb("sb1", "container/c1")},
			backoff: []string{"container/c1"},
			want:    map[string]Result{"container/c1": Backoff, "sandbox/sb1": Skipped},
			errHas:  map[string]string{"sandbox/sb1": "dependency container/c1 did not succeed (backoff)"},
			calls:   []string{"RemoveContainer c1", "StopPodSandbox sb1"},
		},
		{
			name:    "dependency skipped: chain skipped",
			actions: []gc.Action{rmCtr("c1"), rmSb("sb1", "container/c1"), rmLogDir("/p/1", "sandbox/sb1")},
			fail:    []string{"RemoveContainer c1"},
			want:    map[string]Result{"container/c1": Error, "sandbox/sb1": Skipped, "pod-log-dir//p/1": Skipped},
			errHas:  map[string]string{"pod-log-dir//p/1": "dependency sandbox/sb1 did not succeed (skipped)"},
			calls:   []string{"RemovePodLogDir /p/1"},
		},
		{
			name:    "dependency not in this run: dependent skipped",
			actions: []gc.Action{rmSb("sb1", "container/c1")},
			want:    map[string]Result{"sandbox/sb1": Skipped},
			errHas:  map[string]string{"sandbox/sb1": "dependency container/c1 has not run before it"},
			calls:   []string{"StopPodSandbox sb1"},
		},
		{
			name:    "dependency of the same kind: skipped, not raced",
			actions: []gc.Action{rmCtr("c1"), rmCtr("c2", "container/c1")},
			want:    map[string]Result{"container/c1": Success, "container/c2": Skipped},
			calls:   []string{"RemoveContainer c2"},
		},
		{
			name:    "one of several dependencies failed: dependent skipped",
			actions: []gc.Action{rmCtr("c1"), rmCtr("c2"), rmSb("sb1", "container/c1", "container/c2")},
			fail:    []string{"RemoveContainer c2"},
			want:    map[string]Result{"container/c1": Success, "container/c2": Error, "sandbox/sb1": Skipped},
			errHas:  map[string]string{"sandbox/sb1": "container/c2"},
		},
		{
			name:    "unrelated action still runs",
			actions: []gc.Action{rmCtr("c1"), rmCtr("c2"), rmSb("sb1", "container/c1"), rmSb("sb2", "container/c2")},
			fail:    []string{"RemoveContainer c1"},
			want:    map[string]Result{"container/c1": Error, "container/c2": Success, "sandbox/sb1": Skipped, "sandbox/sb2": Success},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(tt.fail...)
			e := newTest(f, Options{MaxParallel: 2, BackoffMin: time.Minute})
			for _, key := range tt.backoff {
				e.fail(key, errFake, t0)
			}
			out := e.Execute(context.Background(), tt.actions, t0, nil)
			got := results(out)
			for key, want := range tt.want {
				if got[key] != want {
					t.Errorf("%s: got %q, want %q", key, got[key], want)
				}
			}
			for _, o := range out {
				if sub, ok := tt.errHas[o.Action.Key]; ok && (o.Err == nil || !strings.Contains(o.Err.Error(), sub)) {
					t.Errorf("%s: error %v does not contain %q", o.Action.Key, o.Err, sub)
				}
				if o.Result == Skipped && o.Err == nil {
					t.Errorf("%s: skipped without an error naming why", o.Action.Key)
				}
			}
			for _, c := range tt.calls {
				if f.has(c) {
					t.Errorf("%s was called", c)
				}
			}
		})
	}
}

func TestRemoveSandboxStopFailureNeverRemovesNorBlocks(t *testing.T) {
	f := newFake("StopPodSandbox sb-a")
	e := newTest(f, Options{MaxParallel: 4, BackoffMin: 10 * time.Second})
	actions := []gc.Action{
		rmSb("sb-a"), rmSb("sb-b"),
		rmLogDir("/p/a", "sandbox/sb-a"), rmLogDir("/p/b", "sandbox/sb-b"),
		rmLink("/l/x"),
	}
	out := e.Execute(context.Background(), actions, t0, nil)
	got := results(out)
	want := map[string]Result{
		"sandbox/sb-a": Error, "sandbox/sb-b": Success,
		"pod-log-dir//p/a": Skipped, "pod-log-dir//p/b": Success, "log-link//l/x": Success,
	}
	for key, w := range want {
		if got[key] != w {
			t.Errorf("%s: got %q, want %q", key, got[key], w)
		}
	}
	if f.has("RemovePodSandbox sb-a") {
		t.Errorf("RemovePodSandbox sb-a was called after its StopPodSandbox failed")
	}
	if !f.has("StopPodSandbox sb-b") || !f.has("RemovePodSandbox sb-b") {
		t.Errorf("sb-b not stopped and removed: %v", f.called())
	}
	a := out[0]
	if !errors.Is(a.Err, errFake) || !strings.Contains(a.Err.Error(), "sb-a") {
		t.Errorf("sb-a error %v: want it to wrap the failure and name the sandbox", a.Err)
	}
	if want := t0.Add(10 * time.Second); !a.RetryAt.Equal(want) {
		t.Errorf("sb-a RetryAt %v, want %v", a.RetryAt, want)
	}

	// Before RetryAt: no call at all. At RetryAt, once Stop works: stopped
	// and removed.
	before := len(f.called())
	out = e.Execute(context.Background(), actions[:1], t0.Add(9*time.Second), nil)
	if out[0].Result != Backoff || len(f.called()) != before {
		t.Errorf("before RetryAt: got %q and calls %v, want backoff and no call", out[0].Result, f.called()[before:])
	}
	f.setFail("StopPodSandbox sb-a", nil)
	out = e.Execute(context.Background(), actions[:1], t0.Add(10*time.Second), nil)
	if out[0].Result != Success || !f.has("RemovePodSandbox sb-a") {
		t.Errorf("at RetryAt: got %q %v, want stopped and removed", out[0].Result, out[0].Err)
	}
}

func TestRemoveSandboxRemoveFailureIsAnError(t *testing.T) {
	f := newFake("RemovePodSandbox sb-a")
	out := newTest(f, Options{}).Execute(context.Background(), []gc.Action{rmSb("sb-a")}, t0, nil)
	if out[0].Result != Error || !errors.Is(out[0].Err, errFake) || !strings.Contains(out[0].Err.Error(), "remove sandbox sb-a") {
		t.Errorf("got %q %v, want an error naming the sandbox", out[0].Result, out[0].Err)
	}
	if got := f.called(); len(got) != 2 || got[0] != "StopPodSandbox sb-a" {
		t.Errorf("calls %v, want stop then remove", got)
	}
}

// removeStopping is a fake runtime whose RemovePodSandbox stops the
// sandbox itself (containerd 2.x).
type removeStopping struct{ *fake }

func (removeStopping) RemoveStopsSandbox(context.Context) bool { return true }

// removeNotStopping is a fake runtime that says its RemovePodSandbox does
// not stop the sandbox itself (an older containerd).
type removeNotStopping struct{ *fake }

func (removeNotStopping) RemoveStopsSandbox(context.Context) bool { return false }

// A runtime that says its RemovePodSandbox does not stop the sandbox gets
// kubelet's order: StopPodSandbox first, and no removal when it fails.
func TestRemoveSandboxStopsFirstWhenTheRuntimeSaysItsRemoveDoesNot(t *testing.T) {
	f := newFake("StopPodSandbox sb-a")
	e := New(removeNotStopping{f}, f, Options{MaxParallel: 1}, nil)
	out := e.Execute(context.Background(), []gc.Action{rmSb("sb-a"), rmSb("sb-b")}, t0, nil)
	if got := results(out); got["sandbox/sb-a"] != Error || got["sandbox/sb-b"] != Success {
		t.Errorf("results %v, want sb-a error (its stop failed), sb-b success", got)
	}
	if f.has("RemovePodSandbox sb-a") {
		t.Errorf("calls %v: sb-a removed though its stop failed", f.called())
	}
	if !f.has("StopPodSandbox sb-b") || !f.has("RemovePodSandbox sb-b") {
		t.Errorf("calls %v, want sb-b stopped, then removed", f.called())
	}
}

// A runtime whose RemovePodSandbox stops the sandbox itself (and removes
// nothing when that fails) gets one call per sandbox, not a StopPodSandbox
// first; a failure is still an error naming the sandbox.
func TestRemoveSandboxIsOneCallWhenTheRuntimeStopsItOnRemove(t *testing.T) {
	f := newFake("RemovePodSandbox sb-a")
	e := New(removeStopping{f}, f, Options{MaxParallel: 2}, nil)
	out := e.Execute(context.Background(), []gc.Action{rmSb("sb-a"), rmSb("sb-b")}, t0, nil)
	if got := results(out); got["sandbox/sb-a"] != Error || got["sandbox/sb-b"] != Success {
		t.Errorf("results %v, want sb-a error (its remove failed), sb-b success", got)
	}
	if !errors.Is(out[0].Err, errFake) || !strings.Contains(out[0].Err.Error(), "remove sandbox sb-a") {
		t.Errorf("sb-a error %v: want the remove failure, naming the sandbox", out[0].Err)
	}
	for _, c := range f.called() {
		if strings.HasPrefix(c, "StopPodSandbox") {
			t.Errorf("%s called: RemovePodSandbox stops the sandbox itself", c)
		}
	}
	if !f.has("RemovePodSandbox sb-a") || !f.has("RemovePodSandbox sb-b") {
		t.Errorf("calls %v, want one RemovePodSandbox per sandbox", f.called())
	}
}

// The planner keys every action apart; should two share a key (a planner
// bug), the key counts as done only if every action with it succeeded, and
// no sandbox removal takes one of them as its own container to carry: what
// rests on the key is not done while one of them failed.
func TestAKeySucceedsOnlyIfEveryActionWithItDid(t *testing.T) {
	twin := rmCtr("c1-twin")
	twin.Key = "container/c1"
	for _, tc := range []struct {
		rule    string
		actions []gc.Action
		fail    string
		notDone string // the call that rests on the failed key
	}{
		{"a later success does not hide an earlier failure", []gc.Action{rmCtr("c1"), twin, rmLink("/l/c1", "container/c1")},
			"RemoveContainer c1", "RemoveContainerLogLink /l/c1"},
		{"a sandbox does not carry a container whose key another action has", []gc.Action{rmCtr("c1"), twin, rmSb("sb", "container/c1")},
			"RemoveContainer c1-twin", "RemovePodSandbox sb"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			f := newFake(tc.fail)
			// One call at a time: the actions settle in their order.
			newTest(f, Options{MaxParallel: 1}).Execute(context.Background(), tc.actions, t0, nil)
			if f.has(tc.notDone) {
				t.Errorf("calls %v: %s done though %s failed", f.called(), tc.notDone, tc.fail)
			}
		})
	}
}

func TestMaxParallelHonoured(t *testing.T) {
	tests := []struct {
		name        string
		maxParallel int
		actions     []gc.Action
		want        int64
	}{
		{"20 removals, 4 in flight", 4, many(20, func(i int) gc.Action { return rmCtr(fmt.Sprint("c", i)) }), 4},
		{"sandbox removal holds one slot for both calls", 3, many(12, func(i int) gc.Action { return rmSb(fmt.Sprint("sb", i)) }), 3},
		{"one at a time", 1, many(6, func(i int) gc.Action { return rmLogDir(fmt.Sprint("/p/", i)) }), 1},
		{"below 1 counts as 1", 0, many(6, func(i int) gc.Action { return rmLink(fmt.Sprint("/l/", i)) }), 1},
		{"fewer actions than slots", 8, many(3, func(i int) gc.Action { return stopCtr(fmt.Sprint("c", i)) }), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.delay = 20 * time.Millisecond
			out := newTest(f, Options{MaxParallel: tt.maxParallel}).Execute(context.Background(), tt.actions, t0, nil)
			for _, o := range out {
				if o.Result != Success {
					t.Errorf("%s: %q %v", o.Action.Key, o.Result, o.Err)
				}
			}
			if got := f.maxInFlight.Load(); got != tt.want {
				t.Errorf("max calls in flight %d, want %d", got, tt.want)
			}
		})
	}
}

func many(n int, mk func(int) gc.Action) []gc.Action {
	var as []gc.Action
	for i := range n {
		as = append(as, mk(i))
	}
	return as
}

func TestBackoffDoublesUpToCap(t *testing.T) {
	f := newFake("RemoveContainer c1")
	e := newTest(f, Options{BackoffMin: time.Second, BackoffMax: 5 * time.Second})
	actions := []gc.Action{rmCtr("c1")}
	now := t0
	for i, want := range []time.Duration{1, 2, 4, 5, 5, 5} {
		want *= time.Second
		out := e.Execute(context.Background(), actions, now, nil)
		if out[0].Result != Error {
			t.Fatalf("failure %d: got %q, want error", i+1, out[0].Result)
		}
		if got := out[0].RetryAt.Sub(now); got != want {
			t.Errorf("failure %d: delay %v, want %v", i+1, got, want)
		}
		// Just before RetryAt: backing off, no call.
		calls := len(f.called())
		out = e.Execute(context.Background(), actions, out[0].RetryAt.Add(-time.Nanosecond), nil)
		if out[0].Result != Backoff || len(f.called()) != calls {
			t.Errorf("failure %d: before RetryAt got %q with %d new calls, want backoff and none", i+1, out[0].Result, len(f.called())-calls)
		}
		if !errors.Is(out[0].Err, errFake) {
			t.Errorf("failure %d: backoff error %v does not carry the last failure", i+1, out[0].Err)
		}
		now = out[0].RetryAt
	}
}

func TestBackoffManyFailuresDoNotOverflow(t *testing.T) {
	e := newTest(newFake(), Options{})
	var b *backoff
	for range 200 {
		b = e.fail("k", errFake, t0)
	}
	if got := b.retryAt.Sub(t0); got != DefaultBackoffMax {
		t.Errorf("delay after 200 failures %v, want %v", got, DefaultBackoffMax)
	}
}

func TestBackoffJitterWithinTwentyPercent(t *testing.T) {
	const n = 200
	f := newFake()
	actions := many(n, func(i int) gc.Action { return rmCtr(fmt.Sprint("c", i)) })
	for _, a := range actions {
		f.setFail("RemoveContainer "+a.ContainerID, errFake)
	}
	e := New(f, f, Options{MaxParallel: 8}, nil) // the real, random jitter
	e.since = frozen                             // delays from now, the time the calls take aside
	for failure, base := range []time.Duration{DefaultBackoffMin, 2 * DefaultBackoffMin} {
		now := t0.Add(time.Duration(failure) * time.Hour) // past every RetryAt
		jittered := 0
		for _, o := range e.Execute(context.Background(), actions, now, nil) {
			d := o.RetryAt.Sub(now)
			if d < base || d > base+base/5 {
				t.Errorf("failure %d of %s: delay %v outside [%v, %v]", failure+1, o.Action.Key, d, base, base+base/5)
			}
			if d > base {
				jittered++
			}
		}
		if jittered == 0 {
			t.Errorf("failure %d: no delay was jittered", failure+1)
		}
	}
}

func TestBackoffClearedOnSuccess(t *testing.T) {
	f := newFake("RemoveContainer c1")
	e := newTest(f, Options{BackoffMin: time.Second, BackoffMax: time.Hour})
	actions := []gc.Action{rmCtr("c1")}
	out := e.Execute(context.Background(), actions, t0, nil)
	out = e.Execute(context.Background(), actions, out[0].RetryAt, nil)
	if d := out[0].RetryAt.Sub(t0.Add(time.Second)); d != 2*time.Second {
		t.Fatalf("second failure delay %v, want 2s", d)
	}
	f.setFail("RemoveContainer c1", nil)
	now := out[0].RetryAt
	if out = e.Execute(context.Background(), actions, now, nil); out[0].Result != Success {
		t.Fatalf("got %q, want success", out[0].Result)
	}
	if len(e.backoffs) != 0 {
		t.Errorf("backoff entries left after success: %v", e.backoffs)
	}
	// The next failure starts from BackoffMin again.
	f.setFail("RemoveContainer c1", errFake)
	out = e.Execute(context.Background(), actions, now, nil)
	if d := out[0].RetryAt.Sub(now); d != time.Second {
		t.Errorf("delay after success then failure %v, want 1s", d)
	}
}

func TestForgetDropsKeysNoLongerProposed(t *testing.T) {
	f := newFake("RemoveContainer a", "RemoveContainer b")
	e := newTest(f, Options{BackoffMin: time.Minute})
	actions := []gc.Action{rmCtr("a"), rmCtr("b")}
	e.Execute(context.Background(), actions, t0, nil)
	if len(e.backoffs) != 2 {
		t.Fatalf("backoff entries %d, want 2", len(e.backoffs))
	}

	e.Forget(map[string]time.Time{"container/a": t0, "container/other": t0})
	if _, ok := e.backoffs["container/b"]; ok || len(e.backoffs) != 1 {
		t.Errorf("after Forget: entries %v, want only container/a", e.backoffs)
	}
	// a still backs off; b, proposed again, is tried at once.
	got := results(e.Execute(context.Background(), actions, t0.Add(time.Second), nil))
	if got["container/a"] != Backoff || got["container/b"] != Error {
		t.Errorf("got %v, want a backoff and b tried (error)", got)
	}

	e.Forget(nil)
	if len(e.backoffs) != 0 {
		t.Errorf("Forget(nil) left %v", e.backoffs)
	}
}

// The reason a key was last aborted (said at warning level once while it
// lasts) is kept only while the key is proposed: memory stays bounded by
// the current plan, and a key proposed again is warned about afresh.
func TestForgetDropsTheAbortReasonsOfKeysNoLongerProposed(t *testing.T) {
	e := newTest(newFake(), Options{})
	changed := func(context.Context, gc.Action) error { return errors.New("the pod is back") }
	e.Execute(context.Background(), []gc.Action{rmCtr("a"), rmCtr("b")}, t0, changed)
	if len(e.aborted) != 2 {
		t.Fatalf("abort reasons %v, want both keys'", e.aborted)
	}
	e.Forget(map[string]time.Time{"container/a": t0})
	if _, ok := e.aborted["container/a"]; !ok || len(e.aborted) != 1 {
		t.Errorf("after Forget: abort reasons %v, want only container/a's", e.aborted)
	}
}

func TestDryRunCallsNothingAndReportsWould(t *testing.T) {
	f := newFake("StopPodSandbox sb1", "RemoveContainer c1")
	log, hook := logtest.NewNullLogger()
	e := New(f, f, Options{DryRun: true, MaxParallel: 4}, log)
	actions := []gc.Action{
		stopCtr("c0"), stopSb("sb0", "stop-container/c0"),
		rmCtr("c1"), rmSb("sb1", "container/c1"),
		rmLogDir("/p/1", "sandbox/sb1"), rmLink("/l/1", "container/c1"),
		rmLogDir("/p/2", "sandbox/not-in-run"),
	}
	for range 2 { // the second pass proves no backoff was recorded
		out := e.Execute(context.Background(), actions, t0, nil)
		for i, o := range out {
			if o.Result != Would || o.Err != nil || o.Action.Key != actions[i].Key {
				t.Errorf("%s: got %q %v, want would", o.Action.Key, o.Result, o.Err)
			}
		}
	}
	if c := f.called(); len(c) != 0 {
		t.Errorf("dry run made calls: %v", c)
	}
	entries := hook.AllEntries()
	if len(entries) != 2*len(actions) {
		t.Fatalf("%d log lines, want %d", len(entries), 2*len(actions))
	}
	for _, en := range entries {
		if !strings.HasPrefix(en.Message, "would ") || en.Level != logrus.InfoLevel {
			t.Errorf("dry-run line %q at %s, want \"would …\" at info", en.Message, en.Level)
		}
	}
}

func TestCancelledContextStartsNothingMore(t *testing.T) {
	actions := []gc.Action{rmCtr("c1"), rmCtr("c2"), rmCtr("c3"), rmSb("sb1"), rmLogDir("/p/1")}
	tests := []struct {
		name        string
		cancelFirst bool   // cancel before Execute
		cancelAt    string // cancel during this call (which still succeeds)
		want        []Result
		calls       int
	}{
		{"cancelled before: nothing starts", true, "", []Result{Skipped, Skipped, Skipped, Skipped, Skipped}, 0},
		{"cancelled during a wave: its rest and later waves skipped", false, "RemoveContainer c1",
			[]Result{Success, Skipped, Skipped, Skipped, Skipped}, 1},
		{"cancelled in the last wave", false, "RemovePodLogDir /p/1",
			[]Result{Success, Success, Success, Success, Success}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := newFake()
			f.onCall = func(method, id string) {
				if method+" "+id == tt.cancelAt {
					cancel()
				}
			}
			if tt.cancelFirst {
				cancel()
			}
			e := newTest(f, Options{MaxParallel: 1})
			out := e.Execute(ctx, actions, t0, nil)
			for i, o := range out {
				if o.Result != tt.want[i] {
					t.Errorf("%s: got %q, want %q", o.Action.Key, o.Result, tt.want[i])
				}
				if o.Result == Skipped && !errors.Is(o.Err, context.Canceled) {
					t.Errorf("%s: skipped with %v, want context.Canceled", o.Action.Key, o.Err)
				}
			}
			if got := len(f.called()); got != tt.calls {
				t.Errorf("%d calls (%v), want %d", got, f.called(), tt.calls)
			}
			if len(e.backoffs) != 0 {
				t.Errorf("actions not started must not back off: %v", e.backoffs)
			}
		})
	}
}

// A stop that lands after a step's check and before its call (SIGTERM):
// the call is not made, and the step is skipped, not a failure to back off
// from. (It was called with the ended context, and counted as failed.)
func TestAStopAfterTheCheckMakesNoCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFake()
	e := newTest(f, Options{MaxParallel: 1})
	recheck := func(context.Context, gc.Action) error {
		cancel() // the signal, right after the check passed
		return nil
	}
	a := rmLogDir("/p/1")
	a.Rule = gc.RulePodLogDir
	out := e.Execute(ctx, []gc.Action{a}, t0, recheck)
	if len(out) != 1 || out[0].Result != Skipped || !errors.Is(out[0].Err, context.Canceled) {
		t.Fatalf("outcome %+v, want skipped with context.Canceled", out)
	}
	if calls := f.called(); len(calls) != 0 {
		t.Fatalf("calls %v after the stop, want none", calls)
	}
	if len(e.backoffs) != 0 {
		t.Fatalf("a step not tried backs off: %v", e.backoffs)
	}
}

func TestEveryExecutedActionLoggedWithItsFields(t *testing.T) {
	f := newFake("RemoveContainer c-bad")
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	e := New(f, f, Options{MaxParallel: 4, BackoffMin: time.Minute}, log)
	e.jitter, e.since = noJitter, frozen
	e.fail("container/c-wait", errFake, t0) // backing off this pass

	actions := []gc.Action{
		stopCtr("c0"), stopSb("sb0"), rmCtr("c1"), rmCtr("c-bad"), rmCtr("c-wait"),
		rmSb("sb1"), rmLogDir("/var/log/pods/ns_web_uid-1"), rmLink("/var/log/containers/x.log"),
	}
	e.Execute(context.Background(), actions, t0, nil)

	type want struct {
		level  logrus.Level
		fields map[string]any
	}
	podFields := map[string]any{logging.FieldPodUID: "uid-1", logging.FieldPodNamespace: "ns", logging.FieldPodName: "web"}
	wants := map[string]want{
		"stopped container":             {logrus.InfoLevel, map[string]any{logging.FieldContainerID: "c0", logging.FieldSandboxID: "sb"}},
		"stopped sandbox":               {logrus.InfoLevel, map[string]any{logging.FieldSandboxID: "sb0"}},
		"removed container":             {logrus.InfoLevel, map[string]any{logging.FieldContainerID: "c1", logging.FieldSandboxID: "sb"}},
		"failed to remove container":    {logrus.WarnLevel, map[string]any{logging.FieldContainerID: "c-bad", fieldAttempts: 1, fieldRetryAt: t0.Add(time.Minute).Format(time.RFC3339)}},
		"backing off: remove container": {logrus.DebugLevel, map[string]any{logging.FieldContainerID: "c-wait", fieldAttempts: 1}},
		"stopped and removed sandbox":   {logrus.InfoLevel, map[string]any{logging.FieldSandboxID: "sb1"}},
		"removed pod log dir":           {logrus.InfoLevel, map[string]any{fieldPath: "/var/log/pods/ns_web_uid-1"}},
		"removed container log link":    {logrus.InfoLevel, map[string]any{fieldPath: "/var/log/containers/x.log", logging.FieldPodUID: nil}},
	}
	entries := hook.AllEntries()
	if len(entries) != len(wants) {
		var msgs []string
		for _, en := range entries {
			msgs = append(msgs, en.Message)
		}
		t.Fatalf("log lines %q, want one per action (%d)", msgs, len(wants))
	}
	for _, en := range entries {
		w, ok := wants[en.Message]
		if !ok {
			t.Errorf("unexpected log line %q", en.Message)
			continue
		}
		delete(wants, en.Message)
		if en.Level != w.level {
			t.Errorf("%q at %s, want %s", en.Message, en.Level, w.level)
		}
		expect := map[string]any{logging.FieldRule: nil, logging.FieldReason: "why"}
		for k, v := range podFields {
			expect[k] = v
		}
		for k, v := range w.fields {
			expect[k] = v
		}
		for k, v := range expect {
			got, has := en.Data[k]
			switch {
			case k == logging.FieldRule:
				if got == "" || !has {
					t.Errorf("%q: no rule", en.Message)
				}
			case v == nil:
				if has {
					t.Errorf("%q: field %s = %v, want it absent (empty)", en.Message, k, got)
				}
			case got != v:
				t.Errorf("%q: field %s = %v, want %v", en.Message, k, got, v)
			}
		}
		if _, ok := en.Data[logging.FieldAction].(string); !ok {
			t.Errorf("%q: no action field", en.Message)
		}
		if w.level <= logrus.InfoLevel { // info and warn: executed
			if _, ok := en.Data[fieldTook].(time.Duration); !ok {
				t.Errorf("%q: no took field", en.Message)
			}
		}
		if w.level == logrus.WarnLevel {
			if err, _ := en.Data[logrus.ErrorKey].(error); !errors.Is(err, errFake) {
				t.Errorf("%q: error field %v, want the failure", en.Message, en.Data[logrus.ErrorKey])
			}
		}
	}
}

func TestUnknownKindIsAnErrorWithoutCalls(t *testing.T) {
	f := newFake()
	a := gc.Action{Kind: "frobnicate", Key: "x/1"}
	out := newTest(f, Options{}).Execute(context.Background(), []gc.Action{a, rmCtr("c1", "x/1")}, t0, nil)
	if out[0].Result != Error || out[0].Err == nil || out[1].Result != Skipped {
		t.Errorf("got %q %v / %q, want error then skipped", out[0].Result, out[0].Err, out[1].Result)
	}
	if c := f.called(); len(c) != 0 {
		t.Errorf("calls %v, want none", c)
	}
}

func TestNewDefaults(t *testing.T) {
	e := New(newFake(), newFake(), Options{MaxParallel: -3, BackoffMax: time.Second}, nil)
	if e.opts.MaxParallel != 1 || e.opts.BackoffMin != DefaultBackoffMin || e.opts.BackoffMax != DefaultBackoffMin {
		t.Errorf("options %+v: want MaxParallel 1, BackoffMin default, BackoffMax raised to BackoffMin", e.opts)
	}
	e = New(newFake(), newFake(), Options{}, nil)
	if e.opts.BackoffMin != 10*time.Second || e.opts.BackoffMax != 5*time.Minute {
		t.Errorf("options %+v: want 10s and 5m", e.opts)
	}
	// A nil logger is allowed.
	e.Execute(context.Background(), []gc.Action{rmCtr("c1")}, t0, nil)
}

func TestCancelledWhileCallsInFlightReturnsAndReleasesSlots(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFake()
	f.delay = 20 * time.Millisecond
	f.onCall = func(method, id string) {
		if id == "c0" {
			cancel()
		}
	}
	actions := many(8, func(i int) gc.Action { return rmCtr(fmt.Sprint("c", i)) })
	e := newTest(f, Options{MaxParallel: 2})

	// The executor waits for a slot while both are taken by running calls
	// when the context ends: it must neither hang nor start more.
	done := make(chan []Outcome)
	go func() { done <- e.Execute(ctx, actions, t0, nil) }()
	var out []Outcome
	select {
	case out = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not return after the context ended")
	}
	succeeded := 0
	for _, o := range out {
		switch o.Result {
		case Success:
			succeeded++
		case Skipped:
			if !errors.Is(o.Err, context.Canceled) {
				t.Errorf("%s: skipped with %v, want context.Canceled", o.Action.Key, o.Err)
			}
		default:
			t.Errorf("%s: got %q, want success or skipped", o.Action.Key, o.Result)
		}
	}
	if out[0].Result != Success || out[len(out)-1].Result != Skipped {
		t.Errorf("first %q, last %q: want the first done and the last not started", out[0].Result, out[len(out)-1].Result)
	}
	if got := len(f.called()); got != succeeded || got > 2 {
		t.Errorf("%d calls for %d successes, want equal and at most MaxParallel", got, succeeded)
	}
}

func TestNodeActionsReachTheirCalls(t *testing.T) {
	f := newFake("DestroyPodCgroup u-fail")
	e := New(f, f, Options{MaxParallel: 2}, nil)
	cg := func(uid string) *podcgroups.PodCgroup { return &podcgroups.PodCgroup{UID: uid} }
	actions := []gc.Action{
		{Kind: gc.RemovePodCgroup, Key: "pod-cgroup/u1", Pod: gc.PodRef{UID: "u1"}, Cgroup: cg("u1")},
		{Kind: gc.RemovePodCgroup, Key: "pod-cgroup/u-fail", Pod: gc.PodRef{UID: "u-fail"}, Cgroup: cg("u-fail")},
		{Kind: gc.ReducePodCgroupCPU, Key: "pod-cgroup-cpu/u2", Pod: gc.PodRef{UID: "u2"}, Cgroup: cg("u2")},
		{Kind: gc.RemovePodCgroup, Key: "pod-cgroup/none", Pod: gc.PodRef{UID: "none"}},
		{Kind: gc.RemovePodDir, Key: "pod-dir/u3", Pod: gc.PodRef{UID: "u3"}, Path: "/var/lib/kubelet/pods/u3",
			PodDir: &nodefs.PodDir{UID: "u3", Path: "/var/lib/kubelet/pods/u3"}},
		{Kind: gc.RemovePodDir, Key: "pod-dir/u4", Pod: gc.PodRef{UID: "u4"}, Path: "/var/lib/kubelet/pods/u4"},
		{Kind: gc.RemovePodDir, Key: "pod-dir/u5", Pod: gc.PodRef{UID: "u5"}, Path: "/var/lib/kubelet/pods/u5",
			PodDir: &nodefs.PodDir{UID: "u6", Path: "/var/lib/kubelet/pods/u6"}},
	}
	out := e.Execute(context.Background(), actions, time.Now(), nil)
	want := []Result{Success, Error, Success, Error, Success, Error, Error}
	for i, o := range out {
		if o.Result != want[i] {
			t.Errorf("%s: %s (%v), want %s", o.Action.Key, o.Result, o.Err, want[i])
		}
	}
	for i, why := range map[int]string{3: "no pod cgroup", 5: "no pod dir", 6: "pod u6's, not pod u5's"} {
		if out[i].Err == nil || !strings.Contains(out[i].Err.Error(), why) {
			t.Errorf("%s: %v, want an error saying %q", out[i].Action.Key, out[i].Err, why)
		}
	}
	got := map[string]bool{}
	for _, c := range f.calls {
		got[c.method+" "+c.id] = true
	}
	for _, c := range []string{"DestroyPodCgroup u1", "ReducePodCgroupCPU u2", "RemoveOrphanedPodDir u3"} {
		if !got[c] {
			t.Errorf("no call %s (calls %v)", c, f.calls)
		}
	}
	for _, c := range []string{"RemoveOrphanedPodDir u4", "RemoveOrphanedPodDir u5", "RemoveOrphanedPodDir u6"} {
		if got[c] {
			t.Errorf("call %s, for a removal without the pod dir its decision saw", c)
		}
	}
}

// TestASliceUnitSystemdCouldNotStopIsSaid: a pod cgroup removed without
// systemd (unreachable, or its stop job failed) is a success, and its line
// names the unit and why, with a warning of its own: systemd may still hold
// the unit. A unit systemd stopped is named; no unit, no field.
func TestASliceUnitSystemdCouldNotStopIsSaid(t *testing.T) {
	const unit = "kubepods-besteffort-podu1.slice"
	for _, c := range []struct {
		name      string
		destroyed podcgroups.Destroyed
		fail      bool
		wantLeft  bool
	}{
		{"cgroupfs driver", podcgroups.Destroyed{}, false, false},
		{"systemd stopped the unit", podcgroups.Destroyed{Unit: unit}, false, false},
		{"systemd could not", podcgroups.Destroyed{Unit: unit, UnitErr: errors.New("systemd is not reachable over D-Bus")}, false, true},
		{"systemd could not and the cgroups stay", podcgroups.Destroyed{Unit: unit, UnitErr: errors.New("job failed")}, true, false},
		// Not what podcgroups says, but no Files may make the step panic.
		{"an error with no unit named", podcgroups.Destroyed{UnitErr: errors.New("job failed")}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			if c.fail {
				f.setFail("DestroyPodCgroup u1", errFake)
			}
			f.destroyed = map[string]podcgroups.Destroyed{"u1": c.destroyed}
			log, hook := logtest.NewNullLogger()
			e := New(f, f, Options{MaxParallel: 1}, log)
			out := e.Execute(context.Background(), []gc.Action{{Kind: gc.RemovePodCgroup, Key: "pod-cgroup/u1",
				Pod: gc.PodRef{UID: "u1"}, Path: "/sys/fs/cgroup/memory/kubepods.slice/" + unit, Cgroup: &podcgroups.PodCgroup{UID: "u1"}}}, time.Now(), nil)
			if want := map[bool]Result{false: Success, true: Error}[c.fail]; out[0].Result != want {
				t.Fatalf("result %s (%v), want %s", out[0].Result, out[0].Err, want)
			}
			var step *logrus.Entry
			warned := false
			for _, en := range hook.AllEntries() {
				if en.Data[logging.FieldAction] == string(gc.RemovePodCgroup) {
					step = en
				} else if en.Level == logrus.WarnLevel && en.Data[logging.FieldPodUID] == "u1" {
					warned = true
				}
			}
			if step == nil {
				t.Fatalf("no line for the step: %v", hook.AllEntries())
			}
			if got, _ := step.Data[fieldSystemdUnit].(string); got != c.destroyed.Unit {
				t.Errorf("the step's line names unit %q, want %q", got, c.destroyed.Unit)
			}
			left, _ := step.Data[fieldSystemdUnitLeft].(string)
			if c.wantLeft != (left != "") || c.wantLeft != warned {
				t.Errorf("the unit systemd still holds: %s=%q, a warning of its own: %v; want both: %v", fieldSystemdUnitLeft, left, warned, c.wantLeft)
			}
		})
	}
}

// A sandbox removed with all its dead containers is one StopPodSandbox and
// one RemovePodSandbox (containerd's RemovePodSandbox removes the
// sandbox's containers); each container keeps its own outcome and log line.
// Containers that need more than that keep their own call.
func TestAWholeSandboxReclaimIsOneStopAndOneRemove(t *testing.T) {
	unknown := rmCtr("c-unknown")
	unknown.StopFirst, unknown.Timeout = true, 2*time.Second
	other := rmCtr("c-other")
	other.SandboxID = "another-sandbox"
	for _, tc := range []struct {
		rule      string
		actions   []gc.Action
		fail      []string
		backoff   string // a key in backoff
		dryRun    bool
		wantCalls []string
		want      map[string]Result
	}{
		{"dead containers go with their sandbox", []gc.Action{rmCtr("c1"), rmCtr("c2"), rmSb("sb", "container/c1", "container/c2"), rmLink("/l/c1", "container/c1")}, nil, "", false,
			[]string{"StopPodSandbox sb", "RemovePodSandbox sb", "RemoveContainerLogLink /l/c1"},
			map[string]Result{"container/c1": Success, "container/c2": Success, "sandbox/sb": Success, "log-link//l/c1": Success}},
		{"a failed sandbox removal leaves the containers still listed for the next plan", []gc.Action{rmCtr("c1"), rmSb("sb", "container/c1"), rmLink("/l/c1", "container/c1")},
			[]string{"RemovePodSandbox sb"}, "", false,
			[]string{"StopPodSandbox sb", "RemovePodSandbox sb", "ContainerLogPaths uid-1"},
			map[string]Result{"container/c1": Skipped, "sandbox/sb": Error, "log-link//l/c1": Skipped}},
		{"an UNKNOWN container is stopped and removed on its own", []gc.Action{unknown, rmSb("sb", "container/c-unknown")}, nil, "", false,
			[]string{"StopContainer c-unknown", "RemoveContainer c-unknown", "StopPodSandbox sb", "RemovePodSandbox sb"},
			map[string]Result{"container/c-unknown": Success, "sandbox/sb": Success}},
		{"a container of another sandbox is not carried", []gc.Action{other, rmSb("sb", "container/c-other")}, nil, "", false,
			[]string{"RemoveContainer c-other", "StopPodSandbox sb", "RemovePodSandbox sb"},
			map[string]Result{"container/c-other": Success, "sandbox/sb": Success}},
		{"a sandbox backing off does not carry its containers", []gc.Action{rmCtr("c1"), rmSb("sb", "container/c1")}, nil, "sandbox/sb", false,
			[]string{"RemoveContainer c1"},
			map[string]Result{"container/c1": Success, "sandbox/sb": Backoff}},
		{"a dry run shows every step alone", []gc.Action{rmCtr("c1"), rmSb("sb", "container/c1")}, nil, "", true,
			nil, map[string]Result{"container/c1": Would, "sandbox/sb": Would}},
		{"a container backing off is not carried", []gc.Action{rmCtr("c1"), rmSb("sb", "container/c1")}, nil, "container/c1", false,
			nil, map[string]Result{"container/c1": Backoff, "sandbox/sb": Skipped}},
		{"a container that rests on a step is not carried past that step's failure",
			[]gc.Action{stopCtr("c0"), rmCtr("c1", "stop-container/c0"), rmSb("sb", "container/c1")}, []string{"StopContainer c0"}, "", false,
			[]string{"StopContainer c0"},
			map[string]Result{"stop-container/c0": Error, "container/c1": Skipped, "sandbox/sb": Skipped}},
		{"a dependency that is not a container removal is not carried", []gc.Action{stopCtr("c1"), rmSb("sb", "stop-container/c1")},
			[]string{"StopContainer c1"}, "", false,
			[]string{"StopContainer c1"},
			map[string]Result{"stop-container/c1": Error, "sandbox/sb": Skipped}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			f := newFake(tc.fail...)
			f.logPaths = map[string]string{"c1": "", "c2": ""} // still listed after a failed removal
			log, hook := logtest.NewNullLogger()
			log.SetLevel(logrus.DebugLevel)
			e := New(f, f, Options{MaxParallel: 4, DryRun: tc.dryRun, BackoffMin: time.Minute, BackoffMax: time.Hour}, log)
			e.jitter, e.since = noJitter, frozen
			if tc.backoff != "" {
				e.fail(tc.backoff, errors.New("earlier failure"), t0)
			}
			out := e.Execute(context.Background(), tc.actions, t0, nil)
			if got := f.called(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("calls = %q, want %q", got, tc.wantCalls)
			}
			if got := results(out); !maps.Equal(got, tc.want) {
				t.Errorf("results = %v, want %v", got, tc.want)
			}
			if tc.rule == "dead containers go with their sandbox" {
				for _, id := range []string{"c1", "c2"} {
					if !loggedWith(hook, "removed container with its sandbox", logging.FieldContainerID, id) {
						t.Errorf("no log line for container %s removed with its sandbox", id)
					}
				}
			}
		})
	}
}

func loggedWith(hook *logtest.Hook, msg, field, value string) bool {
	for _, e := range hook.AllEntries() {
		if e.Message == msg && e.Data[field] == value {
			return true
		}
	}
	return false
}

// TestBackoffCountsFromTheFailureNotTheListing: a pass's clock is its
// listing's time, but a step fails later (a call that ran into its
// timeout, one that waited for a slot or for earlier waves): its retry
// must not come sooner than its backoff after the failure.
func TestBackoffCountsFromTheFailureNotTheListing(t *testing.T) {
	f := newFake("RemoveContainer c1")
	f.delay = 300 * time.Millisecond // the call fails this long after the listing
	e := New(f, f, Options{BackoffMin: time.Second, BackoffMax: time.Minute}, nil)
	e.jitter = noJitter
	now := time.Now()
	out := e.Execute(context.Background(), []gc.Action{rmCtr("c1")}, now, nil)
	if out[0].Result != Error {
		t.Fatalf("got %q, want error", out[0].Result)
	}
	if got := out[0].RetryAt.Sub(now); got < time.Second+300*time.Millisecond {
		t.Fatalf("retry %v after the listing, want at least the call's 300ms plus the 1s backoff", got)
	}
}

// kubelet's removeContainer (kuberuntime_container.go) removes a container's
// log file and rotations before the CRI RemoveContainer, and keeps the
// container when it cannot (removeContainerLog). A container of a live pod
// the plan removes goes the same way.
func TestAContainerOfALivePodGoesAfterItsLogFiles(t *testing.T) {
	const own, newer, side = "/logs/ns_web_uid-1/app/0.log", "/logs/ns_web_uid-1/app/1.log", "/logs/ns_web_uid-1/side/0.log"
	live := func(id string) gc.Action {
		a := rmCtr(id)
		a.Rule, a.ContainerName, a.RemoveLogFiles = gc.RuleContainerMaxPerPod, "app", true
		return a
	}
	unknown := live("c1")
	unknown.StopFirst, unknown.Timeout = true, 2*time.Second
	for _, tc := range []struct {
		rule      string
		actions   []gc.Action
		logPaths  map[string]string
		fail      []string
		wantCalls []string
		wantKeep  [][]string
		want      map[string]Result
		wantLog   string // the outcome's line
		wantField string // a field of it, in the form key=value
		refuse    bool   // RemoveContainerLogFiles refuses the container's log file
	}{
		{"the log files go first, other containers' log files are kept", []gc.Action{live("c1")},
			map[string]string{"c1": own, "c2": newer, "c3": side, "c4": ""}, nil,
			[]string{"ContainerLogPaths uid-1", "RemoveContainerLogFiles " + own, "RemoveContainer c1"},
			[][]string{{newer, side}}, map[string]Result{"container/c1": Success}, "removed container and its log files", "log_files=[" + own + "]", false},
		{"an UNKNOWN container is stopped, then its log files go, then it", []gc.Action{unknown},
			map[string]string{"c1": own}, nil,
			[]string{"StopContainer c1", "ContainerLogPaths uid-1", "RemoveContainerLogFiles " + own, "RemoveContainer c1"},
			[][]string{nil}, map[string]Result{"container/c1": Success}, "stopped and removed container and its log files", "log_files=[" + own + "]", false},
		{"the container stays when its log files cannot be removed", []gc.Action{live("c1")},
			map[string]string{"c1": own}, []string{"RemoveContainerLogFiles " + own},
			[]string{"ContainerLogPaths uid-1", "RemoveContainerLogFiles " + own},
			[][]string{nil}, map[string]Result{"container/c1": Error}, "failed to remove container and its log files", "error=remove the log files of container c1 (it is removed after them): fake failure", false},
		{"the container stays when the log paths cannot be read", []gc.Action{live("c1")},
			map[string]string{"c1": own}, []string{"ContainerLogPaths uid-1"},
			[]string{"ContainerLogPaths uid-1"}, nil, map[string]Result{"container/c1": Error}, "failed to remove container and its log files",
			"error=remove the log files of container c1 (it is removed after them): reading the log paths of pod uid-1's containers: fake failure", false},
		{"a log file another container logs to is left, the container goes", []gc.Action{live("c1")},
			map[string]string{"c1": own, "c9": "/logs/ns_web_uid-1/app/./0.log"}, nil,
			[]string{"ContainerLogPaths uid-1", "RemoveContainer c1"}, nil, map[string]Result{"container/c1": Success},
			"removed container", "log_files_left=container c9 of the pod logs to " + own + " too", false},
		{"a log file another container logs to is left, however the runtime spells the container's own path", []gc.Action{live("c1")},
			map[string]string{"c1": "/logs/ns_web_uid-1/app//0.log", "c9": own}, nil,
			[]string{"ContainerLogPaths uid-1", "RemoveContainer c1"}, nil, map[string]Result{"container/c1": Success},
			"removed container", "log_files_left=container c9 of the pod logs to /logs/ns_web_uid-1/app//0.log too", false},
		{"a container the runtime no longer lists has no log file to remove here", []gc.Action{live("c1")},
			map[string]string{"c2": newer}, nil,
			[]string{"ContainerLogPaths uid-1", "RemoveContainer c1"}, nil, map[string]Result{"container/c1": Success},
			"removed container", "log_files_left=the runtime no longer lists the container", false},
		{"a container without a log path has none to remove", []gc.Action{live("c1")},
			map[string]string{"c1": ""}, nil,
			[]string{"ContainerLogPaths uid-1", "RemoveContainer c1"}, nil, map[string]Result{"container/c1": Success},
			"removed container", "log_files_left=the runtime reports no log path for the container", false},
		{"a log file the stricter rules refuse is left, with a warning, and the container goes", []gc.Action{live("c1")},
			map[string]string{"c1": own}, nil,
			[]string{"ContainerLogPaths uid-1", "RemoveContainerLogFiles " + own, "RemoveContainer c1"},
			[][]string{nil}, map[string]Result{"container/c1": Success}, "removed container",
			"log_files_left=refusing to remove " + own + ": not kubelet's", true},
		{"a container whose log files go first is not carried by its sandbox", []gc.Action{live("c1"), rmSb("sb", "container/c1")},
			map[string]string{"c1": own}, nil,
			[]string{"ContainerLogPaths uid-1", "RemoveContainerLogFiles " + own, "RemoveContainer c1", "StopPodSandbox sb", "RemovePodSandbox sb"},
			[][]string{nil}, map[string]Result{"container/c1": Success, "sandbox/sb": Success}, "removed container and its log files", "log_files=[" + own + "]", false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			f := newFake(tc.fail...)
			f.logPaths = tc.logPaths
			if tc.refuse {
				f.setFail("RemoveContainerLogFiles "+own, &nodefs.RefusedError{Path: own, Reason: "not kubelet's"})
			}
			log, hook := logtest.NewNullLogger()
			log.SetLevel(logrus.DebugLevel)
			e := New(f, f, Options{MaxParallel: 4}, log)
			e.jitter, e.since = noJitter, frozen
			out := e.Execute(context.Background(), tc.actions, t0, nil)
			if got := f.called(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("calls = %q, want %q", got, tc.wantCalls)
			}
			if !slices.EqualFunc(f.keptLogs, tc.wantKeep, func(a, b []string) bool { return slices.Equal(a, b) }) {
				t.Errorf("kept = %q, want %q", f.keptLogs, tc.wantKeep)
			}
			if got := results(out); !maps.Equal(got, tc.want) {
				t.Errorf("results = %v, want %v", got, tc.want)
			}
			// One line for the step, its outcome, with what became of the
			// log files.
			var lines []string
			for _, en := range hook.AllEntries() {
				if en.Data[logging.FieldContainerID] == "c1" && en.Data[logging.FieldAction] != nil && en.Level <= logrus.InfoLevel {
					lines = append(lines, en.Message)
					key, value, _ := strings.Cut(tc.wantField, "=")
					if got := fmt.Sprint(en.Data[key]); en.Message == tc.wantLog && got != value {
						t.Errorf("%s=%q, want %q", key, got, value)
					}
				}
			}
			if !slices.Equal(lines, []string{tc.wantLog}) {
				t.Errorf("lines about the container %q, want only its outcome %q", lines, tc.wantLog)
			}
			warned := false
			for _, en := range hook.AllEntries() {
				warned = warned || en.Level == logrus.WarnLevel && strings.HasPrefix(en.Message, "left a log file") && en.Data[fieldPath] == own &&
					en.Data[logging.FieldAction] == nil
			}
			if warned != tc.refuse {
				t.Errorf("warned of a left log file (without an action field) %v, want %v", warned, tc.refuse)
			}
		})
	}
}

func TestADryRunSaysTheLogFilesWouldGo(t *testing.T) {
	f := newFake()
	log, hook := logtest.NewNullLogger()
	a := rmCtr("c1")
	a.Rule, a.RemoveLogFiles = gc.RuleContainerMaxPerPod, true
	New(f, f, Options{DryRun: true}, log).Execute(context.Background(), []gc.Action{a}, t0, nil)
	if c := f.called(); len(c) != 0 {
		t.Errorf("dry run made calls: %v", c)
	}
	if e := hook.LastEntry(); e == nil || e.Message != "would remove container and its log files" {
		t.Errorf("last line %v, want \"would remove container and its log files\"", e)
	}
}

// TestAStepsOwnLookFindingItChangedIsAnAbort: the pod dir removal, the
// pod cgroup destroy and the network steps look once more in the call that
// acts; a refusal there of something changed since the plan (a pod of that
// UID set up again, a cache entry rewritten) did nothing, and is an abort,
// as when the check right before finds it: no backoff, no failure. Any
// other refusal is a failure.
func TestAStepsOwnLookFindingItChangedIsAnAbort(t *testing.T) {
	f := newFake()
	f.setFail("RemoveOrphanedPodDir u1", &nodefs.RefusedError{Path: "/var/lib/kubelet/pods/u1", Reason: "it changed", Changed: true})
	f.setFail("DestroyPodCgroup u2", fmt.Errorf("destroying: %w", &podcgroups.RefusedError{Path: "/sys/fs/cgroup/x", Reason: "a child", Changed: true}))
	f.setFail("RemoveOrphanedPodDir u3", &nodefs.RefusedError{Path: "/var/lib/kubelet/pods/u3", Reason: "a mount point"})
	f.setFail("DeleteCNIAttachment s4", &podnet.RefusedError{Path: "/var/lib/cni/results/pods-s4-eth0", Reason: "the cache entry changed since it was listed", Changed: true})
	f.setFail("DeleteCNIAttachment s5", &podnet.RefusedError{Path: "/var/lib/cni/results/pods-s5-eth0", Reason: `network "pods" sets disableGC`})
	e := New(f, f, Options{MaxParallel: 1}, nil)
	podDir := func(uid string) gc.Action {
		return gc.Action{Kind: gc.RemovePodDir, Key: "pod-dir/" + uid, Pod: gc.PodRef{UID: uid}, PodDir: &nodefs.PodDir{UID: uid}}
	}
	attachment := func(owner string) gc.Action {
		return gc.Action{Kind: gc.RemoveCNIAttachment, Key: "cni-attachment/pods/" + owner + "/eth0", ContainerID: owner,
			Attachment: &podnet.Attachment{Network: "pods", ContainerID: owner, IfName: "eth0"}}
	}
	out := e.Execute(context.Background(), []gc.Action{
		podDir("u1"),
		{Kind: gc.RemovePodCgroup, Key: "pod-cgroup/u2", Pod: gc.PodRef{UID: "u2"}, Cgroup: &podcgroups.PodCgroup{UID: "u2"}},
		podDir("u3"),
		attachment("s4"),
		attachment("s5"),
	}, time.Now(), nil)
	for i, want := range []Result{Aborted, Aborted, Error, Aborted, Error} {
		if out[i].Result != want || out[i].Err == nil {
			t.Errorf("%s: %s (%v), want %s", out[i].Action.Key, out[i].Result, out[i].Err, want)
		}
		if got := !out[i].RetryAt.IsZero(); got != (want == Error) {
			t.Errorf("%s: retry at %v, want a backoff only for a failure", out[i].Action.Key, out[i].RetryAt)
		}
	}
}
