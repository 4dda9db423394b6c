//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/statefile"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// TestAPluginRestartKeepsThePodsItSawTornDown: the plugin binary sees a pod
// torn down whose dir kubelet could not remove, writes it to its state file,
// and is killed (-9) before leak_grace runs out. The next run restores it
// and removes the orphaned dir one leak_grace after it starts. A pod torn
// down while no plugin ran is one it never saw torn down: its dir stays.
func TestAPluginRestartKeepsThePodsItSawTornDown(t *testing.T) {
	runs := newPluginRuns(t)
	k, statePath := runs.k, runs.statePath
	const grace, period = 6 * time.Second, time.Second
	start := func(run string) (*exec.Cmd, string) {
		cmd, logFile, _ := runs.start(run, binaryConfig{Period: period.String(), Grace: grace.String(),
			Tables: "\n[pod_dirs]\nremove_orphaned = true\n"})
		return cmd, logFile
	}
	tearDown := func(name string) lab.Pod {
		p := newPod(t, name)
		k.admit(t, p)
		mkdirAll(t, filepath.Join(k.podDir(p), "volumes", "kubernetes.io~empty-dir", "cache"))
		sb, err := node.RunPod(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * period) // a pass sees it live
		if err := node.StopPod(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
		if err := node.RemovePod(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kept := func(uid string) bool {
		s, err := statefile.Load(context.Background(), statePath)
		return err == nil && slices.ContainsFunc(s.TornDown, func(d statefile.TornDown) bool { return d.UID == uid })
	}

	first, _ := start("first")
	seen := tearDown("seen")
	waitFor(t, "the first run keeps the pod it saw torn down in its state file", 10*time.Second, func() bool { return kept(seen.UID) })
	// Its times are dated on this boot's clock too (the production wiring
	// of the boot clock), so a restart ages them past any wall clock step.
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := statefile.Load(context.Background(), statePath); err != nil || s.BootID != strings.TrimSpace(string(bootID)) {
		t.Fatalf("the state file names boot %q (err %v), want this boot %s", s.BootID, err, bootID)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if !exists(k.podDir(seen)) {
		t.Fatal("the first run removed the dir before its grace ran out: the test proves nothing")
	}
	// Torn down while no plugin runs: never seen torn down.
	unseen := tearDown("unseen")

	_, secondLog := start("second")
	took := waitFor(t, "the second run removes the orphaned dir of the pod the first run saw torn down", grace+2*period+5*time.Second, func() bool {
		return !exists(k.podDir(seen))
	})
	t.Logf("the orphaned pod dir removed %v after the plugin started again (leak_grace %v)", took.Round(time.Millisecond), grace)
	time.Sleep(grace + 2*period)
	if !exists(filepath.Join(k.podDir(unseen), "volumes", "kubernetes.io~empty-dir", "cache")) {
		t.Fatal("the dir of a pod torn down while no plugin ran was touched")
	}
	b, err := os.ReadFile(secondLog)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	line := logLine(log, "restored the pods seen torn down", "path="+statePath)
	if line == "" {
		t.Fatalf("the second run does not say what it restored from %s:\n%s", statePath, log)
	}
	if !strings.Contains(line, `aged_by="the boot clock`) {
		t.Errorf("the second run, in the same boot, did not age the file by the boot clock: %q", line)
	}
	removal := logLine(log, "action=remove-pod-dir", "pod_uid="+seen.UID)
	if !strings.Contains(removal, "pod_name="+seen.Name) {
		t.Errorf("the removal does not name the pod from the state file: %q", removal)
	}
	if strings.Contains(log, "pod_uid="+unseen.UID) && logLine(log, "action=", "pod_uid="+unseen.UID) != "" {
		t.Errorf("an action names the pod never seen torn down:\n%s", logLine(log, "action=", "pod_uid="+unseen.UID))
	}
	if kept(seen.UID) {
		t.Error("the state file still holds the pod whose dir is gone")
	}
}

// TestASecondPluginOnTheSameStateFileWaitsForTheFirst: two plugin binaries
// on one node and one state file (a DaemonSet beside a leftover systemd
// unit). The second finds the file's lock held: it says so, in its log and
// in nri_housekeeper_degraded{part="state-file"}, holds every budgeted step
// and writes nothing. Once the first is killed (-9: the kernel drops its
// lock), the second takes the file over.
func TestASecondPluginOnTheSameStateFileWaitsForTheFirst(t *testing.T) {
	runs := newPluginRuns(t)
	statePath := runs.statePath
	start := func(run string) (*exec.Cmd, string, string) {
		return runs.start(run, binaryConfig{Period: "1s", Grace: "5s", PluginName: "nri-housekeeper-" + run})
	}
	logSays := func(logFile, what string) func() bool {
		return func() bool { b, _ := os.ReadFile(logFile); return strings.Contains(string(b), what) }
	}
	degraded := func(addr string) float64 {
		s, _ := scrapeMetrics(t, addr)
		return s.value("nri_housekeeper_degraded", map[string]string{"part": "state-file"})
	}

	first, firstLog, firstAddr := start("first")
	_, secondLog, secondAddr := start("second")
	waitFor(t, "the second plugin says another holds the state file", 10*time.Second,
		logSays(secondLog, "another nri-housekeeper holds the state file"))
	waitFor(t, "the second plugin's state-file part is degraded", 5*time.Second, func() bool { return degraded(secondAddr) == 1 })
	if got := degraded(firstAddr); got != 0 {
		t.Fatalf("the first plugin's state-file part is %v, want 0: it holds the file", got)
	}
	if logSays(firstLog, "another nri-housekeeper holds the state file")() {
		t.Fatal("the first plugin, which holds the file, says another holds it")
	}
	line := logLine(readFile(t, secondLog), "another nri-housekeeper holds the state file")
	if !strings.Contains(line, statefile.LockPath(statePath)) || !strings.Contains(line, "pid ") {
		t.Fatalf("the second plugin's error does not name the lock and its holder: %q", line)
	}

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	took := waitFor(t, "the second plugin takes the state file over", 10*time.Second, logSays(secondLog, "took the state file over"))
	t.Logf("the second plugin took the state file over %v after the first was killed", took.Round(time.Millisecond))
	waitFor(t, "the second plugin's state-file part is no longer degraded", 5*time.Second, func() bool { return degraded(secondAddr) == 0 })
}

// pluginRuns are runs of one plugin binary on the lab sharing one state
// file: binaryConfig puts it beside the log, and every run logs in logs.
type pluginRuns struct {
	t                         *testing.T
	k                         *kubelet
	exe, dir, logs, statePath string
}

func newPluginRuns(t *testing.T) *pluginRuns {
	cleanupPods(t, node)
	r := &pluginRuns{t: t, k: newKubelet(t, node), dir: t.TempDir()}
	r.exe = buildPlugin(t, r.dir, "nri-housekeeper")
	r.logs = filepath.Join(r.dir, "logs")
	mkdirAll(t, r.logs)
	r.statePath = filepath.Join(r.logs, "state.json")
	return r
}

// start starts one run with c, its config in dir/<run> and its log in
// logs/<run>.log, on a free metrics address, and waits until it is ready.
// The test kills it at its end, and logs its log if it failed.
func (r *pluginRuns) start(run string, c binaryConfig) (cmd *exec.Cmd, logFile, addr string) {
	t := r.t
	t.Helper()
	runDir := filepath.Join(r.dir, run)
	mkdirAll(t, runDir)
	logFile, addr = filepath.Join(r.logs, run+".log"), freePort(t)
	c.LogFile, c.MetricsAddr = logFile, addr
	conf := writeConfig(t, runDir, c.text(r.k))
	cmd = exec.Command(r.exe, "run", "--config", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("plugin run %s log:\n%s", run, b)
		}
	})
	waitFor(t, "plugin run "+run+" is ready", 20*time.Second, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 })
	return cmd, logFile, addr
}

// TestOnceTakesNoBudgetedStepBesideARunningPluginAndCountsItsOwn: once acts
// on the node like a plugin, so it shares the plugin's hour of budget. Beside
// a running plugin (which holds the state file) it takes no budgeted step and
// says why; alone, it takes the lock and adds its steps to the file, so that
// repeated runs take no more than budget.max_per_hour between them.
func TestOnceTakesNoBudgetedStepBesideARunningPluginAndCountsItsOwn(t *testing.T) {
	runs := newPluginRuns(t)
	k, statePath := runs.k, runs.statePath
	// One live pod: the pod dirs are trusted, and the budget allows one
	// step of a class a pass (min_per_pass).
	live := newPod(t, "live")
	k.admit(t, live)
	runPod(t, node, live, 1)
	// Four pods gone from the node, nothing of them left but their log dirs:
	// budgeted steps (class pod-log-dir), two allowed an hour.
	var gone []string
	for i := range 4 {
		p := newPod(t, fmt.Sprintf("gone-%d", i))
		dir := node.PodLogDir(p)
		mkdirAll(t, filepath.Join(dir, "app"))
		if err := os.WriteFile(filepath.Join(dir, "app", "0.log"), []byte("bye\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, dir)
	}
	left := func() int {
		n := 0
		for _, d := range gone {
			if exists(d) {
				n++
			}
		}
		return n
	}
	onceDir := filepath.Join(runs.dir, "once")
	mkdirAll(t, onceDir)
	onceConf := writeConfig(t, onceDir, binaryConfig{Period: "1s", Grace: "5s", LogFile: filepath.Join(runs.logs, "once.log"),
		Tables: "\n[budget]\nmax_per_hour = 2\n"}.text(k))
	once := func() (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(runs.exe, "once", "--leak-grace", "0s", "--config", onceConf)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("once: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	spentInFile := func() int {
		s, err := statefile.Load(context.Background(), statePath)
		if err != nil {
			t.Fatalf("the state file: %v", err)
		}
		n := 0
		for _, sp := range s.Spent {
			if sp.Class == "pod-log-dir" {
				n++
			}
		}
		return n
	}

	// A running plugin (its grace far off: it takes no step itself).
	plugin, _, _ := runs.start("plugin", binaryConfig{Period: "1s", Grace: "1h"})
	out, errOut := once()
	if n := left(); n != 4 {
		t.Fatalf("once beside a running plugin removed %d pod log dir(s) of the budget's class; want none:\n%s", 4-n, out)
	}
	// once logs to stderr, whatever [log] says.
	line := logLine(errOut, "another nri-housekeeper holds the state file")
	if !strings.Contains(line, statefile.LockPath(statePath)) || !strings.Contains(line, fmt.Sprintf("pid %d", plugin.Process.Pid)) {
		t.Fatalf("once does not log that the running plugin (pid %d) holds %s:\n%s", plugin.Process.Pid, statefile.LockPath(statePath), errOut)
	}
	if !strings.Contains(out, "BUDGET: pod-log-dir PAUSED") || !strings.Contains(out, fmt.Sprintf("is held by another process (pid %d,", plugin.Process.Pid)) {
		t.Fatalf("once's report does not show the budget held, and why:\n%s", out)
	}
	t.Logf("once beside a running plugin:\n%s", out)

	if err := plugin.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = plugin.Wait()
	// Alone, each run takes one (a pass's share) and counts it in the file;
	// the third finds the hour's two spent.
	for run, want := range []struct{ left, spent int }{{3, 1}, {2, 2}, {2, 2}} {
		out, _ := once()
		if n, s := left(), spentInFile(); n != want.left || s != want.spent {
			t.Fatalf("once run %d: %d pod log dir(s) left and %d pod-log-dir step(s) in the state file's hour; want %d and %d:\n%s",
				run+1, n, s, want.left, want.spent, out)
		}
	}
	if out, _ := once(); !strings.Contains(out, "over the 0 left of budget.max_per_hour = 2 (2 taken in the last hour)") {
		t.Fatalf("once does not say that the hour's budget is spent:\n%s", out)
	}
}
