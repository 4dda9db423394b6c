//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// startNetLab starts a lab of its own for a network test (its own network,
// bridge, subnet and netns dir), with host-local's range set to the given
// addresses of the subnet (0, 0: the whole subnet). It is taken down at
// cleanup: nothing of its network stays on the node.
func startNetLab(t *testing.T, rangeFrom, rangeTo int) *lab.Lab {
	t.Helper()
	ctx := context.Background()
	name := labName() + "-net"
	opts := lab.Options{Dir: "/tmp/" + name, CgroupRoot: "/" + name}
	l, err := lab.Start(ctx, opts)
	if err != nil {
		t.Fatalf("lab start: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	if rangeFrom > 0 {
		c := l.CNI()
		if err := l.SetCNIRange(ctx, c.Addr(rangeFrom), c.Addr(rangeTo)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// withNetwork turns the network side of an in-process housekeeper on, over
// its own CRI client, with the defaults of [network] (the netns dir read
// from containerd).
func withNetwork(t *testing.T, l *lab.Lab) func(*housekeeping.Options, *executor.Options) {
	client, err := cri.Dial("unix://"+l.CRISocket, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return func(o *housekeeping.Options, _ *executor.Options) {
		o.Network = housekeeping.NewNetwork(client, housekeeping.NetworkOptions{CacheDir: lab.CNICacheDir,
			ConfDir: "/nonexistent/net.d", BinDir: "/nonexistent/bin"})
	}
}

func netPod(t *testing.T, name string, hostPorts ...int32) lab.Pod {
	p := newPod(t, name)
	p.Network = &lab.PodNetwork{}
	for _, hp := range hostPorts {
		p.Network.Ports = append(p.Network.Ports, lab.PortMapping{HostPort: hp, ContainerPort: 8080, Protocol: "TCP"})
	}
	return p
}

// netState is what the node holds of one sandbox's network.
type netState struct {
	id, ip, netns string
	reservation   string // host-local's file naming the sandbox
}

func sandboxNet(t *testing.T, l *lab.Lab, id string) netState {
	t.Helper()
	n, err := l.SandboxNetwork(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n.IP == "" || n.NetnsPath == "" {
		t.Fatalf("sandbox %s has no pod network: %+v", id, n)
	}
	return netState{id: id, ip: n.IP, netns: n.NetnsPath, reservation: l.CNI().Reservation(n.IP)}
}

// reservedBy lists the host-local reservation files naming id.
func reservedBy(t *testing.T, l *lab.Lab, id string) []string {
	t.Helper()
	dir := l.CNI().IPAMDir
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(string(b), id) {
			out = append(out, e.Name())
		}
	}
	return out
}

func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// bridgePorts lists the veths on the lab's bridge.
func bridgePorts(t *testing.T, l *lab.Lab) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(sh(t, "ip", "-o", "link", "show", "master", l.CNI().Bridge), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			out = append(out, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	slices.Sort(out)
	return out
}

// natRules are the iptables NAT rules that name a host port.
func natRules(t *testing.T, port int32) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(sh(t, "iptables-save", "-t", "nat"), "\n") {
		if strings.HasPrefix(line, "-A ") && strings.Contains(line, fmt.Sprintf("--dport %d ", port)) {
			out = append(out, line)
		}
	}
	return out
}

// podAddr is the address of eth0 inside a pod's network namespace.
func podAddr(t *testing.T, netns string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "nsenter", "--net="+netns, "ip", "-o", "-4", "addr", "show", "dev", "eth0"))
}

// TestAnExhaustedRangeIsReclaimed: a node reboot wipes containerd's state
// while /var/lib/cni survives (containerd/cri#948), so the range stays full
// of reservations nobody will release; a new pod fails with "no IP addresses
// available" until the plugin reclaims them through CNI DEL.
func TestAnExhaustedRangeIsReclaimed(t *testing.T) {
	ctx := context.Background()
	l := startNetLab(t, 10, 12) // three addresses
	k := newKubelet(t, l)
	var leaked []netState
	for i := range 3 {
		p := netPod(t, fmt.Sprintf("filler-%d", i))
		k.admit(t, p)
		sb, _ := runPod(t, l, p, 1)
		leaked = append(leaked, sandboxNet(t, l, sb))
	}
	if _, err := l.RunPod(ctx, netPod(t, "overflow")); err == nil || !strings.Contains(err.Error(), "no IP addresses available") {
		t.Fatalf("a fourth pod on a range of three: err = %v, want no IP addresses available", err)
	}
	if err := l.WipeRuntimeState(ctx, false); err != nil {
		t.Fatal(err)
	}
	leakedAt := time.Now()
	for _, n := range leaked {
		if !exists(l.CNI().ResultFile(n.id, "eth0")) || !exists(n.reservation) {
			t.Fatalf("the reboot did not leave %s's cache entry and reservation", n.id)
		}
	}
	if _, err := l.RunPod(ctx, netPod(t, "after-reboot")); err == nil || !strings.Contains(err.Error(), "no IP addresses available") {
		t.Fatalf("after the reboot the range must still be full: err = %v", err)
	}
	h := startHousekeeper(t, l, k, withNetwork(t, l))
	var sb string
	within := testGrace + 2*testPeriod + 10*time.Second
	errs := map[string]int{}
	waitFor(t, "a new pod gets an address", within, func() bool {
		p := netPod(t, "recovered")
		id, err := l.RunPod(ctx, p)
		if err != nil {
			why := err.Error()[strings.LastIndex(err.Error(), ": ")+2:]
			if strings.Contains(err.Error(), "no IP addresses available") {
				why = "no IP addresses available"
			}
			errs[why]++
			time.Sleep(200 * time.Millisecond)
			return false
		}
		sb = id
		return true
	})
	t.Logf("RunPodSandbox failures while the range was full: %v", errs)
	t.Logf("leak to a Running pod with an address: %s (leak_grace %s, period %s)", time.Since(leakedAt).Round(time.Millisecond), testGrace, testPeriod)
	recovered := sandboxNet(t, l, sb)
	waitFor(t, "every leaked attachment is deleted", 20*time.Second, func() bool {
		for _, n := range leaked {
			if exists(l.CNI().ResultFile(n.id, "eth0")) || len(reservedBy(t, l, n.id)) > 0 ||
				logLine(h.logs.String(), `msg="deleted CNI attachment"`, "container_id="+n.id, "path="+l.CNI().ResultFile(n.id, "eth0")) == "" {
				return false
			}
		}
		return true
	})
	logs := h.logs.String()
	for _, n := range leaked {
		mustLog(t, logs, `msg="deleted CNI attachment"`, "rule=network.attachment-unowned", "container_id="+n.id)
	}
	if strings.Contains(logs, sb) {
		t.Fatalf("an action names the new pod's sandbox %s", sb)
	}
	if got := reservedBy(t, l, sb); len(got) != 1 || !exists(l.CNI().ResultFile(sb, "eth0")) || !mounted(t, recovered.netns) {
		t.Fatalf("the new pod's network was touched: reservations %v", got)
	}
}

// TestLeakedNetworkNamespacesAreReclaimedAndLivePodsUntouched: a reboot that
// keeps the kernel's state (as a containerd whose state dir was wiped)
// leaves netns mounts, veths and portmap rules no sandbox owns; the plugin
// removes them, and the live pods' namespaces, veths, addresses and portmap
// rules stay exactly as they were.
func TestLeakedNetworkNamespacesAreReclaimedAndLivePodsUntouched(t *testing.T) {
	ctx := context.Background()
	l := startNetLab(t, 0, 0)
	k := newKubelet(t, l)
	var leaked []netState
	for i := range 3 {
		p := netPod(t, fmt.Sprintf("leaked-%d", i), int32(31000+i))
		k.admit(t, p)
		sb, _ := runPod(t, l, p, 1)
		leaked = append(leaked, sandboxNet(t, l, sb))
	}
	if err := l.WipeRuntimeState(ctx, true); err != nil {
		t.Fatal(err)
	}
	for i, n := range leaked {
		if !mounted(t, n.netns) || len(natRules(t, int32(31000+i))) == 0 {
			t.Fatalf("the reboot did not leave %s's netns mount and portmap rules", n.id)
		}
	}
	var live []netState
	for i := range 2 {
		p := netPod(t, fmt.Sprintf("live-%d", i), int32(32000+i))
		k.admit(t, p)
		sb, _ := runPod(t, l, p, 1)
		live = append(live, sandboxNet(t, l, sb))
	}
	type liveView struct {
		addr string
		nat  []string
	}
	before := map[string]liveView{}
	for i, n := range live {
		before[n.id] = liveView{addr: podAddr(t, n.netns), nat: natRules(t, int32(32000+i))}
	}
	portsBefore := bridgePorts(t, l)
	if len(portsBefore) != 5 {
		t.Fatalf("veths on the bridge before: %v, want 3 leaked + 2 live", portsBefore)
	}

	h := startHousekeeper(t, l, k, withNetwork(t, l))
	waitFor(t, "the leaked namespaces are removed", 30*time.Second, func() bool {
		for _, n := range leaked {
			// The log line follows the removal.
			if mounted(t, n.netns) || exists(n.netns) || exists(l.CNI().ResultFile(n.id, "eth0")) ||
				logLine(h.logs.String(), `msg="removed network namespace"`, "path="+n.netns) == "" {
				return false
			}
		}
		return true
	})
	logs := h.logs.String()
	for i, n := range leaked {
		mustLog(t, logs, `msg="deleted CNI attachment"`, "container_id="+n.id)
		mustLog(t, logs, `msg="removed network namespace"`, "rule=network.netns-unused", "path="+n.netns)
		if len(reservedBy(t, l, n.id)) > 0 || len(natRules(t, int32(31000+i))) > 0 {
			t.Fatalf("leaked %s: reservation %v or portmap rules %v left", n.id, reservedBy(t, l, n.id), natRules(t, int32(31000+i)))
		}
	}
	if got := bridgePorts(t, l); len(got) != 2 {
		t.Fatalf("veths on the bridge after: %v, want the 2 live pods' only", got)
	}
	for i, n := range live {
		if strings.Contains(logs, n.id) || strings.Contains(logs, n.netns) {
			t.Fatalf("an action names live pod %s", n.id)
		}
		after := liveView{addr: podAddr(t, n.netns), nat: natRules(t, int32(32000+i))}
		if after.addr != before[n.id].addr || !slices.Equal(after.nat, before[n.id].nat) || len(after.nat) == 0 {
			t.Fatalf("live pod %s changed:\n before %+v\n after  %+v", n.id, before[n.id], after)
		}
		if !mounted(t, n.netns) || !exists(l.CNI().ResultFile(n.id, "eth0")) || len(reservedBy(t, l, n.id)) != 1 {
			t.Fatalf("live pod %s lost its netns, cache entry or reservation", n.id)
		}
	}
	t.Logf("ip -o link (bridge %s):\n%s", l.CNI().Bridge, sh(t, "ip", "-o", "link", "show", "master", l.CNI().Bridge))
}

// networkActions records, right before each execution, the network steps
// of the plan and when.
type networkActions struct {
	housekeeping.Executor
	mu    sync.Mutex
	taken []takenAction
}

type takenAction struct {
	at     time.Time
	action gc.Action
}

func (r *networkActions) Execute(ctx context.Context, actions []gc.Action, now time.Time, recheck executor.Recheck) []executor.Outcome {
	r.mu.Lock()
	for _, a := range actions {
		switch a.Kind {
		case gc.RemoveCNIAttachment, gc.ReleaseIPReservation, gc.RemoveNetns:
			r.taken = append(r.taken, takenAction{at: time.Now(), action: a})
		}
	}
	r.mu.Unlock()
	return r.Executor.Execute(ctx, actions, now, recheck)
}

// TestAPodBeingCreatedIsNeverTouched drives pod creations and removals in a
// loop across many passes with a leak_grace far shorter than a creation, on
// a node with real leaks to reclaim: every network step the plugin takes is
// on a leaked sandbox, none on a pod the test made, whatever its stage.
func TestAPodBeingCreatedIsNeverTouched(t *testing.T) {
	ctx := context.Background()
	l := startNetLab(t, 0, 0)
	k := newKubelet(t, l)
	leakedIDs := map[string]bool{}
	for i := range 2 {
		p := netPod(t, fmt.Sprintf("leaked-%d", i))
		sb, _ := runPod(t, l, p, 0)
		leakedIDs[sb] = true
	}
	if err := l.WipeRuntimeState(ctx, false); err != nil {
		t.Fatal(err)
	}
	rec := &networkActions{}
	h := startHousekeeperWrapped(t, l, k, func(o *housekeeping.Options, e *executor.Options) {
		withNetwork(t, l)(o, e)
		o.Period, o.Policy.LeakGrace = 100*time.Millisecond, 20*time.Millisecond
		o.Policy.Budget = gc.Budget{MaxPerPass: 100, MaxFraction: 1, MinPerPass: 100, MaxPerHour: 100000}
	}, func(inner housekeeping.Executor) housekeeping.Executor { rec.Executor = inner; return rec })

	// The creations: each pod is run, checked and, every other one,
	// stopped and removed; made records the time each was first asked for.
	var mu sync.Mutex
	made := map[string]bool{}
	madeNetns := map[string]string{} // netns path → the made pod's sandbox
	var alive []string
	deadline := time.Now().Add(15 * time.Second)
	passes0, _ := h.loop.Passes()
	n := 0
	for time.Now().Before(deadline) {
		p := netPod(t, fmt.Sprintf("churn-%d", n))
		sb, err := l.RunPod(ctx, p)
		if err != nil {
			t.Fatalf("creation %d: %v", n, err)
		}
		net := sandboxNet(t, l, sb)
		mu.Lock()
		made[sb] = true
		madeNetns[net.netns] = sb
		mu.Unlock()
		if n%2 == 1 {
			if _, err := l.Runtime().StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Runtime().RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
				t.Fatal(err)
			}
		} else {
			alive = append(alive, sb)
		}
		n++
	}
	passes1, _ := h.loop.Passes()
	t.Logf("%d creations (%d kept) across %d passes", n, len(alive), passes1-passes0)
	if passes1-passes0 < 20 {
		t.Fatalf("only %d passes ran during the creations", passes1-passes0)
	}
	waitFor(t, "the leaked attachments are reclaimed", 10*time.Second, func() bool {
		for id := range leakedIDs {
			if exists(l.CNI().ResultFile(id, "eth0")) {
				return false
			}
		}
		return true
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	reclaimed := map[string]bool{}
	for _, ta := range rec.taken {
		id := ta.action.ContainerID
		if made[id] {
			t.Errorf("%s %s at %s: a pod the test made", ta.action.Kind, id, ta.at.Format(time.RFC3339Nano))
		}
		// A namespace removal names the owner of an attachment that ran
		// there, if any: a pod being made has none yet, so its path is
		// what tells.
		if sb, ok := madeNetns[ta.action.Path]; ok && ta.action.Kind == gc.RemoveNetns {
			t.Errorf("%s %s at %s: the namespace of pod %s the test made", ta.action.Kind, ta.action.Path, ta.at.Format(time.RFC3339Nano), sb)
		}
		if ta.action.Kind != gc.RemoveNetns && !leakedIDs[id] {
			t.Errorf("%s on %q, not a leaked sandbox", ta.action.Kind, id)
		}
		reclaimed[id] = true
	}
	for id := range leakedIDs {
		if !reclaimed[id] {
			t.Errorf("leaked %s was not reclaimed by the plugin", id)
		}
	}
	for _, id := range alive {
		n := sandboxNet(t, l, id)
		if !mounted(t, n.netns) || !exists(l.CNI().ResultFile(id, "eth0")) || len(reservedBy(t, l, id)) != 1 {
			t.Errorf("live pod %s lost its netns, cache entry or reservation", id)
		}
	}
}

// TestNetworkLeaksInDryRunAndReport: dry_run and report show the would-be
// reclaims of every network kind and change nothing; once reclaims them.
func TestNetworkLeaksInDryRunAndReport(t *testing.T) {
	ctx := context.Background()
	l := startNetLab(t, 0, 0)
	k := newKubelet(t, l)
	var leaked []netState
	for i := range 2 {
		p := netPod(t, fmt.Sprintf("leaked-%d", i))
		sb, _ := runPod(t, l, p, 0)
		leaked = append(leaked, sandboxNet(t, l, sb))
	}
	if err := l.WipeRuntimeState(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The second leak lost its cache entry (a half-written teardown): only
	// its reservation and netns are left.
	if err := os.Remove(l.CNI().ResultFile(leaked[1].id, "eth0")); err != nil {
		t.Fatal(err)
	}

	h := startHousekeeper(t, l, k, func(o *housekeeping.Options, e *executor.Options) {
		withNetwork(t, l)(o, e)
		e.DryRun = true
		// A dry run changes nothing, so a throttled class would show its
		// oldest step every pass and the rest never: room for all of them.
		o.Policy.Budget.MinPerPass, o.Policy.Budget.MaxPerPass = 10, 10
	})
	waitFor(t, "the dry run reports every network step", 20*time.Second, func() bool {
		logs := h.logs.String()
		return strings.Contains(logs, `msg="would delete CNI attachment"`) && strings.Contains(logs, `msg="would release IP reservation"`) &&
			strings.Contains(logs, `msg="would remove network namespace"`)
	})
	logs := h.logs.String()
	mustLog(t, logs, `msg="would delete CNI attachment"`, "container_id="+leaked[0].id)
	mustLog(t, logs, `msg="would release IP reservation"`, "container_id="+leaked[1].id, "path="+leaked[1].reservation)
	mustLog(t, logs, `msg="would remove network namespace"`, "path="+leaked[1].netns)
	if !exists(l.CNI().ResultFile(leaked[0].id, "eth0")) || !exists(leaked[1].reservation) || !mounted(t, leaked[0].netns) || !mounted(t, leaked[1].netns) {
		t.Fatal("the dry run changed something")
	}
	h.stop()

	exe := buildPlugin(t, t.TempDir(), "nri-housekeeper")
	// With the default network.min_age (2m), leaks made a moment ago are
	// kept, even with no grace: they may be sandboxes being set up.
	out, err := exec.Command(exe, "report", "--leak-grace", "0s", "--config", oneShotConfig(t, l, k, "")).CombinedOutput()
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	t.Logf("report, network.min_age 2m:\n%s", out)
	for _, want := range []string{"cni attachment eth0 of " + leaked[0].id[:13], "ip reservation " + leaked[1].ip, "network namespace " + leaked[1].netns} {
		if !regexp.MustCompile(regexp.QuoteMeta(want) + `[^\n]*less than network\.min_age \(2m0s\)`).Match(out) {
			t.Errorf("report does not keep %q as too young", want)
		}
	}
	if strings.Contains(string(out), "remove-netns") || strings.Contains(string(out), "release-ip") {
		t.Error("report plans a network step on objects younger than network.min_age")
	}
	conf := oneShotConfig(t, l, k, "0s")
	out, err = exec.Command(exe, "report", "--config", conf).CombinedOutput()
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	t.Logf("report:\n%s", out)
	// Three attachments: both leaks' loopback ones (containerd's
	// cni-loopback network) and the first one's on the lab's network.
	for _, want := range []string{"3 cni-attachment", "1 ip-reservation", "2 netns",
		"remove-cni-attachment", "network.attachment-unowned", "cni attachment eth0 of " + leaked[0].id[:13],
		"release-ip", "network.reservation-unowned", "ip reservation " + leaked[1].ip,
		"remove-netns", "network.netns-unused", "network namespace " + leaked[1].netns} {
		if !strings.Contains(string(out), want) {
			t.Errorf("report has no %q", want)
		}
	}
	if out, err := exec.Command(exe, "once", "--leak-grace", "0s", "--config", conf).CombinedOutput(); err != nil {
		t.Fatalf("once: %v\n%s", err, out)
	} else {
		t.Logf("once:\n%s", out)
	}
	for _, n := range leaked {
		if exists(l.CNI().ResultFile(n.id, "eth0")) || len(reservedBy(t, l, n.id)) > 0 || mounted(t, n.netns) {
			t.Errorf("once left %s's network behind", n.id)
		}
	}
}

// oneShotConfig writes the configuration report and once run with against
// the lab (the network side on, as by default, with network.min_age
// minAge, "" for the default; a budget that lets every step of a small
// test through) and returns its path.
func oneShotConfig(t *testing.T, l *lab.Lab, k *kubelet, minAge string) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "config.toml")
	minAgeTable := ""
	if minAge != "" {
		minAgeTable = fmt.Sprintf("\n[network]\nmin_age = %q\n", minAge)
	}
	text := fmt.Sprintf(`[housekeeping]
state_file = %q

[runtime]
endpoint = "unix://%s"

[pods]
kubelet_root = %q

[logs]
pod_logs_dir = %q
container_logs_dir = %q

[cgroups]
root = %q
%s
[budget]
max_per_pass = 10
min_per_pass = 10
max_fraction = 1.0
`, filepath.Join(t.TempDir(), "state.json"), l.CRISocket, k.root, l.LogRoot, k.linksDir, strings.TrimPrefix(l.CgroupRoot, "/"), minAgeTable)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}

// TestAPluginThatDoesNotSeeContainerdsNetnsMountsKeepsWhatItCannotCheck:
// a plugin whose mount namespace does not receive containerd's mounts (a
// container run with a private bind of the netns dir) sees a namespace
// containerd mounted after it started as an empty file. Taken for gone,
// the DEL of an attachment no source owns would run with no namespace, no
// thread in it read, though a pod may run there: it is kept, saying why.
// The same once run in containerd's mount namespace reclaims it.
func TestAPluginThatDoesNotSeeContainerdsNetnsMountsKeepsWhatItCannotCheck(t *testing.T) {
	ctx := context.Background()
	l := startNetLab(t, 0, 0)
	k := newKubelet(t, l)
	// The plugin's mount namespace, made before the pod: private, it gets
	// none of the mounts made on the node after.
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	mntNS := fmt.Sprintf("/proc/%d/ns/mnt", holder.Process.Pid)
	waitFor(t, "the holder is in a mount namespace of its own", 10*time.Second, func() bool {
		self, err1 := os.Readlink("/proc/self/ns/mnt")
		its, err2 := os.Readlink(mntNS)
		return err1 == nil && err2 == nil && self != its
	})
	sb, _ := runPod(t, l, netPod(t, "unseen"), 0)
	leaked := sandboxNet(t, l, sb)
	if err := l.WipeRuntimeState(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !mounted(t, leaked.netns) {
		t.Fatalf("the reboot did not leave %s's netns mount", leaked.id)
	}
	exe := buildPlugin(t, t.TempDir(), "nri-housekeeper")
	conf := oneShotConfig(t, l, k, "0s")

	out, err := exec.Command("nsenter", "--mount="+mntNS, "--", exe, "once", "--leak-grace", "0s", "--config", conf).CombinedOutput()
	t.Logf("once, in the private mount namespace (err %v):\n%s", err, out)
	for _, want := range []string{"its netns " + leaked.netns + " is not mounted as seen from here", "HostToContainer",
		"this process may not see the namespaces containerd mounts"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("once's output has no %q", want)
		}
	}
	if !exists(l.CNI().ResultFile(leaked.id, "eth0")) || len(reservedBy(t, l, leaked.id)) != 1 || !mounted(t, leaked.netns) {
		t.Fatalf("once, not seeing containerd's mounts, reclaimed %s's network", leaked.id)
	}

	out, err = exec.Command(exe, "once", "--leak-grace", "0s", "--config", conf).CombinedOutput()
	if err != nil {
		t.Fatalf("once, in containerd's mount namespace: %v\n%s", err, out)
	}
	if exists(l.CNI().ResultFile(leaked.id, "eth0")) || len(reservedBy(t, l, leaked.id)) > 0 || mounted(t, leaked.netns) {
		t.Fatalf("once, in containerd's mount namespace, left %s's network behind:\n%s", leaked.id, out)
	}
}

// mustLog fails unless one line of logs has every part.
func mustLog(t *testing.T, logs string, parts ...string) {
	t.Helper()
	if logLine(logs, parts...) == "" {
		t.Fatalf("no log line with %q", parts)
	}
}
