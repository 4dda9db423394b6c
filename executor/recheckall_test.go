package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// Action builders for the node and network kinds, keyed as the planner
// keys them.

func rmPodDir(uid string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.RemovePodDir, Rule: gc.RuleOrphanedPodDir, Reason: "why", Pod: gc.PodRef{UID: uid, Namespace: "ns", Name: "web"},
		Key: "pod-dir/" + uid, Path: "/var/lib/kubelet/pods/" + uid, DependsOn: deps,
		PodDir: &nodefs.PodDir{UID: uid, Path: "/var/lib/kubelet/pods/" + uid}}
}

func destroyCgroup(uid string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.RemovePodCgroup, Rule: gc.RuleCgroupOrphaned, Reason: "why", Pod: gc.PodRef{UID: uid, Namespace: "ns", Name: "web"},
		Key: "pod-cgroup/" + uid, Path: "/sys/fs/cgroup/kubepods/pod" + uid, Cgroup: &podcgroups.PodCgroup{UID: uid}, DependsOn: deps}
}

func reduceCPU(uid string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.ReducePodCgroupCPU, Rule: gc.RuleCgroupVolumesRemain, Reason: "why", Pod: gc.PodRef{UID: uid, Namespace: "ns", Name: "web"},
		Key: "pod-cgroup-cpu/" + uid, Path: "/sys/fs/cgroup/kubepods/pod" + uid, Cgroup: &podcgroups.PodCgroup{UID: uid}, DependsOn: deps}
}

func delAttachment(owner string, deps ...string) gc.Action {
	a := &podnet.Attachment{Network: "pods", ContainerID: owner, IfName: "eth0", NetNS: "/var/run/netns/cni-" + owner}
	return gc.Action{Kind: gc.RemoveCNIAttachment, Rule: gc.RuleNetworkAttachment, Reason: "why",
		Key: "cni-attachment/pods/" + owner + "/eth0", ContainerID: owner, Path: "/var/lib/cni/results/pods-" + owner + "-eth0", Attachment: a, DependsOn: deps}
}

func releaseIP(ip, owner string, deps ...string) gc.Action {
	r := &podnet.Reservation{Network: "pods", IP: ip, Path: "/var/lib/cni/networks/pods/" + ip, Owner: owner}
	return gc.Action{Kind: gc.ReleaseIPReservation, Rule: gc.RuleNetworkReservation, Reason: "why",
		Key: "ip-reservation/pods/" + ip + "/" + owner, ContainerID: owner, Path: r.Path, Reservation: r, DependsOn: deps}
}

func rmNetns(path, owner string, deps ...string) gc.Action {
	return gc.Action{Kind: gc.RemoveNetns, Rule: gc.RuleNetworkNetns, Reason: "why",
		Key: "netns/" + path, Path: path, ContainerID: owner, Netns: &podnet.Netns{Path: path}, DependsOn: deps}
}

// keyRecheck is a Recheck that records the keys it was asked about and
// aborts those abort says (every key when abort is nil).
type keyRecheck struct {
	abort map[string]bool

	mu      sync.Mutex
	checked []string
}

var errChanged = errors.New("checked again: what the plan saw no longer holds")

func (r *keyRecheck) check(_ context.Context, a gc.Action) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = append(r.checked, a.Key)
	if r.abort == nil || r.abort[a.Key] {
		return errChanged
	}
	return nil
}

func (r *keyRecheck) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := slices.Clone(r.checked)
	slices.Sort(k)
	return k
}

