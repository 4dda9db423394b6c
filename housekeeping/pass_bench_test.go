package housekeeping

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// fakeNode is a node's files under a temp dir, the way kubelet and runc lay
// them out: pod cgroups (cgroup v1 with 10 hierarchies, or v2), kubelet pod
// dirs, pod log dirs and container log links; the pod network as
// containerd's CNI leaves it (fakeNet); and the CRI listing of its live
// pods. Leaked pods have all the files and nothing listed.
type fakeNode struct {
	cgroups     podcgroups.Options
	kubeletRoot string
	podLogs     string
	ctrLogs     string
	snap        cri.Snapshot
	net         fakeNet
}

// fakeNet is the node's pod network with containerd's default CNI setup: one
// conflist (bridge with host-local IPAM, then portmap) in the conf dir, and
// per pod what its CNI ADDs left: libcni's cache entries of network "pods"
// (eth0) and of "cni-loopback" (lo, which containerd attaches first), and
// host-local's reservation; containerd's sandbox records name the live pods
// and their netns. The netns dir exists but is empty: real namespace mounts
// need root, and podnet's BenchmarkList and BenchmarkNetnsInUse measure them
// (with any mount, List also stats every thread's namespace).
type fakeNet struct {
	confDir, cacheDir, dataDir, netnsDir string
	records                              cri.Records
}

// benchConfList is the node's network: containerd's default conflist (its
// 10-containerd-net.conflist) with host-local's dataDir in the tree.
func benchConfList(dataDir string) string {
	return `{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "promiscMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "` + dataDir + `",
        "ranges": [[{"subnet": "10.88.0.0/16"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}`
}

// benchLoopbackConf is the loopback network containerd attaches every pod
// to (go-cni's WithLoNetwork), as its cache entries hold it.
const benchLoopbackConf = `{
"cniVersion": "0.3.1",
"name": "cni-loopback",
"plugins": [{
  "type": "loopback"
}]
}`

