package gc

import (
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
)

// kubelet cuts a link name at 255 bytes, and with it the container ID: the
// prefix left names the container when exactly one listed container has it.
// When several do, the link's container cannot be told: the link is kept,
// whatever state the matching containers are in.
func TestATruncatedLinkMatchingSeveralListedContainersIsAmbiguous(t *testing.T) {
	link := nodefs.ContainerLogLink{Path: ctrLogs + "/pod_ns_app-abcdef.log", ContainerID: "abcdef", PodName: "pod-u1", Namespace: "ns",
		ContainerName: "app", Truncated: true, Dangling: true}
	exited := func(id, name string) cri.Container { return ctr(id, "s1", "u1", name, cri.ContainerExited, time.Hour) }
	running := func(id, name string) cri.Container { return ctr(id, "s1", "u1", name, cri.ContainerRunning, time.Hour) }
	for _, tc := range []struct {
		name     string
		ctrs     []cri.Container
		want     []string
		keptWhy  string
		notTrunc bool
	}{
		{name: "the prefix names one exited container: its dangling link goes",
			ctrs: []cri.Container{exited("abcdef111", "app"), exited("ffffff111", "side")},
			want: []string{"remove-log-link " + link.Path}},
		{name: "the prefix names one running container: rotation may be in progress",
			ctrs:    []cri.Container{running("abcdef111", "app"), exited("ffffff111", "side")},
			keptWhy: "log rotation"},
		{name: "the prefix matches a running and an exited container: ambiguous, kept",
			ctrs:    []cri.Container{running("abcdef111", "app"), exited("abcdef222", "side")},
			keptWhy: "matches several listed containers"},
		{name: "the prefix matches two exited containers: still ambiguous, kept",
			ctrs:    []cri.Container{exited("abcdef111", "app"), exited("abcdef222", "side")},
			keptWhy: "matches several listed containers"},
		{name: "a link that is not truncated names its container exactly, prefix or not",
			ctrs:     []cri.Container{exited("abcdef", "app"), running("abcdef222", "side")},
			want:     []string{"remove-log-link " + link.Path},
			notTrunc: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := link
			l.Truncated = !tc.notTrunc
			r := Plan(Input{Now: now, Policy: policy(), Oracle: present("u1"), Containers: tc.ctrs,
				Sandboxes: []cri.Sandbox{sb("s1", "u1", true, time.Hour)}, ContainerLogLinks: []nodefs.ContainerLogLink{l}})
			same(t, "due", due(r), tc.want)
			same(t, "deferred", deferred(r), nil)
			if tc.keptWhy != "" {
				if got := keptReason(r, "log link "+l.Path); !strings.Contains(got, tc.keptWhy) {
					t.Fatalf("link kept for %q, want %q", got, tc.keptWhy)
				}
			}
		})
	}
}