// Every step but a container log link's removal is checked again right
// before it runs (executor.Recheck): a check that finds the plan no longer
// holds aborts the step, with no runtime or node call made for it. A log
// link rests on its target being absent and is not checked: it runs. Each
// kind of gc.Kinds has a row; a kind added without one fails the test.
func TestEveryStepButALogLinkIsCheckedAgainRightBeforeItRuns(t *testing.T) {
	unknown := rmCtr("c-unknown")
	unknown.StopFirst, unknown.Timeout = true, 2*time.Second
	live := rmCtr("c-live")
	live.Rule, live.ContainerName, live.RemoveLogFiles = gc.RuleContainerMaxPerPod, "app", true
	unknownLive := live
	unknownLive.Key, unknownLive.ContainerID, unknownLive.StopFirst, unknownLive.Timeout = "container/c-unknown-live", "c-unknown-live", true, 2*time.Second
	link := rmLink("/var/log/containers/x.log")

	for _, tc := range []struct {
		rule    string
		kind    gc.Kind // the kind the row proves re-checked
		actions []gc.Action
		// want is every action's result but the link's (always Success).
		want map[string]Result
	}{
		{"an orphan's container stop", gc.StopContainer, []gc.Action{stopCtr("c-orphan")},
			map[string]Result{"stop-container/c-orphan": Aborted}},
		{"an orphan's sandbox stop", gc.StopSandbox, []gc.Action{stopSb("sb-orphan")},
			map[string]Result{"stop-sandbox/sb-orphan": Aborted}},
		{"a gone pod's container removal", gc.RemoveContainer, []gc.Action{rmCtr("c-gone")},
			map[string]Result{"container/c-gone": Aborted}},
		{"an UNKNOWN container's stop and removal", gc.RemoveContainer, []gc.Action{unknown},
			map[string]Result{"container/c-unknown": Aborted}},
		{"a live pod's container removal after its log files", gc.RemoveContainer, []gc.Action{live},
			map[string]Result{"container/c-live": Aborted}},
		{"a live pod's UNKNOWN container's stop, log files and removal", gc.RemoveContainer, []gc.Action{unknownLive},
			map[string]Result{"container/c-unknown-live": Aborted}},
		{"a sandbox removal", gc.RemoveSandbox, []gc.Action{rmSb("sb-gone")},
			map[string]Result{"sandbox/sb-gone": Aborted}},
		{"a sandbox removal carrying its dead containers", gc.RemoveSandbox, []gc.Action{rmCtr("c1"), rmCtr("c2"), rmSb("sb", "container/c1", "container/c2")},
			map[string]Result{"sandbox/sb": Aborted, "container/c1": Aborted, "container/c2": Aborted}},
		{"a pod log dir removal", gc.RemovePodLogDir, []gc.Action{rmLogDir("/var/log/pods/ns_web_uid-1")},
			map[string]Result{"pod-log-dir//var/log/pods/ns_web_uid-1": Aborted}},
		{"an orphaned pod dir removal", gc.RemovePodDir, []gc.Action{rmPodDir("uid-1")},
			map[string]Result{"pod-dir/uid-1": Aborted}},
		{"a pod cgroup destroy", gc.RemovePodCgroup, []gc.Action{destroyCgroup("uid-1")},
			map[string]Result{"pod-cgroup/uid-1": Aborted}},
		{"a pod cgroup CPU reduction", gc.ReducePodCgroupCPU, []gc.Action{reduceCPU("uid-1")},
			map[string]Result{"pod-cgroup-cpu/uid-1": Aborted}},
		{"a CNI DEL", gc.RemoveCNIAttachment, []gc.Action{delAttachment("1eaced")},
			map[string]Result{"cni-attachment/pods/1eaced/eth0": Aborted}},
		{"an IP reservation release", gc.ReleaseIPReservation, []gc.Action{releaseIP("10.9.0.3", "1eaced")},
			map[string]Result{"ip-reservation/pods/10.9.0.3/1eaced": Aborted}},
		{"a netns removal", gc.RemoveNetns, []gc.Action{rmNetns("/var/run/netns/cni-1", "")},
			map[string]Result{"netns//var/run/netns/cni-1": Aborted}},
	} {
		t.Run(string(tc.kind)+": "+tc.rule, func(t *testing.T) {
			f := newFake()
			f.logPaths = map[string]string{"c-live": "/var/log/pods/ns_web_uid-1/app/0.log", "c-unknown-live": "/var/log/pods/ns_web_uid-1/app/1.log"}
			e := newTest(f, Options{MaxParallel: 4})
			check := &keyRecheck{} // every step it is asked about has changed
			out := e.Execute(context.Background(), append(slices.Clone(tc.actions), link), t0, check.check)

			want := maps.Clone(tc.want)
			want[link.Key] = Success
			if got := results(out); !maps.Equal(got, want) {
				t.Errorf("results %v, want %v", got, want)
			}
			// The only call is the log link's: nothing of an aborted step
			// reached the runtime or the node.
			if got, wantCalls := f.called(), []string{"RemoveContainerLogLink " + link.Path}; !slices.Equal(got, wantCalls) {
				t.Errorf("calls %q, want only %q: a step checked again and found changed must make no call", got, wantCalls)
			}
			// Every step of the row was checked (a carried container by its
			// sandbox's check, its pod's), the link never.
			carried := map[string]bool{}
			for _, a := range tc.actions {
				if a.Kind == gc.RemoveSandbox {
					for _, dep := range a.DependsOn {
						carried[dep] = true
					}
				}
			}
			var wantChecked []string
			for key, r := range tc.want {
				if r == Aborted && !carried[key] {
					wantChecked = append(wantChecked, key)
				}
			}
			slices.Sort(wantChecked)
			if got := check.keys(); !slices.Equal(got, wantChecked) {
				t.Errorf("checked %q, want %q (and never the log link)", got, wantChecked)
			}
			for _, o := range out {
				if o.Result == Aborted && !errors.Is(o.Err, errChanged) {
					t.Errorf("%s: aborted with %v, want the check's error", o.Action.Key, o.Err)
				}
			}
			if len(e.backoffs) != 0 {
				t.Errorf("an aborted step backs off: %v", e.backoffs)
			}
		})
	}

	// Every kind but the log link's has a row above.
	t.Run("every kind has a row", func(t *testing.T) {
		covered := []gc.Kind{gc.StopContainer, gc.StopSandbox, gc.RemoveContainer, gc.RemoveSandbox, gc.RemovePodLogDir, gc.RemovePodDir,
			gc.RemovePodCgroup, gc.ReducePodCgroupCPU, gc.RemoveCNIAttachment, gc.ReleaseIPReservation, gc.RemoveNetns}
		for _, k := range gc.Kinds {
			if k != gc.RemoveContainerLogLink && !slices.Contains(covered, k) {
				t.Errorf("kind %s has no row: is it checked again right before it runs?", k)
			}
		}
	})

	// The log link alone, with a check that would abort anything: it is
	// not asked, and the link goes.
	t.Run("a log link is not checked again", func(t *testing.T) {
		f := newFake()
		check := &keyRecheck{}
		out := newTest(f, Options{}).Execute(context.Background(), []gc.Action{link}, t0, check.check)
		if out[0].Result != Success || !f.has("RemoveContainerLogLink "+link.Path) || len(check.keys()) != 0 {
			t.Fatalf("log link: %s (%v), calls %q, checked %q; want it removed without a check", out[0].Result, out[0].Err, f.called(), check.keys())
		}
	})
}

