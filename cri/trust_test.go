package cri

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podRuntime answers the filtered listings and status calls the re-checks
// make, and records the filters.
type podRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	sandboxFilter, containerFilter map[string]string
}

func (p *podRuntime) ListPodSandbox(_ context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	p.sandboxFilter = r.GetFilter().GetLabelSelector()
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{Id: "s1"}}}, nil
}

func (p *podRuntime) ListContainers(_ context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	p.containerFilter = r.GetFilter().GetLabelSelector()
	return &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: "c1"}, {Id: "c2"}}}, nil
}

func (p *podRuntime) PodSandboxStatus(_ context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	switch r.GetPodSandboxId() {
	case "known":
		return &runtimeapi.PodSandboxStatusResponse{}, nil
	case "broken":
		return nil, status.Error(codes.Unavailable, "restarting")
	}
	return nil, status.Error(codes.NotFound, "no such sandbox")
}

func TestListPodAsksTheRuntimeForOnePodUID(t *testing.T) {
	rt := &podRuntime{}
	c, err := Dial(serveRuntime(t, rt), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	objs, err := c.ListPod(context.Background(), "uid-1")
	if err != nil || len(objs.Sandboxes) != 1 || len(objs.Containers) != 2 || objs.Empty() {
		t.Fatalf("objects = %+v, %v", objs, err)
	}
	for _, f := range []map[string]string{rt.sandboxFilter, rt.containerFilter} {
		if len(f) != 1 || f["io.kubernetes.pod.uid"] != "uid-1" {
			t.Fatalf("filter = %v, want the pod UID label only", f)
		}
	}
}

func TestSandboxExistsIsFalseOnlyForNotFound(t *testing.T) {
	c, err := Dial(serveRuntime(t, &podRuntime{}), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for id, want := range map[string]bool{"known": true, "gone": false} {
		if got, err := c.SandboxExists(context.Background(), id); err != nil || got != want {
			t.Fatalf("%s: exists %v, %v; want %v", id, got, err, want)
		}
	}
	if _, err := c.SandboxExists(context.Background(), "broken"); err == nil {
		t.Fatal("an unavailable runtime answered that the sandbox is gone")
	}
}
