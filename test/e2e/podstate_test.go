//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// TestPodstateMatchesTheListingThroughTheLifecycle drives pods through every
// CRI lifecycle step like kubelet and checks after each step that podstate
// already matches a fresh CRI listing: NRI events alone keep it exact.
func TestPodstateMatchesTheListingThroughTheLifecycle(t *testing.T) {
	cleanupPods(t, node)
	tr := startTracker(t, node, time.Hour) // no periodic pass: events must do it
	ctx := context.Background()
	tr.requireMatch(t, "after synchronize")

	pods := []lab.Pod{newPod(t, "web"), newPod(t, "db"), newPod(t, "batch")}
	sandboxes := map[string]string{}
	containers := map[string][]string{}
	for _, p := range pods {
		sb, err := node.RunPod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		sandboxes[p.UID] = sb
		tr.requireMatch(t, "RunPodSandbox "+p.Name)
		for i := range 2 {
			id, err := node.CreateContainer(ctx, p, sb, fmt.Sprintf("c%d", i), 0)
			if err != nil {
				t.Fatal(err)
			}
			tr.requireMatch(t, "CreateContainer "+p.Name)
			if err := node.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			tr.requireMatch(t, "StartContainer "+p.Name)
			containers[p.UID] = append(containers[p.UID], id)
		}
		if ph := tr.pod(t, p.UID).Phase; ph != podstate.PhaseRunning {
			t.Fatalf("pod %s phase = %s, want Running", p.Name, ph)
		}
	}

	// web: one container stops (restart policy would recreate it).
	web, db, batch := pods[0], pods[1], pods[2]
	if err := node.StopContainer(ctx, containers[web.UID][0], 2); err != nil {
		t.Fatal(err)
	}
	tr.requireMatch(t, "StopContainer web/c0")
	if got := tr.containerState(t, web.UID, containers[web.UID][0]); got != podstate.ContainerExited {
		t.Fatalf("stopped container = %s, want Exited", got)
	}

	// db: the pod is deleted the way kubelet does it.
	for _, id := range containers[db.UID] {
		if err := node.StopContainer(ctx, id, 2); err != nil {
			t.Fatal(err)
		}
		tr.requireMatch(t, "StopContainer db")
	}
	if err := node.StopPod(ctx, sandboxes[db.UID]); err != nil {
		t.Fatal(err)
	}
	tr.requireMatch(t, "StopPodSandbox db")
	if ph := tr.pod(t, db.UID).Phase; ph != podstate.PhaseTerminated {
		t.Fatalf("db phase = %s, want Terminated", ph)
	}
	for _, id := range containers[db.UID] {
		if err := node.RemoveContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		tr.requireMatch(t, "RemoveContainer db")
	}
	if err := node.RemovePod(ctx, sandboxes[db.UID]); err != nil {
		t.Fatal(err)
	}
	tr.requireMatch(t, "RemovePodSandbox db")
	if ph := tr.pod(t, db.UID).Phase; ph != podstate.PhaseRemoved {
		t.Fatalf("db phase = %s, want Removed", ph)
	}

	// batch: the sandbox is stopped while containers run (they are stopped
	// with it by containerd), then removed with its containers in one call.
	if err := node.StopPod(ctx, sandboxes[batch.UID]); err != nil {
		t.Fatal(err)
	}
	tr.requireMatch(t, "StopPodSandbox batch")
	if err := node.RemovePod(ctx, sandboxes[batch.UID]); err != nil {
		t.Fatal(err)
	}
	tr.requireMatch(t, "RemovePodSandbox batch")

	// A periodic pass agrees and changes nothing.
	tr.loop.Resync()
	r := tr.waitPass(t, 10*time.Second)
	if r.Err != nil || r.Reconcile.Added+r.Reconcile.Updated+r.Reconcile.Removed != 0 {
		t.Fatalf("a pass after event-driven tracking changed something: %+v", r)
	}
	tr.requireMatch(t, "after a housekeeping pass")
}