// The other side of the check right before a network step: a check that
// finds nothing changed since the plan lets the step run, exactly as
// planned (the attachment, reservation or namespace the plan named, handed
// to the node as is), once, and the steps that wait for it after it. A
// check that always aborted would leave every network leak in place
// without a word of error.
func TestANetworkStepWhoseCheckFindsNothingChangedRunsAsPlanned(t *testing.T) {
	del := delAttachment("1eaced")
	netnsOfDel := rmNetns(del.Attachment.NetNS, "1eaced", del.Key)
	for _, tc := range []struct {
		rule    string
		actions []gc.Action
		calls   []string // in order
		args    []any    // what the node is handed, in order
	}{
		{"a CNI DEL runs", []gc.Action{del}, []string{"DeleteCNIAttachment 1eaced"}, []any{*del.Attachment}},
		{"an IP reservation release runs", []gc.Action{releaseIP("10.9.0.3", "1eaced")}, []string{"ReleaseIPReservation 10.9.0.3"},
			[]any{*releaseIP("10.9.0.3", "1eaced").Reservation}},
		{"a netns removal runs", []gc.Action{rmNetns("/var/run/netns/cni-1", "")}, []string{"RemoveNetns /var/run/netns/cni-1"},
			[]any{*rmNetns("/var/run/netns/cni-1", "").Netns}},
		{"a CNI DEL runs, then the removal of the namespace it ran in", []gc.Action{del, netnsOfDel},
			[]string{"DeleteCNIAttachment 1eaced", "RemoveNetns " + del.Attachment.NetNS}, []any{*del.Attachment, *netnsOfDel.Netns}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			f := newFake()
			e := newTest(f, Options{MaxParallel: 4})
			check := &keyRecheck{abort: map[string]bool{}} // nothing has changed
			out := e.Execute(context.Background(), tc.actions, t0, check.check)
			for _, o := range out {
				if o.Result != Success || o.Err != nil {
					t.Errorf("%s: %s (%v), want success: its check found nothing changed", o.Action.Key, o.Result, o.Err)
				}
			}
			if got := f.called(); !slices.Equal(got, tc.calls) {
				t.Errorf("calls %q, want %q", got, tc.calls)
			}
			f.mu.Lock()
			args := slices.Clone(f.netArgs)
			f.mu.Unlock()
			if !reflect.DeepEqual(args, tc.args) {
				t.Errorf("the node was handed %+v, want what the plan named: %+v", args, tc.args)
			}
			// Each step checked once, right before it ran.
			var keys []string
			for _, a := range tc.actions {
				keys = append(keys, a.Key)
			}
			slices.Sort(keys)
			if got := check.keys(); !slices.Equal(got, keys) {
				t.Errorf("checked %q, want each step once: %q", got, keys)
			}
			if len(e.backoffs) != 0 {
				t.Errorf("a step that ran backs off: %v", e.backoffs)
			}
		})
	}
}

