//go:build e2e

// Package e2e tests nri-housekeeper against a real containerd with NRI and
// runc, started by the project's own lab (test/e2e/lab). Kubelet is played by
// the tests: they create kubelet-labelled pods through CRI.
//
// Run: make e2e (installs the lab on first use), as root.
package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/plugin"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// node is the lab shared by the tests of this package; tests that need their
// own containerd (pre-registered plugins) start another one.
var node *lab.Lab

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: these tests drive a real containerd and need root")
		os.Exit(1)
	}
	if err := lab.Install(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: lab install:", err)
		os.Exit(1)
	}
	var err error
	// NRIHK_E2E_LAB lets two runs of this package use separate labs.
	name := "nrihk-e2e"
	if v := os.Getenv("NRIHK_E2E_LAB"); v != "" {
		name = v
	}
	node, err = lab.Start(ctx, lab.Options{Dir: "/tmp/" + name, CgroupRoot: "/" + name})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: lab start:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := node.Down(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: lab down:", err)
		code = 1
	}
	// The benchmarks' busy node: its kubelet root outlives each of them.
	if busyNode.dir != "" {
		if err := os.RemoveAll(busyNode.dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: removing the busy node's dir:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// tracker is the plugin running in the test process against the lab: the
// same plugin, podstate and housekeeping loop the binary wires together, so
// tests can look at the podstate directly.
type tracker struct {
	state  *podstate.State
	nri    *plugin.Plugin
	loop   *housekeeping.Loop
	client *cri.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startTracker(t *testing.T, l *lab.Lab, period time.Duration) *tracker {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	log.SetOutput(testWriter{t})
	client, err := cri.Dial("unix://"+l.CRISocket, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	state := podstate.New(0)
	loop := housekeeping.New(state, client, housekeeping.Options{Period: period, SlowPassWarning: time.Second}, log)
	nri := plugin.New(state, loop, log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	tr := &tracker{state: state, nri: nri, loop: loop, client: client, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		loopDone := make(chan struct{})
		go func() { _ = loop.Run(ctx); close(loopDone) }()
		_ = nri.Run(ctx, plugin.ConnectOptions{SocketPath: l.NRISocket, PluginName: "nri-housekeeper", PluginIndex: "10"})
		<-loopDone
	}()
	t.Cleanup(tr.stop)
	waitFor(t, "the plugin synchronizes with containerd", 10*time.Second, func() bool { return nri.Synchronized() })
	return tr
}

func (tr *tracker) stop() {
	tr.cancel()
	<-tr.done
	_ = tr.client.Close()
}

// listing takes a fresh CRI listing of the managed objects.
func (tr *tracker) listing(t *testing.T) podstate.Listing {
	t.Helper()
	snap, err := tr.client.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("CRI listing: %v", err)
	}
	if len(snap.Malformed) > 0 {
		t.Fatalf("malformed CRI entries: %v", snap.Malformed)
	}
	l, _ := housekeeping.ToListing(0, snap)
	return l
}

// mismatches compares podstate with a fresh listing, without reconciling.
func (tr *tracker) mismatches(t *testing.T) []string {
	t.Helper()
	return tr.state.View().Mismatches(tr.listing(t))
}

// listingSettle is how long a listing may lag the CRI call before it: the
// call returned, and containerd's own store has not caught up yet.
// StopPodSandbox returns once the sandbox controller saw its task exit,
// while the sandbox's state is set NotReady by another goroutine, the exit
// monitor (containerd v2.4.2 internal/cri/server/events.go,
// handleSandboxExit): a listing right after it can still say Ready, while
// NRI already reported the stop.
const listingSettle = 2 * time.Second

// requireMatch fails unless podstate matches a fresh listing, once the
// listing caught up with the CRI calls before it (listingSettle). podstate
// does not change meanwhile: no event comes, and no pass runs.
func (tr *tracker) requireMatch(t *testing.T, checkpoint string) {
	t.Helper()
	before := tr.state.View()
	m := tr.mismatches(t)
	for deadline := time.Now().Add(listingSettle); len(m) > 0 && time.Now().Before(deadline); m = tr.mismatches(t) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(m) > 0 {
		t.Fatalf("%s: podstate differs from the CRI listing %s after the call:\n  %s", checkpoint, listingSettle, strings.Join(m, "\n  "))
	}
	if after := tr.state.View(); after.Seq != before.Seq {
		t.Fatalf("%s: podstate changed (seq %d → %d) while the listing caught up: the match proves nothing", checkpoint, before.Seq, after.Seq)
	}
}

// waitPass waits for the housekeeping pass after now to finish.
func (tr *tracker) waitPass(t *testing.T, within time.Duration) housekeeping.PassResult {
	t.Helper()
	n, _ := tr.loop.Passes()
	var last housekeeping.PassResult
	waitFor(t, "a housekeeping pass", within, func() bool {
		m, r := tr.loop.Passes()
		last = r
		return m > n
	})
	return last
}

func (tr *tracker) pod(t *testing.T, uid string) podstate.PodView {
	t.Helper()
	p, ok := tr.state.Pod(uid)
	if !ok {
		t.Fatalf("pod %s is not tracked", uid)
	}
	return p
}

func (tr *tracker) containerState(t *testing.T, uid, id string) podstate.ContainerState {
	t.Helper()
	for _, c := range tr.pod(t, uid).Containers {
		if c.ID == id {
			return c.State
		}
	}
	t.Fatalf("container %s of pod %s is not tracked", id, uid)
	return 0
}

func (tr *tracker) sandboxState(t *testing.T, uid, id string) podstate.SandboxState {
	t.Helper()
	for _, s := range tr.pod(t, uid).Sandboxes {
		if s.ID == id {
			return s.State
		}
	}
	t.Fatalf("sandbox %s of pod %s is not tracked", id, uid)
	return 0
}

func waitFor(t testing.TB, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("timed out after %v waiting until %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// newPod returns a kubelet-like pod identity unique to this test.
func newPod(t *testing.T, name string) lab.Pod {
	return lab.Pod{Name: name, Namespace: "e2e", UID: lab.NewUID()}
}

// runPod starts a pod with n running containers; it returns the sandbox and
// container IDs.
func runPod(t *testing.T, l *lab.Lab, p lab.Pod, n int) (string, []string) {
	t.Helper()
	ctx := context.Background()
	sb, err := l.RunPod(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range n {
		id, err := l.RunContainer(ctx, p, sb, fmt.Sprintf("app%d", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return sb, ids
}

// cleanupPods removes every pod of the lab after a test, so tests start clean.
func cleanupPods(t *testing.T, l *lab.Lab) {
	t.Cleanup(func() {
		ctx := context.Background()
		r, err := l.Runtime().ListPodSandbox(ctx, nil)
		if err != nil {
			t.Logf("cleanup: list pods: %v", err)
			return
		}
		for _, p := range r.Items {
			_ = l.StopPod(ctx, p.Id)
			_ = l.RemovePod(ctx, p.Id)
		}
		// The pod log dirs the lab's kubelet stand-in created go too, so the
		// next test's plugin does not find (and count) them as leaks.
		entries, _ := os.ReadDir(l.LogRoot)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(l.LogRoot, e.Name()))
		}
	})
}

func kill9(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
}

// buildPlugin builds the nri-housekeeper binary into dir/name, or copies
// NRIHK_E2E_BINARY there when set (to run a test against another build, an
// older commit's for one).
func buildPlugin(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	if bin := os.Getenv("NRIHK_E2E_BINARY"); bin != "" {
		if b, err := exec.Command("cp", bin, out).CombinedOutput(); err != nil {
			t.Fatalf("copying NRIHK_E2E_BINARY: %v\n%s", err, b)
		}
		return out
	}
	cmd := exec.Command("go", "build", "-o", out, "github.com/nri-housekeeper/nri-housekeeper/cmd/nri-housekeeper")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// processes returns the pids whose executable path is exe.
func processes(exe string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && target == exe {
			pids = append(pids, pid)
		}
	}
	return pids
}

// testWriter sends log output to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

var _ io.Writer = testWriter{}
