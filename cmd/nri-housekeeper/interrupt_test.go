package main

// The binary's lifecycle: each test here failed before its fix (an
// independent review's proof tests).

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// signalledRuntime is a CRI runtime with nothing listed. Asked for one
// pod's sandboxes (the check right before a step), it closes signalled and
// calls signal, if set, which sends the signal (as systemd, a Job's
// deadline or an operator's Ctrl-C would), and answers once the caller gave
// up.
type signalledRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	signalled chan struct{}
	signal    func()
}

func (signalledRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v2.4.2", RuntimeApiVersion: "v1"}, nil
}

func (r signalledRuntime) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	if req.GetFilter() == nil {
		return &runtimeapi.ListPodSandboxResponse{}, nil // the pass's listing
	}
	select {
	case <-r.signalled:
	default:
		close(r.signalled)
		if r.signal != nil {
			r.signal()
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

func (signalledRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{}, nil
}

// TestOnceStoppedBySignalDoesNotExitZero: a SIGTERM (or Ctrl-C) that
// arrives while once takes its steps ends the pass: the step in flight is
// not done ("aborted": its check could not finish) and the rest are
// skipped. once then printed "executed 0 action(s), 0 failed" and exited 0,
// the code its help gives for "every step taken succeeded (or none was
// due)": a script or cron job cannot tell a run cut short, its leaks left,
// from one that reclaimed them.
func TestOnceStoppedBySignalDoesNotExitZero(t *testing.T) {
	dir := t.TempDir()
	gone := []string{"ns_gone-a_0b1e5e54-5b2b-4b0e-9f3a-1c2d3e4f5a6b", "ns_gone-b_1b1e5e54-5b2b-4b0e-9f3a-1c2d3e4f5a6b"}
	for _, d := range append([]string{
		"kubelet/pods/2b1e5e54-5b2b-4b0e-9f3a-1c2d3e4f5a6b", // a live pod: the pods dir is not empty
		"containers",
	}, "pods-logs/"+gone[0], "pods-logs/"+gone[1]) {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, signalledRuntime{
		signalled: make(chan struct{}),
		signal:    func() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) },
	})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	path := writeOnceConfig(t, dir, "unix://"+sock, "max_parallel = 1\n")
	var stdout, stderr bytes.Buffer
	code := run([]string{"once", "--config", path, "--leak-grace", "0s"}, &stdout, &stderr)
	for _, g := range gone {
		if _, err := os.Stat(filepath.Join(dir, "pods-logs", g)); err != nil {
			t.Fatalf("pod log dir %s was removed (%v): the signal did not cut the pass short, the test proves nothing", g, err)
		}
	}
	if code == 0 {
		t.Errorf("once exited 0 although a signal stopped it before its steps were taken; stdout:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "stopped by a signal") {
		t.Errorf("stderr does not say once was stopped by a signal:\n%s", tail(stderr.String(), 600))
	}
}

// TestOnceStoppedBySIGHUPStopsGracefully: SIGHUP (containerd and kubelet
// end on it too) stops once as SIGTERM does: the pass is cut short, Close
// writes the state file, once says a signal stopped it and exits 1. Go's
// default for an unhandled SIGHUP is to end the process at once, as
// SIGKILL would: no state file written, no word said.
func TestOnceStoppedBySIGHUPStopsGracefully(t *testing.T) {
	dir := t.TempDir()
	gone := []string{"ns_gone-a_0b1e5e54-5b2b-4b0e-9f3a-1c2d3e4f5a6b", "ns_gone-b_1b1e5e54-5b2b-4b0e-9f3a-1c2d3e4f5a6b"}
	for _, d := range []string{
		"kubelet/pods/2b1e5e54-5b2b-4b0e-9f3a-1c2d3e4f5a6b", // a live pod: the pods dir is not empty
		"containers", "pods-logs/" + gone[0], "pods-logs/" + gone[1],
	} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rt := signalledRuntime{signalled: make(chan struct{})}
	stateFile := filepath.Join(dir, "state", "state.json")
	path := writeChildConfig(t, dir, serveRuntime(t, rt), "max_parallel = 1\nstate_file = \""+stateFile+"\"\n", "")

	c := startChild(t, "once", "--config", path, "--leak-grace", "0s")
	select {
	case <-rt.signalled: // in the check right before its first step
	case <-c.exited:
		t.Fatalf("once exited before its first step; stderr:\n%s", tail(c.Stderr(), 1500))
	case <-time.After(4 * time.Second):
		t.Fatalf("once did not reach its first step; stderr:\n%s", tail(c.Stderr(), 1500))
	}
	c.signal(t, syscall.SIGHUP)
	code := c.wait(t, 4*time.Second)

	for _, g := range gone {
		if _, err := os.Stat(filepath.Join(dir, "pods-logs", g)); err != nil {
			t.Fatalf("pod log dir %s was removed (%v): the signal did not cut the pass short, the test proves nothing", g, err)
		}
	}
	if code != 1 {
		t.Errorf("once exited %d after SIGHUP cut its pass short, want 1 (as for SIGTERM); stdout:\n%s", code, c.stdout.String())
	}
	if stderr := c.Stderr(); !strings.Contains(stderr, "stopped by a signal (hangup)") || !containsAll(stderr, `msg="stopping`, "signal=hangup") {
		t.Errorf("stderr does not say SIGHUP (hangup) stopped once:\n%s", tail(stderr, 1500))
	}
	// The state file was written before the steps, counting both; the
	// write at Close gives back the units of steps that never ran.
	s, err := statefile.Load(context.Background(), stateFile)
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	if len(s.Spent) != 0 {
		t.Errorf("the state file still counts %d budgeted step(s) that never ran: Close did not write it", len(s.Spent))
	}
}

// TestRunStoppedBySIGHUPStopsGracefully: the plugin stops on SIGHUP as on
// SIGTERM, saying which signal, and exits 0 after writing the state file.
// Before, SIGHUP ended it at once, as SIGKILL would.
func TestRunStoppedBySIGHUPStopsGracefully(t *testing.T) {
	dir := t.TempDir()
	stateFile := filepath.Join(dir, "state", "state.json")
	// No containerd at the NRI socket: the plugin waits, reconnecting, and
	// its loop waits for the startup delay; neither holds a stop.
	path := writeChildConfig(t, dir, serveRuntime(t, signalledRuntime{signalled: make(chan struct{})}),
		"state_file = \""+stateFile+"\"\n", "[nri]\nsocket = \""+filepath.Join(dir, "nri.sock")+"\"\n[metrics]\naddress = \"\"\n")

	c := startChild(t, "run", "--config", path)
	if !c.waitLine(4*time.Second, "nri-housekeeper starting") {
		t.Fatalf("run did not start; stderr:\n%s", tail(c.Stderr(), 1500))
	}
	c.signal(t, syscall.SIGHUP)
	if code := c.wait(t, 4*time.Second); code != 0 {
		t.Errorf("run exited %d after SIGHUP, want 0 (as for SIGTERM)", code)
	}
	stderr := c.Stderr()
	if !containsAll(stderr, `level=info msg="stopping`, "signal=hangup") || !strings.Contains(stderr, `msg="nri-housekeeper stopped"`) {
		t.Errorf("the log does not say it stopped on SIGHUP (hangup):\n%s", tail(stderr, 1500))
	}
	if _, err := statefile.Load(context.Background(), stateFile); err != nil {
		t.Errorf("state file not written at the stop: %v", err)
	}
}

// slowListingRuntime is a CRI runtime with nothing listed whose listing
// of every sandbox (a pass's first call) closes listing and then answers
// only once the caller gave up, or after 5s.
type slowListingRuntime struct {
	signalledRuntime
	listing chan struct{}
	once    *sync.Once
}

func (r slowListingRuntime) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	if req.GetFilter() != nil {
		return &runtimeapi.ListPodSandboxResponse{}, nil
	}
	r.once.Do(func() { close(r.listing) })
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

// TestASecondSignalExitsAtOnce: a command stuck in a call that does not
// heed its context (on a node, a read of a hung NFS volume, or a log line
// to a journal that stopped reading; here its stderr, full) holds a
// stopping process: the first signal only ends the context. A second
// SIGINT/SIGTERM/SIGHUP exits at once, with status 1, even though it
// cannot say so. Before, the second signal was swallowed, and only SIGKILL
// (systemd's, after TimeoutStopSec) ended the process; and each signal was
// logged before it was acted on, so a log that blocked held both.
// TestStopOnSignal checks what a second signal says.
func TestASecondSignalExitsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		cmd           string
		first, second syscall.Signal
	}{
		{"once", syscall.SIGTERM, syscall.SIGINT},
		{"report", syscall.SIGHUP, syscall.SIGTERM},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"kubelet/pods", "containers", "pods-logs"} {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			stateFile := filepath.Join(dir, "state", "state.json")
			listing := make(chan struct{})
			rt := slowListingRuntime{signalledRuntime: signalledRuntime{signalled: make(chan struct{})}, listing: listing, once: &sync.Once{}}
			path := writeChildConfig(t, dir, serveRuntime(t, rt), "state_file = \""+stateFile+"\"\n", "")

			c := startChild(t, tc.cmd, "--config", path)
			// The pass lists (its signals are handled since before it
			// began), and its stderr takes no more.
			select {
			case <-listing:
			case <-c.exited:
				t.Fatalf("%s exited before its pass listed; stderr:\n%s", tc.cmd, tail(c.Stderr(), 1500))
			case <-time.After(5 * time.Second):
				t.Fatalf("%s did not list; stderr:\n%s", tc.cmd, tail(c.Stderr(), 1500))
			}
			release := c.holdStderr(t)
			defer release()
			c.signal(t, tc.first)
			if c.exitsWithin(500 * time.Millisecond) {
				t.Fatalf("%s ended at the first signal (%v): its stop was not held by the full stderr, and the test proves nothing", tc.cmd, tc.first)
			}
			sent := time.Now()
			c.signal(t, tc.second)
			if !c.exitsWithin(sayBeforeExit + 3*time.Second) {
				t.Fatalf("%s still runs %v after a second signal, its stderr full", tc.cmd, sayBeforeExit+3*time.Second)
			}
			t.Logf("exited %v after the second signal", time.Since(sent).Round(time.Millisecond))
			release()
			if code := c.wait(t, 3*time.Second); code != 1 {
				t.Errorf("exit %d after a second signal, want 1", code)
			}
			if _, err := os.Stat(stateFile); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("state file: %v; want none: it exited without writing it", err)
			}
		})
	}
}