// A step its check aborts did not succeed: whatever depends on it is
// skipped, its call never made, though its own check (asked or not) would
// let it run. A step that depends on a skipped one is skipped in turn.
func TestAStepAbortedByItsCheckAlsoSkipsWhatDependsOnIt(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		actions []gc.Action
		abort   string            // the key its check aborts
		want    map[string]Result // every action's result
		skipped map[string]string // a dependent's key → the dependency its error names
		never   []string          // calls that must not be made
		made    []string          // calls that must be made (the unrelated steps)
	}{
		{"an orphan's sandbox stop waits for its containers' stops",
			[]gc.Action{stopCtr("c1"), stopCtr("c2"), stopSb("sb", "stop-container/c1", "stop-container/c2")}, "stop-container/c1",
			map[string]Result{"stop-container/c1": Aborted, "stop-container/c2": Success, "stop-sandbox/sb": Skipped},
			map[string]string{"stop-sandbox/sb": "stop-container/c1"},
			[]string{"StopContainer c1", "StopPodSandbox sb"}, []string{"StopContainer c2"}},
		{"a log link waits for its container's removal",
			[]gc.Action{rmCtr("c1"), rmLink("/l/c1", "container/c1")}, "container/c1",
			map[string]Result{"container/c1": Aborted, "log-link//l/c1": Skipped},
			map[string]string{"log-link//l/c1": "container/c1"},
			[]string{"RemoveContainer c1", "RemoveContainerLogLink /l/c1"}, nil},
		{"a pod log dir and a log link wait for the sandbox; what waits for them too",
			[]gc.Action{rmSb("sb"), rmLogDir("/p/1", "sandbox/sb"), rmLink("/l/1", "sandbox/sb"), rmLink("/l/2", "pod-log-dir//p/1"), rmLogDir("/p/other")}, "sandbox/sb",
			map[string]Result{"sandbox/sb": Aborted, "pod-log-dir//p/1": Skipped, "log-link//l/1": Skipped, "log-link//l/2": Skipped, "pod-log-dir//p/other": Success},
			map[string]string{"pod-log-dir//p/1": "sandbox/sb", "log-link//l/1": "sandbox/sb", "log-link//l/2": "pod-log-dir//p/1"},
			[]string{"StopPodSandbox sb", "RemovePodSandbox sb", "RemovePodLogDir /p/1", "RemoveContainerLogLink /l/1", "RemoveContainerLogLink /l/2"},
			[]string{"RemovePodLogDir /p/other"}},
		{"an orphaned pod's cgroup waits for its pod dir",
			[]gc.Action{rmPodDir("uid-1"), destroyCgroup("uid-1", "pod-dir/uid-1")}, "pod-dir/uid-1",
			map[string]Result{"pod-dir/uid-1": Aborted, "pod-cgroup/uid-1": Skipped},
			map[string]string{"pod-cgroup/uid-1": "pod-dir/uid-1"},
			[]string{"RemoveOrphanedPodDir uid-1", "DestroyPodCgroup uid-1"}, nil},
		{"a netns waits for the CNI DELs that ran in it",
			[]gc.Action{delAttachment("1eaced"), rmNetns("/var/run/netns/cni-1eaced", "1eaced", "cni-attachment/pods/1eaced/eth0")}, "cni-attachment/pods/1eaced/eth0",
			map[string]Result{"cni-attachment/pods/1eaced/eth0": Aborted, "netns//var/run/netns/cni-1eaced": Skipped},
			map[string]string{"netns//var/run/netns/cni-1eaced": "cni-attachment/pods/1eaced/eth0"},
			[]string{"DeleteCNIAttachment 1eaced", "RemoveNetns /var/run/netns/cni-1eaced"}, nil},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			f := newFake()
			e := newTest(f, Options{MaxParallel: 4})
			check := &keyRecheck{abort: map[string]bool{tc.abort: true}}
			out := e.Execute(context.Background(), tc.actions, t0, check.check)
			if got := results(out); !maps.Equal(got, tc.want) {
				t.Errorf("results %v, want %v", got, tc.want)
			}
			for _, o := range out {
				dep, ok := tc.skipped[o.Action.Key]
				if !ok {
					continue
				}
				// The dependency's result in parentheses: aborted for a
				// direct dependent, skipped further down the chain.
				why := "dependency " + dep + " did not succeed (" + string(Skipped) + ")"
				if dep == tc.abort {
					why = "dependency " + dep + " did not succeed (" + string(Aborted) + ")"
				}
				if o.Err == nil || !strings.Contains(o.Err.Error(), why) {
					t.Errorf("%s: %s with error %v, want skipped with %q", o.Action.Key, o.Result, o.Err, why)
				}
			}
			for _, c := range tc.never {
				if f.has(c) {
					t.Errorf("%s was called (calls %q)", c, f.called())
				}
			}
			for _, c := range tc.made {
				if !f.has(c) {
					t.Errorf("%s was not called (calls %q): an unrelated step must still run", c, f.called())
				}
			}
			if len(e.backoffs) != 0 {
				t.Errorf("an aborted step, or one skipped for it, backs off: %v", e.backoffs)
			}
		})
	}
}

