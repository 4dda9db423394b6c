//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// Sources must agree (issue 10): on the real containerd, a wrong source or a
// race ends in "no action, and a clear reason".

// livePods runs n pods with a running container each, their pod dirs made
// first, as kubelet does.
func livePods(t *testing.T, k *kubelet, prefix string, n int) (pods []lab.Pod, sandboxes, ctrs []string) {
	t.Helper()
	for i := range n {
		p := newPod(t, fmt.Sprintf("%s-%d", prefix, i))
		k.admit(t, p)
		sb, cs := runPod(t, node, p, 1)
		pods, sandboxes, ctrs = append(pods, p), append(sandboxes, sb), append(ctrs, cs...)
	}
	return pods, sandboxes, ctrs
}

// completedPod runs a pod whose container exits and whose sandbox is
// stopped: a restartPolicy Never pod that is complete, not deleted from the
// API (its pod dir stays), with its logs.
func completedPod(t *testing.T, k *kubelet, name string) (lab.Pod, string, string) {
	t.Helper()
	p := newPod(t, name)
	k.admit(t, p)
	sb, cs := runPod(t, node, p, 1)
	if err := node.StopContainer(context.Background(), cs[0], 2); err != nil {
		t.Fatal(err)
	}
	if err := node.StopPod(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	return p, sb, cs[0]
}

// writeConfig writes a config for the plugin binary and returns its path.
func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}

// binaryConfig is the config of the plugin binary run against the lab in
// external mode: the lab's sockets, k's kubelet_root and log dirs, metrics
// on metricsAddr ("" for none), logs to logFile, passes every period with
// leak_grace grace. top goes before the tables (e.g. dry_run), tables after.
type binaryConfig struct {
	Period, Grace        string
	MetricsAddr, LogFile string
	Top, Tables          string
	PluginName           string // nri.plugin_name; "" for the default
}

func (c binaryConfig) text(k *kubelet) string {
	// The lab's pod cgroups are under its own root: with kubelet's default
	// ("kubepods", in no hierarchy here) pod cgroups would not be looked
	// at, an error while Ready sandboxes run (once exits 1).
	tables := c.Tables
	if !strings.Contains(tables, "[cgroups]") {
		tables += fmt.Sprintf("\n[cgroups]\nroot = %q\n", cgroupRoot())
	}
	// The state file beside the log: each test's plugin keeps its own.
	return fmt.Sprintf(`%s
[housekeeping]
period = %q
startup_delay = "0s"
leak_grace = %q
state_file = %q

[nri]
socket = %q
plugin_name = %q

[runtime]
endpoint = "unix://%s"

[pods]
kubelet_root = %q

[logs]
pod_logs_dir = %q
container_logs_dir = %q

[metrics]
address = %q

[log]
target = "file"
file = %q
%s`, c.Top, c.Period, c.Grace, filepath.Join(filepath.Dir(c.LogFile), "state.json"), node.NRISocket, cmp.Or(c.PluginName, "nri-housekeeper"), node.CRISocket, k.root, node.LogRoot, k.linksDir, c.MetricsAddr, c.LogFile, tables)
}

// runBinary starts the plugin binary with a config; it is stopped, and its
// log shown on failure, at cleanup.
func runBinary(t *testing.T, exe, conf, logFile string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, exe, "run", "--config", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("plugin log:\n%s", b)
		}
	})
}