// TestKilledContainerIsExitedWithinOneSecond: containerd reports a
// container's own exit over NRI (StopContainer), so the record follows fast.
func TestKilledContainerIsExitedWithinOneSecond(t *testing.T) {
	cleanupPods(t, node)
	tr := startTracker(t, node, time.Hour)
	p := newPod(t, "victim")
	_, ctrs := runPod(t, node, p, 1)
	pid, err := node.ContainerPID(context.Background(), ctrs[0])
	if err != nil {
		t.Fatal(err)
	}
	kill9(t, pid)
	took := waitFor(t, "the container record turns Exited", time.Second, func() bool {
		return tr.containerState(t, p.UID, ctrs[0]) == podstate.ContainerExited
	})
	t.Logf("container record Exited %v after kill -9", took)
	if ph := tr.pod(t, p.UID).Phase; ph != podstate.PhaseRunning {
		t.Fatalf("pod phase = %s, want Running (its sandbox is Ready)", ph)
	}
	// containerd notifies NRI of the exit before its CRI store says EXITED.
	waitFor(t, "the CRI listing agrees", 2*time.Second, func() bool { return len(tr.mismatches(t)) == 0 })
}

// TestKilledPauseProcessIsCaughtByTheNextReconcile: no NRI event exists for
// a sandbox whose pause process dies; the periodic listing must catch it.
func TestKilledPauseProcessIsCaughtByTheNextReconcile(t *testing.T) {
	cleanupPods(t, node)
	tr := startTracker(t, node, 2*time.Second)
	p := newPod(t, "pauseless")
	sb, ctrs := runPod(t, node, p, 1)
	pid, err := node.SandboxPID(context.Background(), sb)
	if err != nil {
		t.Fatal(err)
	}
	tr.waitPass(t, 5*time.Second)
	kill9(t, pid)
	time.Sleep(200 * time.Millisecond) // let containerd see the exit
	if got := tr.sandboxState(t, p.UID, sb); got != podstate.SandboxReady {
		t.Logf("sandbox already %s before a pass (no NRI event expected)", got)
	}
	waitFor(t, "the sandbox record turns NotReady", 5*time.Second, func() bool {
		return tr.sandboxState(t, p.UID, sb) == podstate.SandboxNotReady
	})
	// The app container (its own pid namespace) still runs: the pod is
	// Terminating until it stops, then Terminated.
	if got := tr.containerState(t, p.UID, ctrs[0]); got != podstate.ContainerRunning {
		t.Fatalf("container = %s, want Running", got)
	}
	if ph := tr.pod(t, p.UID).Phase; ph != podstate.PhaseTerminating {
		t.Fatalf("pod phase = %s, want Terminating", ph)
	}
	tr.requireMatch(t, "after the pause process died")
	if err := node.StopContainer(context.Background(), ctrs[0], 2); err != nil {
		t.Fatal(err)
	}
	if ph := tr.pod(t, p.UID).Phase; ph != podstate.PhaseTerminated {
		t.Fatalf("pod phase = %s after its last container stopped, want Terminated", ph)
	}
}