// kubelet's container GC stops an UNKNOWN container before removing it;
// a stop that fails leaves the container for the next pass: the step is
// an error (backing off), nothing of the container is removed (neither its
// log files nor it), and what depends on it is skipped.
func TestAnUnknownContainerWhoseStopFailsIsNotRemoved(t *testing.T) {
	const own = "/var/log/pods/ns_web_uid-1/app/0.log"
	gone := rmCtr("c1")
	gone.StopFirst, gone.Timeout = true, 2*time.Second
	live := gone
	live.Rule, live.ContainerName, live.RemoveLogFiles = gc.RuleContainerMaxPerPod, "app", true
	for _, tc := range []struct {
		rule      string
		actions   []gc.Action
		fail      []string
		want      map[string]Result
		wantCalls []string
	}{
		{"the stop works: stopped, then removed", []gc.Action{gone, rmSb("sb", "container/c1")}, nil,
			map[string]Result{"container/c1": Success, "sandbox/sb": Success},
			[]string{"StopContainer c1", "RemoveContainer c1", "StopPodSandbox sb", "RemovePodSandbox sb"}},
		{"a gone pod's UNKNOWN container whose stop fails stays, and so does its sandbox", []gc.Action{gone, rmSb("sb", "container/c1")},
			[]string{"StopContainer c1"},
			map[string]Result{"container/c1": Error, "sandbox/sb": Skipped},
			[]string{"StopContainer c1"}},
		{"a live pod's UNKNOWN container whose stop fails keeps its log files too", []gc.Action{live, rmLink("/l/c1", "container/c1")},
			[]string{"StopContainer c1"},
			map[string]Result{"container/c1": Error, "log-link//l/c1": Skipped},
			[]string{"StopContainer c1"}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			f := newFake(tc.fail...)
			f.logPaths = map[string]string{"c1": own}
			e := newTest(f, Options{MaxParallel: 4, BackoffMin: time.Minute, BackoffMax: time.Hour})
			out := e.Execute(context.Background(), tc.actions, t0, nil)
			if got := results(out); !maps.Equal(got, tc.want) {
				t.Errorf("results %v, want %v", got, tc.want)
			}
			if got := f.called(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("calls %q, want %q", got, tc.wantCalls)
			}
			if tc.want["container/c1"] != Error {
				return
			}
			o := out[0]
			if !errors.Is(o.Err, errFake) || !strings.Contains(o.Err.Error(), "stop container c1 before removing it") {
				t.Errorf("error %v, want the stop's failure, saying the container was not removed for it", o.Err)
			}
			if want := t0.Add(time.Minute); !o.RetryAt.Equal(want) {
				t.Errorf("retry at %v, want %v: a failed stop backs off like any failure", o.RetryAt, want)
			}
		})
	}
}

