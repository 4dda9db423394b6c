//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// Beside a real kubelet (issue #11): kubelet lab.KubeletVersion, standalone
// (static pods, hostNetwork) on a lab of its own, with the plugin binary
// pointed at kubelet's root dir, pod logs dir, /var/log/containers and
// cgroup root.

// kubeletNodeState is kubelet.sh's record of what kubelet labs changed on the node.
const kubeletNodeState = "/run/nrihk-kubelet"

// kubeletSysctls are what kubelet sets with protectKernelDefaults: false.
var kubeletSysctls = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

func readSysctl(name string) string {
	b, _ := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	return strings.TrimSpace(string(b))
}

// startKubeletLab starts a lab of its own (dir and cgroup root from
// labName()+"-kubelet") and a real kubelet in it. At cleanup both go down and
// the test fails unless nothing of them is left on the node: no mount under
// kubelet's root, no link to its pod logs, no cgroup under the root, and,
// when no other kubelet lab runs, the sysctls and /var/lib/kubelet and
// /var/log/containers as they were.
func startKubeletLab(t *testing.T) (*lab.Lab, *lab.RealKubelet) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	name := labName() + "-kubelet"
	sysctls := map[string]string{}
	for _, s := range kubeletSysctls {
		sysctls[s] = readSysctl(s)
	}
	// A run that died without its down left the values from before it.
	if b, err := os.ReadFile(filepath.Join(kubeletNodeState, "sysctl.saved")); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				sysctls[k] = v
			}
		}
	}
	existed := map[string]bool{}
	for _, p := range []string{lab.ContainerLogsDir, "/var/lib/kubelet", "/var/lib/kubelet/device-plugins"} {
		existed[p] = exists(p)
	}
	start := time.Now()
	l, err := lab.Start(ctx, lab.Options{Dir: "/tmp/" + name, CgroupRoot: "/" + name})
	if err != nil {
		t.Fatal(err)
	}
	k, err := lab.StartKubelet(ctx, l, lab.KubeletOptions{})
	if err != nil {
		_ = l.Down(context.Background())
		t.Fatal(err)
	}
	t.Logf("lab and kubelet %s up in %v (root %s, pod logs %s, pods cgroup %s)", lab.KubeletVersion,
		time.Since(start).Round(time.Millisecond), k.RootDir, k.PodLogsDir, k.PodsCgroup)
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := k.Logs(); err == nil {
				t.Logf("kubelet log (tail):\n%s", tail(b, 60))
			}
		}
		ctx := context.Background()
		if err := k.Down(ctx); err != nil {
			t.Errorf("kubelet down: %v", err)
		}
		if err := l.Down(ctx); err != nil {
			t.Errorf("lab down: %v", err)
		}
		if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), " "+k.RootDir) {
			t.Errorf("mounts left under %s", k.RootDir)
		}
		if links, err := k.ContainerLogLinks(); err != nil || len(links) > 0 {
			t.Errorf("container log links left: %v %v", links, err)
		}
		if left, _ := filepath.Glob("/sys/fs/cgroup/*/" + name); len(left) > 0 || exists("/sys/fs/cgroup/"+name) {
			t.Errorf("cgroups left: %v", left)
		}
		if users, _ := filepath.Glob(kubeletNodeState + "/users/*"); len(users) > 0 {
			t.Logf("another kubelet lab runs (%v): the node state stays until it goes", users)
			return
		}
		for s, want := range sysctls {
			if got := readSysctl(s); got != want {
				t.Errorf("sysctl %s = %s after down, was %s", s, got, want)
			}
		}
		for p, was := range existed {
			if exists(p) != was {
				t.Errorf("%s exists: %v after down, %v before", p, exists(p), was)
			}
		}
	})
	return l, k
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kubeletPlugin is the plugin binary pointed at a real kubelet's paths.
type kubeletPlugin struct {
	LogFile, Addr string
	cmd           *exec.Cmd
	done          chan struct{}
}

// pluginConfigFor is the plugin's config beside k. Default: only the paths
// (sockets, kubelet_root, the log dirs, cgroups.root, the log file, a free
// metrics port) and log level debug, everything else the defaults.
// Aggressive: also period 5s, no startup delay, leak_grace 15s (shorter than
// kubelet's one-minute container GC), orphans stopped, cgroups on with the
// cgroupfs driver, orphaned pod dirs removed.
func pluginConfigFor(l *lab.Lab, k *lab.RealKubelet, logFile, addr string, aggressive bool, grace time.Duration) string {
	var b strings.Builder
	// The state file beside the log: kept across this test's plugin restarts.
	fmt.Fprintf(&b, "[housekeeping]\nstate_file = %q\n", filepath.Join(filepath.Dir(logFile), "state.json"))
	if aggressive {
		fmt.Fprintf(&b, "period = \"5s\"\nstartup_delay = \"0s\"\nleak_grace = %q\n", grace.String())
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "[nri]\nsocket = %q\n\n[runtime]\nendpoint = \"unix://%s\"\n\n[pods]\nkubelet_root = %q\n\n",
		l.NRISocket, l.CRISocket, k.RootDir)
	if aggressive {
		b.WriteString("[orphans]\naction = \"stop\"\n\n[pod_dirs]\nremove_orphaned = true\n\n")
	}
	fmt.Fprintf(&b, "[logs]\npod_logs_dir = %q\ncontainer_logs_dir = %q\n\n[cgroups]\nroot = %q\n",
		k.PodLogsDir, k.ContainerLogsDir, k.PodsCgroup)
	if aggressive {
		b.WriteString("enabled = true\ndriver = \"cgroupfs\"\n")
	}
	fmt.Fprintf(&b, "\n[metrics]\naddress = %q\n\n[log]\nlevel = \"debug\"\ntarget = \"file\"\nfile = %q\n", addr, logFile)
	return b.String()
}

// startKubeletPlugin runs the plugin binary exe with the config text; it is
// stopped (and its log shown on failure) at cleanup, or by stop.
func startKubeletPlugin(t *testing.T, exe string, config func(logFile, addr string) string) *kubeletPlugin {
	t.Helper()
	dir := t.TempDir()
	p := &kubeletPlugin{LogFile: filepath.Join(dir, "plugin.log"), Addr: freePort(t), done: make(chan struct{})}
	conf := writeConfig(t, dir, config(p.LogFile, p.Addr))
	p.cmd = exec.Command(exe, "run", "--config", conf)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("plugin log (tail):\n%s", tail(p.log(), 150))
		}
	})
	waitFor(t, "the plugin serves /readyz", 20*time.Second, func() bool { code, _ := get("http://" + p.Addr + "/readyz"); return code != 0 })
	return p
}

