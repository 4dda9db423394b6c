package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// A stop signal while the pods dir is read is no unreadable pods dir: a
// pod seen torn down, restored from the state file and not yet looked at,
// keeps its mark, and the state file written at the stop keeps it. (It was
// dropped as a mark none had checked while the pods dir could not be read,
// and the next start only reported its orphaned dir.)
func TestAStopDuringThePassKeepsARestoredTornDownMark(t *testing.T) {
	uid := testUID(7)
	root := podDirs(t, uid)
	path := filepath.Join(t.TempDir(), "state.json")
	data, err := statefile.Encode(statefile.State{TornDown: []statefile.TornDown{{UID: uid, Namespace: "ns", Name: "p", At: now.Add(-time.Minute)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	opts := Options{Period: time.Minute, KubeletRoot: root, StateFile: path, Synchronized: func() bool { return true },
		Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}
	first, firstLogs := restartedLoop(nil, opts, rt, now)
	if first.tornDown[uid] == nil {
		t.Fatal("the mark is not restored: the test proves nothing")
	}
	ctx, cancel := context.WithCancel(context.Background())
	rt.onSnapshot = cancel // SIGTERM while the listing is taken
	first.Pass(ctx)
	rt.onSnapshot = nil
	if strings.Contains(firstLogs(), "level=warning") {
		t.Errorf("the stopped pass warned of its sources:\n%s", firstLogs())
	}
	second, logs := restartedLoop(first, opts, rt, now.Add(time.Second)) // Close, then a new start
	t.Cleanup(func() { _ = second.Close() })
	if second.tornDown[uid] == nil {
		t.Fatalf("after a stop during the first pass, the pod seen torn down is forgotten:\n%s", logs())
	}
}

// A CPU reduction waits while the state file cannot be written before it,
// as the other steps on what may be a live workload do: it frees no disk,
// and counted in memory only, a crash loop would take its hour afresh.
func TestACPUReductionWaitsWhileTheStateFileCannotBeWritten(t *testing.T) {
	log, _ := testLogger()
	loop := New(podstate.New(0), &fakeRuntime{}, Options{Period: time.Minute}, log)
	loop.warning = map[string]bool{}
	cpu := gc.Action{Kind: gc.ReducePodCgroupCPU, Rule: gc.RuleCgroupVolumesRemain, Key: "pod-cgroup-cpu/u", Pod: gc.PodRef{UID: "u"}}
	logDir := gc.Action{Kind: gc.RemovePodLogDir, Rule: gc.RulePodLogDir, Key: "pod-log-dir/x", Pod: gc.PodRef{UID: "u"}}
	kept, held := loop.holdUnrecorded([]gc.Action{cpu, logDir}, os.ErrPermission)
	if len(kept) != 1 || kept[0].Key != logDir.Key || len(held) != 1 || held[0].Key != cpu.Key {
		t.Fatalf("kept %v, held %v: want the pod log dir removed (it frees the disk) and the CPU reduction held", kept, held)
	}
}

// A pass whose listing is not trusted looks at nothing, so nothing it said
// once while it lasts has ended: the next trusted pass does not say it
// again, and the steps keep their backoffs. (An untrusted pass forgot
// both: a listing flapping between trusted and not repeated every such
// line, and retried a failing step without its backoff.)
func TestAnUntrustedPassForgetsNothingSaidOnce(t *testing.T) {
	uid := testUID(10)
	root := podDirs(t, uid)
	logs := t.TempDir()
	if err := os.Mkdir(filepath.Join(logs, "not-a-pod-log-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := podstate.New(0)
	state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
	rt := &fakeRuntime{exists: map[string]bool{"s1": true}}
	log, buf := testLogger()
	exec := &fakeExecutor{}
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Synchronized: func() bool { return true }, Executor: exec,
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: logs, ContainerLogsDir: t.TempDir()}}, log)
	live := []cri.Sandbox{{ID: "s1", UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)}}
	for i, sbs := range [][]cri.Sandbox{live, nil, live, nil, live} {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Minute), Sandboxes: sbs}, nil)
		if r := loop.Pass(context.Background()); (r.Untrusted != "") != (sbs == nil) {
			t.Fatalf("pass %d: untrusted %q: the test proves nothing", i+1, r.Untrusted)
		}
	}
	// Nor are the steps' backoffs forgotten: only trusted passes plan.
	if exec.forgot != 3 {
		t.Errorf("the executor forgot its backoffs %d times, want 3 (the trusted passes)", exec.forgot)
	}
	if n := strings.Count(buf.String(), "left alone: not a name kubelet writes"); n != 1 {
		t.Fatalf("said %d times over 5 passes, 2 of them untrusted; want once:\n%s", n, buf.String())
	}
}

// The malformed-entries warning is said once for the same entries, in
// whatever order the runtime lists them (containerd lists from a map).
// (It was said again each time the order changed.)
func TestTheMalformedWarningIsSaidOnceWhateverTheOrder(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := cri.Malformed{Kind: "container", ID: "c1", Reason: "no creation time", SandboxID: "s1", PodUID: "u1"}
	b := cri.Malformed{Kind: "container", ID: "c2", Reason: "no creation time", SandboxID: "s1", PodUID: "u1"}
	sb := []cri.Sandbox{{ID: "s1", UID: "u1", CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels("u1")}}
	rt := &fakeRuntime{}
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Hour, KubeletRoot: root, Executor: &fakeExecutor{},
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	for i, order := range [][]cri.Malformed{{a, b}, {b, a}, {a, b}, {b, a}} {
		rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Minute), Sandboxes: sb, Malformed: order}, nil)
		loop.Pass(context.Background())
	}
	if n := strings.Count(buf.String(), "malformed entries"); n != 1 {
		t.Fatalf("warned %d times in 4 passes, only the order changed; want once:\n%s", n, buf.String())
	}
}

// A pass stopped while it asks the runtime (SIGTERM) says nothing of the
// sources it could not read then, whatever error the cut-short call gives
// (gRPC's Canceled status is not context.Canceled): the runtime is not
// distrusted, and nothing is remembered as said.
func TestAStoppedPassSaysNothingOfItsSources(t *testing.T) {
	uid := testUID(11)
	root := podDirs(t, uid)
	state := podstate.New(0)
	state.Synchronize(now.Add(-time.Hour), []podstate.SyncedSandbox{{Pod: ident(uid), SandboxID: "s1"}}, nil)
	// s1, live to NRI, is not listed: the pass asks the runtime for it,
	// and the stop cuts that call short.
	rt := &fakeRuntime{existsErr: status.FromContextError(context.Canceled).Err()}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	log, buf := testLogger()
	loop := New(state, rt, Options{Period: time.Minute, KubeletRoot: root, Synchronized: func() bool { return true },
		Policy: gc.Policy{LeakGrace: time.Minute, MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
	ctx, cancel := context.WithCancel(context.Background())
	rt.onSnapshot = cancel
	loop.Pass(ctx)
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "level=warning") || strings.Contains(line, "level=error") {
			t.Errorf("a stopped pass said: %s", line)
		}
	}
	if len(loop.said) > 0 {
		t.Errorf("a stopped pass remembers as said: %v", loop.said)
	}
}
