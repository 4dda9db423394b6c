package main

// The binary's lifecycle: each test here failed before its fix (an
// independent review's proof tests).

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// signalledRuntime is a CRI runtime with nothing listed. Asked for one
// pod's sandboxes (the check right before a step), it sends this process
// SIGTERM, as systemd, a Job's deadline or an operator's Ctrl-C would, and
// answers once the caller gave up.
type signalledRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	signalled chan struct{}
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
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
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
	runtimeapi.RegisterRuntimeServiceServer(srv, signalledRuntime{signalled: make(chan struct{})})
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
