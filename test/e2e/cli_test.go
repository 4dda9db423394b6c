//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
`, filepath.Join(t.TempDir(), "state.json"), node.CRISocket, k.root, node.LogRoot, k.linksDir)
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
	for _, want := range []string{"leaks detected: 1 container, 1 pod-log-dir, 1 sandbox", "NOT DUE YET (3)",
		"containers.pod-gone", "sandboxes.pod-gone", "waiting for leak_grace", "e2e/leaked"} {
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
	if len(rep.Actions) != 3 || rep.Leaks["sandbox"] != 1 {
		t.Fatalf("report --json: %d actions, leaks %v; want 3 and 1 sandbox", len(rep.Actions), rep.Leaks)
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
	if runtimeHas(t, node, sb) || runtimeHas(t, node, ctrs[0]) || exists(node.PodLogDir(leaked)) {
		t.Fatal("once left the leak behind")
	}
	if !runtimeHas(t, node, liveSb) || !sandboxReady(t, node, liveSb) {
		t.Fatal("once touched the live pod")
	}
	if !strings.Contains(out, "executed 3 action(s), 0 failed") {
		t.Fatalf("once output does not count its actions:\n%s", out)
	}
}
