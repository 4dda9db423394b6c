//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/plugin"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// Short settings so that scenarios finish in seconds.
const (
	testGrace  = 2 * time.Second
	testPeriod = time.Second
)

// kubelet plays the parts of kubelet the plugin reads: the pod dirs under
// its root (the oracle) and the legacy container log links.
type kubelet struct {
	root     string // kubelet_root
	linksDir string // container_logs_dir
	lab      *lab.Lab
}

func newKubelet(t testing.TB, l *lab.Lab) *kubelet {
	dir := t.TempDir()
	k := &kubelet{root: filepath.Join(dir, "kubelet"), linksDir: filepath.Join(dir, "containers"), lab: l}
	for _, d := range []string{filepath.Join(k.root, "pods"), k.linksDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func (k *kubelet) podDir(p lab.Pod) string { return filepath.Join(k.root, "pods", p.UID) }

// admit creates the pod dir, as kubelet does before RunPodSandbox.
func (k *kubelet) admit(t testing.TB, p lab.Pod) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(k.podDir(p), "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// forget removes the pod dir, as kubelet does once a pod is deleted.
func (k *kubelet) forget(t testing.TB, p lab.Pod) {
	t.Helper()
	if err := os.RemoveAll(k.podDir(p)); err != nil {
		t.Fatal(err)
	}
}

// link creates the legacy /var/log/containers link of a container.
func (k *kubelet) link(t *testing.T, p lab.Pod, name, id string) string {
	t.Helper()
	path := filepath.Join(k.linksDir, fmt.Sprintf("%s_%s_%s-%s.log", p.Name, p.Namespace, name, id))
	target := filepath.Join(k.lab.PodLogDir(p), name, "0.log")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// housekeeper is the whole plugin in the test process: NRI, podstate,
// housekeeping loop, executor, against the lab's containerd.
type housekeeper struct {
	*tracker
	logs *syncBuffer
}

func startHousekeeper(t *testing.T, l *lab.Lab, k *kubelet, configure func(*housekeeping.Options, *executor.Options)) *housekeeper {
	t.Helper()
	return startHousekeeperWrapped(t, l, k, configure, nil)
}

// startHousekeeperWrapped is startHousekeeper whose executor wrap may wrap:
// to make something happen between a plan and its execution.
func startHousekeeperWrapped(t *testing.T, l *lab.Lab, k *kubelet, configure func(*housekeeping.Options, *executor.Options),
	wrap func(housekeeping.Executor) housekeeping.Executor) *housekeeper {
	t.Helper()
	logs := &syncBuffer{}
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	log.SetOutput(logs)
	log.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	client, err := cri.Dial("unix://"+l.CRISocket, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	opts := housekeeping.Options{
		Period: testPeriod, SlowPassWarning: 5 * time.Second, Debounce: 200 * time.Millisecond,
		KubeletRoot: k.root,
		// As the plugin asks it: whether this process sees the mounts
		// made in the pods dir, compared with containerd's view.
		PodDirMountsUnseen: housekeeping.PodDirMountsUnseenBy(client.PeerPID, k.root),
		// The lab runs on the node's wall clock, as the plugin does.
		CompareBirthTimes: true,
		Policy: gc.Policy{LeakGrace: testGrace, MaxPerPodContainer: 1, MaxContainers: -1,
			StopTimeout: time.Second, Budget: gc.Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 1000},
			PodLogsDir: l.LogRoot, ContainerLogsDir: k.linksDir},
	}
	execOpts := executor.Options{MaxParallel: 4}
	if configure != nil {
		configure(&opts, &execOpts)
	}
	podLogs, err := nodefs.NewRemover(l.LogRoot)
	if err != nil {
		t.Fatal(err)
	}
	links, err := nodefs.NewRemover(k.linksDir)
	if err != nil {
		t.Fatal(err)
	}
	node := executor.Node{PodLogs: podLogs, Links: links, KubeletRoot: k.root}
	if opts.Network != nil {
		node.Network = opts.Network
	}
	opts.Executor = executor.New(client, node, execOpts, log)
	if wrap != nil {
		opts.Executor = wrap(opts.Executor)
	}
	state := podstate.New(0)
	var nri *plugin.Plugin
	opts.Synchronized = func() bool { return nri.Synchronized() }
	loop := housekeeping.New(state, client, opts, log)
	nri = plugin.New(state, loop, log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	tr := &tracker{state: state, nri: nri, loop: loop, client: client, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = loop.Run(ctx) }()
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = client.WatchTaskExits(ctx, "k8s.io", loop.Wake)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
		_ = nri.Run(ctx, plugin.ConnectOptions{SocketPath: l.NRISocket, PluginName: "nri-housekeeper", PluginIndex: "10"})
		wg.Wait()
	}()
	h := &housekeeper{tracker: tr, logs: logs}
	t.Cleanup(func() {
		tr.stop()
		if t.Failed() {
			t.Logf("plugin log:\n%s", logs.String())
		}
	})
	waitFor(t, "the plugin synchronizes", 10*time.Second, nri.Synchronized)
	return h
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runtimeHas reports whether the runtime still lists a sandbox or container.
func runtimeHas(t *testing.T, l *lab.Lab, id string) bool {
	t.Helper()
	ctx := context.Background()
	pods, err := l.Runtime().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	for _, p := range pods.Items {
		if p.Id == id {
			return true
		}
	}
	ctrs, err := l.Runtime().ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	for _, c := range ctrs.Containers {
		if c.Id == id {
			return true
		}
	}
	return false
}

func sandboxReady(t *testing.T, l *lab.Lab, id string) bool {
	t.Helper()
	r, err := l.Runtime().PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return r.Status.State == runtimeapi.PodSandboxState_SANDBOX_READY
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// waitGone waits until none of ids is listed and none of paths exists.
func waitGone(t *testing.T, l *lab.Lab, what string, within time.Duration, ids []string, paths []string) time.Duration {
	t.Helper()
	return waitFor(t, what, within, func() bool {
		for _, id := range ids {
			if runtimeHas(t, l, id) {
				return false
			}
		}
		for _, p := range paths {
			if exists(p) {
				return false
			}
		}
		return true
	})
}

// leakLike107730 deletes a pod the way a stuck kubelet leaves it: pod dir
// removed, containers stopped, sandbox stopped, nothing removed.
func leakLike107730(t *testing.T, l *lab.Lab, k *kubelet, p lab.Pod, sandbox string, ctrs []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ctrs {
		if err := l.StopContainer(ctx, id, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.StopPod(ctx, sandbox); err != nil {
		t.Fatal(err)
	}
	k.forget(t, p)
}

func TestReclaimsTheLeakOfKubernetes107730(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	h := startHousekeeper(t, node, k, nil)
	p := newPod(t, "deleted")
	k.admit(t, p)
	sb, ctrs := runPod(t, node, p, 2)
	links := []string{k.link(t, p, "app0", ctrs[0]), k.link(t, p, "app1", ctrs[1])}
	bystander := newPod(t, "bystander")
	k.admit(t, bystander)
	bsb, bctrs := runPod(t, node, bystander, 1)

	leakLike107730(t, node, k, p, sb, ctrs)
	// The whole pod in one pass, one grace after it was found: the links
	// (which dangle only once the log dir is gone) right after the dir.
	took := waitGone(t, node, "containers, sandbox, pod log dir and log links are reclaimed", testGrace+testPeriod+3*time.Second,
		append([]string{sb}, ctrs...), append([]string{node.PodLogDir(p)}, links...))
	t.Logf("#107730 leak reclaimed whole %v after the pod dir was removed (grace %v, period %v)", took.Round(time.Millisecond), testGrace, testPeriod)
	if !runtimeHas(t, node, bsb) || !runtimeHas(t, node, bctrs[0]) || !sandboxReady(t, node, bsb) {
		t.Fatal("the live bystander pod was touched")
	}
	logs := h.logs.String()
	for _, want := range []string{
		"action=remove-container", "action=remove-sandbox", "action=remove-pod-log-dir", "action=remove-log-link",
		"rule=containers.pod-gone", "rule=sandboxes.pod-gone", "pod_uid=" + p.UID, "pod_name=deleted",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("plugin log has no %q", want)
		}
	}
	// The dead containers went with their sandbox: one RemovePodSandbox,
	// each container still logged.
	for _, id := range ctrs {
		if logLine(logs, `msg="removed container with its sandbox"`, "container_id="+id) == "" {
			t.Errorf("container %s was not removed with its sandbox:\n%s", id, logs)
		}
	}
}

func TestReclaimsALeakAcrossAContainerdKill9(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	h := startHousekeeper(t, node, k, func(o *housekeeping.Options, _ *executor.Options) {
		o.Policy.LeakGrace = 5 * time.Second // longer than the restart takes
	})
	p := newPod(t, "crashed")
	k.admit(t, p)
	sb, ctrs := runPod(t, node, p, 1)
	ctx := context.Background()
	if err := node.StopContainer(ctx, ctrs[0], 2); err != nil {
		t.Fatal(err)
	}
	if err := node.StopPod(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := node.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	k.forget(t, p) // kubelet goes on without the runtime
	time.Sleep(2 * time.Second)
	if _, err := node.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin reconnects by itself", 5*time.Second, h.nri.Synchronized)
	waitGone(t, node, "the leak is reclaimed after the restart", 5*time.Second+testPeriod+5*time.Second,
		[]string{sb, ctrs[0]}, []string{node.PodLogDir(p)})
}

// TestOrphanedLivePodAfterAContainerdCrash: containerd died between stopping
// the container and stopping the sandbox; the sandbox is still Ready but its
// pod is gone. Reported with orphans.action = "report", stopped and
// reclaimed with "stop".
func TestOrphanedLivePodAfterAContainerdCrash(t *testing.T) {
	for _, action := range []string{"report", "stop"} {
		t.Run(action, func(t *testing.T) {
			cleanupPods(t, node)
			k := newKubelet(t, node)
			// Pods kubelet still has beside it: one Ready sandbox without a
			// pod dir among them is an orphan, not a wrong oracle.
			livePods(t, k, "bystander-"+action, 2)
			p := newPod(t, "half-deleted-"+action)
			k.admit(t, p)
			sb, ctrs := runPod(t, node, p, 1)
			ctx := context.Background()
			if err := node.StopContainer(ctx, ctrs[0], 2); err != nil {
				t.Fatal(err)
			}
			if err := node.KillContainerd(); err != nil {
				t.Fatal(err)
			}
			k.forget(t, p)
			if _, err := node.RestartContainerd(ctx); err != nil {
				t.Fatal(err)
			}
			h := startHousekeeper(t, node, k, func(o *housekeeping.Options, _ *executor.Options) {
				o.Policy.StopOrphans = action == "stop"
			})
			if action == "report" {
				waitFor(t, "the orphan is reported", testGrace+5*time.Second, func() bool {
					return logLine(h.logs.String(), "orphaned live pod", "pod_uid="+p.UID) != ""
				})
				time.Sleep(testGrace + 2*testPeriod)
				if !sandboxReady(t, node, sb) {
					t.Fatal("orphans.action = report stopped the sandbox")
				}
				return
			}
			waitGone(t, node, "the orphan is stopped and reclaimed", 2*testGrace+4*testPeriod+5*time.Second,
				[]string{sb, ctrs[0]}, []string{node.PodLogDir(p)})
			if !strings.Contains(h.logs.String(), "action=stop-sandbox") {
				t.Fatal("no stop-sandbox action logged")
			}
		})
	}
}

func TestLivePodLosesOnlyItsOldSandboxAttempt(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	startHousekeeper(t, node, k, nil)
	ctx := context.Background()
	p := newPod(t, "restarted")
	k.admit(t, p)
	oldSb, oldCtrs := runPod(t, node, p, 1)
	if err := node.StopContainer(ctx, oldCtrs[0], 2); err != nil {
		t.Fatal(err)
	}
	if err := node.RemoveContainer(ctx, oldCtrs[0]); err != nil {
		t.Fatal(err)
	}
	if err := node.StopPod(ctx, oldSb); err != nil {
		t.Fatal(err)
	}
	p.Attempt = 1
	newSb, newCtrs := runPod(t, node, p, 1)
	waitGone(t, node, "the old NotReady sandbox is removed", testGrace+testPeriod+3*time.Second, []string{oldSb}, nil)
	time.Sleep(2 * testPeriod)
	if !runtimeHas(t, node, newSb) || !sandboxReady(t, node, newSb) || !runtimeHas(t, node, newCtrs[0]) {
		t.Fatal("the Ready sandbox or its container was touched")
	}
	if !exists(node.PodLogDir(p)) {
		t.Fatal("the live pod's log dir was removed")
	}
}

// TestAContainerContainerdCannotReadHoldsItsSandbox: containerd lists a
// container whose status file it could not load as UNKNOWN with no creation
// time. The plugin never acts on it, and its old sandbox attempt, which it
// still references, is not removed (RemovePodSandbox would remove the
// container with it). Without it, the old attempt goes
// (TestLivePodLosesOnlyItsOldSandboxAttempt).
func TestAContainerContainerdCannotReadHoldsItsSandbox(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	ctx := context.Background()
	p := newPod(t, "unreadable")
	k.admit(t, p)
	oldSb, oldCtrs := runPod(t, node, p, 1)
	if err := node.StopContainer(ctx, oldCtrs[0], 2); err != nil {
		t.Fatal(err)
	}
	if err := node.StopPod(ctx, oldSb); err != nil {
		t.Fatal(err)
	}
	p.Attempt = 1
	newSb, err := node.RunPod(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.RunContainer(ctx, p, newSb, "app0", 1); err != nil { // the restarted container
		t.Fatal(err)
	}
	statuses, err := filepath.Glob(filepath.Join(node.Dir, "root", "*", "containers", oldCtrs[0], "status"))
	if err != nil || len(statuses) != 1 {
		t.Fatalf("the old container's status file: %v, %v", statuses, err)
	}
	if err := node.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statuses[0], []byte("not a status"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := node.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	listed, err := node.Runtime().ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: oldCtrs[0]}})
	if err != nil || len(listed.Containers) != 1 {
		t.Fatalf("containerd does not list the container it cannot read: %v, %v", listed, err)
	}
	if c := listed.Containers[0]; c.State != runtimeapi.ContainerState_CONTAINER_UNKNOWN || c.CreatedAt != 0 {
		t.Fatalf("containerd lists it as %s created at %d, want UNKNOWN with no creation time", c.State, c.CreatedAt)
	}

	h := startHousekeeper(t, node, k, nil)
	waitFor(t, "the unreadable entry is logged", testGrace+5*time.Second, func() bool {
		return strings.Contains(h.logs.String(), "keep the sandboxes and pods they name") && strings.Contains(h.logs.String(), oldCtrs[0])
	})
	time.Sleep(testGrace + 3*testPeriod)
	if !runtimeHas(t, node, oldSb) || !runtimeHas(t, node, oldCtrs[0]) {
		t.Fatal("the sandbox of a container containerd cannot read was removed, and the container with it")
	}
	if !sandboxReady(t, node, newSb) {
		t.Fatal("the Ready sandbox was touched")
	}
}

func TestLivePodKeepsMaxPerPodContainerDeadInstances(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	h := startHousekeeper(t, node, k, func(o *housekeeping.Options, _ *executor.Options) {
		o.Policy.LeakGrace = 0 // kubelet's own GC has no grace either; this is about the count
	})
	ctx := context.Background()
	p := newPod(t, "crashloop")
	k.admit(t, p)
	sb, err := node.RunPod(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	// kubelet's removeContainer removes a container's log file and the
	// rotations its log manager made, then the container: so does the
	// plugin. containerd makes <n>.log; the rotations are the test's, made
	// first (the plugin acts as soon as an attempt has a newer one).
	dir := filepath.Join(node.PodLogDir(p), "app")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var gone, kept []string
	for i := range 5 {
		log := filepath.Join(dir, fmt.Sprintf("%d.log", i))
		rotated := []string{log + ".20261124-101010", log + ".20261124-090909.gz"}
		for _, r := range rotated {
			if err := os.WriteFile(r, []byte("rotated\n"), 0o640); err != nil {
				t.Fatal(err)
			}
		}
		if i < 4 {
			gone = append(append(gone, log), rotated...)
		} else {
			kept = append(append(kept, log), rotated...)
		}
	}
	notes := filepath.Join(dir, "0.logbook")
	if err := os.WriteFile(notes, []byte("not kubelet's\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, notes)
	var attempts, links []string
	for i := range 5 {
		id, err := node.RunContainer(ctx, p, sb, "app", uint32(i))
		if err != nil {
			t.Fatal(err)
		}
		// kubelet's legacy link, made once the log file exists.
		link := filepath.Join(k.linksDir, fmt.Sprintf("%s_%s_app-%s.log", p.Name, p.Namespace, id))
		if err := os.Symlink(filepath.Join(dir, fmt.Sprintf("%d.log", i)), link); err != nil {
			t.Fatal(err)
		}
		if err := node.StopContainer(ctx, id, 2); err != nil {
			t.Fatal(err)
		}
		attempts, links = append(attempts, id), append(links, link)
	}
	gone, kept = append(gone, links[:4]...), append(kept, links[4])
	waitGone(t, node, "all but the newest dead attempt are removed, with their log files", testPeriod+5*time.Second, attempts[:4], gone)
	time.Sleep(2 * testPeriod)
	if !runtimeHas(t, node, attempts[4]) || !runtimeHas(t, node, sb) {
		t.Fatal("the newest dead attempt or the sandbox was removed")
	}
	for _, k := range kept {
		if !exists(k) {
			t.Errorf("%s was removed: it is the kept attempt's log, or no log file of kubelet's", k)
		}
	}
	// The log files containerd made are named where the plugin says it
	// removed them (waitGone alone would pass had they never existed).
	var removed []string
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if _, files, ok := strings.Cut(line, `log_files="[`); ok {
			files, _, _ = strings.Cut(files, `]"`)
			removed = append(removed, strings.Fields(files)...)
		}
	}
	for _, log := range gone {
		if strings.HasSuffix(log, ".log") && filepath.Dir(log) == dir && !slices.Contains(removed, log) {
			t.Errorf("%s is not among the log files the plugin says it removed (%v)", log, removed)
		}
	}
	if !strings.Contains(h.logs.String(), "removed container and its log files") {
		t.Error("no log line says a container was removed with its log files")
	}
	// Each link goes right after its container, in the same pass, as
	// kubelet's removeContainer removes it: not once it dangles.
	n := 0
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `msg="removed container log link"`) && strings.Contains(line, "link of a container this plan removes with its log files first") {
			n++
		}
	}
	if n != 4 {
		t.Errorf("%d links removed right after their container, want 4", n)
	}
}

func TestDryRunChangesNothingAndLogsEveryWould(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	h := startHousekeeper(t, node, k, func(_ *housekeeping.Options, e *executor.Options) { e.DryRun = true })
	p := newPod(t, "dry")
	k.admit(t, p)
	sb, ctrs := runPod(t, node, p, 1)
	leakLike107730(t, node, k, p, sb, ctrs)
	waitFor(t, "would-lines for the container, the sandbox and the log dir", testGrace+5*time.Second, func() bool {
		l := h.logs.String()
		return strings.Contains(l, "would remove container") && strings.Contains(l, "would stop and remove sandbox") &&
			strings.Contains(l, "would remove pod log dir")
	})
	time.Sleep(2 * testPeriod)
	if !runtimeHas(t, node, sb) || !runtimeHas(t, node, ctrs[0]) || !exists(node.PodLogDir(p)) {
		t.Fatal("dry run changed something")
	}
}

// TestNoActionWhileTheRuntimeIsDown: while containerd is down a pass fails
// and changes nothing, not even what needs no runtime (the log dir of a pod
// deleted during the outage); once it is back the leak is reclaimed.
func TestNoActionWhileTheRuntimeIsDown(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	h := startHousekeeper(t, node, k, nil)
	p := newPod(t, "during-outage")
	k.admit(t, p)
	sb, ctrs := runPod(t, node, p, 1)
	logDir := node.PodLogDir(p)
	if !exists(logDir) {
		t.Fatalf("the pod has no log dir %s: the outage would prove nothing of it", logDir)
	}
	ctx := context.Background()
	if err := node.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	n, _ := h.loop.Passes()
	r := h.waitPass(t, 5*time.Second)
	if r.Err == nil || len(r.Outcomes) != 0 {
		t.Fatalf("a pass while containerd is down: err %v, %d actions", r.Err, len(r.Outcomes))
	}
	k.forget(t, p) // the pod is deleted during the outage: no listing, no plan
	time.Sleep(testGrace + testPeriod)
	if m, _ := h.loop.Passes(); m <= n {
		t.Fatal("no pass ran during the outage")
	}
	if !strings.Contains(h.logs.String(), "nothing is changed on partial data") {
		t.Fatal("the skipped pass was not logged")
	}
	// The pod is gone and the runtime lists nothing: a pass that took the
	// failed listing for an empty one would remove its log dir, which
	// needs no runtime (its sandbox's removal would only fail).
	if !exists(logDir) {
		t.Fatal("the deleted pod's log dir was removed while the runtime was down")
	}
	if _, err := node.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	if !runtimeHas(t, node, sb) {
		t.Fatal("the sandbox went while the runtime was down")
	}
	leakLike107730(t, node, k, p, sb, ctrs)
	waitGone(t, node, "the leak is reclaimed once the runtime is back", testGrace+testPeriod+5*time.Second, []string{sb, ctrs[0]}, nil)
}

// TestAnExecExitDoesNotWakeHousekeepingButATaskExitDoes: the exit of an
// exec'd process (kubelet's exec probes) changes no pod and must not keep
// a pass due every wake interval; a container's own exit (what a dying
// pause process gives, with no NRI event) still wakes it. Against the
// lab's real containerd: its shim names an exec by its own ID.
func TestAnExecExitDoesNotWakeHousekeepingButATaskExitDoes(t *testing.T) {
	cleanupPods(t, node)
	p := newPod(t, "exec-exit")
	_, ids := runPod(t, node, p, 1)
	client, err := cri.Dial("unix://"+node.CRISocket, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wakes := make(chan struct{}, 16)
	watching := make(chan error, 1)
	go func() {
		watching <- client.WatchTaskExits(ctx, "k8s.io", func() { wakes <- struct{}{} })
	}()
	time.Sleep(500 * time.Millisecond) // subscribed (the stream has no ack)

	for range 3 {
		r, err := node.Runtime().ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ids[0],
			Cmd: []string{"/sleeper", "-exit-after", "1ms"}, Timeout: 10})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec: %v (%+v)", err, r)
		}
	}
	select {
	case <-wakes:
		t.Fatal("an exec'd process's exit woke housekeeping")
	case err := <-watching:
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(2 * time.Second):
	}
	if _, err := node.Runtime().StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ids[0], Timeout: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wakes:
	case err := <-watching:
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the container's exit did not wake housekeeping within 10 s")
	}
}