// Acceptance 2a: runtime.endpoint points at a second, empty containerd while
// NRI is connected to the first. With cgroups enabled, orphans stopped and
// orphaned pod dirs removed, for over five leak_graces the live pods'
// sandboxes, containers, pod dirs and cgroups are untouched, and /readyz
// names the disagreement.
func TestAListingFromAnotherContainerdChangesNothing(t *testing.T) {
	cleanupPods(t, node)
	ctx := context.Background()
	other, err := lab.Start(ctx, lab.Options{Dir: "/tmp/" + labName() + "-other", CgroupRoot: "/" + labName() + "-other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := other.Down(context.Background()); err != nil {
			t.Errorf("second lab down: %v", err)
		}
	})
	k := newKubelet(t, node)
	pods, sandboxes, ctrs := livePods(t, k, "live", 2)
	done, doneSb, doneCtr := completedPod(t, k, "completed")
	pods, sandboxes, ctrs = append(pods, done), append(sandboxes, doneSb), append(ctrs, doneCtr)
	var cgroups []string
	for _, p := range pods {
		cgroups = append(cgroups, podCgroupPaths(t, p)...)
	}
	if len(cgroups) == 0 {
		t.Fatal("the lab pods have no cgroups to protect")
	}

	dir := t.TempDir()
	exe := buildPlugin(t, dir, "nri-housekeeper")
	addr, logFile := freePort(t), filepath.Join(dir, "plugin.log")
	const grace = 2 * time.Second
	conf := writeConfig(t, dir, fmt.Sprintf(`[housekeeping]
period = "1s"
startup_delay = "0s"
leak_grace = "%s"
state_file = %q

[nri]
socket = %q

[runtime]
endpoint = "unix://%s"

[pods]
kubelet_root = %q

[orphans]
action = "stop"

[logs]
pod_logs_dir = %q
container_logs_dir = %q

[cgroups]
enabled = true
driver = "cgroupfs"
mountpoint = %q
root = %q

[pod_dirs]
remove_orphaned = true

[metrics]
address = %q

[log]
level = "debug"
target = "file"
file = %q
`, grace, filepath.Join(dir, "state.json"), node.NRISocket, other.CRISocket, k.root, node.LogRoot, k.linksDir, cgroupMount, cgroupRoot(), addr, logFile))
	runBinary(t, exe, conf, logFile)
	waitFor(t, "the plugin serves /readyz", 10*time.Second, func() bool { code, _ := get("http://" + addr + "/readyz"); return code != 0 })
	start := time.Now()
	time.Sleep(5*grace + 2*time.Second)
	for _, id := range append(sandboxes, ctrs...) {
		if !runtimeHas(t, node, id) {
			t.Errorf("%s was removed on the word of another containerd's listing", id)
		}
	}
	for _, sb := range sandboxes[:2] {
		if !sandboxReady(t, node, sb) {
			t.Errorf("live sandbox %s was stopped", sb)
		}
	}
	for _, p := range pods {
		if !exists(k.podDir(p)) || !exists(node.PodLogDir(p)) {
			t.Errorf("pod dir or log dir of %s was removed", p.Name)
		}
	}
	for _, cg := range cgroups {
		if !exists(cg) {
			t.Errorf("pod cgroup %s was removed", cg)
		}
	}
	code, why := get("http://" + addr + "/readyz")
	if code != 503 || !strings.Contains(why, "NRI reported 3 sandbox(es)") || !strings.Contains(why, "runtime.endpoint") {
		t.Errorf("/readyz after %v = %d %q", time.Since(start).Round(time.Second), code, why)
	}
	s, _ := scrapeMetrics(t, addr)
	untrusted := s.value("nri_housekeeper_untrusted_source", map[string]string{"source": "runtime-listing"})
	untrustedPasses := s.value("nri_housekeeper_passes_total", map[string]string{"result": "listing_untrusted"})
	okPasses := s.value("nri_housekeeper_passes_total", map[string]string{"result": "ok"})
	if untrusted != 1 || untrustedPasses < 5 || okPasses != 0 {
		t.Errorf("metrics: untrusted_source{runtime-listing} %v, listing_untrusted passes %v, ok passes %v; want 1, >= 5, 0",
			untrusted, untrustedPasses, okPasses)
	}
	log, _ := os.ReadFile(logFile)
	for _, line := range strings.Split(string(log), "\n") {
		for _, done := range []string{`msg="removed`, `msg="stopped`, `msg="killed`, `msg="reduced`, `msg="deleted`, `msg="released`} {
			if strings.Contains(line, done) {
				t.Errorf("the plugin acted: %s", line)
			}
		}
	}
	t.Logf("/readyz while the endpoint is another containerd (%v, %d leak_graces): %d %s",
		time.Since(start).Round(time.Second), int(time.Since(start)/grace), code, why)
}

