package housekeeping

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// fakeNode is a node's files under a temp dir, the way kubelet and runc lay
// them out: pod cgroups (cgroup v1 with 10 hierarchies, or v2), kubelet pod
// dirs, pod log dirs and container log links; and the CRI listing of its
// live pods. Leaked pods have all the files and nothing listed.
type fakeNode struct {
	cgroups     podcgroups.Options
	kubeletRoot string
	podLogs     string
	ctrLogs     string
	snap        cri.Snapshot
}

var v1Hierarchies = []string{"blkio", "cpu,cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory", "net_cls,net_prio", "perf_event", "pids"}

func benchUID(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i) }

func benchID(kind string, i int) string {
	return fmt.Sprintf("%s%0*x", kind, 64-len(kind), i)
}

// makeFakeNode writes the node's files under dir.
func makeFakeNode(tb testing.TB, dir string, v2 bool, live, leaked int) fakeNode {
	tb.Helper()
	n := fakeNode{
		cgroups:     podcgroups.Options{Mountpoint: filepath.Join(dir, "cgroup"), Root: "kubepods", Driver: "cgroupfs"},
		kubeletRoot: filepath.Join(dir, "kubelet"),
		podLogs:     filepath.Join(dir, "log", "pods"),
		ctrLogs:     filepath.Join(dir, "log", "containers"),
		snap:        cri.Snapshot{TakenAt: now},
	}
	write := func(path, content string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	hierarchies := []string{n.cgroups.Mountpoint}
	if v2 {
		write(filepath.Join(n.cgroups.Mountpoint, "cgroup.controllers"), "cpu memory pids\n")
	} else {
		hierarchies = nil
		for _, h := range v1Hierarchies {
			hierarchies = append(hierarchies, filepath.Join(n.cgroups.Mountpoint, h))
		}
	}
	for _, h := range hierarchies {
		write(filepath.Join(h, "cgroup.procs"), "1\n")
	}
	for i := range live + leaked {
		uid, name := benchUID(i), fmt.Sprintf("web-%d", i)
		sandbox, app := benchID("s", i), benchID("c", i)
		qos := "besteffort"
		if i%2 == 0 {
			qos = "burstable"
		}
		for _, h := range hierarchies {
			pod := filepath.Join(h, "kubepods", qos, "pod"+uid)
			write(filepath.Join(pod, "cgroup.procs"), "")
			if v2 {
				write(filepath.Join(pod, "cpu.weight"), "100\n")
			} else if strings.HasPrefix(filepath.Base(h), "cpu,") {
				write(filepath.Join(pod, "cpu.shares"), "1024\n")
			}
			write(filepath.Join(pod, sandbox, "cgroup.procs"), fmt.Sprintf("%d\n", 100000+2*i))
			write(filepath.Join(pod, app, "cgroup.procs"), fmt.Sprintf("%d\n", 100001+2*i))
		}
		if i >= live {
			// A leaked pod is gone from kubelet (no pod dir): its cgroup
			// outlived it.
			if err := os.MkdirAll(filepath.Join(n.kubeletRoot, "pods"), 0o755); err != nil {
				tb.Fatal(err)
			}
		}
		podDir := filepath.Join(n.kubeletRoot, "pods", uid)
		if i >= live {
			podDir = filepath.Join(dir, "deleted-pod-dirs", uid)
		}
		write(filepath.Join(podDir, "etc-hosts"), "127.0.0.1 localhost\n")
		write(filepath.Join(podDir, "containers", "app", "0a1b2c3d"), "")
		write(filepath.Join(podDir, "volumes", "kubernetes.io~projected", "kube-api-access", "token"), "t")
		logDir := filepath.Join(n.podLogs, "ns_"+name+"_"+uid)
		write(filepath.Join(logDir, "app", "0.log"), "hello\n")
		link := filepath.Join(n.ctrLogs, name+"_ns_app-"+app+".log")
		if err := os.MkdirAll(n.ctrLogs, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(logDir, "app", "0.log"), link); err != nil {
			tb.Fatal(err)
		}
		if i >= live {
			continue
		}
		labels := map[string]string{podstate.LabelPodUID: uid, podstate.LabelPodNamespace: "ns", podstate.LabelPodName: name}
		n.snap.Sandboxes = append(n.snap.Sandboxes, cri.Sandbox{ID: sandbox, UID: uid, Namespace: "ns", Name: name, Ready: true,
			CreatedAt: now.Add(-time.Hour), Labels: labels})
		ctrLabels := map[string]string{podstate.LabelPodUID: uid, podstate.LabelPodNamespace: "ns", podstate.LabelPodName: name,
			podstate.LabelContainerName: "app"}
		n.snap.Containers = append(n.snap.Containers, cri.Container{ID: app, SandboxID: sandbox, Name: "app", State: cri.ContainerRunning,
			CreatedAt: now.Add(-time.Hour), Labels: ctrLabels})
	}
	return n
}

// fakeNodes caches the nodes across benchmarks: writing 3,000 pods' trees
// takes seconds.
var fakeNodes = struct {
	sync.Mutex
	dir   string
	nodes map[string]fakeNode
}{nodes: map[string]fakeNode{}}

func cachedFakeNode(b *testing.B, v2 bool, live, leaked int) fakeNode {
	fakeNodes.Lock()
	defer fakeNodes.Unlock()
	key := fmt.Sprintf("v2=%v/live=%d/leaked=%d", v2, live, leaked)
	if n, ok := fakeNodes.nodes[key]; ok {
		return n
	}
	if fakeNodes.dir == "" {
		dir, err := os.MkdirTemp("", "nrihk-bench-")
		if err != nil {
			b.Fatal(err)
		}
		fakeNodes.dir = dir
	}
	n := makeFakeNode(b, filepath.Join(fakeNodes.dir, strings.NewReplacer("/", "-", "=", "").Replace(key)), v2, live, leaked)
	fakeNodes.nodes[key] = n
	return n
}

// TestMain removes the benchmarks' fake nodes.
func TestMain(m *testing.M) {
	code := m.Run()
	if fakeNodes.dir != "" {
		_ = os.RemoveAll(fakeNodes.dir)
	}
	os.Exit(code)
}

func (n fakeNode) loop() *Loop {
	log, _ := testLogger()
	opts := n.cgroups
	return New(podstate.New(0), &fakeRuntime{snap: n.snap}, Options{Period: time.Hour, KubeletRoot: n.kubeletRoot, Cgroups: &opts,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, LeakGrace: time.Minute, PodLogsDir: n.podLogs, ContainerLogsDir: n.ctrLogs}}, log)
}

