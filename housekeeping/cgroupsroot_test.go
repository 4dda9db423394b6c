package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// A cgroups.root kubelet does not use (a typo, kubelet's --cgroup-root not
// carried over) finds no pod cgroup: safe, as nothing is done, but it must
// not be silent while pods run, as a wrong kubelet_root is not. It is said
// once while it lasts, naming the key, and said over when the root is
// there.
func TestACgroupsRootInNoHierarchyIsSaidWhilePodsRun(t *testing.T) {
	live := testUID(80)
	for _, tc := range []struct {
		name      string
		root      string
		sandboxes []cri.Sandbox
		want      bool
	}{
		{"a typo, with a Ready sandbox", "kubepod", []cri.Sandbox{{ID: "s1", UID: live, Ready: true, CreatedAt: now, Labels: kubeletLabels(live)}}, true},
		{"the right root", "kubepods", []cri.Sandbox{{ID: "s1", UID: live, Ready: true, CreatedAt: now, Labels: kubeletLabels(live)}}, false},
		{"a typo on a node with no Ready sandbox (kubelet may not have started)", "kubepod", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cg := fakeCgroups(t, live)
			cg.Root = tc.root
			rt := &fakeRuntime{}
			log, buf := testLogger()
			obs := &partsObserver{}
			loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: podDirs(t, live), Cgroups: cg, Observer: obs,
				Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir()}}, log)
			for i := range 3 {
				rt.set(cri.Snapshot{TakenAt: now.Add(time.Duration(i) * time.Minute), Sandboxes: tc.sandboxes}, nil)
				r := loop.Pass(context.Background())
				// once and report say it too (NOT LOOKED FOR; once exits 1).
				if notLooked := slices.ContainsFunc(r.NotLookedFor, func(s string) bool { return strings.HasPrefix(s, "pod cgroups (") }); notLooked != tc.want {
					t.Fatalf("pass %d: pod cgroups not looked for: %v, want %v (NotLookedFor %q)", i, notLooked, tc.want, r.NotLookedFor)
				}
			}
			said := strings.Count(buf.String(), "no pod cgroup can be found where cgroups.root says")
			if tc.want != (said == 1) || said > 1 || (tc.want && !strings.Contains(buf.String(), `cgroups.root \"kubepod\"`)) {
				t.Fatalf("said %d time(s) in 3 passes, want it said once: %v:\n%s", said, tc.want, buf.String())
			}
			if degraded, told := obs.told(PartCgroups); !told || degraded != tc.want {
				t.Fatalf("degraded{part=%q} = %v (told: %v), want %v", PartCgroups, degraded, told, tc.want)
			}
			if !tc.want {
				return
			}
			if err := os.MkdirAll(filepath.Join(cg.Mountpoint, "memory", tc.root), 0o755); err != nil {
				t.Fatal(err)
			}
			rt.set(cri.Snapshot{TakenAt: now.Add(3 * time.Minute), Sandboxes: tc.sandboxes}, nil)
			if r := loop.Pass(context.Background()); len(r.NotLookedFor) > 0 {
				t.Fatalf("with the root found: NotLookedFor %q", r.NotLookedFor)
			}
			if degraded, _ := obs.told(PartCgroups); degraded || !strings.Contains(buf.String(), "cgroups.root is found again") {
				t.Fatalf("the root made did not end the error (degraded: %v):\n%s", degraded, buf.String())
			}
		})
	}
}
