package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// stopRecorder records CRI calls with their stop timeouts.
type stopRecorder struct{ calls []string }

func (r *stopRecorder) StopContainer(_ context.Context, id string, timeout time.Duration) error {
	r.calls = append(r.calls, fmt.Sprintf("StopContainer %s %v", id, timeout))
	return nil
}
func (r *stopRecorder) RemoveContainer(_ context.Context, id string) error {
	r.calls = append(r.calls, "RemoveContainer "+id)
	return nil
}
func (r *stopRecorder) StopPodSandbox(_ context.Context, id string) error {
	r.calls = append(r.calls, "StopPodSandbox "+id)
	return nil
}
func (r *stopRecorder) ContainerLogPaths(_ context.Context, uid string) (map[string]string, error) {
	r.calls = append(r.calls, "ContainerLogPaths "+uid)
	return nil, nil
}
func (r *stopRecorder) RemovePodSandbox(_ context.Context, id string) error {
	r.calls = append(r.calls, "RemovePodSandbox "+id)
	return nil
}

// Case 9 of the safety review: an UNKNOWN container of a gone pod is stopped
// with its pod's grace (at least kubelet's 2 s) and removed right after, as kubelet's
// container GC does (killContainer, then removeContainer); its sandbox goes
// in the same pass.
func TestAnUnknownContainerIsStoppedThenRemovedInTheSamePass(t *testing.T) {
	labels := map[string]string{podstate.LabelPodUID: "u1", podstate.LabelPodNamespace: "ns", podstate.LabelPodName: "p"}
	now := time.Now()
	plan := gc.Plan(gc.Input{Now: now,
		Policy:     gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, Budget: gc.Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 10}, PodLogsDir: "/var/log/pods", ContainerLogsDir: "/var/log/containers"},
		Oracle:     gc.Oracle{PodDirs: nodefs.PodDirs{Ready: true}},
		Sandboxes:  []cri.Sandbox{{ID: "s1", UID: "u1", CreatedAt: now.Add(-time.Hour), Labels: labels}},
		Containers: []cri.Container{{ID: "c1", SandboxID: "s1", Name: "app", State: cri.ContainerUnknown, CreatedAt: now.Add(-time.Hour), Labels: labels}},
	})
	rt := &stopRecorder{}
	New(rt, newFake(), Options{MaxParallel: 1}, nil).Execute(context.Background(), plan.Actions, now, nil)
	want := []string{"StopContainer c1 2s", "RemoveContainer c1", "StopPodSandbox s1", "RemovePodSandbox s1"}
	if fmt.Sprint(rt.calls) != fmt.Sprint(want) {
		t.Fatalf("calls = %q, want %q", rt.calls, want)
	}
}

// A step is checked again right before it runs: when the check finds the
// pod back, the step is not taken (aborted, no backoff, logged), and what
// depends on it is skipped. CRI steps are checked too (the loop's check
// says which rules need it); log links and dry runs are not.
func TestStepsAreCheckedAgainRightBeforeTheyRun(t *testing.T) {
	f := newFake()
	var mu sync.Mutex
	var checked []string
	recheck := func(_ context.Context, a gc.Action) error {
		mu.Lock()
		defer mu.Unlock()
		checked = append(checked, a.Key)
		if a.Path == "/p/back" {
			return errors.New("kubelet's pod dir is back")
		}
		return nil
	}
	log, hook := logtest.NewNullLogger()
	e := New(f, f, Options{MaxParallel: 2}, log)
	link := gc.Action{Kind: gc.RemoveContainerLogLink, Key: "log-link//l/x.log", Path: "/l/x.log"}
	actions := []gc.Action{rmSb("sb"), rmLogDir("/p/back"), rmLogDir("/p/gone"), link}
	got := results(e.Execute(context.Background(), actions, t0, recheck))
	if got["sandbox/sb"] != Success || got["pod-log-dir//p/back"] != Aborted || got["pod-log-dir//p/gone"] != Success || got[link.Key] != Success {
		t.Fatalf("results = %v", got)
	}
	slices.Sort(checked)
	if want := []string{"pod-log-dir//p/back", "pod-log-dir//p/gone", "sandbox/sb"}; !slices.Equal(checked, want) {
		t.Fatalf("checked %v, want %v: the sandbox and the two node steps, not the link", checked, want)
	}
	for _, c := range f.calls {
		if c.id == "/p/back" {
			t.Fatal("the aborted step ran")
		}
	}
	if e.backoffs["pod-log-dir//p/back"] != nil {
		t.Fatal("an aborted step backs off like a failure")
	}
	warned := false
	for _, entry := range hook.AllEntries() {
		if strings.Contains(entry.Message, "checked again right before it") && entry.Data[logging.FieldAction] == string(gc.RemovePodLogDir) {
			warned = true
		}
	}
	if !warned {
		t.Fatal("the aborted step is not logged with its action")
	}

	// The same abort again is not a new warning.
	hook.Reset()
	e.Execute(context.Background(), []gc.Action{rmLogDir("/p/back")}, t0, recheck)
	for _, entry := range hook.AllEntries() {
		if entry.Level <= logrus.WarnLevel {
			t.Fatalf("the same abort warned again: %s", entry.Message)
		}
	}

	// A dry run checks nothing: nothing runs.
	checked = nil
	dry := New(f, f, Options{DryRun: true}, nil)
	if got := results(dry.Execute(context.Background(), []gc.Action{rmLogDir("/p/back")}, t0, recheck)); got["pod-log-dir//p/back"] != Would || len(checked) != 0 {
		t.Fatalf("dry run: results %v, checked %v", got, checked)
	}
}
