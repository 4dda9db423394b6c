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