// attach writes what the CNI ADDs of pod i left: the two cache entries and
// the reservation. It returns the pod's netns path.
func (f fakeNet) attach(tb testing.TB, write func(path, content string), i int, sandbox, uid, name string) (netns string) {
	tb.Helper()
	netns = filepath.Join(f.netnsDir, fmt.Sprintf("cni-%08x-0000-4000-8000-%012x", i, i))
	ip := fmt.Sprintf("10.88.%d.%d", i/250, i%250+2)
	entry := func(network, ifName, config string, result map[string]any) {
		data, err := json.Marshal(map[string]any{
			"kind": "cniCacheV1", "containerId": sandbox, "config": []byte(config), "ifName": ifName, "networkName": network, "netns": netns,
			"cniArgs": [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", name},
				{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", uid}},
			"capabilityArgs": map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
				"kubernetes.io/config.seen": "2026-11-21T11:00:00.000000000Z", "kubernetes.io/config.source": "api"}},
			"result": result,
		})
		if err != nil {
			tb.Fatal(err)
		}
		write(filepath.Join(f.cacheDir, "results", network+"-"+sandbox+"-"+ifName), string(data))
	}
	type m = map[string]any
	entry("cni-loopback", "lo", benchLoopbackConf, m{"cniVersion": "0.3.1",
		"interfaces": []m{{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": netns}},
		"ips":        []m{{"interface": 0, "address": "127.0.0.1/8"}, {"interface": 0, "address": "::1/128"}},
		"dns":        m{}})
	entry("pods", "eth0", benchConfList(f.dataDir), m{"cniVersion": "1.0.0",
		"interfaces": []m{{"name": "cni0", "mac": "0a:58:0a:58:00:01"}, {"name": fmt.Sprintf("veth%08x", i), "mac": "66:2c:1e:4d:7a:10"},
			{"name": "eth0", "mac": "0a:58:0a:58:00:02", "sandbox": netns}},
		"ips":    []m{{"interface": 2, "address": ip + "/16", "gateway": "10.88.0.1"}},
		"routes": []m{{"dst": "0.0.0.0/0"}},
		"dns":    m{}})
	write(filepath.Join(f.dataDir, "pods", ip), sandbox+"\r\neth0")
	return netns
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
	n.net = fakeNet{confDir: filepath.Join(dir, "net.d"), cacheDir: filepath.Join(dir, "cni"), dataDir: filepath.Join(dir, "cni-networks"),
		netnsDir: filepath.Join(dir, "netns"), records: cri.Records{Sandboxes: map[string]cri.SandboxRecord{}, Containers: map[string]string{}}}
	write(filepath.Join(n.net.confDir, "10-containerd-net.conflist"), benchConfList(n.net.dataDir))
	write(filepath.Join(n.net.dataDir, "pods", "lock"), "")
	if err := os.MkdirAll(n.net.netnsDir, 0o755); err != nil {
		tb.Fatal(err)
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
		netns := n.net.attach(tb, write, i, sandbox, uid, name)
		if i >= live {
			continue
		}
		n.net.records.Sandboxes[sandbox] = cri.SandboxRecord{Namespace: "k8s.io", NetNSPath: netns}
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

// TestMain removes the benchmarks' fake nodes, and fails the package when
// a test wrote the node's own state file (config.Default's), absent
// before: a test must set housekeeping.state_file, or "".
func TestMain(m *testing.M) {
	node := config.Default().Housekeeping.StateFile
	_, err := os.Lstat(node)
	existed := err == nil
	code := m.Run()
	if fakeNodes.dir != "" {
		_ = os.RemoveAll(fakeNodes.dir)
	}
	if _, err := os.Lstat(node); err == nil && !existed {
		fmt.Fprintf(os.Stderr, "a test wrote the node's own state file %s: set housekeeping.state_file in the test\n", node)
		code = 1
	}
	os.Exit(code)
}

// loop is a loop on the node; with network, its network side is on, with
// a fake containerd whose records are the live pods' (copied for each
// listing, as a real one decodes them).
func (n fakeNode) loop(network bool) *Loop {
	log, _ := testLogger()
	opts := n.cgroups
	var net *Network
	if network {
		net = NewNetwork(&fakeContainerd{netnsDir: n.net.netnsDir, records: n.net.records},
			NetworkOptions{CacheDir: n.net.cacheDir, ConfDir: n.net.confDir, BinDir: "/opt/cni/bin"})
	}
	return New(podstate.New(0), &fakeRuntime{snap: n.snap}, Options{Period: time.Hour, KubeletRoot: n.kubeletRoot, Cgroups: &opts,
		Policy:  gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, LeakGrace: time.Minute, PodLogsDir: n.podLogs, ContainerLogsDir: n.ctrLogs},
		Network: net}, log)
}

// readNetwork is the network side's reads of a pass beside the CRI
// listing snap: containerd's CNI configuration (from the conf dir here), the
// cache entries, reservations and netns dir, then, for the suspects only,
// containerd's records and the namespaces. It fails when the network side
// would be left out of the plan, or the node's network is not what the
// fake node has: two cache entries and one reservation a pod.
func (l *Loop) readNetwork(ctx context.Context, snap cri.Snapshot, pods int) (*gc.NetworkInput, error) {
	listing, err := l.listNetwork(ctx, now)
	in := l.networkInput(ctx, gc.Input{Sandboxes: snap.Sandboxes, Containers: snap.Containers, Unreadable: snap.Malformed}, listing, err)
	switch {
	case err != nil:
		return nil, err
	case in == nil:
		return nil, errors.New("the network side is left out of the plan")
	case len(in.Listing.Attachments) != 2*pods || len(in.Listing.Reservations) != pods || len(in.Listing.Unreadable) != 0:
		return nil, fmt.Errorf("listed %d attachments, %d reservations, %d unreadable; want %d, %d, 0",
			len(in.Listing.Attachments), len(in.Listing.Reservations), len(in.Listing.Unreadable), 2*pods, pods)
	}
	return in, nil
}

// cpuTime is the CPU time this process has used, every thread (GC
// included).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time an op took since start (cpu-ns/op) beside
// its wall time: on a machine that other work keeps busy, it moves less.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkPass is one housekeeping pass without execution: the (fake,
// free) listing, reconcile, gather and plan, against real file trees. What
// grows with the node should be the listing's share only; what grows with
// the leaks is looked into.
//
// With network=on the pass also reads the pod network (fakeNet: two cache
// entries and a reservation a pod; a leaked pod's are leaks too) and
// containerd's (fake, nearly free) records, and plans the network's rules:
// on - off is what the network side adds to a pass (BenchmarkNetwork splits
// it). The loop's Network is primed before the timer, so its Lister reads
// no file again that did not change: every pass but a plugin's first
// (BenchmarkNetwork's read-cold is the first).
func BenchmarkPass(b *testing.B) {
	type size struct {
		live, leaked int
		network      bool
	}
	var sizes []size
	for _, s := range []size{{250, 0, false}, {300, 0, false}, {1000, 0, false}, {3000, 0, false}, {1000, 30, false}, {1000, 300, false}} {
		sizes = append(sizes, s)
		if (s.live == 250 || s.live == 1000) && s.leaked <= 30 {
			sizes = append(sizes, size{s.live, s.leaked, true})
		}
	}
	for _, v2 := range []bool{false, true} {
		for _, size := range sizes {
			cgroup, network := "cgroup-v1", "off"
			if v2 {
				cgroup = "cgroup-v2"
			}
			if size.network {
				network = "on"
			}
			b.Run(fmt.Sprintf("%s/live=%d/leaked=%d/network=%s", cgroup, size.live, size.leaked, network), func(b *testing.B) {
				n := cachedFakeNode(b, v2, size.live, size.leaked)
				l := n.loop(size.network)
				if size.network {
					l.warning = map[string]bool{}
					if _, err := l.readNetwork(context.Background(), n.snap, size.live+size.leaked); err != nil {
						b.Fatal(err)
					}
				}
				// Every pass, the first (untimed) and the timed ones, finds
				// every leak: a pass that returned early would post a
				// better time.
				check := func(r PassResult) {
					b.Helper()
					if r.Err != nil || r.Untrusted != "" {
						b.Fatalf("pass failed (%v) or untrusted (%q)", r.Err, r.Untrusted)
					}
					if got := r.Plan.Leaks[gc.LeakPodCgroup]; got != size.leaked {
						b.Fatalf("%d leaked pod cgroups found, want %d (%+v)", got, size.leaked, r.Plan.Leaks)
					}
					if got, want := r.Plan.Leaks[gc.LeakCNIAttachment], 2*size.leaked; size.network && got != want {
						b.Fatalf("%d leaked CNI attachments found, want %d (%+v)", got, want, r.Plan.Leaks)
					}
				}
				check(l.Pass(context.Background()))
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime(b)
				var last PassResult
				for b.Loop() {
					last = l.Pass(context.Background())
				}
				reportCPU(b, cpu)
				check(last)
			})
		}
	}
}

// BenchmarkNetwork splits the network side of a pass (cgroup v2 nodes of
// BenchmarkPass): "read" is its reads (listNetwork and networkInput: the CNI
// configuration, the Network's podnet.Lister listing the cache entries,
// reservations and netns dir, containerd's fake records), by a Network that
// listed the node before (warm: no file read again, as every pass after a
// plugin's first); "read-cold" is the same by a new Network (every file
// read, as the first pass); "plan" is gc.Plan of the pass's input with the
// network in it, "plan-without-network" the same without: their difference
// is the network rules (and, with leaks, their actions' resolution). The
// network side of a pass is read + plan - plan-without-network (read-cold
// for the first pass).
func BenchmarkNetwork(b *testing.B) {
	for _, size := range []struct{ live, leaked int }{{250, 0}, {1000, 0}, {1000, 30}} {
		b.Run(fmt.Sprintf("live=%d/leaked=%d", size.live, size.leaked), func(b *testing.B) {
			n := cachedFakeNode(b, true, size.live, size.leaked)
			l := n.loop(true)
			ctx := context.Background()
			l.warning = map[string]bool{}
			net, err := l.readNetwork(ctx, n.snap, size.live+size.leaked)
			if err != nil {
				b.Fatal(err)
			}
			listing, _ := ToListing(l.state.Seq(), n.snap)
			l.state.Reconcile(listing, n.snap.TakenAt)
			in := l.planInput(ctx, n.snap, l.state.View())
			without := in
			in.Network = net
			if got, want := gc.Plan(in).Leaks[gc.LeakCNIAttachment], 2*size.leaked; got != want {
				b.Fatalf("%d leaked CNI attachments found, want %d", got, want)
			}
			for _, part := range []struct {
				name string
				run  func() error
			}{
				{"read", func() error { _, err := l.readNetwork(ctx, n.snap, size.live+size.leaked); return err }},
				{"read-cold", func() error {
					warm := l.opts.Network
					defer func() { l.opts.Network = warm }()
					l.opts.Network = NewNetwork(warm.rt, warm.opts)
					_, err := l.readNetwork(ctx, n.snap, size.live+size.leaked)
					return err
				}},
				{"plan", func() error { gc.Plan(in); return nil }},
				{"plan-without-network", func() error { gc.Plan(without); return nil }},
			} {
				b.Run(part.name, func(b *testing.B) {
					b.ReportAllocs()
					cpu := cpuTime(b)
					for b.Loop() {
						if err := part.run(); err != nil {
							b.Fatal(err)
						}
					}
					reportCPU(b, cpu)
				})
			}
		})
	}
}

// BenchmarkGather splits a pass's reads by source, on a node of 1,000 live
// pods with cgroup v1: each source as the pass reads it (the pod cgroups
// between full scans, and in a full scan, every podcgroups.FullScanEvery),
// and the pod cgroups also as read before candidates were (every pod
// looked into).
func BenchmarkGather(b *testing.B) {
	n := cachedFakeNode(b, false, 1000, 0)
	listed, running := listedUIDs(n.snap), listedRunning(n.snap)
	ctx := context.Background()
	scanner := podcgroups.NewScanner(n.cgroups, time.Hour)
	if l := scanner.Discover(ctx, now, listed.lacks); !l.Ready || scanner.Primary() == "" {
		b.Fatalf("the first (full) scan: %v, primary %q", l.Err, scanner.Primary())
	}
	for _, src := range []struct {
		name string
		read func() error
	}{
		{"pod-cgroups-between-full-scans", func() error {
			if l := scanner.Discover(ctx, now.Add(time.Minute), listed.lacks); !l.Ready {
				return l.Err
			}
			return nil
		}},
		{"pod-cgroups-full-scan", func() error {
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
