package cri

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerd2IsContainerdFrom2(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		want          bool
	}{
		{"containerd", "v2.4.2", true},
		{"containerd", "2.0.0", true},
		{"containerd", "v2.1.0-rc.1-dirty", true},
		{"containerd", "v1.7.27", false},
		{"containerd", "", false},
		{"containerd", "main", false},
		{"cri-o", "2.0.0", false},
	} {
		if got := containerd2(tc.name, tc.version); got != tc.want {
			t.Errorf("containerd2(%q, %q) = %v, want %v", tc.name, tc.version, got, tc.want)
		}
	}
}

// versionRuntime answers Version; it fails while fail is set.
type versionRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	fail  atomic.Bool
	asked atomic.Int64
}

func (v *versionRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	v.asked.Add(1)
	if v.fail.Load() {
		return nil, errors.New("not serving yet")
	}
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v2.4.2"}, nil
}

// Unknown (the runtime not answering) means stop first, and is asked
// again; once read, the answer is kept.
func TestRemoveStopsSandboxIsAskedUntilKnownThenKept(t *testing.T) {
	rt := &versionRuntime{}
	rt.fail.Store(true)
	c, err := Dial(serveRuntime(t, rt), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if c.RemoveStopsSandbox(ctx) {
		t.Fatal("true while the version cannot be read")
	}
	rt.fail.Store(false)
	for range 3 {
		if !c.RemoveStopsSandbox(ctx) {
			t.Fatal("false for containerd v2.4.2")
		}
	}
	if n := rt.asked.Load(); n != 2 {
		t.Fatalf("Version asked %d times, want 2 (once failing, then once)", n)
	}
}

// slowRemoval answers Version as containerd v2.4.2 (or as v1.7.27 with
// v1) and takes removalTakes to remove a sandbox.
type slowRemoval struct {
	versionRuntime
	v1           bool
	removalTakes time.Duration
}

func (s *slowRemoval) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	if s.v1 {
		return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v1.7.27"}, nil
	}
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v2.4.2"}, nil
}

func (s *slowRemoval) RemovePodSandbox(ctx context.Context, _ *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	select {
	case <-time.After(s.removalTakes):
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A RemovePodSandbox that stops the sandbox first (containerd 2.x) stands
// for a StopPodSandbox and a RemovePodSandbox, and is given the time of
// both: its stop runs the network teardown, and one call's time cut it
// short at every retry. A plain removal keeps one call's time.
func TestARemovalThatStopsFirstIsGivenTheTimeOfBothCalls(t *testing.T) {
	const rpcTimeout = time.Second
	for _, tc := range []struct {
		name    string
		v1      bool
		takes   time.Duration
		wantErr bool
	}{
		{"containerd 2: the stop and the removal in one call, 1.5 call's time", false, 1500 * time.Millisecond, false},
		{"containerd 2: more than both calls' time", false, 2500 * time.Millisecond, true},
		{"containerd 1.7: a removal only, 1.5 call's time", true, 1500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &slowRemoval{v1: tc.v1, removalTakes: tc.takes}
			c, err := Dial(serveRuntime(t, rt), rpcTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if got := c.RemoveStopsSandbox(ctx); got == tc.v1 { // as the executor asks, right before
				t.Fatalf("RemoveStopsSandbox = %v", got)
			}
			err = c.RemovePodSandbox(ctx, "sb")
			if (err != nil) != tc.wantErr {
				t.Fatalf("RemovePodSandbox: %v, want an error: %v", err, tc.wantErr)
			}
		})
	}
}
