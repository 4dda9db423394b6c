package cri

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime is a CRI runtime service on a unix socket.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	listErr error
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{
		Id: "s1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"}, CreatedAt: 1,
		State: runtimeapi.PodSandboxState_SANDBOX_READY,
	}}}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return nil, f.listErr
}

func (f *fakeRuntime) RemovePodSandbox(context.Context, *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	return nil, status.Error(codes.NotFound, "sandbox gone already")
}

func serve(t *testing.T, rt *fakeRuntime) string {
	t.Helper()
	return serveRuntime(t, rt)
}

// serveRuntime serves any runtime service on a unix socket.
func serveRuntime(t testing.TB, rt runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	return serveServices(t, func(srv *grpc.Server) { runtimeapi.RegisterRuntimeServiceServer(srv, rt) })
}

// serveServices serves what register registers on a unix socket until the
// test ends.
func serveServices(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

func TestAFailedListingFailsTheWholeSnapshot(t *testing.T) {
	endpoint := serve(t, &fakeRuntime{listErr: status.Error(codes.Internal, "boom")})
	c, err := Dial(endpoint, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	snap, err := c.Snapshot(context.Background())
	if err == nil || len(snap.Sandboxes) != 0 {
		t.Fatalf("snapshot = %+v, %v; want an error and nothing", snap, err)
	}
}

func TestObserverSeesEveryCall(t *testing.T) {
	endpoint := serve(t, &fakeRuntime{})
	var mu sync.Mutex
	seen := map[string]error{}
	c, err := Dial(endpoint, time.Second, WithObserver(func(method string, _ time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		seen[method] = err
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	snap, err := c.Snapshot(context.Background())
	if err != nil || len(snap.Sandboxes) != 1 || !snap.Sandboxes[0].Ready {
		t.Fatalf("snapshot = %+v, %v", snap, err)
	}
	if err := c.RemovePodSandbox(context.Background(), "gone"); err != nil {
		t.Fatalf("RemovePodSandbox of a gone sandbox = %v, want nil (NotFound is done)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range []string{"ListPodSandbox", "ListContainers", "RemovePodSandbox"} {
		if _, ok := seen[m]; !ok {
			t.Errorf("observer did not see %s (saw %v)", m, seen)
		}
	}
	if status.Code(seen["RemovePodSandbox"]) != codes.NotFound {
		t.Errorf("observer got %v for RemovePodSandbox, want the raw NotFound", seen["RemovePodSandbox"])
	}
}