// TestContainerdKill9AndRestart: the plugin reconnects by itself within 2s of
// containerd being ready and catches up with what happened while it was down,
// including containers that died then (Synchronize leaves exited ones out).
func TestContainerdKill9AndRestart(t *testing.T) {
	cleanupPods(t, node)
	tr := startTracker(t, node, 30*time.Second)
	ctx := context.Background()
	type started struct {
		pod lab.Pod
		sb  string
		ctr string
	}
	var pods []started
	for i := range 20 {
		p := newPod(t, fmt.Sprintf("fleet-%02d", i))
		sb, ctrs := runPod(t, node, p, 1)
		pods = append(pods, started{p, sb, ctrs[0]})
	}
	tr.requireMatch(t, "20 pods running")
	var victims []int
	for _, i := range []int{3, 7, 11} {
		pid, err := node.ContainerPID(ctx, pods[i].ctr)
		if err != nil {
			t.Fatal(err)
		}
		victims = append(victims, pid)
	}
	registrations := tr.nri.Stats().Registrations.Load()

	if err := node.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin notices containerd is gone", 5*time.Second, func() bool { return !tr.nri.Connected() })
	for _, pid := range victims {
		kill9(t, pid) // they die while containerd is down
	}
	readyAt, err := node.RestartContainerd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin reconnects", 10*time.Second, func() bool {
		return tr.nri.Synchronized() && tr.nri.Stats().Registrations.Load() > registrations
	})
	reconnect := time.Since(readyAt)
	t.Logf("plugin reconnected and synchronized %v after containerd's CRI became ready", reconnect.Round(time.Millisecond))
	if reconnect > 2*time.Second {
		t.Fatalf("reconnect took %v after containerd was ready, want <= 2s", reconnect)
	}
	// The resync pass after Synchronize brings podstate to the listing.
	waitFor(t, "podstate matches the listing after the restart", 10*time.Second, func() bool {
		return len(tr.mismatches(t)) == 0
	})
	for _, i := range []int{3, 7, 11} {
		if got := tr.containerState(t, pods[i].pod.UID, pods[i].ctr); got != podstate.ContainerExited {
			t.Errorf("container that died while containerd was down: %s, want Exited", got)
		}
	}
	if got := tr.containerState(t, pods[0].pod.UID, pods[0].ctr); got != podstate.ContainerRunning {
		t.Errorf("surviving container: %s, want Running", got)
	}
}

