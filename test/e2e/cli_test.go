//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/report"
)

// TestReportAndOnceCommands runs the binary the way an SRE would: report
// shows the leak and why the rest is kept, once reclaims it.
func TestReportAndOnceCommands(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	exe := buildPlugin(t, t.TempDir(), "nri-housekeeper")
	conf := filepath.Join(t.TempDir(), "config.toml")
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
`, filepath.Join(t.TempDir(), "state.json"), node.CRISocket, k.root, node.LogRoot, k.linksDir, cgroupRoot())
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	leaked := newPod(t, "leaked")
	k.admit(t, leaked)
	sb, ctrs := runPod(t, node, leaked, 1)
	leakLike107730(t, node, k, leaked, sb, ctrs)
	live := newPod(t, "live")
	k.admit(t, live)
	liveSb, _ := runPod(t, node, live, 1)

	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(exe, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", args[0], stderr.String())
		}
		return stdout.String(), code
	}

	out, code := run("report", "--config", conf)
	if code != 0 {
		t.Fatalf("report exit %d:\n%s", code, out)
	}
	t.Logf("report:\n%s", out)
	// Pod cgroups other tests' pods left (the lab has no kubelet to remove
	// them) are leaks too: only this test's pod is counted.
	for _, want := range []string{"leaks detected: 1 container, ", "1 pod-log-dir, 1 sandbox", "DUE NOW (0)",
		"containers.pod-gone", "sandboxes.pod-gone", "cgroups.pod-gone", "waiting for leak_grace", "e2e/leaked"} {
		if !strings.Contains(out, want) {
			t.Errorf("report has no %q", want)
		}
	}

	out, code = run("report", "--json", "--leak-grace", "0s", "--config", conf)
	if code != 0 {
		t.Fatalf("report --json exit %d:\n%s", code, out)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report --json is not JSON: %v\n%s", err, out)
	}
	var kinds []string
	for _, a := range rep.Actions {
		if a.Pod.UID == leaked.UID {
			kinds = append(kinds, a.Action)
		}
	}
	slices.Sort(kinds)
	if want := []string{"remove-container", "remove-pod-cgroup", "remove-pod-log-dir", "remove-sandbox"}; !slices.Equal(kinds, want) || rep.Leaks["sandbox"] != 1 {
		t.Fatalf("report --json: the leaked pod's actions %q, leaks %v; want %q and 1 sandbox", kinds, rep.Leaks, want)
	}
	if !runtimeHas(t, node, sb) {
		t.Fatal("report changed something")
	}

	start := time.Now()
	out, code = run("once", "--leak-grace", "0s", "--config", conf)
	if code != 0 {
		t.Fatalf("once exit %d:\n%s", code, out)
	}
	t.Logf("once (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if runtimeHas(t, node, sb) || runtimeHas(t, node, ctrs[0]) || exists(node.PodLogDir(leaked)) || len(podCgroupPaths(t, leaked)) > 0 {
		t.Fatalf("once left the leak behind (pod cgroup dirs %q)", podCgroupPaths(t, leaked))
	}
	if !runtimeHas(t, node, liveSb) || !sandboxReady(t, node, liveSb) || len(podCgroupPaths(t, live)) == 0 {
		t.Fatal("once touched the live pod")
	}
	if !strings.Contains(out, fmt.Sprintf("executed %d action(s), 0 failed", len(rep.Actions))) {
		t.Fatalf("once output does not count its actions:\n%s", out)
	}
}
