package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// goneSandboxRuntime lists one NotReady sandbox of a pod whose pod dir is
// gone, and records the calls that would act on it.
type goneSandboxRuntime struct {
	exitedRuntime
	mu    sync.Mutex
	calls []string
}

func (r *goneSandboxRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	const uid = "0f4d3c2b-1a2b-4c3d-8e9f-0123456789ab"
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{
		// Made after the test's kubelet pods dir: a pod dir it lacks is gone.
		Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: time.Now().UnixNano(),
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: uid},
		Labels:   map[string]string{"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "ns"},
	}}}, nil
}

func (r *goneSandboxRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{}, nil
}

func (r *goneSandboxRuntime) record(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

func (r *goneSandboxRuntime) StopPodSandbox(context.Context, *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	r.record("StopPodSandbox")
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (r *goneSandboxRuntime) RemovePodSandbox(context.Context, *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	r.record("RemovePodSandbox")
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// once --dry-run takes no step, whatever the configuration says, and says
// what it would have done; without it the same once acts (the test can
// fail).
func TestOnceDryRunTakesNoStep(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantCalls bool
		want      string
	}{
		{[]string{"--dry-run"}, false, "(dry_run = true)"},
		{nil, true, "(dry_run = false)"},
	} {
		dir := t.TempDir()
		for _, d := range []string{"kubelet/pods", "pods-logs", "containers"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		rt := &goneSandboxRuntime{}
		path := writeOnceConfig(t, dir, serveRuntime(t, rt), "")
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"once", "--config", path, "--leak-grace", "0s"}, tc.args...), &stdout, &stderr)
		rt.mu.Lock()
		calls := rt.calls
		rt.mu.Unlock()
		if code != 0 || (len(calls) > 0) != tc.wantCalls || !strings.Contains(stdout.String(), tc.want) ||
			!strings.HasPrefix(stdout.String(), "nri-housekeeper once, ") {
			t.Errorf("once %v: exit %d, runtime calls %v (want some: %v), stdout:\n%s\nstderr:\n%s", tc.args, code, calls, tc.wantCalls, stdout.String(), stderr.String())
		}
	}
}

// TestOnceSaysAndExitsOneWhenSomeLeaksWereNotLookedFor: a pass that could
// not read one of its sources (here the pod logs dir, a file) does the
// rest, prints which leaks it did not look for, and exits 1: an exit 0
// read as a node with no leak left. report prints the same and exits 0
// (it printed). With every source readable, once exits 0 (the test can
// fail).
func TestOnceSaysAndExitsOneWhenSomeLeaksWereNotLookedFor(t *testing.T) {
	for _, tc := range []struct {
		cmd           string
		logsUnread    bool
		wantCode      int
		wantNotLooked bool
	}{
		{"once", true, 1, true},
		{"once", false, 0, false},
		{"report", true, 0, true},
	} {
		dir := t.TempDir()
		for _, d := range []string{"kubelet/pods", "containers"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if tc.logsUnread {
			if err := os.WriteFile(filepath.Join(dir, "pods-logs"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Mkdir(filepath.Join(dir, "pods-logs"), 0o755); err != nil {
			t.Fatal(err)
		}
		rt := &goneSandboxRuntime{}
		path := writeOnceConfig(t, dir, serveRuntime(t, rt), "")
		var stdout, stderr bytes.Buffer
		code := run([]string{tc.cmd, "--config", path, "--leak-grace", "0s"}, &stdout, &stderr)
		rt.mu.Lock()
		calls := rt.calls
		rt.mu.Unlock()
		name := fmt.Sprintf("%s, pod logs dir unreadable %v", tc.cmd, tc.logsUnread)
		if code != tc.wantCode {
			t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", name, code, tc.wantCode, stdout.String(), stderr.String())
		}
		said := strings.Contains(stdout.String(), "NOT LOOKED FOR: pod log dirs (pod logs dir "+filepath.Join(dir, "pods-logs"))
		if said != tc.wantNotLooked {
			t.Errorf("%s: report says the pod log dirs were not looked for: %v, want %v\n%s", name, said, tc.wantNotLooked, stdout.String())
		}
		if tc.cmd == "once" {
			if len(calls) == 0 {
				t.Errorf("%s: the rest was not done: no runtime call", name)
			}
			if got := strings.Contains(stderr.String(), "not every leak was looked for: pod log dirs"); got != tc.wantNotLooked {
				t.Errorf("%s: stderr says not every leak was looked for: %v, want %v\n%s", name, got, tc.wantNotLooked, stderr.String())
			}
		}
	}
}
