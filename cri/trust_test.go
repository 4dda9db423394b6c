package cri

import (
	"context"
	"fmt"
	"maps"
	"sync"
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
	containers                     []string          // listed; default c1, c2
	statusErr                      map[string]error  // by container ID
	logPaths                       map[string]string // by container ID

	mu       sync.Mutex
	statuses map[string]int // ContainerStatus calls, by container ID
}

func (p *podRuntime) ListPodSandbox(_ context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	p.sandboxFilter = r.GetFilter().GetLabelSelector()
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{Id: "s1"}}}, nil
}

func (p *podRuntime) ListContainers(_ context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	p.containerFilter = r.GetFilter().GetLabelSelector()
	ids := p.containers
	if ids == nil {
		ids = []string{"c1", "c2"}
	}
	r2 := &runtimeapi.ListContainersResponse{}
	for _, id := range ids {
		r2.Containers = append(r2.Containers, &runtimeapi.Container{Id: id})
	}
	return r2, nil
}

func (p *podRuntime) ContainerStatus(_ context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	p.mu.Lock()
	if p.statuses == nil {
		p.statuses = make(map[string]int)
	}
	p.statuses[r.GetContainerId()]++
	p.mu.Unlock()
	if err := p.statusErr[r.GetContainerId()]; err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: r.GetContainerId(), LogPath: p.logPaths[r.GetContainerId()]}}, nil
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

func TestContainerLogPathsAreThePodsContainersNow(t *testing.T) {
	for _, tt := range []struct {
		rule    string
		rt      *podRuntime
		want    map[string]string
		wantErr bool
	}{
		{"every listed container's log path, by ID", &podRuntime{containers: []string{"c1", "c2", "c3"},
			logPaths: map[string]string{"c1": "/l/p/app/0.log", "c2": "/l/p/app/1.log"}},
			map[string]string{"c1": "/l/p/app/0.log", "c2": "/l/p/app/1.log", "c3": ""}, false},
		{"a container removed since the listing is left out", &podRuntime{containers: []string{"c1", "c2"},
			logPaths: map[string]string{"c1": "/l/p/app/0.log"}, statusErr: map[string]error{"c2": status.Error(codes.NotFound, "gone")}},
			map[string]string{"c1": "/l/p/app/0.log"}, false},
		{"a status that cannot be read fails the whole answer", &podRuntime{containers: []string{"c1", "c2"},
			statusErr: map[string]error{"c2": status.Error(codes.Unavailable, "restarting")}}, nil, true},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			c, err := Dial(serveRuntime(t, tt.rt), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := c.ContainerLogPaths(context.Background(), "uid-1")
			if (err != nil) != tt.wantErr || !maps.Equal(got, tt.want) {
				t.Fatalf("paths = %v, %v; want %v (error: %v)", got, err, tt.want, tt.wantErr)
			}
			if f := tt.rt.containerFilter; len(f) != 1 || f["io.kubernetes.pod.uid"] != "uid-1" {
				t.Fatalf("filter = %v, want the pod UID label only", f)
			}
		})
	}
}

// TestEachContainersLogPathIsAskedOnce: removing the dead instances of one
// pod one by one reads the pod's log paths before each removal. A log path
// never changes once the container is created, so each container's status
// is asked once, not once per removal (N² calls for N instances); the
// listing is still taken every time, so a container created since is asked,
// and one removed since is not in the answer.
func TestEachContainersLogPathIsAskedOnce(t *testing.T) {
	const n = 100
	rt := &podRuntime{logPaths: map[string]string{}}
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		rt.containers = append(rt.containers, id)
		rt.logPaths[id] = fmt.Sprintf("/l/p/app/%d.log", i)
	}
	c, err := Dial(serveRuntime(t, rt), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for len(rt.containers) > 1 {
		got, err := c.ContainerLogPaths(ctx, "uid-1")
		if err != nil {
			t.Fatal(err)
		}
		want := make(map[string]string)
		for _, id := range rt.containers {
			want[id] = rt.logPaths[id]
		}
		if !maps.Equal(got, want) {
			t.Fatalf("with %d containers listed: paths = %v, want %v", len(rt.containers), got, want)
		}
		rt.containers = rt.containers[1:] // the oldest is removed
	}
	rt.containers = append(rt.containers, "new")
	rt.logPaths["new"] = "/l/p/app/0.log" // a restart count started again
	got, err := c.ContainerLogPaths(ctx, "uid-1")
	if err != nil || got["new"] != "/l/p/app/0.log" || len(got) != 2 {
		t.Fatalf("after a container was created: paths = %v, %v; want the new one's path read", got, err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	total := 0
	for id, calls := range rt.statuses {
		total += calls
		if calls != 1 {
			t.Errorf("container %s: %d ContainerStatus calls, want 1", id, calls)
		}
	}
	if total != n+1 {
		t.Fatalf("%d ContainerStatus calls for %d containers over %d reads", total, n+1, n)
	}
}

// BenchmarkLogPathsWhileRemovingDeadInstances: the log-path reads of
// removing the dead instances of one pod one by one, over gRPC to an
// in-process runtime; per op, all reads for pods of 10, 100 and 1,000
// instances.
func BenchmarkLogPathsWhileRemovingDeadInstances(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			rt := &podRuntime{logPaths: map[string]string{}}
			all := make([]string, n)
			for i := range n {
				all[i] = fmt.Sprintf("c%d", i)
				rt.logPaths[all[i]] = fmt.Sprintf("/l/p/app/%d.log", i)
			}
			c, err := Dial(serveRuntime(b, rt), 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			for b.Loop() {
				c.logPaths = logPathMemo{} // each op starts as a new pass of a new plugin
				rt.containers = all
				for len(rt.containers) > 1 {
					if _, err := c.ContainerLogPaths(ctx, "uid-1"); err != nil {
						b.Fatal(err)
					}
					rt.containers = rt.containers[1:]
				}
			}
			rt.mu.Lock()
			calls := 0
			for _, k := range rt.statuses {
				calls += k
			}
			rt.mu.Unlock()
			b.ReportMetric(float64(calls)/float64(b.N), "status-calls/op")
		})
	}
}