// Acceptance 2b: kubelet_root points at a root kubelet does not use while
// pods run, one of them complete (dead container, NotReady sandbox, logs):
// nothing is removed, and report says why.
func TestAKubeletRootWithoutTheRunningPodsRemovesNothing(t *testing.T) {
	mkdirs := func(t *testing.T, root string, uids ...string) {
		for _, uid := range uids {
			if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		stale func(t *testing.T, root string, running []lab.Pod) // what the wrong root holds
	}{
		{"an empty pods dir", func(*testing.T, string, []lab.Pod) {}},
		{"a stale pods dir of other pods", func(t *testing.T, root string, _ []lab.Pod) { mkdirs(t, root, lab.NewUID()) }},
		{"a stale copy that still holds the running pods' dirs", func(t *testing.T, root string, running []lab.Pod) {
			for _, p := range running {
				mkdirs(t, root, p.UID)
			}
			time.Sleep(2500 * time.Millisecond) // the completed pod comes after the copy, beyond the clock margin
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanupPods(t, node)
			real := newKubelet(t, node) // where kubelet really keeps its pod dirs
			running, sandboxes, ctrs := livePods(t, real, "running", 2)
			wrong := newKubelet(t, node)
			tc.stale(t, wrong.root, running)
			done, doneSb, doneCtr := completedPod(t, real, "complete")
			sandboxes, ctrs = append(sandboxes, doneSb), append(ctrs, doneCtr)
			h := startHousekeeper(t, node, wrong, withCgroups)
			time.Sleep(4*testGrace + 2*testPeriod)
			for _, id := range append(sandboxes, ctrs...) {
				if !runtimeHas(t, node, id) {
					t.Errorf("%s was removed", id)
				}
			}
			if !exists(node.PodLogDir(done)) {
				t.Error("the completed pod's logs were removed")
			}
			n, last := h.loop.Passes()
			if n == 0 || !strings.Contains(last.Plan.OracleUntrusted, "pods.kubelet_root") || !strings.Contains(h.loop.NotReady(), "pods.kubelet_root") {
				t.Fatalf("the last pass does not distrust the oracle: %q (not ready: %q)", last.Plan.OracleUntrusted, h.loop.NotReady())
			}
			for _, o := range last.Outcomes {
				t.Errorf("action %s %s while the oracle is not trusted", o.Action.Kind, o.Action.Key)
			}

			exe := buildPlugin(t, t.TempDir(), "nri-housekeeper")
			conf := writeConfig(t, t.TempDir(), fmt.Sprintf("[runtime]\nendpoint = \"unix://%s\"\n\n[pods]\nkubelet_root = %q\n\n[logs]\npod_logs_dir = %q\ncontainer_logs_dir = %q\n",
				node.CRISocket, wrong.root, node.LogRoot, wrong.linksDir))
			out, err := exec.Command(exe, "report", "--leak-grace", "0s", "--config", conf).Output()
			if err != nil {
				t.Fatalf("report: %v\n%s", err, out)
			}
			t.Logf("report:\n%s", out)
			for _, want := range []string{"kubelet pod dirs NOT TRUSTED", "pods.kubelet_root", "DUE NOW (0)"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("report has no %q", want)
				}
			}
		})
	}
}

// raceOnce runs race, once, before the first execution that holds an
// action matching want: something that happens between plan and execution.
type raceOnce struct {
	housekeeping.Executor
	want func(gc.Action) bool
	race func()
	once sync.Once
	ran  chan struct{}
}

func (r *raceOnce) Execute(ctx context.Context, actions []gc.Action, now time.Time, recheck executor.Recheck) []executor.Outcome {
	for _, a := range actions {
		if r.want(a) {
			r.once.Do(func() { r.race(); close(r.ran) })
			break
		}
	}
	return r.Executor.Execute(ctx, actions, now, recheck)
}

// Acceptance 2c: a leaked pod cgroup (no sandbox, no pod dir, a process
// inside) is due; between the plan and its execution a pod of the same UID
// comes back with a new sandbox (a static pod moved back into its manifest
// dir keeps its UID). The cgroup and its process are not touched.
func TestAnOrphanCgroupWhoseUIDComesBackIsNotTouched(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	livePods(t, k, "bystander", 1)
	back := newPod(t, "static")
	proc, paths := fakeOrphanCgroup(t, back.UID)
	var race *raceOnce
	h := startHousekeeperWrapped(t, node, k, withCgroups, func(e housekeeping.Executor) housekeeping.Executor {
		race = &raceOnce{Executor: e, ran: make(chan struct{}),
			want: func(a gc.Action) bool { return a.Kind == gc.RemovePodCgroup && a.Pod.UID == back.UID },
			race: func() {
				k.admit(t, back)
				if _, err := node.RunPod(context.Background(), back); err != nil {
					t.Error(err)
				}
			}}
		return race
	})
	select {
	case <-race.ran:
	case <-time.After(testGrace + 3*testPeriod + 5*time.Second):
		t.Fatal("the orphan cgroup was never due: the test proves nothing")
	}
	time.Sleep(3 * testPeriod)
	requireUntouched(t, proc, paths, "a pod that came back")
	logs := h.logs.String()
	if logLine(logs, "not done: checked again right before it", "pod_uid="+back.UID) == "" {
		t.Fatalf("the abort is not logged with its pod:\n%s", logs)
	}
}

// budgetOpts sets orphans.action and the budget.
func budgetOpts(stop bool, b gc.Budget) func(*housekeeping.Options, *executor.Options) {
	return func(o *housekeeping.Options, _ *executor.Options) {
		o.Policy.StopOrphans = stop
		o.Policy.Budget = b
	}
}