func (p *kubeletPlugin) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *kubeletPlugin) log() string {
	b, _ := os.ReadFile(p.LogFile)
	return string(b)
}

// parseLogfmt splits a logrus text line into its fields.
func parseLogfmt(line string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(line); {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		j := i
		for j < len(line) && line[j] != '=' && line[j] != ' ' {
			j++
		}
		if j >= len(line) || line[j] != '=' {
			i = j + 1
			continue
		}
		key := line[i:j]
		j++
		if j < len(line) && line[j] == '"' {
			e := j + 1
			for e < len(line) && line[e] != '"' {
				if line[e] == '\\' {
					e++
				}
				e++
			}
			v, err := strconv.Unquote(line[j:min(e+1, len(line))])
			if err != nil {
				v = line[j:min(e+1, len(line))]
			}
			m[key] = v
			i = e + 1
			continue
		}
		e := j
		for e < len(line) && line[e] != ' ' {
			e++
		}
		m[key] = line[j:e]
		i = e
	}
	return m
}

// pluginLine is a line of the plugin's log with an action= field.
type pluginLine struct {
	Time                                                        time.Time
	Msg, Kind, Rule, Reason, UID, Pod, Sandbox, Container, Path string
	Line                                                        string
}

// Deferred: a planned action not due yet ("not due: ..."). Else the line is
// an action taken or attempted: done, "would ...", failed, or aborted by
// the re-check right before it.
func (a pluginLine) Deferred() bool { return strings.HasPrefix(a.Msg, "not due") }
func (a pluginLine) Aborted() bool  { return strings.HasPrefix(a.Msg, "not done: checked again") }
func (a pluginLine) Failed() bool   { return strings.HasPrefix(a.Msg, "failed to ") }

// objectID is what the action is on: container, sandbox or path.
func (a pluginLine) objectID() string { return cmp.Or(a.Container, a.Sandbox, a.Path) }

func pluginLines(log string) []pluginLine {
	var out []pluginLine
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, " action=") {
			continue
		}
		f := parseLogfmt(line)
		ts, _ := time.Parse(time.RFC3339Nano, f["time"])
		out = append(out, pluginLine{Time: ts, Msg: f["msg"], Kind: f["action"], Rule: f["rule"], Reason: f["reason"],
			UID: f["pod_uid"], Pod: f["pod_name"], Sandbox: f["sandbox_id"], Container: f["container_id"], Path: f["path"], Line: line})
	}
	return out
}

// eligibleSince is when a deferred action's object became eligible.
var eligibleSince = regexp.MustCompile(`eligible since (\S+),`)

// longestEligible is the longest any deferred object had been eligible, per
// the plugin's "not due" lines, and how many objects were ever eligible.
func longestEligible(lines []pluginLine) (longest time.Duration, objects int) {
	seen := map[string]bool{}
	for _, a := range lines {
		if !a.Deferred() {
			continue
		}
		seen[a.Kind+" "+a.objectID()] = true
		if m := eligibleSince.FindStringSubmatch(a.Msg); m != nil {
			if since, err := time.Parse(time.RFC3339, m[1]); err == nil && a.Time.Sub(since) > longest {
				longest = a.Time.Sub(since)
			}
		}
	}
	return longest, len(seen)
}

// truth is the test's ground truth: what it asked of kubelet and when, and
// what the runtime and kubelet's dirs showed, sampled every 200 ms.
type truth struct {
	t  *testing.T
	l  *lab.Lab
	k  *lab.RealKubelet
	mu sync.Mutex
	// by static pod name (without the node suffix)
	specs            map[string]lab.StaticPod
	added, removed   map[string]time.Time
	uidName          map[string]string
	podDirGone       map[string]time.Time
	ctrs             map[string]*ctrRecord
	sbs              map[string]*sbRecord
	cancel           context.CancelFunc
	done             chan struct{}
	samples, failing int
}

type ctrRecord struct {
	ID, UID, Pod, Name string
	Attempt            uint32
	Created            time.Time
	Exited, Gone       time.Time // when first seen exited / no longer listed
	ExitCode           int32
	Ran                time.Duration // FinishedAt - StartedAt
	Reason             string
}

type sbRecord struct {
	ID, UID, Pod   string
	Attempt        uint32
	Created        time.Time
	NotReady, Gone time.Time
}

