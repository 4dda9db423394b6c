//go:build e2e

package lab_test

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// The labs of this package's tests (one at a time, the second one beside the
// first). NRIHK_E2E_LAB=x gives a run its own: /tmp/nrihk-lab-x, /tmp/nrihk-lab-x2
// and the cgroup root /nrihk-x.
var (
	testDir    = "/tmp/nrihk-labtest"
	testDir2   = "/tmp/nrihk-labtest2"
	cgroupRoot = "/nrihk-labtest" // shared by both labs of TestLab
)

func init() {
	if v := os.Getenv("NRIHK_E2E_LAB"); v != "" {
		testDir, testDir2, cgroupRoot = "/tmp/nrihk-lab-"+v, "/tmp/nrihk-lab-"+v+"2", "/nrihk-"+v
	}
}

// TestLab exercises the harness: pods through CRI, kill -9 and restart of
// containerd, a dying pause process, a second lab side by side, and a down
// that leaves nothing behind.
func TestLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	t0 := time.Now()
	if err := lab.Install(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("install: %v", time.Since(t0).Round(time.Millisecond))

	pluginDir := t.TempDir() // overrides the default $LAB_DIR/nri/plugins
	t0 = time.Now()
	l, err := lab.Start(ctx, lab.Options{Dir: testDir, CgroupRoot: cgroupRoot, PluginPath: pluginDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start (down + up): %v", time.Since(t0).Round(time.Millisecond))
	downed := false
	t.Cleanup(func() {
		if !downed {
			_ = l.Down(context.Background())
		}
	})
	cfg, err := os.ReadFile(filepath.Join(l.Dir, "containerd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cfg, []byte(`plugin_path = "`+pluginDir+`"`)) ||
		!bytes.Contains(cfg, []byte(`plugin_config_path = "`+testDir+`/nri/conf.d"`)) {
		t.Fatalf("NRI plugin paths not in the config:\n%s", cfg)
	}

	rt := l.Runtime()
	pod := lab.Pod{Name: "labtest", Namespace: "e2e", UID: lab.NewUID()}
	sb, err := l.RunPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := l.RunContainer(ctx, pod, sb, "app", 0)
	if err != nil {
		t.Fatal(err)
	}
	wantPod(ctx, t, rt, sb, runtimeapi.PodSandboxState_SANDBOX_READY)
	wantCtr(ctx, t, rt, ctr, runtimeapi.ContainerState_CONTAINER_RUNNING)

	// Shaped like the kubelet's: labels, log path, cgroup.
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Status.Labels["io.kubernetes.pod.uid"]; got != pod.UID {
		t.Errorf("pod uid label = %q, want %q", got, pod.UID)
	}
	cst, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(l.PodLogDir(pod), "app/0.log"); cst.Status.LogPath != want {
		t.Errorf("log path = %q, want %q", cst.Status.LogPath, want)
	}
	if got := cst.Status.Labels["io.kubernetes.container.name"]; got != "app" {
		t.Errorf("container name label = %q", got)
	}
	cg := filepath.Join("/sys/fs/cgroup/memory", l.PodCgroupParent(pod), ctr)
	if _, err := os.Stat(cg); err != nil {
		t.Errorf("container cgroup: %v", err)
	}
	sbPID, err := l.SandboxPID(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	ctrPID, err := l.ContainerPID(ctx, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(readFile(fmt.Sprintf("/proc/%d/cgroup", ctrPID)), ctr) {
		t.Errorf("container pid %d is not in a cgroup named after %s", ctrPID, ctr)
	}

	t.Run("second lab side by side", func(t *testing.T) {
		l2, err := lab.Start(ctx, lab.Options{Dir: testDir2, CgroupRoot: cgroupRoot})
		if err != nil {
			t.Fatal(err)
		}
		pod2 := lab.Pod{Name: "other", Namespace: "e2e", UID: lab.NewUID()}
		sb2, err := l2.RunPod(ctx, pod2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l2.RunContainer(ctx, pod2, sb2, "app", 0); err != nil {
			t.Fatal(err)
		}
		if err := l2.Down(ctx); err != nil {
			t.Fatal(err)
		}
		// The first lab is untouched.
		wantPod(ctx, t, rt, sb, runtimeapi.PodSandboxState_SANDBOX_READY)
		wantCtr(ctx, t, rt, ctr, runtimeapi.ContainerState_CONTAINER_RUNNING)
		if !alive(sbPID) || !alive(ctrPID) {
			t.Fatal("down of the second lab killed processes of the first")
		}
		assertGone(t, testDir2)
	})

	// kill -9 containerd: shims and containers survive, CRI is gone.
	oldPID := l.ContainerdPID()
	if err := l.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	if !alive(sbPID) || !alive(ctrPID) {
		t.Fatal("pod processes died with containerd")
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	if _, err := rt.Version(short, &runtimeapi.VersionRequest{}); err == nil {
		t.Error("CRI answers after containerd was killed")
	}
	cancelShort()

	t0 = time.Now()
	readyAt, err := l.RestartContainerd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart: CRI ready after %v, RestartContainerd returned after %v",
		readyAt.Sub(t0).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if pid := l.ContainerdPID(); pid == oldPID || !alive(pid) {
		t.Fatalf("containerd pid %d after restart (was %d)", pid, oldPID)
	}
	wantPod(ctx, t, rt, sb, runtimeapi.PodSandboxState_SANDBOX_READY)
	wantCtr(ctx, t, rt, ctr, runtimeapi.ContainerState_CONTAINER_RUNNING)
	if pid, err := l.ContainerPID(ctx, ctr); err != nil || pid != ctrPID {
		t.Fatalf("container pid after restart = %d, %v; want %d", pid, err, ctrPID)
	}

	// The pause process dies: the sandbox turns NOTREADY.
	if err := syscall.Kill(sbPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	for podState(ctx, t, rt, sb) != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		if time.Since(t0) > 30*time.Second {
			t.Fatalf("sandbox still %v 30s after its pause process was killed", podState(ctx, t, rt, sb))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("sandbox NOTREADY %v after kill -9 of pause", time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	downed = true
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("down: %v", time.Since(t0).Round(time.Millisecond))
	assertGone(t, testDir)
	if alive(ctrPID) {
		t.Errorf("container process %d survived down", ctrPID)
	}
	for _, m := range []string{"memory", "cpu", "pids", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", m, cgroupRoot)); err == nil {
			t.Errorf("cgroup %s%s survived down", m, cgroupRoot)
		}
	}
}

func podState(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, id string) runtimeapi.PodSandboxState {
	t.Helper()
	r, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 1 {
		t.Fatalf("sandbox %s: %d in the CRI listing", id, len(r.Items))
	}
	return r.Items[0].State
}

func wantPod(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, id string, want runtimeapi.PodSandboxState) {
	t.Helper()
	if got := podState(ctx, t, rt, id); got != want {
		t.Fatalf("sandbox %s: %v, want %v", id, got, want)
	}
}

func wantCtr(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, id string, want runtimeapi.ContainerState) {
	t.Helper()
	r, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Containers) != 1 || r.Containers[0].State != want {
		t.Fatalf("container %s: %v, want one %v", id, r.Containers, want)
	}
}

// assertGone checks that no process mentions dir in its cmdline, nothing is
// mounted under it and it is removed.
func assertGone(t *testing.T, dir string) {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		if strings.Contains(strings.ReplaceAll(readFile(f), "\x00", " "), dir+"/") {
			t.Errorf("process left: %s: %q", f, readFile(f))
		}
	}
	for _, line := range strings.Split(readFile("/proc/self/mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			t.Errorf("mount left: %s", line)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists (%v)", dir, err)
	}
}

func alive(pid int) bool {
	s := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// startLab installs and starts a lab in testDir that is downed at the end of
// the test (unless the test downs it itself and says so through *downed).
func startLab(ctx context.Context, t *testing.T, opts lab.Options) (*lab.Lab, *bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root")
	}
	if err := lab.Install(ctx); err != nil {
		t.Fatal(err)
	}
	opts.Dir, opts.CgroupRoot = testDir, cgroupRoot
	t0 := time.Now()
	l, err := lab.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start (down + up): %v", time.Since(t0).Round(time.Millisecond))
	downed := new(bool)
	t.Cleanup(func() {
		if !*downed {
			_ = l.Down(context.Background())
		}
	})
	return l, downed
}

// TestLabPodNetwork: a pod with its own netns on the lab's CNI network and a
// hostPort beside a hostNetwork pod; what CNI leaves on the node while it runs
// and that StopPodSandbox takes all of it away; what a reboot with and without
// the netns leaves (the leaks the e2e tests build on); and a down that leaves
// nothing of the network.
func TestLabPodNetwork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, downed := startLab(ctx, t, lab.Options{})
	c := l.CNI()
	t.Logf("network %s, bridge %s, subnet %s, netns dir %s", c.Network, c.Bridge, c.Subnet, c.NetnsDir)
	subnet, err := netip.ParsePrefix(c.Subnet)
	if err != nil {
		t.Fatalf("CNI().Subnet: %v", err)
	}
	if len(c.Bridge) > 15 || c.Network == "" || c.Gateway != c.Addr(1) ||
		!strings.HasPrefix(c.NetnsDir, l.Dir+"/") || !strings.HasPrefix(c.IPAMDir, l.Dir+"/") || c.ResultsDir != "/var/lib/cni/results" {
		t.Fatalf("CNI() = %+v", c)
	}
	conf := readFile(c.ConfFile)
	for _, want := range []string{`"name": "` + c.Network + `"`, `"bridge": "` + c.Bridge + `"`, `"type": "portmap"`, `"dataDir": "` + c.DataDir + `"`} {
		if !strings.Contains(conf, want) {
			t.Fatalf("conflist %s lacks %s:\n%s", c.ConfFile, want, conf)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(c.BinDir, p)); err != nil {
			t.Fatalf("CNI plugin: %v", err)
		}
	}

	hostPort := int32(20000 + mrand.IntN(10000))
	pod := lab.Pod{Name: "netpod", Namespace: "e2e", UID: lab.NewUID(),
		Network: &lab.PodNetwork{Ports: []lab.PortMapping{{HostPort: hostPort, ContainerPort: 8080}}}}
	sb, err := l.RunPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := l.RunContainer(ctx, pod, sb, "app", 0)
	if err != nil {
		t.Fatal(err)
	}
	hostPod := lab.Pod{Name: "hostpod", Namespace: "e2e", UID: lab.NewUID()}
	hostSB, err := l.RunPod(ctx, hostPod)
	if err != nil {
		t.Fatal(err)
	}

	n, err := l.SandboxNetwork(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod network: %+v", n)
	ip, err := netip.ParseAddr(n.IP)
	if err != nil || !subnet.Contains(ip) || n.IP == c.Gateway {
		t.Fatalf("pod IP %q not a pod address of %s", n.IP, c.Subnet)
	}
	if filepath.Dir(n.NetnsPath) != c.NetnsDir || n.NetnsClosed {
		t.Fatalf("netns %q (closed %v), want a mount in %s", n.NetnsPath, n.NetnsClosed, c.NetnsDir)
	}
	if hn, err := l.SandboxNetwork(ctx, hostSB); err != nil || hn.IP != "" || hn.NetnsPath != "" {
		t.Fatalf("hostNetwork pod: %+v, %v; want no IP and no netns", hn, err)
	}
	// The container runs in the pod's netns.
	ctrPID, err := l.ContainerPID(ctx, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", ctrPID)), nsInode(t, n.NetnsPath); got != want {
		t.Fatalf("container netns inode %d, the pod's netns mount %d", got, want)
	}
	host := leftovers(t, c, sb, n)
	for _, what := range []string{"cache", "loopback cache", "reservation", "netns mount", "veth", "portmap chain", "bridge"} {
		if !host[what] {
			t.Errorf("running pod: no %s (%v)", what, host)
		}
	}
	if cache := readFile(c.ResultFile(sb, "eth0")); !strings.Contains(cache, `"address":"`+n.IP+`/`) {
		t.Errorf("cache %s does not hold the pod IP %s:\n%s", c.ResultFile(sb, "eth0"), n.IP, cache)
	}
	if got := readFile(c.Reservation(n.IP)); got != sb+"\r\neth0" {
		t.Errorf("reservation %s = %q, want the sandbox id and eth0", c.Reservation(n.IP), got)
	}
	if dnat := fmt.Sprintf("--dport %d -j DNAT --to-destination %s:8080", hostPort, n.IP); !strings.Contains(natRules(t), dnat) {
		t.Errorf("no portmap rule %q in:\n%s", dnat, natRules(t))
	}
	if entries, _ := filepath.Glob(filepath.Join(c.ResultsDir, "*"+hostSB+"*")); len(entries) > 0 {
		t.Errorf("CNI cache entries of the hostNetwork pod: %v", entries)
	}

	t.Run("second lab side by side", func(t *testing.T) {
		l2, err := lab.Start(ctx, lab.Options{Dir: testDir2, CgroupRoot: cgroupRoot + "2"})
		if err != nil {
			t.Fatal(err)
		}
		c2 := l2.CNI()
		if c2.Network == c.Network || c2.Bridge == c.Bridge || c2.Subnet == c.Subnet || c2.NetnsDir == c.NetnsDir {
			t.Fatalf("two labs share their network: %+v and %+v", c, c2)
		}
		sb2, n2 := runNetPod(ctx, t, l2, "other")
		if p, _ := netip.ParsePrefix(c2.Subnet); !p.Contains(netip.MustParseAddr(n2.IP)) {
			t.Errorf("second lab's pod IP %s not in %s", n2.IP, c2.Subnet)
		}
		if err := l2.Down(ctx); err != nil {
			t.Fatal(err)
		}
		assertGone(t, testDir2)
		assertNetworkGone(t, c2, sb2)
		// The first lab's network is untouched.
		if got := leftovers(t, c, sb, n); len(got) != 7 {
			t.Errorf("the first lab's pod after the second lab's down: %v, want all 7", got)
		}
	})

	// StopPodSandbox is CNI DEL and the netns removal: nothing stays.
	if err := l.StopPod(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, c, sb, n); len(got) != 1 || !got["bridge"] {
		t.Errorf("after StopPodSandbox: %v, want the bridge only", got)
	}
	if n2, err := l.SandboxNetwork(ctx, sb); err != nil || !n2.NetnsClosed {
		t.Errorf("stopped sandbox: %+v, %v; want its netns closed", n2, err)
	}
	if err := l.RemovePod(ctx, sb); err != nil {
		t.Fatal(err)
	}

	// A reboot that keeps the kernel's state: containerd forgets the pod, the
	// node keeps all of its network.
	sb, n = runNetPod(ctx, t, l, "leak1")
	t0 := time.Now()
	if err := l.WipeRuntimeState(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("WipeRuntimeState(keepNetns): %v", time.Since(t0).Round(time.Millisecond))
	if r, err := l.Runtime().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil || len(r.Items) != 0 {
		t.Fatalf("CRI after the wipe: %v, %v; want no sandboxes", r, err)
	}
	got := leftovers(t, c, sb, n)
	for _, what := range []string{"cache", "loopback cache", "reservation", "netns mount", "veth", "portmap chain", "bridge"} {
		if !got[what] {
			t.Errorf("after WipeRuntimeState(keepNetns): no %s (%v)", what, got)
		}
	}
	// A real reboot: the kernel's part goes, the disk's stays.
	if err := l.WipeRuntimeState(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, c, sb, n); len(got) != 3 || !got["cache"] || !got["loopback cache"] || !got["reservation"] {
		t.Errorf("after WipeRuntimeState: %v, want the cache entries and the reservation only", got)
	}
	// A pod of the new boot works next to the leaks.
	sb2, n2 := runNetPod(ctx, t, l, "afterboot")
	if n2.IP == n.IP {
		t.Errorf("the new pod got the leaked pod's IP %s", n.IP)
	}

	t0 = time.Now()
	*downed = true
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("down: %v", time.Since(t0).Round(time.Millisecond))
	assertGone(t, testDir)
	assertNetworkGone(t, c, sb, sb2)
}

// TestLabCNIRangeExhausted: host-local's range is a knob; a range of three
// addresses takes three pods and the fourth RunPodSandbox fails with "no IP
// addresses available". Both through SetCNIRange on a running lab and
// through Options at Start.
func TestLabCNIRangeExhausted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, downed := startLab(ctx, t, lab.Options{})
	c := l.CNI()

	// containerd reloads the conf dir on every change (fsnotify): measure it.
	var reloads []time.Duration
	for i := range 5 {
		b := []byte(readFile(c.ConfFile) + strings.Repeat(" ", i+1))
		tmp := filepath.Join(c.ConfDir, ".measure")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := os.Rename(tmp, c.ConfFile); err != nil {
			t.Fatal(err)
		}
		if err := l.WaitCNIConfig(ctx); err != nil {
			t.Fatal(err)
		}
		reloads = append(reloads, time.Since(t0))
	}
	t.Logf("conflist rename -> loaded by containerd (CRI Status): %v", reloads)

	t0 := time.Now()
	if err := l.SetCNIRange(ctx, c.Addr(10), c.Addr(12)); err != nil {
		t.Fatal(err)
	}
	t.Logf("SetCNIRange(%s, %s): %v", c.Addr(10), c.Addr(12), time.Since(t0).Round(time.Millisecond))
	if c2 := l.CNI(); c2.RangeStart != c.Addr(10) || c2.RangeEnd != c.Addr(12) {
		t.Errorf("CNI() range after SetCNIRange: %s..%s", c2.RangeStart, c2.RangeEnd)
	}
	exhaust(ctx, t, l, "set", 3, c.Addr(10), c.Addr(11), c.Addr(12))
	// The whole subnet again: the fourth pod runs.
	if err := l.SetCNIRange(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := l.RunPod(ctx, lab.Pod{Name: "set-more", Namespace: "e2e", UID: lab.NewUID(), Network: &lab.PodNetwork{}}); err != nil {
		t.Fatalf("after widening the range: %v", err)
	}
	*downed = true
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}

	// The same dir again (same network and subnet), the range from the start.
	l, downed = startLab(ctx, t, lab.Options{CNIRangeStart: c.Addr(20), CNIRangeEnd: c.Addr(21)})
	if c2 := l.CNI(); c2.Network != c.Network || c2.RangeStart != c.Addr(20) || c2.RangeEnd != c.Addr(21) {
		t.Fatalf("CNI() = %+v, want network %s with range %s..%s", c2, c.Network, c.Addr(20), c.Addr(21))
	}
	exhaust(ctx, t, l, "opt", 2, c.Addr(20), c.Addr(21))
	*downed = true
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	assertNetworkGone(t, c)
}

// exhaust runs n pod-network pods, which must get the addresses want, then
// one more, which must fail for want of an address.
func exhaust(ctx context.Context, t *testing.T, l *lab.Lab, prefix string, n int, want ...string) {
	t.Helper()
	var got []string
	for i := range n {
		_, pn := runNetPod(ctx, t, l, fmt.Sprintf("%s-%d", prefix, i))
		got = append(got, pn.IP)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("pod IPs %v, want %v", got, want)
	}
	_, err := l.RunPod(ctx, lab.Pod{Name: prefix + "-full", Namespace: "e2e", UID: lab.NewUID(), Network: &lab.PodNetwork{}})
	if err == nil || !strings.Contains(err.Error(), "no IP addresses available") {
		t.Fatalf("RunPodSandbox with the range used up: %v, want \"no IP addresses available\"", err)
	}
	t.Logf("range used up: %v", err)
}

// runNetPod runs a pod-network pod (sandbox only) and returns its network.
func runNetPod(ctx context.Context, t *testing.T, l *lab.Lab, name string) (string, lab.SandboxNet) {
	t.Helper()
	sb, err := l.RunPod(ctx, lab.Pod{Name: name, Namespace: "e2e", UID: lab.NewUID(),
		Network: &lab.PodNetwork{Ports: []lab.PortMapping{{HostPort: int32(30000 + mrand.IntN(10000)), ContainerPort: 80}}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.SandboxNetwork(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	return sb, n
}

// leftovers reports what of a sandbox's attachment (sandbox id sb, network n)
// is on the node, and whether the lab's bridge is: "cache", "loopback cache",
// "reservation", "netns mount", "veth" (any on the bridge, or the one the
// cache names), "portmap chain", "bridge".
func leftovers(t *testing.T, c lab.CNIPaths, sb string, n lab.SandboxNet) map[string]bool {
	t.Helper()
	have := map[string]bool{}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	have["cache"] = exists(c.ResultFile(sb, "eth0"))
	have["loopback cache"] = exists(c.LoopbackResultFile(sb))
	have["reservation"] = exists(c.Reservation(n.IP))
	have["netns mount"] = mounted(n.NetnsPath)
	have["bridge"] = exists("/sys/class/net/" + c.Bridge)
	brif, _ := os.ReadDir("/sys/class/net/" + c.Bridge + "/brif")
	have["veth"] = len(brif) > 0
	have["portmap chain"] = strings.Contains(natRules(t), fmt.Sprintf(`dnat name: \"%s\" id: \"%s\"`, c.Network, sb))
	for k, v := range have {
		if !v {
			delete(have, k)
		}
	}
	return have
}

// assertNetworkGone checks that nothing of the lab's network is on the node:
// no bridge, no cache entries of the network (or loopback entries of the
// sandboxes), no iptables rule naming the network, no netns mount of the lab.
func assertNetworkGone(t *testing.T, c lab.CNIPaths, sandboxes ...string) {
	t.Helper()
	if _, err := os.Stat("/sys/class/net/" + c.Bridge); err == nil {
		t.Errorf("bridge %s survived down", c.Bridge)
	}
	entries, _ := filepath.Glob(filepath.Join(c.ResultsDir, c.Network+"-*"))
	for _, sb := range sandboxes {
		if _, err := os.Stat(c.LoopbackResultFile(sb)); err == nil {
			entries = append(entries, c.LoopbackResultFile(sb))
		}
	}
	if len(entries) > 0 {
		t.Errorf("cache entries survived down: %v", entries)
	}
	rules := natRules(t)
	if strings.Contains(rules, `\"`+c.Network+`\"`) || strings.Contains(rules, c.Subnet) {
		t.Errorf("iptables rules of %s survived down:\n%s", c.Network, rules)
	}
	for _, sb := range sandboxes {
		if chain := portmapChain(c.Network, sb); strings.Contains(rules, chain) {
			t.Errorf("portmap chain %s of %s survived down", chain, sb)
		}
	}
	if strings.Contains(readFile("/proc/self/mountinfo"), c.NetnsDir) {
		t.Errorf("netns mounts in %s survived down", c.NetnsDir)
	}
}

// portmapChain is portmap's per-pod DNAT chain: CNI-DN- and the start of
// sha512(network + sandbox id).
func portmapChain(network, sb string) string {
	h := sha512.Sum512([]byte(network + sb))
	return "CNI-DN-" + hex.EncodeToString(h[:])[:21]
}

func natRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Fatalf("iptables-save -t nat: %v", err)
	}
	return string(out)
}

// mounted reports whether path is a mount point (of the test's mount namespace).
func mounted(path string) bool {
	if path == "" {
		return false
	}
	for _, line := range strings.Split(readFile("/proc/self/mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