// defaultBudget is the [budget] defaults.
var defaultBudget = gc.Budget{MaxPerPass: 3, MaxFraction: 0.1, MinPerPass: 1, MaxPerHour: 20}

// orphanedPod runs a pod whose pod dir then vanishes while it runs: an
// orphaned live pod.
func orphanedPod(t *testing.T, k *kubelet, name string) (string, string) {
	t.Helper()
	p := newPod(t, name)
	k.admit(t, p)
	sb, cs := runPod(t, node, p, 1)
	k.forget(t, p)
	return sb, cs[0]
}

// Acceptance 2d: the budget. One orphan beside two live pods is stopped with
// the default budget (max_fraction 0.1 of 3 Ready sandboxes used to forbid
// it); five at once are not; the per-hour budget holds across passes.
func TestTheBudgetOverOrphanStops(t *testing.T) {
	t.Run("one orphan is reported", func(t *testing.T) {
		cleanupPods(t, node)
		k := newKubelet(t, node)
		livePods(t, k, "live", 2)
		sb, _ := orphanedPod(t, k, "vanished")
		h := startHousekeeper(t, node, k, budgetOpts(false, defaultBudget))
		waitFor(t, "the orphan is reported", testGrace+5*time.Second, func() bool { return strings.Contains(h.logs.String(), "orphaned live pod") })
		time.Sleep(2 * testPeriod)
		if !sandboxReady(t, node, sb) {
			t.Fatal("a reported orphan was stopped")
		}
	})
	t.Run("one orphan beside two live pods is stopped", func(t *testing.T) {
		cleanupPods(t, node)
		k := newKubelet(t, node)
		_, live, _ := livePods(t, k, "live", 2)
		sb, ctr := orphanedPod(t, k, "vanished")
		startHousekeeper(t, node, k, budgetOpts(true, defaultBudget))
		waitGone(t, node, "the orphan is stopped, then reclaimed", 2*testGrace+4*testPeriod+5*time.Second, []string{sb, ctr}, nil)
		for _, s := range live {
			if !sandboxReady(t, node, s) {
				t.Fatalf("live sandbox %s was stopped", s)
			}
		}
	})
	t.Run("five orphans at once are not", func(t *testing.T) {
		cleanupPods(t, node)
		k := newKubelet(t, node)
		// Enough live pods that five orphans are not a wrong oracle (a
		// quarter of the Ready sandboxes): the budget is what holds them.
		livePods(t, k, "live", 16)
		var orphans []string
		for i := range 5 {
			sb, _ := orphanedPod(t, k, fmt.Sprintf("vanished-%d", i))
			orphans = append(orphans, sb)
		}
		h := startHousekeeper(t, node, k, budgetOpts(true, defaultBudget))
		waitFor(t, "the budget trips", testGrace+5*time.Second, func() bool {
			return strings.Contains(h.logs.String(), "blast-radius budget: this pass would take 5 orphan-stop step(s)")
		})
		time.Sleep(2 * testPeriod)
		for _, sb := range orphans {
			if !sandboxReady(t, node, sb) {
				t.Fatalf("orphan %s was stopped though the pass was over its budget", sb)
			}
		}
		if _, last := h.loop.Passes(); len(last.Plan.Trips) != 1 || last.Plan.Trips[0].Class != gc.ClassOrphanStop {
			t.Fatalf("the last pass's trips: %+v", last.Plan.Trips)
		}
	})
	t.Run("the per-hour budget holds across passes", func(t *testing.T) {
		cleanupPods(t, node)
		k := newKubelet(t, node)
		livePods(t, k, "live", 2)
		h := startHousekeeper(t, node, k, budgetOpts(true, gc.Budget{MaxPerPass: 3, MaxFraction: 1, MinPerPass: 1, MaxPerHour: 2}))
		for i := range 2 {
			sb, ctr := orphanedPod(t, k, fmt.Sprintf("vanished-%d", i))
			waitGone(t, node, "orphan "+sb+" is stopped, then reclaimed", 2*testGrace+4*testPeriod+5*time.Second, []string{sb, ctr}, nil)
		}
		third, _ := orphanedPod(t, k, "vanished-2")
		waitFor(t, "the hour's budget trips", testGrace+5*time.Second, func() bool {
			return strings.Contains(h.logs.String(), "over the 0 left of budget.max_per_hour = 2")
		})
		time.Sleep(2 * testPeriod)
		if !sandboxReady(t, node, third) {
			t.Fatal("the third orphan within the hour was stopped over max_per_hour = 2")
		}
	})
}