// TestAPassStoppedDuringAStepsCheckLeavesTheStepNotStarted: a check cut
// short by the pass's end (SIGTERM, containerd gone) found nothing changed:
// the step and what it carries are not started (skipped, at debug), not
// aborted with a warning that the pod changed.
func TestAPassStoppedDuringAStepsCheckLeavesTheStepNotStarted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFake()
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	e := New(f, f, Options{MaxParallel: 1}, log)
	check := func(ctx context.Context, a gc.Action) error {
		cancel() // the pass ends while the check asks the runtime
		return fmt.Errorf("list pod %s: %w", a.Pod.UID, ctx.Err())
	}
	out := e.Execute(ctx, []gc.Action{rmCtr("c1"), rmSb("sb", "container/c1")}, t0, check)
	for _, o := range out {
		if o.Result != Skipped {
			t.Errorf("%s: %s (%v), want skipped: the pass was stopped, nothing was found changed", o.Action.Key, o.Result, o.Err)
		}
	}
	for _, en := range hook.AllEntries() {
		if en.Level <= logrus.WarnLevel {
			t.Errorf("said at %s: %q", en.Level, en.Message)
		}
	}
	if calls := f.called(); len(calls) > 0 {
		t.Errorf("calls %q after the pass was stopped", calls)
	}
}