// TestPreRegisteredPluginTracksPods: containerd launches the binary from its
// plugin dir with the config from its config dir; it registers, tracks pods,
// and exits when containerd goes away (containerd relaunches it).
func TestPreRegisteredPluginTracksPods(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pluginDir, confDir := filepath.Join(dir, "plugins"), filepath.Join(dir, "conf.d")
	for _, d := range []string{pluginDir, confDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := buildPlugin(t, pluginDir, "10-nri-housekeeper")
	logFile := filepath.Join(dir, "plugin.log")
	labDir := "/tmp/nrihk-e2e-pre"
	conf := fmt.Sprintf(`# written by the e2e test
[housekeeping]
period = "1s"
state_file = %q

[runtime]
endpoint = "unix://%s/containerd.sock"

[metrics]
address = ""

[log]
level = "debug"
target = "file"
file = %q
`, filepath.Join(dir, "state.json"), labDir, logFile)
	if err := os.WriteFile(filepath.Join(confDir, "10-nri-housekeeper.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := lab.Start(ctx, lab.Options{Dir: labDir, PluginPath: pluginDir, PluginConfigPath: confDir, CgroupRoot: "/nrihk-e2e-pre"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	readLog := func() string {
		b, _ := os.ReadFile(logFile)
		return string(b)
	}
	// Until containerd's Configure delivers the config, the plugin cannot
	// know its log target: the first line in the file is the start-up line.
	waitFor(t, "the plugin starts with the config containerd passed", 10*time.Second, func() bool {
		return strings.Contains(readLog(), `msg="nri-housekeeper starting" config="containerd plugin config"`)
	})
	if !strings.Contains(readLog(), "mode=pre-registered") {
		t.Fatalf("plugin log does not say it runs pre-registered:\n%s", readLog())
	}
	// A pod the first pass finds is in its summary; one made after it has
	// its own line.
	waitFor(t, "the first housekeeping pass", 15*time.Second, func() bool { return strings.Contains(readLog(), `msg="first pass: `) })
	p := newPod(t, "tracked")
	runPod(t, l, p, 1)
	want := "pod e2e/tracked: new -> Running"
	waitFor(t, "the plugin logs the new pod", 5*time.Second, func() bool { return strings.Contains(readLog(), want) })
	if !strings.Contains(readLog(), "pod_uid="+p.UID) {
		t.Fatalf("the pod's log line has no pod_uid field:\n%s", readLog())
	}
	if n := len(processes(exe)); n != 1 {
		t.Fatalf("%d plugin processes, want 1", n)
	}
	// containerd dies: the launched plugin must not linger on a dead fd.
	if err := l.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the orphaned plugin exits", 5*time.Second, func() bool { return len(processes(exe)) == 0 })
	// It says why it went, as a warning (containerd may have dropped it),
	// not as an error of its own.
	requireContains(t, "plugin log", readLog(), `level=warning msg="containerd closed the NRI connection it passed: exiting.`)
	if strings.Contains(readLog(), "msg=exiting") {
		t.Fatalf("the plugin logged containerd going away as its own error:\n%s", lastLines(readLog(), 8))
	}
	if _, err := l.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "containerd relaunches the plugin", 10*time.Second, func() bool { return len(processes(exe)) == 1 })
	waitFor(t, "the relaunched plugin tracks the pod again", 10*time.Second, func() bool {
		return strings.Count(readLog(), want) >= 2
	})
	t.Logf("plugin log excerpt:\n%s", lastLines(readLog(), 12))

	// A [log] section the plugin cannot use (its file's dir is missing) is
	// refused to containerd, as run exits 2 on it: the plugin neither logs
	// elsewhere than configured nor acts.
	missing := filepath.Join(dir, "no-such-dir", "plugin.log")
	bad := strings.Replace(conf, fmt.Sprintf("file = %q", logFile), fmt.Sprintf("file = %q", missing), 1)
	if err := os.WriteFile(filepath.Join(confDir, "10-nri-housekeeper.conf"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin exits with containerd", 5*time.Second, func() bool { return len(processes(exe)) == 0 })
	restarted := time.Now()
	if _, err := l.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	containerdLog := func() string {
		b, _ := os.ReadFile(l.ContainerdLog)
		return string(b)
	}
	// containerd logs the failed Configure; nri's stub (v0.12.5 Start)
	// closes the connection as soon as a Configure failed, racing the
	// answer that carries the reason, so containerd may only say "ttrpc:
	// closed", and then SIGKILLs the plugin. The plugin says the reason
	// before it answers, where a launched plugin logs before its
	// configuration is known: journald, else /var/log/nri-housekeeper.log.
	const failed = `failed to start pre-installed NRI plugin \"nri-housekeeper\": failed to configure plugin`
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(containerdLog(), failed); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("containerd does not say it refused the plugin within 15s; its NRI lines:\n%s", lastLines(grepLines(containerdLog(), "nri"), 15))
		}
	}
	waitFor(t, "the refused plugin is not running", 5*time.Second, func() bool { return len(processes(exe)) == 0 })
	reason := "containerd plugin config: [log]: log.file " + missing
	said := grepLines(containerdLog(), failed)
	switch {
	case strings.Contains(said, reason):
	case !strings.Contains(said, "ttrpc: closed"):
		t.Fatalf("containerd's line names neither the reason nor a closed connection:\n%s", said)
	default:
		if _, err := os.Stat(logging.DefaultJournalSocket); err == nil {
			t.Logf("containerd got the connection closed before the reason; the plugin said it to journald")
			break
		}
		b, _ := os.ReadFile("/var/log/nri-housekeeper.log")
		if said := grepLines(string(b), reason); !strings.Contains(said, "the configuration containerd passed cannot be used, and is refused") {
			t.Fatalf("containerd got the connection closed before the reason, and /var/log/nri-housekeeper.log does not say it either:\n%s", lastLines(string(b), 5))
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatalf("%s was made", missing)
	}
	t.Logf("refused %v after containerd's restart; containerd log:\n%s", time.Since(restarted).Round(time.Millisecond), lastLines(grepLines(containerdLog(), "failed to configure plugin"), 3))
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, ln := range strings.Split(s, "\n") {
		if strings.Contains(ln, sub) {
			out = append(out, ln)
		}
	}
	return strings.Join(out, "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