// BenchmarkPass is one housekeeping pass without execution: the (fake,
// free) listing, reconcile, gather and plan, against real file trees. What
// grows with the node should be the listing's share only; what grows with
// the leaks is looked into.
func BenchmarkPass(b *testing.B) {
	for _, v2 := range []bool{false, true} {
		for _, size := range []struct{ live, leaked int }{{300, 0}, {1000, 0}, {3000, 0}, {1000, 30}, {1000, 300}} {
			name := fmt.Sprintf("cgroup-v1/live=%d/leaked=%d", size.live, size.leaked)
			if v2 {
				name = fmt.Sprintf("cgroup-v2/live=%d/leaked=%d", size.live, size.leaked)
			}
			b.Run(name, func(b *testing.B) {
				n := cachedFakeNode(b, v2, size.live, size.leaked)
				l := n.loop()
				if r := l.Pass(context.Background()); r.Err != nil {
					b.Fatal(r.Err)
				} else if got := r.Plan.Leaks[gc.LeakPodCgroup] + len(r.Plan.Deferred); size.leaked > 0 && got == 0 {
					b.Fatalf("the leaked pods were not found: %+v", r.Plan.Leaks)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					l.Pass(context.Background())
				}
			})
		}
	}
}

// BenchmarkGather splits a pass's reads by source, on a node of 1,000 live
// pods with cgroup v1: each source as the pass reads it, and the pod
// cgroups also as read before candidates were (every pod looked into).
func BenchmarkGather(b *testing.B) {
	n := cachedFakeNode(b, false, 1000, 0)
	listed, running := listedUIDs(n.snap), listedRunning(n.snap)
	ctx := context.Background()
	for _, src := range []struct {
		name string
		read func() error
	}{
		{"pod-cgroups-candidates", func() error {
			if l := podcgroups.Discover(ctx, n.cgroups, listed.lacks); !l.Ready {
				return l.Err
			}
			return nil
		}},
		{"pod-cgroups-every-pod", func() error {
			if l := podcgroups.Discover(ctx, n.cgroups, nil); !l.Ready {
				return l.Err
			}
			return nil
		}},
		{"pod-dirs", func() error {
			if d := nodefs.ListPodDirs(ctx, n.kubeletRoot); !d.Ready {
				return d.Err
			}
			return nil
		}},
		{"pod-log-dirs", func() error { _, _, err := nodefs.ListPodLogDirs(ctx, n.podLogs); return err }},
		{"container-log-links", func() error {
			_, _, err := nodefs.ListContainerLogLinks(ctx, n.ctrLogs, n.podLogs, running.lacksLink)
			return err
		}},
		{"reconcile", func() error {
			state := podstate.New(0)
			listing, _ := ToListing(0, n.snap)
			state.Reconcile(listing, now)
			return nil
		}},
	} {
		b.Run(src.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := src.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