func newTruth(t *testing.T, l *lab.Lab, k *lab.RealKubelet) *truth {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &truth{t: t, l: l, k: k, specs: map[string]lab.StaticPod{}, added: map[string]time.Time{}, removed: map[string]time.Time{},
		uidName: map[string]string{}, podDirGone: map[string]time.Time{}, ctrs: map[string]*ctrRecord{}, sbs: map[string]*sbRecord{},
		cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for ctx.Err() == nil {
			tr.sample(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(tr.stop)
	return tr
}

func (tr *truth) stop() {
	tr.cancel()
	<-tr.done
}

func (tr *truth) add(p lab.StaticPod) {
	tr.t.Helper()
	tr.mu.Lock()
	tr.specs[p.Name], tr.added[p.Name] = p, time.Now()
	tr.mu.Unlock()
	if err := tr.k.AddPod(p); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *truth) remove(name string) {
	tr.t.Helper()
	tr.mu.Lock()
	tr.removed[name] = time.Now()
	tr.mu.Unlock()
	if err := tr.k.RemovePod(name); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *truth) sample(ctx context.Context) {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pods, err := tr.k.Pods(c)
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err != nil {
		tr.failing++ // containerd restarts
		return
	}
	tr.samples++
	seen := map[string]bool{}
	for uid, p := range pods {
		name := strings.TrimSuffix(p.Name, "-"+tr.k.NodeName)
		tr.uidName[uid] = name
		for _, s := range p.Sandboxes {
			seen[s.Id] = true
			r := tr.sbs[s.Id]
			if r == nil {
				r = &sbRecord{ID: s.Id, UID: uid, Pod: name, Attempt: s.Metadata.Attempt, Created: time.Unix(0, s.CreatedAt)}
				tr.sbs[s.Id] = r
			}
			if s.State != runtimeapi.PodSandboxState_SANDBOX_READY && r.NotReady.IsZero() {
				r.NotReady = now
			}
		}
		for _, ct := range p.Containers {
			seen[ct.Id] = true
			r := tr.ctrs[ct.Id]
			if r == nil {
				r = &ctrRecord{ID: ct.Id, UID: uid, Pod: name, Name: ct.Metadata.Name, Attempt: ct.Metadata.Attempt, Created: time.Unix(0, ct.CreatedAt)}
				tr.ctrs[ct.Id] = r
			}
			if ct.State == runtimeapi.ContainerState_CONTAINER_EXITED && r.Exited.IsZero() {
				r.Exited = now
				if st, err := tr.l.Runtime().ContainerStatus(c, &runtimeapi.ContainerStatusRequest{ContainerId: ct.Id}); err == nil {
					r.ExitCode, r.Reason = st.Status.ExitCode, st.Status.Reason
					r.Ran = time.Duration(st.Status.FinishedAt - st.Status.StartedAt)
				} else {
					r.ExitCode, r.Reason = -1, err.Error()
				}
			}
		}
	}
	for id, r := range tr.sbs {
		if !seen[id] && r.Gone.IsZero() {
			r.Gone = now
		}
	}
	for id, r := range tr.ctrs {
		if !seen[id] && r.Gone.IsZero() {
			r.Gone = now
		}
	}
	for uid := range tr.uidName {
		if _, err := os.Lstat(tr.k.PodDir(uid)); errors.Is(err, fs.ErrNotExist) && tr.podDirGone[uid].IsZero() {
			tr.podDirGone[uid] = now
		}
	}
}

// exitExpected reports whether a container exiting this way is the
// workload's own doing (its ExitAfter, with its ExitCode), not a kill.
func (tr *truth) exitExpected(r *ctrRecord) bool {
	spec, ok := tr.specs[r.Pod]
	if !ok {
		return false
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Name == r.Name && c.ExitAfter > 0 {
			return r.ExitCode == int32(c.ExitCode) && r.Ran >= c.ExitAfter-500*time.Millisecond
		}
	}
	return false
}

// checkNoForeignRestarts: every container that exited before its pod was
// removed exited by itself (its ExitAfter and ExitCode: a kill by the plugin
// is 137, or 0 for a SIGTERM much earlier than ExitAfter), every pod had one
// sandbox and it was Ready until its pod was removed or completed. Returns
// kubelet's restarts (containers of attempt > 0) per pod.
func (tr *truth) checkNoForeignRestarts(t *testing.T) map[string]int {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.samples == 0 {
		// Without one listing, every check below passes on nothing.
		t.Fatalf("the ground truth took no sample of the runtime (%d listing(s) failed): nothing to check against", tr.failing)
	}
	restarts := map[string]int{}
	for _, r := range tr.ctrs {
		if r.Attempt > 0 {
			restarts[r.Pod] = max(restarts[r.Pod], int(r.Attempt))
		}
		if r.Exited.IsZero() {
			continue
		}
		if rm, ok := tr.removed[r.Pod]; ok && !r.Exited.Before(rm) {
			continue // kubelet tore the pod down
		}
		if !tr.exitExpected(r) {
			t.Errorf("container %s/%s (attempt %d, %s) exited with %d (%s) after %v, not by itself and before its pod was removed",
				r.Pod, r.Name, r.Attempt, r.ID[:12], r.ExitCode, r.Reason, r.Ran.Round(time.Millisecond))
		}
	}
	perUID := map[string][]*sbRecord{}
	for _, s := range tr.sbs {
		perUID[s.UID] = append(perUID[s.UID], s)
	}
	for uid, sbs := range perUID {
		if len(sbs) != 1 {
			t.Errorf("pod %s (%s) had %d sandboxes: kubelet made a new one, its first one went", sbs[0].Pod, uid, len(sbs))
		}
		s := sbs[0]
		rm, removed := tr.removed[s.Pod]
		completes := tr.specs[s.Pod].RestartPolicy == "Never"
		if !s.NotReady.IsZero() && !completes && (!removed || s.NotReady.Before(rm)) {
			t.Errorf("sandbox of %s went NotReady at %s, before its pod was removed (%v)", s.Pod, s.NotReady.Format(time.TimeOnly), rm)
		}
	}
	return restarts
}

// kubeletErrors are kubelet's error lines (klog "E" lines) mentioning any of
// needles; notFound are those that only say an object is not found.
func kubeletErrors(log string, needles []string) (errs, notFound []string) {
	for _, line := range strings.Split(log, "\n") {
		if len(line) < 5 || line[0] != 'E' || line[1] < '0' || line[1] > '9' {
			continue
		}
		for _, n := range needles {
			if n == "" || !strings.Contains(line, n) {
				continue
			}
			if l := strings.ToLower(line); strings.Contains(l, "not found") || strings.Contains(l, "notfound") || strings.Contains(l, "no such file") {
				notFound = append(notFound, line)
			} else {
				errs = append(errs, line)
			}
			break
		}
	}
	return errs, notFound
}

// needles are the IDs, UIDs and paths of the plugin's actions.
func needles(acts []pluginLine) []string {
	set := map[string]bool{}
	for _, a := range acts {
		for _, s := range []string{a.Sandbox, a.Container, a.Path, a.UID} {
			if s != "" {
				set[s] = true
			}
		}
	}
	var out []string
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// churnPods are the long-lived pods of the churn: one that runs throughout,
// one that crashes (kubelet restarts it with its back-off), one with init
// containers, a restartPolicy Never pod that completes, and one with a
// 15 s preStop sleep in a 30 s grace period.
func churnPods() []lab.StaticPod {
	thirty := int64(30)
	return []lab.StaticPod{
		{Name: "steady", Namespace: "churn", Containers: []lab.StaticContainer{{Name: "app"}}},
		{Name: "crasher", Namespace: "churn", Containers: []lab.StaticContainer{{Name: "app", ExitAfter: 3 * time.Second, ExitCode: 1}}},
		{Name: "init", Namespace: "churn", InitContainers: []lab.StaticContainer{{Name: "setup-a", ExitAfter: time.Second}, {Name: "setup-b", ExitAfter: time.Second}},
			Containers: []lab.StaticContainer{{Name: "app"}}},
		{Name: "job", Namespace: "churn", RestartPolicy: "Never", Containers: []lab.StaticContainer{{Name: "app", ExitAfter: 5 * time.Second}}},
		{Name: "prestop", Namespace: "churn", TerminationGracePeriodSeconds: &thirty,
			Containers: []lab.StaticContainer{{Name: "app", PreStopSleep: 15 * time.Second}}},
	}
}

type churnStats struct {
	Created, Deleted, Completed, Restarts int
	Took                                  time.Duration
}

func (s churnStats) String() string {
	return fmt.Sprintf("%d pods created, %d deleted, %d completed, %d container restarts by kubelet in %v",
		s.Created, s.Deleted, s.Completed, s.Restarts, s.Took.Round(time.Second))
}

// churn drives kubelet for about d: the long-lived pods, the preStop pod,
// the completed pod and the init pod removed along the way, and short-lived
// pods (every third with an init container) added and removed one after the
// other, each running for 3 s.
func churn(t *testing.T, tr *truth, d time.Duration) churnStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	k := tr.k
	start := time.Now()
	var st churnStats
	for _, p := range churnPods() {
		tr.add(p)
		st.Created++
	}
	for _, name := range []string{"steady", "init", "prestop"} {
		if _, err := k.WaitPod(ctx, name, "running", func(p *lab.KubeletPod) bool { return p.Running("app") }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.WaitPod(ctx, "job", "completed", func(p *lab.KubeletPod) bool { return p.Exited("app") }); err != nil {
		t.Fatal(err)
	}
	st.Completed++
	events := []struct {
		at   time.Duration
		name string
	}{{d * 25 / 110, "prestop"}, {d * 50 / 110, "job"}, {d * 75 / 110, "init"}}
	five := int64(5)
	for i := 0; time.Since(start) < d-8*time.Second; i++ {
		for len(events) > 0 && time.Since(start) >= events[0].at {
			tr.remove(events[0].name)
			st.Deleted++
			events = events[1:]
		}
		p := lab.StaticPod{Name: fmt.Sprintf("churn-%d", i), Namespace: "churn", TerminationGracePeriodSeconds: &five,
			Containers: []lab.StaticContainer{{Name: "app"}}}
		if i%3 == 2 {
			p.InitContainers = []lab.StaticContainer{{Name: "init", ExitAfter: 500 * time.Millisecond}}
		}
		tr.add(p)
		st.Created++
		if _, err := k.WaitPod(ctx, p.Name, "running", func(p *lab.KubeletPod) bool { return p.Running("app") }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		tr.remove(p.Name)
		st.Deleted++
	}
	for _, e := range events {
		tr.remove(e.name)
		st.Deleted++
	}
	time.Sleep(time.Until(start.Add(d)))
	pods, err := k.PodsNamed(ctx, "crasher")
	if err != nil || len(pods) != 1 {
		t.Fatalf("crasher: %v %v", pods, err)
	}
	st.Restarts = pods[0].Attempt("app")
	st.Took = time.Since(start)
	if !k.Running() {
		t.Fatal("kubelet is not running")
	}
	return st
}

// TestKubeletCoexistenceUnderChurn: pods come and go, crash, complete and
// stop slowly beside a real kubelet, with the plugin (a) in its default
// config: it takes no action at all, kubelet always gets there first; (b) in
// an aggressive one (leak_grace 15 s, under kubelet's one-minute container
// GC): every action it takes is on an object kubelet's own rules remove
// (checked against the test's record of which pods were deleted when and
// what kubelet restarted), kubelet logs no error about them other than
// not-found, and no pod restarts that kubelet did not restart itself.
func TestKubeletCoexistenceUnderChurn(t *testing.T) {
	exe := buildPlugin(t, t.TempDir(), "nri-housekeeper")
	// NRIHK_E2E_KUBELET_CHURN runs each config longer (e.g. 7m: past the
	// default startup_delay and leak_grace).
	runFor := 110 * time.Second
	if v := os.Getenv("NRIHK_E2E_KUBELET_CHURN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 40*time.Second {
			t.Fatalf("NRIHK_E2E_KUBELET_CHURN=%q: a duration of at least 40s", v)
		}
		runFor = d
	}
	t.Run("default config", func(t *testing.T) {
		l, k := startKubeletLab(t)
		p := startKubeletPlugin(t, exe, func(logFile, addr string) string {
			return pluginConfigFor(l, k, logFile, addr, false, 0)
		})
		tr := newTruth(t, l, k)
		st := churn(t, tr, runFor)
		restarts := tr.checkNoForeignRestarts(t)
		lines := pluginLines(p.log())
		var taken []string
		for _, a := range lines {
			if !a.Deferred() {
				taken = append(taken, a.Line)
			}
		}
		if len(taken) > 0 {
			t.Errorf("the plugin acted beside a healthy kubelet with its default config:\n%s", strings.Join(taken, "\n"))
		}
		longest, eligible := longestEligible(lines)
		if eligible == 0 {
			// "0 actions" holds of a plugin that never plans too: a deleted
			// pod's NotReady sandbox and log dir are candidates until
			// kubelet's GC (once a minute) takes them.
			t.Errorf("no object was ever a leak candidate over %v of churn: the plugin did not plan", st.Took.Round(time.Second))
		}
		t.Logf("default config: %d actions over %v: %s; kubelet restarts %v; %d objects were eligible for a while, the longest for %v (leak_grace 5m)",
			len(taken), st.Took.Round(time.Second), st, restarts, eligible, longest.Round(time.Second))
	})
	t.Run("aggressive config", func(t *testing.T) {
		const grace = 15 * time.Second
		l, k := startKubeletLab(t)
		p := startKubeletPlugin(t, exe, func(logFile, addr string) string {
			return pluginConfigFor(l, k, logFile, addr, true, grace)
		})
		tr := newTruth(t, l, k)
		st := churn(t, tr, runFor)
		// The last pods' leftovers are due after the grace: let the plugin
		// have them, or kubelet's GC.
		time.Sleep(grace + 10*time.Second)
		tr.stop()
		restarts := tr.checkNoForeignRestarts(t)
		acts := pluginLines(p.log())
		rules := checkKubeletWouldRemove(t, tr, acts)
		klog, err := k.Logs()
		if err != nil {
			t.Fatal(err)
		}
		var done []pluginLine
		for _, a := range acts {
			if !a.Deferred() && !a.Aborted() {
				done = append(done, a)
			}
		}
		if len(done) == 0 {
			// Every check above is over the actions taken: with none, it
			// says nothing. A deleted pod's NotReady sandbox and log dir
			// wait past a 15 s grace for kubelet's GC (once a minute).
			t.Errorf("the plugin took no action over %v of churn with leak_grace %v", st.Took.Round(time.Second), grace)
		}
		errs, notFound := kubeletErrors(klog, needles(done))
		for _, e := range errs {
			t.Errorf("kubelet logged an error about an object the plugin acted on: %s", e)
		}
		aborted := 0
		for _, a := range acts {
			if a.Aborted() {
				aborted++
			}
		}
		// The budget: classes that tripped, and objects held back by it.
		var trips []string
		for _, line := range strings.Split(p.log(), "\n") {
			if strings.Contains(line, "level=error") && strings.Contains(line, "blast-radius budget") {
				trips = append(trips, parseLogfmt(line)["class"])
			}
		}
		heldBack := map[string]bool{}
		for _, a := range acts {
			if a.Deferred() && strings.Contains(a.Msg, "blast-radius budget") {
				heldBack[a.Kind+" "+a.objectID()] = true
			}
		}
		t.Logf("aggressive config (leak_grace %v): %d actions over %v: %v (%d aborted by the re-check); budget trips: %v, objects held back by the budget: %d; "+
			"%s; kubelet restarts %v; kubelet error lines about them: %d, not-found only: %d", grace, len(done), st.Took.Round(time.Second), rules,
			aborted, trips, len(heldBack), st, restarts, len(errs), len(notFound))
		for _, line := range notFound[:min(3, len(notFound))] {
			t.Logf("kubelet, not found: %s", line)
		}
	})
}

// checkKubeletWouldRemove checks every action the plugin took against the
// test's record: it must be on an object kubelet's own rules remove, and
// the object must have been what the rule says when the plugin acted.
// Returns the number of actions per kind and rule.
func checkKubeletWouldRemove(t *testing.T, tr *truth, acts []pluginLine) map[string]int {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	perRule := map[string]int{}
	// deleted: the pod's manifest was removed before at, and kubelet had
	// removed its pod dir (kubelet's own sign that it tore the pod down).
	deleted := func(a pluginLine) error {
		name, ok := tr.uidName[a.UID]
		if !ok {
			return fmt.Errorf("pod %s is not one of kubelet's", a.UID)
		}
		rm, ok := tr.removed[name]
		if !ok || !rm.Before(a.Time) {
			return fmt.Errorf("pod %s was not deleted before %s", name, a.Time.Format(time.TimeOnly))
		}
		if gone := tr.podDirGone[a.UID]; gone.IsZero() || gone.After(a.Time.Add(time.Second)) {
			return fmt.Errorf("kubelet had not removed the pod dir of %s", name)
		}
		return nil
	}
	for _, a := range acts {
		if a.Deferred() || a.Aborted() {
			continue
		}
		perRule[a.Kind+" ("+a.Rule+")"]++
		var err error
		switch a.Rule {
		case "containers.pod-gone":
			err = deleted(a)
			if c := tr.ctrs[a.Container]; err == nil && (c == nil || c.Exited.IsZero() || c.Exited.After(a.Time)) {
				err = fmt.Errorf("container %s was not seen exited before", a.Container)
			}
		case "containers.max-per-pod-container":
			c := tr.ctrs[a.Container]
			switch {
			case c == nil || c.Exited.IsZero() || c.Exited.After(a.Time):
				err = fmt.Errorf("container %s was not seen exited before", a.Container)
			default:
				newer := false
				for _, o := range tr.ctrs {
					newer = newer || o.UID == c.UID && o.Name == c.Name && o.Attempt > c.Attempt && o.Created.Before(a.Time)
				}
				if !newer {
					err = fmt.Errorf("container %s/%s attempt %d has no newer instance", c.Pod, c.Name, c.Attempt)
				}
			}
		case "sandboxes.pod-gone", "sandboxes.not-newest":
			s := tr.sbs[a.Sandbox]
			switch {
			case s == nil || s.NotReady.IsZero() || s.NotReady.After(a.Time):
				err = fmt.Errorf("sandbox %s was not seen NotReady before", a.Sandbox)
			case a.Rule == "sandboxes.pod-gone":
				err = deleted(a)
			default:
				newer := false
				for _, o := range tr.sbs {
					newer = newer || o.UID == s.UID && o.Created.After(s.Created) && o.Created.Before(a.Time)
				}
				if !newer {
					err = fmt.Errorf("sandbox %s is its pod's newest", a.Sandbox)
				}
			}
		case "logs.pod-log-dir", "cgroups.pod-gone", "cgroups.orphaned-pod", "pod-dirs.orphaned":
			err = deleted(a)
		case "logs.dangling-link":
			id := strings.TrimSuffix(a.Path[strings.LastIndexByte(a.Path, '-')+1:], ".log")
			var c *ctrRecord
			for _, o := range tr.ctrs {
				if strings.HasPrefix(o.ID, id) {
					c = o
				}
			}
			before := func(t time.Time) bool { return !t.IsZero() && t.Before(a.Time) }
			if c == nil || !before(c.Exited) && !before(c.Gone) {
				err = fmt.Errorf("the link's container %s was neither exited nor gone before", id)
			}
		default:
			err = fmt.Errorf("rule %s has nothing to do beside a healthy kubelet", a.Rule)
		}
		if err != nil {
			t.Errorf("an action kubelet would not have taken: %v:\n%s", err, a.Line)
		}
	}
	return perRule
}

// TestKubeletFormats: the plugin's parsers find exactly what a real kubelet
// made: pod dirs, pod log dirs, container log links (one of them cut at
// 255 bytes) and pod cgroups of each QoS class.
func TestKubeletFormats(t *testing.T) {
	_, k := startKubeletLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A 205-character pod name (DNS labels of 60): kubelet's pod log dir name
	// (<ns>_<name>-<node>_<uid>) is then 250 bytes, and its container log link
	// (<name>-<node>_<ns>_<ctr>-<id>.log) is cut at 255, mid-ID.
	var long []string
	for len(strings.Join(long, ".")) < 205 {
		long = append(long, strings.Repeat(string(rune('a'+len(long))), 60))
	}
	longName := strings.Join(long, ".")[:205]
	small := map[string]string{"cpu": "10m", "memory": "32Mi"}
	pods := []lab.StaticPod{
		{Name: "besteffort", Namespace: "fmt", InitContainers: []lab.StaticContainer{{Name: "setup", ExitAfter: 500 * time.Millisecond}},
			Containers: []lab.StaticContainer{{Name: "app"}, {Name: "sidecar"}}},
		{Name: "burstable", Namespace: "fmt", Containers: []lab.StaticContainer{{Name: "app", Requests: small}}},
		{Name: "guaranteed", Namespace: "fmt", Containers: []lab.StaticContainer{{Name: "app", Requests: small, Limits: small}}},
		{Name: "crasher", Namespace: "fmt", Containers: []lab.StaticContainer{{Name: "app", ExitAfter: time.Second, ExitCode: 2}}},
		{Name: "done", Namespace: "fmt", RestartPolicy: "Never", Containers: []lab.StaticContainer{{Name: "app", ExitAfter: time.Second}}},
		{Name: longName, Namespace: "fmt", Containers: []lab.StaticContainer{{Name: "app"}}},
	}
	for _, p := range pods {
		if err := k.AddPod(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		var cond func(*lab.KubeletPod) bool
		switch p.Name {
		case "crasher": // restarted once, dead again: a back-off of 20 s to look at it
			cond = func(kp *lab.KubeletPod) bool { return kp.Attempt("app") >= 1 && kp.Exited("app") }
		case "done":
			cond = func(kp *lab.KubeletPod) bool { return kp.Exited("app") && !kp.Ready() }
		default:
			cond = func(kp *lab.KubeletPod) bool { return kp.Running("app") }
		}
		if _, err := k.WaitPod(ctx, p.Name, "settled", cond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // the completed pod's cgroup goes at kubelet's next housekeeping

	expectQoS := map[string]string{"besteffort": podcgroups.QOSBestEffort, "burstable": podcgroups.QOSBurstable,
		"guaranteed": podcgroups.QOSGuaranteed, "crasher": podcgroups.QOSBestEffort, longName: podcgroups.QOSBestEffort}
	for attempt := 1; ; attempt++ {
		before, err := k.Pods(ctx)
		if err != nil {
			t.Fatal(err)
		}
		problems := compareFormats(ctx, t, k, before, expectQoS)
		after, err := k.Pods(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !sameListing(before, after) && attempt < 3 {
			t.Logf("the runtime changed while comparing (attempt %d): again", attempt)
			continue
		}
		for _, p := range problems {
			t.Error(p)
		}
		return
	}
}

func sameListing(a, b map[string]*lab.KubeletPod) bool {
	key := func(m map[string]*lab.KubeletPod) string {
		var s []string
		for uid, p := range m {
			for _, sb := range p.Sandboxes {
				s = append(s, uid+sb.Id+sb.State.String())
			}
			for _, c := range p.Containers {
				s = append(s, uid+c.Id+c.State.String())
			}
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}
	return key(a) == key(b)
}

// compareFormats compares what kubelet made on disk (read here with plain
// directory listings) and what the plugin's parsers see, for the pods in
// listing; it logs what it compared and returns the differences.
func compareFormats(ctx context.Context, t *testing.T, k *lab.RealKubelet, listing map[string]*lab.KubeletPod, expectQoS map[string]string) []string {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	uids := map[string]bool{}
	for uid := range listing {
		uids[uid] = true
	}

	// Pod dirs: every pod kubelet has (the completed one too).
	entries, err := os.ReadDir(filepath.Join(k.RootDir, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() {
			onDisk[e.Name()] = true
		}
	}
	oracle := nodefs.ListPodDirs(ctx, k.RootDir)
	if !oracle.Ready {
		fail("ListPodDirs(%s) not ready: %v", k.RootDir, oracle.Err)
	}
	if got := keys(oracle.UIDs); !slices.Equal(got, keys(onDisk)) || !slices.Equal(got, keys(uids)) {
		fail("pod dirs: ListPodDirs %v, on disk %v, runtime UIDs %v", got, keys(onDisk), keys(uids))
	}
	for uid := range onDisk {
		d, err := nodefs.InspectPodDir(ctx, k.RootDir, uid)
		if err != nil || len(d.Blockers) > 0 || nodefs.PodVolumesExist(d) {
			fail("InspectPodDir %s: %+v, %v (a pod without volumes: removable, no volume dirs)", uid, d, err)
		}
	}
	t.Logf("pod dirs: %d, the same in ListPodDirs, on disk and in the runtime; InspectPodDir: no volumes, no blockers", len(onDisk))

	// Pod log dirs <podLogsDir>/<ns>_<name>_<uid>.
	logDirs, skipped, err := nodefs.ListPodLogDirs(ctx, k.PodLogsDir)
	if err != nil || len(skipped) > 0 {
		fail("ListPodLogDirs(%s): skipped %v, %v", k.PodLogsDir, skipped, err)
	}
	entries, err = os.ReadDir(k.PodLogsDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(logDirs) || len(logDirs) != len(listing) {
		fail("pod log dirs: %d on disk, %d parsed, %d pods", len(entries), len(logDirs), len(listing))
	}
	for _, d := range logDirs {
		p := listing[d.UID]
		if p == nil || d.Namespace != p.Namespace || d.PodName != p.Name || d.Path != k.PodLogDir(p) {
			fail("pod log dir %s parsed as %s/%s %s; the runtime's pod: %+v", d.Name, d.Namespace, d.PodName, d.UID, p)
		}
	}
	t.Logf("pod log dirs: %d, each parsed to its pod's namespace, name and UID", len(logDirs))

	// Container log links: one per listed container, parsed to its pod and ID.
	ours, err := k.ContainerLogLinks()
	if err != nil {
		t.Fatal(err)
	}
	links, skippedLinks, err := nodefs.ListContainerLogLinks(ctx, k.ContainerLogsDir, k.PodLogsDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range skippedLinks {
		if slices.Contains(ours, s.Path) {
			fail("a link kubelet made was skipped: %s: %s", s.Path, s.Reason)
		}
	}
	parsed := map[string]nodefs.ContainerLogLink{}
	for _, ln := range links {
		if slices.Contains(ours, ln.Path) {
			parsed[ln.Path] = ln
		}
	}
	if len(parsed) != len(ours) {
		fail("links: kubelet made %d, the plugin lists %d of them", len(ours), len(parsed))
	}
	containers, truncated := 0, 0
	for _, p := range listing {
		for _, c := range p.Containers {
			containers++
			var match []nodefs.ContainerLogLink
			for _, ln := range parsed {
				if ln.PodName == p.Name && ln.Namespace == p.Namespace && strings.HasPrefix(c.Id, ln.ContainerID) {
					match = append(match, ln)
				}
			}
			if len(match) != 1 {
				fail("container %s/%s %s: %d links parse to it", p.Name, c.Metadata.Name, c.Id[:12], len(match))
				continue
			}
			ln := match[0]
			if ln.ContainerName != c.Metadata.Name || ln.PodUID != p.UID || ln.Dangling || ln.Truncated != (len(ln.Name) == 255) ||
				!ln.Truncated && ln.ContainerID != c.Id {
				fail("link %s parsed as %+v; container %s %s of pod %s", ln.Name, ln, c.Metadata.Name, c.Id, p.UID)
			}
			if ln.Truncated {
				truncated++
			}
		}
	}
	if containers != len(ours) {
		fail("links: %d for %d listed containers", len(ours), containers)
	}
	if truncated == 0 {
		fail("no link was cut at 255 bytes: the long pod's name is not long enough")
	}
	t.Logf("container log links: %d for %d listed containers, each parsed to its pod, container name and ID (%d cut at 255 bytes, ID as a prefix)",
		len(ours), containers, truncated)

	// Pod cgroups <root>/kubepods/[<qos>/]pod<uid> in every hierarchy.
	cg := podcgroups.Discover(ctx, podcgroups.Options{Mountpoint: "/sys/fs/cgroup", Root: k.PodsCgroup, Driver: podcgroups.DriverAuto}, nil)
	if !cg.Ready || cg.Driver != podcgroups.DriverCgroupfs {
		fail("Discover: ready %v, driver %s, %v", cg.Ready, cg.Driver, cg.Err)
	}
	for _, s := range cg.Skipped {
		fail("Discover skipped %s: %s", s.Path, s.Reason)
	}
	withCgroup := map[string]bool{}
	for uid := range listing {
		paths := k.PodCgroups(uid)
		if len(paths) == 0 {
			continue
		}
		withCgroup[uid] = true
		pc, ok := cg.Pods[uid]
		if !ok {
			fail("pod cgroup of %s (%v) not discovered", uid, paths)
			continue
		}
		got := slices.Clone(pc.Paths)
		sort.Strings(got)
		if !slices.Equal(got, paths) {
			fail("pod cgroup %s: Discover %v, on disk %v", uid, got, paths)
		}
		name := strings.TrimSuffix(listing[uid].Name, "-"+k.NodeName)
		if want := expectQoS[name]; pc.QOS != want {
			fail("pod %s: QoS %s, want %s", name, pc.QOS, want)
		}
		var subdirs []string
		for _, p := range paths {
			es, _ := os.ReadDir(p)
			for _, e := range es {
				if e.IsDir() && !slices.Contains(subdirs, e.Name()) {
					subdirs = append(subdirs, e.Name())
				}
			}
		}
		sort.Strings(subdirs)
		if !slices.Equal(pc.Containers, subdirs) || pc.Procs == 0 {
			fail("pod cgroup %s: containers %v (%d procs), on disk %v", uid, pc.Containers, pc.Procs, subdirs)
		}
	}
	if !slices.Equal(keys(cg.Pods), keys(withCgroup)) {
		fail("pod cgroups: Discover %v, on disk %v", keys(cg.Pods), keys(withCgroup))
	}
	for name, qos := range expectQoS {
		found := false
		for uid, p := range listing {
			found = found || p.Name == k.FullName(name) && cg.Pods[uid].QOS == qos
		}
		if !found {
			fail("no %s pod cgroup of %s discovered", qos, name)
		}
	}
	t.Logf("pod cgroups: %d pods in %d hierarchies, each discovered with its QoS class, paths and container cgroups (driver %s)",
		len(withCgroup), len(cg.Hierarchies), cg.Driver)
	return problems
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestKubeletKilledThenContainerdRestarted: kubelet dies (kill -9, not
// restarted) right after it tore a deleted pod down and removed its pod
// dir, before its container GC minute came: the pod's NotReady sandbox, its
// dead containers, its pod log dir and its log links are what kubelet would
// have collected (a kubelet that crashes, is OOM-killed or stopped for an
// upgrade in that minute leaves exactly this). Then, with kubelet dead, a
// pod is deleted (its manifest removed: nobody tears it down, its pod dir
// stays, so it is no leak: kubelet does it when it is back), a
// restartPolicy Never pod completes (nobody stops its sandbox) and
// containerd restarts. The plugin reclaims the torn-down pod's leftovers
// after leak_grace; the live, deleted-but-not-torn-down and completed pods
// do not move. kubelet then starts again, tears down the deleted pod itself
// and logs no error about what the plugin removed.
func TestKubeletKilledThenContainerdRestarted(t *testing.T) {
	const grace = 20 * time.Second
	exe := buildPlugin(t, t.TempDir(), "nri-housekeeper")
	l, k := startKubeletLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tr := newTruth(t, l, k)
	five := int64(5)
	running := func(p *lab.KubeletPod) bool { return p.Running("app") }
	tr.add(lab.StaticPod{Name: "live", Namespace: "down", Containers: []lab.StaticContainer{{Name: "app"}}})
	tr.add(lab.StaticPod{Name: "unwatched", Namespace: "down", TerminationGracePeriodSeconds: &five, Containers: []lab.StaticContainer{{Name: "app"}}})
	tr.add(lab.StaticPod{Name: "doomed", Namespace: "down", TerminationGracePeriodSeconds: &five,
		Containers: []lab.StaticContainer{{Name: "app"}, {Name: "sidecar"}}})
	tr.add(lab.StaticPod{Name: "marker", Namespace: "down", TerminationGracePeriodSeconds: &five, Containers: []lab.StaticContainer{{Name: "app"}}})
	for _, name := range []string{"live", "unwatched", "doomed", "marker"} {
		if _, err := k.WaitPod(ctx, name, "running", running); err != nil {
			t.Fatal(err)
		}
	}
	live, _ := k.WaitPod(ctx, "live", "running", running)
	unwatched, _ := k.WaitPod(ctx, "unwatched", "running", running)
	doomed, _ := k.WaitPod(ctx, "doomed", "running", running)
	// kubelet's container GC runs once a minute: the marker pod's NotReady
	// sandbox goes at a tick (the plugin does not run yet: it would take the
	// sandbox first). Right after one, the deleted pod below is torn down
	// long before the next.
	tr.remove("marker")
	if _, err := k.WaitPod(ctx, "marker", "collected by kubelet's GC", func(p *lab.KubeletPod) bool { return p == nil }); err != nil {
		t.Fatal(err)
	}
	tick := time.Now()
	p := startKubeletPlugin(t, exe, func(logFile, addr string) string {
		return pluginConfigFor(l, k, logFile, addr, true, grace)
	})
	tr.add(lab.StaticPod{Name: "finisher", Namespace: "down", RestartPolicy: "Never",
		Containers: []lab.StaticContainer{{Name: "app", ExitAfter: 8 * time.Second}}})
	finisher, err := k.WaitPod(ctx, "finisher", "running", running)
	if err != nil {
		t.Fatal(err)
	}
	tr.remove("doomed")
	dirGone := waitFor(t, "kubelet removes the deleted pod's dir", 20*time.Second, func() bool { return !exists(k.PodDir(doomed.UID)) })
	if err := k.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Deleted while kubelet is dead: nobody tears it down, its pod dir stays,
	// and it is no leak (kubelet will do it when it is back).
	tr.remove("unwatched")
	left, err := k.PodsNamed(ctx, "doomed")
	if err != nil || len(left) != 1 {
		t.Fatalf("nothing of the deleted pod is left when kubelet dies (%v after its GC tick): %v %v", time.Since(tick), left, err)
	}
	var ids []string
	for _, s := range left[0].Sandboxes {
		ids = append(ids, s.Id)
	}
	for _, c := range left[0].Containers {
		ids = append(ids, c.Id)
	}
	links := linksOf(t, k, doomed)
	cgroups := k.PodCgroups(doomed.UID)
	logDir := k.PodLogDir(doomed)
	t.Logf("kubelet killed %v after its GC tick, %v after the pod dir went; left of the deleted pod: sandbox %s (%s), %d containers, "+
		"pod log dir %v, %d log links, %d cgroup dirs", killed.Sub(tick).Round(time.Millisecond), dirGone.Round(time.Millisecond),
		left[0].Sandboxes[0].Id[:12], left[0].Sandboxes[0].State, len(left[0].Containers), exists(logDir), len(links), len(cgroups))
	if !exists(logDir) || left[0].Ready() || len(left[0].Containers) == 0 || len(links) == 0 {
		t.Fatalf("the deleted pod's log dir is gone, its sandbox still Ready, or no container or log link is left: not what kubelet leaves before its GC")
	}

	// containerd restarts while kubelet is dead.
	time.Sleep(3 * time.Second)
	if err := l.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if _, err := l.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	// What kubelet would have collected is reclaimed after the grace.
	latency := map[string]time.Duration{}
	if len(cgroups) == 0 {
		latency["pod cgroups"] = 0 // kubelet removed them with the pod dir
	}
	deadline := killed.Add(grace + 90*time.Second)
	for len(latency) < 4 && time.Now().Before(deadline) {
		pods, err := k.PodsNamed(ctx, "doomed")
		if _, ok := latency["sandbox and containers"]; !ok && err == nil && len(pods) == 0 {
			latency["sandbox and containers"] = time.Since(killed)
		}
		if _, ok := latency["pod log dir"]; !ok && !exists(logDir) {
			latency["pod log dir"] = time.Since(killed)
		}
		if _, ok := latency["log links"]; !ok && !slices.ContainsFunc(links, exists) {
			latency["log links"] = time.Since(killed)
		}
		if _, ok := latency["pod cgroups"]; !ok && !slices.ContainsFunc(cgroups, exists) {
			latency["pod cgroups"] = time.Since(killed)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(latency) < 4 {
		t.Fatalf("not everything of the deleted pod was reclaimed within %v of kubelet's death: %v", grace+90*time.Second, latency)
	}
	t.Logf("reclaimed after kubelet's kill -9 (leak_grace %v, containerd restarted %v after the kill): %v",
		grace, restarted.Sub(killed).Round(time.Millisecond), roundAll(latency))

	// Nothing live moves: the finisher completes with kubelet dead (its
	// sandbox stays Ready, its pod dir stays), the live pod runs on.
	if _, err := k.WaitPod(ctx, "finisher", "completed", func(p *lab.KubeletPod) bool { return p.Exited("app") }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(grace + 15*time.Second)
	for _, want := range []*lab.KubeletPod{live, finisher, unwatched} {
		now, err := k.PodsNamed(ctx, strings.TrimSuffix(want.Name, "-"+k.NodeName))
		if err != nil || len(now) != 1 || len(now[0].Sandboxes) != 1 || now[0].Sandboxes[0].Id != want.Sandboxes[0].Id || !now[0].Ready() {
			t.Errorf("pod %s: sandbox changed or not Ready with kubelet dead: %+v %v", want.Name, now, err)
			continue
		}
		if c := now[0].Container("app"); c == nil || c.Metadata.Attempt != 0 || c.Id != want.Container("app").Id {
			t.Errorf("pod %s: container app changed: %+v", want.Name, c)
		}
		if !exists(k.PodDir(want.UID)) || !exists(k.PodLogDir(want)) || len(k.PodCgroups(want.UID)) == 0 || len(linksOf(t, k, want)) == 0 {
			t.Errorf("pod %s: pod dir, log dir, cgroups or log links gone", want.Name)
		}
	}
	acts := pluginLines(p.log())
	var done []pluginLine
	for _, a := range acts {
		if a.Deferred() || a.Aborted() {
			continue
		}
		done = append(done, a)
		if a.UID != doomed.UID {
			t.Errorf("an action on a pod that was not deleted: %s", a.Line)
		}
	}

	// kubelet again: no conflict with what the plugin removed.
	logBefore, _ := k.Logs()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	time.Sleep(65 * time.Second) // one container GC minute of the new kubelet
	klog, _ := k.Logs()
	klog = klog[len(logBefore):]
	errs, notFound := kubeletErrors(klog, append(needles(done), ids...))
	for _, e := range errs {
		t.Errorf("the restarted kubelet logged an error about an object the plugin removed: %s", e)
	}
	if _, err := k.WaitPod(ctx, "unwatched", "torn down by the restarted kubelet", func(p *lab.KubeletPod) bool {
		return p == nil || !p.Ready() && len(p.Containers) == 0 && !exists(k.PodDir(unwatched.UID))
	}); err != nil {
		t.Error(err)
	}
	if pods, err := k.PodsNamed(ctx, "doomed"); err != nil || len(pods) != 0 {
		t.Errorf("the deleted pod is back: %+v %v", pods, err)
	}
	now, err := k.PodsNamed(ctx, "live")
	if err != nil || len(now) != 1 || now[0].Sandboxes[0].Id != live.Sandboxes[0].Id || now[0].Attempt("app") != 0 || !now[0].Running("app") {
		t.Errorf("the live pod moved after kubelet's restart: %+v %v", now, err)
	}
	tr.stop()
	tr.checkNoForeignRestarts(t)
	perKind := map[string]int{}
	for _, a := range done {
		perKind[a.Kind+" ("+a.Rule+")"]++
	}
	t.Logf("the plugin's actions: %v; kubelet restarted %v after its kill: its error lines about them in its first %v: %d, not-found only: %d",
		perKind, since.Sub(killed).Round(time.Second), time.Since(since).Round(time.Second), len(errs), len(notFound))
}

func roundAll(m map[string]time.Duration) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v.Round(100 * time.Millisecond).String()
	}
	return out
}

// linksOf are the pod's container log links.
func linksOf(t *testing.T, k *lab.RealKubelet, p *lab.KubeletPod) []string {
	t.Helper()
	all, err := k.ContainerLogLinks()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range all {
		if strings.HasPrefix(filepath.Base(l), p.Name+"_"+p.Namespace+"_") {
			out = append(out, l)
		}
	}
	return out
}