// serveRuntime serves rt on a unix socket until the test ends, and
// returns its endpoint.
func serveRuntime(t *testing.T, rt runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

// writeChildConfig writes the configuration of a child's command under dir
// (see writeOnceConfig), with housekeeping in [housekeeping] and the
// sections given added ([cgroups] disabled unless given).
func writeChildConfig(t *testing.T, dir, endpoint, housekeeping, sections string) string {
	t.Helper()
	if !strings.Contains(sections, "[cgroups]") {
		sections += "[cgroups]\nenabled = false\n"
	}
	text := "[runtime]\nendpoint = \"" + endpoint + "\"\n" +
		"[housekeeping]\n" + housekeeping +
		"[pods]\nkubelet_root = \"" + filepath.Join(dir, "kubelet") + "\"\n" +
		"[logs]\npod_logs_dir = \"" + filepath.Join(dir, "pods-logs") + "\"\ncontainer_logs_dir = \"" + filepath.Join(dir, "containers") + "\"\n" +
		sections + "[network]\nenabled = false\n"
	if !strings.Contains(sections, "[log]") {
		text += "[log]\ntarget = \"stderr\"\n"
	}
	path := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A signal while the runtime is listed (a hung containerd) is said as a
// signal, not as a failed listing: the listing's error alone read
// "context canceled".
func TestReportStoppedBySignalDuringTheListingSaysSo(t *testing.T) {
	dir := t.TempDir()
	sock := hungSocket(t, filepath.Join(dir, "hung.sock"))
	path := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(path, []byte("[runtime]\nendpoint = \"unix://"+sock+"\"\nrpc_timeout = \"30s\"\n[log]\ntarget = \"stderr\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(500*time.Millisecond, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) })
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run([]string{"report", "--config", path}, &stdout, &stderr)
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("report took %v: the signal did not end the listing", took)
	}
	if code != 1 || !strings.Contains(stderr.String(), "stopped by a signal (") {
		t.Fatalf("exit %d, want 1 and stderr saying a signal stopped it:\n%s", code, tail(stderr.String(), 600))
	}
}

// slowVersionRuntime answers Version (run's first CRI call) only once the
// caller gave up, after closing asked.
type slowVersionRuntime struct {
	signalledRuntime
	asked chan struct{}
	once  *sync.Once
}

func (r slowVersionRuntime) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	r.once.Do(func() { close(r.asked) })
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
	}
	return nil, ctx.Err()
}

// TestRunStoppedWhileItAsksTheRuntimeSaysNoFault: a stop that comes while
// run asks the CRI runtime for its version (at start) ends that call; that
// is the stop, not a fault of the runtime. It was logged as a warning
// ("CRI runtime not reachable yet ... context canceled") in a clean stop.
func TestRunStoppedWhileItAsksTheRuntimeSaysNoFault(t *testing.T) {
	dir := t.TempDir()
	rt := slowVersionRuntime{signalledRuntime: signalledRuntime{signalled: make(chan struct{})}, asked: make(chan struct{}), once: &sync.Once{}}
	path := writeChildConfig(t, dir, serveRuntime(t, rt),
		"state_file = \"\"\n", "[nri]\nsocket = \""+filepath.Join(dir, "nri.sock")+"\"\n[metrics]\naddress = \"\"\n")
	c := startChild(t, "run", "--config", path)
	select {
	case <-rt.asked:
	case <-time.After(5 * time.Second):
		t.Fatalf("run did not ask the runtime its version; stderr:\n%s", tail(c.Stderr(), 1500))
	}
	c.signal(t, syscall.SIGTERM)
	if code := c.wait(t, 5*time.Second); code != 0 {
		t.Errorf("run exited %d after SIGTERM, want 0", code)
	}
	stderr := c.Stderr()
	if !strings.Contains(stderr, `msg="nri-housekeeper stopped"`) {
		t.Fatalf("run did not say it stopped:\n%s", tail(stderr, 1500))
	}
	if strings.Contains(stderr, "CRI runtime not reachable") { // (no NRI socket here: that warning is due)
		t.Errorf("a stop while asking the runtime is logged as a fault:\n%s", tail(stderr, 1500))
	}
}
