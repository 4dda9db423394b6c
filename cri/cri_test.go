package cri

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestMalformedEntriesAreSkippedAndNamed(t *testing.T) {
	meta := &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u", Attempt: 1}
	cmeta := &runtimeapi.ContainerMetadata{Name: "app", Attempt: 2}
	pods := []*runtimeapi.PodSandbox{
		{Id: "good", Metadata: meta, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: 5, Labels: map[string]string{"a": "b"}},
		nil,
		{Metadata: meta, CreatedAt: 5},
		{Id: "nometa", CreatedAt: 5},
		{Id: "notime", Metadata: meta},
		{Id: "badstate", Metadata: meta, CreatedAt: 5, State: 7},
	}
	ctrs := []*runtimeapi.Container{
		{Id: "c", PodSandboxId: "good", Metadata: cmeta, State: runtimeapi.ContainerState_CONTAINER_UNKNOWN, CreatedAt: 6},
		{Id: "nosandbox", Metadata: cmeta, CreatedAt: 6},
		{Id: "nometa", PodSandboxId: "good", CreatedAt: 6},
		{Id: "badstate", PodSandboxId: "good", Metadata: cmeta, CreatedAt: 6, State: 9},
		// containerd's listing of a container whose status it could not load
		{Id: "unloaded", PodSandboxId: "good", Metadata: cmeta, State: runtimeapi.ContainerState_CONTAINER_UNKNOWN,
			Labels: map[string]string{"io.kubernetes.pod.uid": "u"}},
	}
	sandboxes, containers, bad := convert(pods, ctrs)
	if len(sandboxes) != 1 || len(containers) != 1 {
		t.Fatalf("kept %d sandboxes, %d containers; want 1 and 1", len(sandboxes), len(containers))
	}
	wantSandbox := Sandbox{ID: "good", Name: "p", Namespace: "ns", UID: "u", Attempt: 1, CreatedAt: time.Unix(0, 5)}
	if s := sandboxes[0]; s.ID != wantSandbox.ID || s.UID != "u" || s.Ready || s.Attempt != 1 || !s.CreatedAt.Equal(wantSandbox.CreatedAt) || s.Labels["a"] != "b" {
		t.Errorf("sandbox = %+v", s)
	}
	if c := containers[0]; c.State != ContainerUnknown || c.Name != "app" || c.Attempt != 2 || c.SandboxID != "good" {
		t.Errorf("container = %+v", c)
	}
	var got []string
	for _, m := range bad {
		got = append(got, m.String())
	}
	want := []string{
		"sandbox <no id>: empty entry", "sandbox <no id>: no id", "sandbox nometa: no metadata",
		"sandbox notime: no creation time", "sandbox badstate: unknown state 7",
		"container nosandbox: no sandbox id", "container nometa: no metadata", "container badstate: unknown state 9",
		"container unloaded: no creation time",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("malformed =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// What can be read of them still counts: their sandbox and their pod.
	if m := bad[len(bad)-1]; m.SandboxID != "good" || m.PodUID != "u" {
		t.Errorf("the unloaded container = %+v, want its sandbox and pod UID", m)
	}
	if m := bad[1]; m.PodUID != "u" {
		t.Errorf("the sandbox without an ID = %+v, want its metadata UID", m)
	}
}

func TestDialRejectsNonUnixEndpoints(t *testing.T) {
	if _, err := Dial("tcp://127.0.0.1:1", time.Second); err == nil || !strings.Contains(err.Error(), "unix://") {
		t.Fatalf("err = %v, want a unix:// hint", err)
	}
}

func TestNotFoundCountsAsDone(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{status.Error(codes.NotFound, "no such sandbox"), false},
		{status.Error(codes.Unavailable, "connection refused"), true},
	} {
		if got := ignoreNotFound(tc.err) != nil; got != tc.want {
			t.Errorf("ignoreNotFound(%v) != nil is %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestAnIDListedTwiceIsMalformed: which entry would be the object? Taken as
// two, a pod's only sandbox would be "not its newest" and removed. Every
// entry of such an ID is set apart, naming its pod, so the pod is kept.
func TestAnIDListedTwiceIsMalformed(t *testing.T) {
	meta := &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u", Attempt: 1}
	cmeta := &runtimeapi.ContainerMetadata{Name: "app"}
	labels := map[string]string{"io.kubernetes.pod.uid": "u"}
	sb := &runtimeapi.PodSandbox{Id: "s1", Metadata: meta, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 5, Labels: labels}
	ct := &runtimeapi.Container{Id: "c1", PodSandboxId: "s1", Metadata: cmeta, State: runtimeapi.ContainerState_CONTAINER_EXITED, CreatedAt: 6, Labels: labels}
	other := &runtimeapi.PodSandbox{Id: "s2", Metadata: meta, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: 4, Labels: labels}
	sandboxes, containers, bad := convert([]*runtimeapi.PodSandbox{sb, other, sb}, []*runtimeapi.Container{ct, ct})
	if len(sandboxes) != 1 || sandboxes[0].ID != "s2" || len(containers) != 0 {
		t.Fatalf("kept sandboxes %+v, containers %+v; want s2 alone", sandboxes, containers)
	}
	var got []string
	for _, m := range bad {
		got = append(got, m.String())
		if m.PodUID != "u" {
			t.Errorf("%s does not name its pod", m)
		}
	}
	want := "sandbox s1: listed 2 times\nsandbox s1: listed 2 times\ncontainer c1: listed 2 times\ncontainer c1: listed 2 times"
	if strings.Join(got, "\n") != want {
		t.Fatalf("malformed =\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
}

// TestAContainersKillSpecIsReadAsKubeletReadsIt: the grace period and preStop
// hook kubelet restores from a container's annotations when it kills it
// without its pod (v1.37 getContainerInfoFromAnnotations,
// setTerminationGracePeriod): the deletion grace period first, else the
// termination grace period; an annotation that is there but cannot be read
// is said, not taken for none.
func TestAContainersKillSpecIsReadAsKubeletReadsIt(t *testing.T) {
	for _, tc := range []struct {
		rule        string
		annotations map[string]string
		want        KillSpec
		unreadable  string
	}{
		{"no annotations", nil, KillSpec{}, ""},
		{"the termination grace period", map[string]string{annotationTerminationGrace: "30"}, KillSpec{Grace: 30 * time.Second}, ""},
		{"the deletion grace period before the termination one",
			map[string]string{annotationTerminationGrace: "30", annotationDeletionGrace: "5"}, KillSpec{Grace: 5 * time.Second}, ""},
		{"a deletion grace period of 0", map[string]string{annotationDeletionGrace: "0", annotationTerminationGrace: "30"}, KillSpec{}, ""},
		{"a preStop hook", map[string]string{annotationPreStop: `{"exec":{"command":["sleep","5"]}}`}, KillSpec{PreStop: true}, ""},
		{"a grace that is not a number", map[string]string{annotationTerminationGrace: "30s"}, KillSpec{}, `io.kubernetes.pod.terminationGracePeriod = "30s"`},
		{"a negative grace", map[string]string{annotationDeletionGrace: "-1"}, KillSpec{}, `io.kubernetes.pod.deletionGracePeriod = "-1"`},
		{"a grace too large for a duration", map[string]string{annotationTerminationGrace: "99999999999999"}, KillSpec{}, "99999999999999"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			c, bad := convertContainer(&runtimeapi.Container{Id: "c1", PodSandboxId: "s1", Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
				State: runtimeapi.ContainerState_CONTAINER_UNKNOWN, CreatedAt: 1, Annotations: tc.annotations})
			if bad != "" {
				t.Fatal(bad)
			}
			got := c.Kill
			if tc.unreadable != "" {
				if !strings.Contains(got.Unreadable, tc.unreadable) {
					t.Fatalf("unreadable %q, want it to name %s", got.Unreadable, tc.unreadable)
				}
				got.Unreadable = ""
			}
			if got != tc.want {
				t.Fatalf("kill spec %+v, want %+v", c.Kill, tc.want)
			}
		})
	}
}
