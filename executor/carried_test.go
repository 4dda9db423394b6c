package executor

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-housekeeper/nri-housekeeper/gc"
)

// partialRemover is a runtime whose RemovePodSandbox does what containerd's
// does when it fails late (v2.4.2 internal/cri/server/sandbox_remove.go):
// it stops the sandbox, removes the sandbox's containers one by one, and
// then fails (ShutdownSandbox, the sandbox store, or the client's deadline).
// ContainerLogPaths lists what is left of the pod.
type partialRemover struct {
	*fake
	containers map[string]bool // the pod's containers the runtime still has
	failAfter  int             // containers removed before RemovePodSandbox fails
	listErr    error           // what ContainerLogPaths fails with (nil: it answers)
}

func (p *partialRemover) RemovePodSandbox(ctx context.Context, id string) error {
	_ = p.fake.RemovePodSandbox(ctx, id)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range []string{"c1", "c2"} {
		if n == p.failAfter {
			break
		}
		delete(p.containers, c)
		n++
	}
	return errors.New("failed to delete sandbox: shim ttrpc: closed")
}

func (p *partialRemover) ContainerLogPaths(_ context.Context, _ string) (map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listErr != nil {
		return nil, p.listErr
	}
	out := map[string]string{}
	for c := range p.containers {
		out[c] = ""
	}
	return out, nil
}

// A combined reclaim (one RemovePodSandbox carrying the sandbox's dead
// containers) that fails after containerd removed some of the containers
// must not report those containers as "skipped: its sandbox was not
// removed": the README promises each container its own log line, metric
// and outcome, and a removal the plugin caused must be logged as done.
func TestACarriedContainerTheRuntimeRemovedIsNotReportedAsSkipped(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failAfter int
		listErr   error
		want      map[string]Result
	}{
		{"both containers removed, then the sandbox removal failed", 2, nil,
			map[string]Result{"container/c1": Success, "container/c2": Success, "sandbox/sb": Error}},
		{"one container removed, then the removal failed", 1, nil,
			map[string]Result{"container/c1": Success, "container/c2": Skipped, "sandbox/sb": Error}},
		// Not reported removed when the runtime cannot say it removed them.
		{"both containers removed, then the removal failed, and what is left cannot be listed", 2, errors.New("rpc error: code = Unavailable"),
			map[string]Result{"container/c1": Skipped, "container/c2": Skipped, "sandbox/sb": Error}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &partialRemover{fake: newFake(), containers: map[string]bool{"c1": true, "c2": true}, failAfter: tc.failAfter, listErr: tc.listErr}
			log, hook := logtest.NewNullLogger()
			log.SetLevel(logrus.DebugLevel)
			e := New(rt, rt.fake, Options{MaxParallel: 4, BackoffMin: time.Minute, BackoffMax: time.Hour}, log)
			e.jitter, e.since = noJitter, frozen
			out := e.Execute(context.Background(), []gc.Action{rmCtr("c1"), rmCtr("c2"), rmSb("sb", "container/c1", "container/c2")}, t0, nil)
			got := results(out)
			for key, want := range tc.want {
				if got[key] != want {
					t.Errorf("%s: %s, want %s (the runtime has %v left)", key, got[key], want, rt.containers)
				}
			}
			if tc.listErr == nil && !rt.containers["c1"] && !loggedWith(hook, "removed container with its sandbox", "container_id", "c1") {
				t.Errorf("container c1 was removed by the plugin's RemovePodSandbox, but no log line says so")
			}
			// Whose fate cannot be told is said, with why: if containerd
			// removed it, no later listing has it, and nothing else would.
			if tc.listErr != nil {
				for _, id := range []string{"c1", "c2"} {
					said := false
					for _, en := range hook.AllEntries() {
						err, _ := en.Data[logrus.ErrorKey].(error)
						if en.Level == logrus.WarnLevel && en.Data["container_id"] == id && err != nil &&
							strings.Contains(err.Error(), "Unavailable") && strings.Contains(en.Message, "not known whether done") {
							said = true
						}
					}
					if !said {
						t.Errorf("container %s: no warning says its fate is unknown and why", id)
					}
				}
			}
		})
	}
}

// A sandbox's check right before its removal is its pod's: a container the
// sandbox references but whose labels name another pod (not kubelet's doing,
// but a listing may hold it) is checked as that pod's, in its own call, and
// is not removed with the sandbox while its own check finds its pod back.
func TestAContainerOfAnotherPodIsNotCarriedPastItsOwnCheck(t *testing.T) {
	other := rmCtr("c1")
	other.Pod = gc.PodRef{UID: "uid-2", Namespace: "ns", Name: "other"}
	f := newFake()
	check := &keyRecheck{abort: map[string]bool{other.Key: true}} // only uid-2 has changed
	out := newTest(f, Options{MaxParallel: 4}).Execute(context.Background(), []gc.Action{other, rmSb("sb", other.Key)}, t0, check.check)
	if got, want := results(out), map[string]Result{"container/c1": Aborted, "sandbox/sb": Skipped}; !maps.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	if calls := f.called(); len(calls) > 0 {
		t.Errorf("calls %q: the container went without its own check passing", calls)
	}
}

// TestContainersCarriedByASandboxWhoseCheckAbortsAreAbortedToo: the
// sandbox's check right before it is its pod's, and so the check of the
// containers it carries (its own pod's only): each is counted and said
// aborted, as its own step would have been, once while the reason lasts.
func TestContainersCarriedByASandboxWhoseCheckAbortsAreAbortedToo(t *testing.T) {
	f := newFake()
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	e := New(f, f, Options{MaxParallel: 4}, log)
	e.jitter, e.since = noJitter, frozen
	check := &keyRecheck{abort: map[string]bool{"sandbox/sb": true}}
	plan := []gc.Action{rmCtr("c1"), rmCtr("c2"), rmSb("sb", "container/c1", "container/c2")}
	out := e.Execute(context.Background(), plan, t0, check.check)
	if got, want := results(out), map[string]Result{"container/c1": Aborted, "container/c2": Aborted, "sandbox/sb": Aborted}; !maps.Equal(got, want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	if calls := f.called(); len(calls) > 0 {
		t.Errorf("calls %q after the sandbox's check failed", calls)
	}
	for _, o := range out {
		if !errors.Is(o.Err, errChanged) {
			t.Errorf("%s: error %v, want the check's reason", o.Action.Key, o.Err)
		}
	}
	warned := func() int {
		n := 0
		for _, en := range hook.AllEntries() {
			if en.Level == logrus.WarnLevel && en.Message == "not done: checked again right before it: remove container" {
				n++
			}
		}
		return n
	}
	if n := warned(); n != 2 {
		t.Errorf("%d warnings for the carried containers, want one each", n)
	}
	e.Execute(context.Background(), plan, t0, check.check)
	if n := warned(); n != 2 {
		t.Errorf("%d warnings after the same abort again, want them said once", n)
	}
}
