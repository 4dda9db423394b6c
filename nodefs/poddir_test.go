package nodefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kubeletNode is a crafted kubelet root with its pods dir, and a directory
// outside it that must never be touched.
type kubeletNode struct {
	root, pods, outside string
}

func newKubeletNode(t *testing.T) kubeletNode {
	t.Helper()
	base := t.TempDir()
	n := kubeletNode{
		root:    filepath.Join(base, "kubelet"),
		pods:    filepath.Join(base, "kubelet", "pods"),
		outside: filepath.Join(base, "outside"),
	}
	mkdirAll(t, n.pods)
	mkdirAll(t, n.outside)
	return n
}

// Names in a pod dir, as kubelet lays them out.
const (
	emptyDirVol  = "volumes/kubernetes.io~empty-dir/cache"
	projectedVol = "volumes/kubernetes.io~projected/kube-api-access-x7k2p"
	csiVol       = "volumes/kubernetes.io~csi/pvc-1"
	fileSubpath  = "volume-subpaths/config/app/0"
	dirSubpath   = "volume-subpaths/config/app/1"
	termMsg      = "containers/app/abcd1234"
	pluginFile   = "plugins/kubernetes.io~empty-dir/cache/ready"
	etcHosts     = "etc-hosts"
	blockVol     = "volumeDevices/kubernetes.io~csi/blk-1"
)

// cleanOrphan lays out what kubelet leaves of a pod whose volumes were all
// unmounted and torn down: empty volume dirs, the subpath mount points, and
// the files kubelet removes with its one-file-system removal.
func cleanOrphan(t *testing.T, pod string) {
	t.Helper()
	mkdirAll(t, filepath.Join(pod, emptyDirVol))
	mkdirAll(t, filepath.Join(pod, projectedVol))
	mkdirAll(t, filepath.Join(pod, csiVol, "mount"))
	writeFile(t, filepath.Join(pod, fileSubpath), "") // a file subpath's mount point
	mkdirAll(t, filepath.Join(pod, dirSubpath))       // a directory subpath's
	writeFile(t, filepath.Join(pod, termMsg), "terminated")
	writeFile(t, filepath.Join(pod, pluginFile), "")
	writeFile(t, filepath.Join(pod, etcHosts), "127.0.0.1 localhost\n")
}

// minimalPod has no volumes at all.
func minimalPod(t *testing.T, pod string) {
	t.Helper()
	writeFile(t, filepath.Join(pod, termMsg), "terminated")
	writeFile(t, filepath.Join(pod, etcHosts), "127.0.0.1 localhost\n")
}

func joinAll(dir string, rels []string) []string {
	if len(rels) == 0 {
		return nil
	}
	out := make([]string, len(rels))
	for i, r := range rels {
		if r == "" {
			out[i] = dir
		} else {
			out[i] = dir + "/" + r
		}
	}
	return out
}

func sameStrings(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n") && len(a) == len(b)
}

func TestInspectPodDir(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		rule  string
		setup func(t *testing.T, n kubeletNode, pod string)
		// Paths relative to the pod dir ("" is the pod dir).
		volumeDirs, mountPoints, leftovers []string
		// One substring per blocker, in order.
		blockers     []string
		volumesExist bool
	}{
		{
			rule:  "a clean dir without volumes has nothing to report",
			setup: func(t *testing.T, n kubeletNode, pod string) { minimalPod(t, pod) },
		},
		{
			rule:         "empty volume dirs are listed and block nothing: they are rmdir'ed",
			setup:        func(t *testing.T, n kubeletNode, pod string) { cleanOrphan(t, pod) },
			volumeDirs:   []string{csiVol, emptyDirVol, projectedVol},
			volumesExist: true,
		},
		{
			rule: "a bind mount at a volume dir is a mount point and a blocker, and is not entered",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				cleanOrphan(t, pod)
				writeFile(t, filepath.Join(n.outside, "src", "data"), "keep")
				mkdirAll(t, filepath.Join(pod, "volumes/kubernetes.io~empty-dir/x"))
				mount(t, filepath.Join(n.outside, "src"), filepath.Join(pod, "volumes/kubernetes.io~empty-dir/x"), "")
			},
			volumeDirs:   []string{csiVol, emptyDirVol, "volumes/kubernetes.io~empty-dir/x", projectedVol},
			mountPoints:  []string{"volumes/kubernetes.io~empty-dir/x"},
			blockers:     []string{"volume kubernetes.io~empty-dir/x is a mount point"},
			volumesExist: true,
		},
		{
			rule: "a CSI volume mounted at <volume>/mount is a blocker",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				mkdirAll(t, filepath.Join(pod, csiVol, "mount"))
				mount(t, "tmpfs", filepath.Join(pod, csiVol, "mount"), "tmpfs")
				writeFile(t, filepath.Join(pod, csiVol, "mount", "data"), "keep")
			},
			volumeDirs:   []string{csiVol},
			mountPoints:  []string{csiVol + "/mount"},
			blockers:     []string{"volume kubernetes.io~csi/pvc-1/mount is a mount point"},
			volumesExist: true,
		},
		{
			rule: "a mount point outside volumes/ is a blocker too",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				minimalPod(t, pod)
				mount(t, "tmpfs", filepath.Join(pod, "containers", "app"), "tmpfs")
			},
			mountPoints:  []string{"containers/app"},
			blockers:     []string{"containers/app is a mount point"},
			volumesExist: true,
		},
		{
			rule: "a subpath entry still bind-mounted (a file) is a blocker",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				cleanOrphan(t, pod)
				writeFile(t, filepath.Join(n.outside, "file"), "keep")
				mount(t, filepath.Join(n.outside, "file"), filepath.Join(pod, fileSubpath), "")
			},
			volumeDirs:   []string{csiVol, emptyDirVol, projectedVol},
			mountPoints:  []string{fileSubpath},
			blockers:     []string{fileSubpath + " is a mount point"},
			volumesExist: true,
		},
		{
			rule: "a pod dir that is itself a mount point is a blocker and is not entered",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				writeFile(t, filepath.Join(n.outside, "src", csiVol, "vol_data.json"), "{}")
				mkdirAll(t, pod)
				mount(t, filepath.Join(n.outside, "src"), pod, "")
			},
			mountPoints:  []string{""},
			blockers:     []string{"the pod dir is a mount point"},
			volumesExist: true,
		},
		{
			rule: "a leftover CSI vol_data.json is a leftover and a blocker (kubernetes#105536)",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				minimalPod(t, pod)
				mkdirAll(t, filepath.Join(pod, csiVol, "mount"))
				writeFile(t, filepath.Join(pod, csiVol, "vol_data.json"), `{"driverName":"x"}`)
			},
			volumeDirs:   []string{csiVol},
			leftovers:    []string{csiVol + "/vol_data.json"},
			blockers:     []string{"leftover regular file " + csiVol + "/vol_data.json"},
			volumesExist: true,
		},
		{
			rule: "the content of a disk emptyDir that was never torn down is leftovers",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				writeFile(t, filepath.Join(pod, emptyDirVol, "a", "b", "data"), "precious")
			},
			volumeDirs:   []string{emptyDirVol},
			leftovers:    []string{emptyDirVol + "/a/b/data"},
			blockers:     []string{"leftover regular file " + emptyDirVol + "/a/b/data"},
			volumesExist: true,
		},
		{
			rule: "a symlink in volumes/ pointing outside the root is a leftover (rmdir cannot remove it) and is not followed",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				writeFile(t, filepath.Join(n.outside, "precious", "data"), "keep")
				symlink(t, filepath.Join(n.outside, "precious"), filepath.Join(pod, "volumes/kubernetes.io~empty-dir/link"))
			},
			leftovers:    []string{"volumes/kubernetes.io~empty-dir/link"},
			blockers:     []string{"leftover symlink volumes/kubernetes.io~empty-dir/link"},
			volumesExist: true,
		},
		{
			rule: "a symlink at volumes/<plugin> is a leftover, never listed through (kubelet would follow it)",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				writeFile(t, filepath.Join(n.outside, "plugin", "pvc-1", "vol_data.json"), "{}")
				symlink(t, filepath.Join(n.outside, "plugin"), filepath.Join(pod, "volumes/kubernetes.io~csi"))
			},
			leftovers:    []string{"volumes/kubernetes.io~csi"},
			blockers:     []string{"leftover symlink volumes/kubernetes.io~csi"},
			volumesExist: true,
		},
		{
			rule: "volumes/ that is not a directory is a leftover",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				writeFile(t, filepath.Join(pod, "volumes"), "")
			},
			leftovers:    []string{"volumes"},
			blockers:     []string{"leftover regular file volumes"},
			volumesExist: true,
		},
		{
			rule: "symlinks outside volumes/ pointing outside the root are not followed and block nothing: they are unlinked",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				writeFile(t, filepath.Join(n.outside, "precious", "data"), "keep")
				writeFile(t, filepath.Join(n.outside, "precious", "vol_data.json"), "keep")
				symlink(t, filepath.Join(n.outside, "precious"), filepath.Join(pod, "containers", "app", "link"))
				symlink(t, "../../../outside/precious", filepath.Join(pod, "plugins", "p"))
				symlink(t, filepath.Join(n.outside, "precious", "data"), filepath.Join(pod, etcHosts))
				symlink(t, filepath.Join(n.outside, "precious"), filepath.Join(pod, fileSubpath))
			},
		},
		{
			rule: "a symlink above the subpath entries is a blocker (kubelet would follow it)",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				mkdirAll(t, filepath.Join(n.outside, "subpaths", "app", "0"))
				symlink(t, filepath.Join(n.outside, "subpaths"), filepath.Join(pod, "volume-subpaths", "config"))
			},
			blockers: []string{"volume-subpaths/config is a symlink where kubelet expects a directory"},
		},
		{
			rule: "a non-empty subpath dir is a blocker: subpath entries are never removed recursively",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				cleanOrphan(t, pod)
				writeFile(t, filepath.Join(pod, dirSubpath, "data"), "keep")
			},
			volumeDirs:   []string{csiVol, emptyDirVol, projectedVol},
			blockers:     []string{dirSubpath + " is a non-empty directory"},
			volumesExist: true,
		},
		{
			rule: "volumeDevices entries are volume dirs and blockers: the block volume may still be mapped",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				minimalPod(t, pod)
				writeFile(t, filepath.Join(n.outside, "dev"), "")
				symlink(t, filepath.Join(n.outside, "dev"), filepath.Join(pod, blockVol))
			},
			volumeDirs:   []string{blockVol},
			blockers:     []string{"block volume kubernetes.io~csi/blk-1 may still be mapped"},
			volumesExist: true,
		},
		{
			rule: "a plugin entry in volumeDevices that is not a dir is a volume dir and a blocker too",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				minimalPod(t, pod)
				writeFile(t, filepath.Join(n.outside, "dev"), "")
				symlink(t, filepath.Join(n.outside, "dev"), filepath.Join(pod, "volumeDevices", "kubernetes.io~csi"))
			},
			volumeDirs:   []string{"volumeDevices/kubernetes.io~csi"},
			blockers:     []string{"block volume kubernetes.io~csi may still be mapped"},
			volumesExist: true,
		},
		{
			rule: "a pod dir that is itself a symlink is a blocker and is not followed",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				writeFile(t, filepath.Join(n.outside, "target", csiVol, "vol_data.json"), "{}")
				symlink(t, filepath.Join(n.outside, "target"), pod)
			},
			blockers: []string{"the pod dir is a symlink, not a directory"},
		},
		{
			rule: "a pod dir that is a regular file is a blocker",
			setup: func(t *testing.T, n kubeletNode, pod string) {
				writeFile(t, pod, "")
			},
			blockers: []string{"the pod dir is a regular file, not a directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			n := newKubeletNode(t)
			pod := filepath.Join(n.pods, testUUID)
			tt.setup(t, n, pod)
			d, err := InspectPodDir(ctx, n.root, testUUID)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", d)
			if d.UID != testUUID || d.Path != pod {
				t.Errorf("UID, Path = %q, %q; want %q, %q", d.UID, d.Path, testUUID, pod)
			}
			if want := joinAll(pod, tt.volumeDirs); !sameStrings(d.VolumeDirs, want) {
				t.Errorf("VolumeDirs = %q, want %q", d.VolumeDirs, want)
			}
			if want := joinAll(pod, tt.mountPoints); !sameStrings(d.MountPoints, want) {
				t.Errorf("MountPoints = %q, want %q", d.MountPoints, want)
			}
			if want := joinAll(pod, tt.leftovers); !sameStrings(d.Leftovers, want) {
				t.Errorf("Leftovers = %q, want %q", d.Leftovers, want)
			}
			if len(d.Blockers) != len(tt.blockers) {
				t.Errorf("Blockers = %q, want %d matching %q", d.Blockers, len(tt.blockers), tt.blockers)
			} else {
				for i, b := range tt.blockers {
					if !strings.Contains(d.Blockers[i], b) {
						t.Errorf("Blockers[%d] = %q, want it to contain %q", i, d.Blockers[i], b)
					}
				}
			}
			if got := PodVolumesExist(d); got != tt.volumesExist {
				t.Errorf("PodVolumesExist = %v, want %v", got, tt.volumesExist)
			}
		})
	}

	t.Run("leftovers are listed up to a bound, and the blockers say more exist", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		for i := 0; i < 3*maxLeftovers; i++ {
			writeFile(t, filepath.Join(pod, emptyDirVol, fmt.Sprintf("f%03d", i)), "")
		}
		mkdirAll(t, filepath.Join(pod, projectedVol))
		d, err := InspectPodDir(ctx, n.root, testUUID)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Leftovers) != maxLeftovers {
			t.Errorf("%d leftovers listed, want %d", len(d.Leftovers), maxLeftovers)
		}
		if want := joinAll(pod, []string{emptyDirVol, projectedVol}); !sameStrings(d.VolumeDirs, want) {
			t.Errorf("VolumeDirs = %q, want %q: volume dirs are counted past the bound", d.VolumeDirs, want)
		}
		if last := d.Blockers[len(d.Blockers)-1]; !strings.Contains(last, "more leftovers") {
			t.Errorf("last blocker = %q, want it to say more leftovers exist", last)
		}
	})

	t.Run("past the bound, a volume is read no further, and a mount in it is still a blocker", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		// More than one batch of names (readBatch), every one a leftover;
		// the mount sorts after them.
		for i := 0; i < readBatch+maxLeftovers; i++ {
			writeFile(t, filepath.Join(pod, emptyDirVol, fmt.Sprintf("f%05d", i)), "")
		}
		mnt := filepath.Join(pod, emptyDirVol, "zz", "mnt")
		mkdirAll(t, mnt)
		mount(t, "tmpfs", mnt, "tmpfs")
		d, err := InspectPodDir(ctx, n.root, testUUID)
		if err != nil {
			t.Fatal(err)
		}
		// Which 16: the first by name of the batch read first, in the
		// directory's own order (a hash order on ext4).
		if len(d.Leftovers) != maxLeftovers || !slices.IsSorted(d.Leftovers) {
			t.Errorf("leftovers %q, want %d in name order", d.Leftovers, maxLeftovers)
		}
		if !sameStrings(d.MountPoints, []string{mnt}) || !strings.Contains(d.Blockers[0], "is a mount point") {
			t.Errorf("MountPoints = %q, Blockers = %q; want %q, a blocker", d.MountPoints, d.Blockers, mnt)
		}
	})

	t.Run("a mount is found when the kubelet root is reached through a symlink", func(t *testing.T) {
		n := newKubeletNode(t)
		viaLink := filepath.Join(filepath.Dir(n.root), "kubelet-link")
		symlink(t, n.root, viaLink)
		mnt := filepath.Join(n.pods, testUUID, emptyDirVol)
		mkdirAll(t, mnt)
		mount(t, "tmpfs", mnt, "tmpfs")
		d, err := InspectPodDir(ctx, viaLink, testUUID)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{filepath.Join(viaLink, "pods", testUUID, emptyDirVol)}
		if !sameStrings(d.MountPoints, want) || len(d.Blockers) != 1 {
			t.Fatalf("MountPoints = %q, Blockers = %q; want %q and one blocker", d.MountPoints, d.Blockers, want)
		}
	})

	t.Run("a missing pod dir is an error for which fs.ErrNotExist holds, naming the path", func(t *testing.T) {
		n := newKubeletNode(t)
		_, err := InspectPodDir(ctx, n.root, testUUID)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(n.pods, testUUID)) {
			t.Fatalf("err = %v, want ErrNotExist naming the pod dir", err)
		}
	})

	t.Run("a missing pods dir is an error for which fs.ErrNotExist holds", func(t *testing.T) {
		_, err := InspectPodDir(ctx, filepath.Join(t.TempDir(), "nope"), testUUID)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v, want ErrNotExist", err)
		}
	})

	t.Run("a cancelled context is an error", func(t *testing.T) {
		n := newKubeletNode(t)
		cleanOrphan(t, filepath.Join(n.pods, testUUID))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := InspectPodDir(cctx, n.root, testUUID); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})

	for _, tt := range []struct{ rule, root, uid string }{
		{"a uid that climbs out of the pods dir is refused", "", "../etc"},
		{"a uid of .. is refused", "", ".."},
		{"an empty uid is refused", "", ""},
		{"a uid with a path inside is refused", "", testUUID + "/volumes"},
		{"an uppercase uid is refused", "", strings.ToUpper(testUUID)},
		{"a uid kubelet does not create is refused", "", "not-a-uid"},
		{"a relative kubelet root is refused", "var/lib/kubelet", testUUID},
		{"an empty kubelet root is refused", "-", testUUID},
		{"a kubelet root with .. is refused", "/var/lib/../lib/kubelet", testUUID},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			n := newKubeletNode(t)
			writeFile(t, filepath.Join(n.root, "etc", "passwd"), "keep")
			root := n.root
			switch tt.root {
			case "":
			case "-":
				root = ""
			default:
				root = tt.root
			}
			d, err := InspectPodDir(ctx, root, tt.uid)
			t.Logf("err = %v", err)
			if err == nil {
				t.Fatalf("InspectPodDir(%q, %q) = %+v, want an error", root, tt.uid, d)
			}
			if root == n.root && !strings.Contains(err.Error(), n.pods+"/"+tt.uid) {
				t.Fatalf("err = %v, want it to name %s", err, n.pods+"/"+tt.uid)
			}
		})
	}
}

// removeAsInspected inspects the pod dir uid and removes it on that
// inspection, as the planner and the executor do.
func removeAsInspected(ctx context.Context, kubeletRoot, uid string) error {
	seen, _ := InspectPodDir(ctx, kubeletRoot, uid)
	return RemoveOrphanedPodDir(ctx, kubeletRoot, seen)
}

func TestRemoveOrphanedPodDir(t *testing.T) {
	ctx := context.Background()

	t.Run("a clean orphan is fully removed; the pods dir stays", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		writeFile(t, filepath.Join(pod, "unknown-entry", "f"), "") // kubelet removes anything
		other := filepath.Join(n.pods, testMD5UID, termMsg)
		writeFile(t, other, "")
		if err := removeAsInspected(ctx, n.root, testUUID); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, pod)
		mustExist(t, n.pods, other)
	})

	t.Run("a static pod's orphan (md5 UID) is removed", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testMD5UID)
		cleanOrphan(t, pod)
		if err := removeAsInspected(ctx, n.root, testMD5UID); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, pod)
	})

	t.Run("symlinks inside pointing outside the root are unlinked; their targets survive", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		precious := filepath.Join(n.outside, "precious")
		writeFile(t, filepath.Join(precious, "data"), "keep")
		mkdirAll(t, filepath.Join(precious, "empty"))
		writeFile(t, filepath.Join(n.outside, "file"), "keep")
		symlink(t, precious, filepath.Join(pod, "containers", "app", "link"))
		symlink(t, "../../../../outside/precious", filepath.Join(pod, "plugins", "p"))
		symlink(t, filepath.Join(n.outside, "file"), filepath.Join(pod, "etc-hosts2"))
		symlink(t, precious, filepath.Join(pod, "volume-subpaths", "config", "app", "2"))
		symlink(t, filepath.Join(precious, "empty"), filepath.Join(pod, "volume-subpaths", "config", "app", "3"))
		symlink(t, precious, filepath.Join(pod, "volumeDevices"))
		if err := removeAsInspected(ctx, n.root, testUUID); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, pod)
		mustExist(t, filepath.Join(precious, "data"), filepath.Join(precious, "empty"), filepath.Join(n.outside, "file"))
	})

	t.Run("a missing pod dir is success", func(t *testing.T) {
		n := newKubeletNode(t)
		if err := removeAsInspected(ctx, n.root, testUUID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a missing pods dir is success", func(t *testing.T) {
		if err := removeAsInspected(ctx, filepath.Join(t.TempDir(), "nope"), testUUID); err != nil {
			t.Fatal(err)
		}
	})

	// Every refusal removes nothing at all: keep lists the paths (relative
	// to the pod dir unless absolute) that must survive.
	refusals := []struct {
		rule  string
		setup func(t *testing.T, n kubeletNode, pod string) (name string, keep []string)
	}{
		{"a bind mount inside is refused; the mounted content and the whole dir survive", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			writeFile(t, filepath.Join(n.outside, "src", "data"), "keep")
			mnt := filepath.Join(pod, "volumes/kubernetes.io~empty-dir/x")
			mkdirAll(t, mnt)
			mount(t, filepath.Join(n.outside, "src"), mnt, "")
			return "volume kubernetes.io~empty-dir/x is a mount point", []string{
				filepath.Join(n.outside, "src", "data"), "volumes/kubernetes.io~empty-dir/x/data",
				emptyDirVol, projectedVol, csiVol + "/mount", fileSubpath, dirSubpath, termMsg, pluginFile, etcHosts,
			}
		}},
		{"another file system inside, outside volumes/, is refused", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			mnt := filepath.Join(pod, "plugins", "tmp")
			mkdirAll(t, mnt)
			mount(t, "tmpfs", mnt, "tmpfs")
			writeFile(t, filepath.Join(mnt, "data"), "keep")
			return "plugins/tmp is a mount point", []string{"plugins/tmp/data", emptyDirVol, termMsg, etcHosts}
		}},
		{"a bind-mounted subpath file is refused", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			writeFile(t, filepath.Join(n.outside, "file"), "keep")
			mount(t, filepath.Join(n.outside, "file"), filepath.Join(pod, fileSubpath), "")
			return fileSubpath + " is a mount point", []string{filepath.Join(n.outside, "file"), fileSubpath, emptyDirVol, termMsg}
		}},
		{"a pod dir that is itself a bind mount is refused", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			writeFile(t, filepath.Join(n.outside, "src", termMsg), "keep")
			mkdirAll(t, pod)
			mount(t, filepath.Join(n.outside, "src"), pod, "")
			return "the pod dir is a mount point", []string{filepath.Join(n.outside, "src", termMsg)}
		}},
		{"a leftover vol_data.json is refused; the file survives", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			writeFile(t, filepath.Join(pod, csiVol, "vol_data.json"), `{"driverName":"x"}`)
			return csiVol + "/vol_data.json", []string{csiVol + "/vol_data.json", csiVol + "/mount", emptyDirVol, termMsg, etcHosts}
		}},
		{"the content of a disk emptyDir never torn down is refused; it survives", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			writeFile(t, filepath.Join(pod, emptyDirVol, "db", "data"), "precious")
			return emptyDirVol + "/db/data", []string{emptyDirVol + "/db/data", termMsg}
		}},
		{"a symlink in volumes/ is refused; the link and its target survive", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			writeFile(t, filepath.Join(n.outside, "precious", "data"), "keep")
			symlink(t, filepath.Join(n.outside, "precious"), filepath.Join(pod, "volumes/kubernetes.io~empty-dir/link"))
			return "volumes/kubernetes.io~empty-dir/link", []string{"volumes/kubernetes.io~empty-dir/link", filepath.Join(n.outside, "precious", "data"), termMsg}
		}},
		{"a non-empty subpath dir is refused; its content survives", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			writeFile(t, filepath.Join(pod, dirSubpath, "data"), "keep")
			return dirSubpath + " is a non-empty directory", []string{dirSubpath + "/data", fileSubpath, emptyDirVol, termMsg}
		}},
		{"a symlink above the subpath entries is refused; its target survives", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			mkdirAll(t, filepath.Join(n.outside, "subpaths", "app", "0"))
			symlink(t, filepath.Join(n.outside, "subpaths"), filepath.Join(pod, "volume-subpaths", "other"))
			return "volume-subpaths/other is a symlink", []string{filepath.Join(n.outside, "subpaths", "app", "0"), termMsg}
		}},
		{"a pod dir that is itself a symlink is refused; the link and its target survive", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			target := filepath.Join(n.outside, "target")
			cleanOrphan(t, target)
			symlink(t, target, pod)
			return "the pod dir is a symlink", []string{"", filepath.Join(target, termMsg), filepath.Join(target, emptyDirVol)}
		}},
		{"a pod dir that is a regular file is refused", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			writeFile(t, pod, "keep")
			return "the pod dir is a regular file", []string{""}
		}},
		// kubelet maps a block volume with a symlink here and a bind mount
		// of the device named by the pod UID in its global map path, outside
		// the pod dir; its unmap removes this link first. Only kubelet's
		// volume manager sees the mapping: with the link gone, a kubelet
		// restart can no longer reconstruct the volume, and it is never
		// unmapped, unpublished or detached.
		{"a block volume entry is refused: the volume may still be mapped", func(t *testing.T, n kubeletNode, pod string) (string, []string) {
			cleanOrphan(t, pod)
			writeFile(t, filepath.Join(n.outside, "dev"), "")
			symlink(t, filepath.Join(n.outside, "dev"), filepath.Join(pod, blockVol))
			return "block volume kubernetes.io~csi/blk-1", []string{blockVol, filepath.Join(n.outside, "dev"), termMsg, emptyDirVol}
		}},
	}
	for _, tt := range refusals {
		t.Run(tt.rule, func(t *testing.T) {
			n := newKubeletNode(t)
			pod := filepath.Join(n.pods, testUUID)
			name, keep := tt.setup(t, n, pod)
			err := removeAsInspected(ctx, n.root, testUUID)
			wantRefused(t, err, pod)
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("err = %v, want it to name %q", err, name)
			}
			for _, k := range keep {
				if !filepath.IsAbs(k) {
					k = filepath.Join(pod, k)
				}
				mustExist(t, k)
			}
		})
	}

	for _, tt := range []struct{ rule, uid string }{
		{"a uid like ../etc is refused", "../etc"},
		{"a uid of .. (the kubelet root) is refused", ".."},
		{"a uid of . (the pods dir) is refused", "."},
		{"an empty uid (the pods dir) is refused", ""},
		{"a uid with a path below it is refused", testUUID + "/containers"},
		{"a uid kubelet does not create is refused", "my-precious-dir"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			n := newKubeletNode(t)
			writeFile(t, filepath.Join(n.root, "etc", "passwd"), "keep")
			writeFile(t, filepath.Join(n.pods, "my-precious-dir", "f"), "keep")
			cleanOrphan(t, filepath.Join(n.pods, testUUID))
			err := removeAsInspected(ctx, n.root, tt.uid)
			wantRefused(t, err, n.pods+"/"+tt.uid)
			mustExist(t, filepath.Join(n.root, "etc", "passwd"), filepath.Join(n.pods, "my-precious-dir", "f"),
				filepath.Join(n.pods, testUUID, termMsg), filepath.Join(n.pods, testUUID, emptyDirVol))
		})
	}

	t.Run("a relative kubelet root is an error", func(t *testing.T) {
		if err := removeAsInspected(ctx, "var/lib/kubelet", testUUID); err == nil {
			t.Fatal("want an error")
		}
	})

	t.Run("a mount found through a symlinked kubelet root is refused", func(t *testing.T) {
		n := newKubeletNode(t)
		viaLink := filepath.Join(filepath.Dir(n.root), "kubelet-link")
		symlink(t, n.root, viaLink)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		mount(t, "tmpfs", filepath.Join(pod, emptyDirVol), "tmpfs")
		writeFile(t, filepath.Join(pod, emptyDirVol, "data"), "keep")
		err := removeAsInspected(ctx, viaLink, testUUID)
		wantRefused(t, err, filepath.Join(viaLink, "pods", testUUID))
		mustExist(t, filepath.Join(pod, emptyDirVol, "data"), filepath.Join(pod, termMsg))
	})

	t.Run("a cancelled context removes nothing", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := removeAsInspected(cctx, n.root, testUUID); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		mustExist(t, filepath.Join(pod, termMsg), filepath.Join(pod, emptyDirVol))
	})
}

// openTestPods opens n's pods dir as the removal steps see it.
func openTestPods(t *testing.T, n kubeletNode) podsRoot {
	t.Helper()
	p, _, err := openPods(n.root, testUUID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

// TestPodDirStepsWithoutTheInspection checks each removal step on its own,
// as if a file or mount appeared after the inspection: the step itself
// refuses, and removes only what its rule allows.
func TestPodDirStepsWithoutTheInspection(t *testing.T) {
	ctx := context.Background()

	t.Run("the rmdir-only walk refuses a file, keeps it, and removes the empty dirs around it", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		writeFile(t, filepath.Join(pod, csiVol, "vol_data.json"), "{}")
		p := openTestPods(t, n)
		dir, fd, err := walker{ctx: ctx, root: p.info}.openChecked(p.fd, testUUID, pod)
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		err = walker{ctx: ctx, root: p.info}.rmdirTree(fd, "volumes", pod+"/volumes")
		wantRefused(t, err, filepath.Join(pod, csiVol, "vol_data.json"))
		mustExist(t, filepath.Join(pod, csiVol, "vol_data.json"))
		mustBeGone(t, filepath.Join(pod, csiVol, "mount"), filepath.Join(pod, emptyDirVol), filepath.Join(pod, projectedVol))
	})

	for _, tt := range []struct{ rule, fstype string }{
		{"the rmdir-only walk tells a same-device bind mount apart by its mount ID", ""},
		{"the rmdir-only walk tells another file system apart by its device", "tmpfs"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			n := newKubeletNode(t)
			pod := filepath.Join(n.pods, testUUID)
			cleanOrphan(t, pod)
			mnt := filepath.Join(pod, "volumes/kubernetes.io~empty-dir/x")
			mkdirAll(t, mnt)
			src := filepath.Join(n.outside, "src")
			mkdirAll(t, src)
			if tt.fstype != "" {
				src = "tmpfs"
			}
			mount(t, src, mnt, tt.fstype)
			mkdirAll(t, filepath.Join(mnt, "empty"))
			p := openTestPods(t, n)
			w := walker{ctx: ctx, root: p.info}
			dir, fd, err := w.openChecked(p.fd, testUUID, pod)
			if err != nil {
				t.Fatal(err)
			}
			defer dir.Close()
			wantRefused(t, w.rmdirTree(fd, "volumes", pod+"/volumes"), mnt)
			mustExist(t, filepath.Join(mnt, "empty")) // not even an empty dir is removed across a mount
			mustBeGone(t, filepath.Join(pod, emptyDirVol))
		})
	}

	t.Run("subpath entries get a plain remove: a non-empty dir is refused, the rest removed", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		writeFile(t, filepath.Join(pod, "volume-subpaths/config/app/2/data"), "keep")
		p := openTestPods(t, n)
		w := walker{ctx: ctx, root: p.info}
		dir, fd, err := w.openChecked(p.fd, testUUID, pod)
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		err = w.removeSubpathEntries(fd, "volume-subpaths", pod+"/volume-subpaths", 0)
		wantRefused(t, err, filepath.Join(pod, "volume-subpaths/config/app/2"))
		mustExist(t, filepath.Join(pod, "volume-subpaths/config/app/2/data"))
		mustBeGone(t, filepath.Join(pod, fileSubpath), filepath.Join(pod, dirSubpath))
	})

	t.Run("a mount appearing after the inspection stops the removal at the rmdir-only step", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		mount(t, "tmpfs", filepath.Join(pod, emptyDirVol), "tmpfs")
		p := openTestPods(t, n)
		err := p.removePodDir(ctx, testUUID, pod, nil)
		wantRefused(t, err, filepath.Join(pod, emptyDirVol))
		// kubelet's order: a volumes/ error stops before anything else.
		mustExist(t, filepath.Join(pod, termMsg), filepath.Join(pod, fileSubpath), filepath.Join(pod, etcHosts))
	})
}

// TestRemoveOrphanedPodDirRacingSymlinkSwap: while a pod dir is being
// removed, another goroutine keeps swapping the pod dir and a volume dir in
// it for symlinks to directories outside the root. Whatever the removal
// returns, nothing outside is removed, not even an empty directory.
func TestRemoveOrphanedPodDirRacingSymlinkSwap(t *testing.T) {
	n := newKubeletNode(t)
	victim := filepath.Join(n.outside, "victim")
	for i := 0; i < 10; i++ {
		writeFile(t, filepath.Join(victim, termMsg+strings.Repeat("x", i)), "keep")
		mkdirAll(t, filepath.Join(victim, emptyDirVol+strings.Repeat("x", i)))
	}
	pod := filepath.Join(n.pods, testUUID)
	ctx := context.Background()
	for round := 0; round < 100; round++ {
		cleanOrphan(t, pod)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tmp := pod + ".tmp"
			vol := filepath.Join(pod, "volumes", "kubernetes.io~empty-dir")
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Errors are expected: the removal is deleting the same names.
				if i%2 == 0 {
					_ = os.Rename(pod, tmp)
					_ = os.Symlink(victim, pod)
					_ = os.Remove(pod)
					_ = os.Rename(tmp, pod)
				} else {
					_ = os.Rename(vol, vol+".tmp")
					_ = os.Symlink(filepath.Join(victim, "volumes", "kubernetes.io~empty-dir"), vol)
					_ = os.Remove(vol)
					_ = os.Rename(vol+".tmp", vol)
				}
			}
		}()
		_ = removeAsInspected(ctx, n.root, testUUID)
		close(stop)
		<-done
		for i := 0; i < 10; i++ {
			mustExist(t, filepath.Join(victim, termMsg+strings.Repeat("x", i)), filepath.Join(victim, emptyDirVol+strings.Repeat("x", i)))
		}
		if t.Failed() {
			t.Fatalf("round %d: removal reached outside the root", round)
		}
		if err := os.RemoveAll(pod); err != nil { // reset for the next round
			t.Fatal(err)
		}
		_ = os.RemoveAll(pod + ".tmp")
	}
}

// chainOfDirs makes depth nested directories named "d" below dir, the way
// a workload can in its disk emptyDir in a few seconds.
func chainOfDirs(t *testing.T, dir string, depth int) {
	t.Helper()
	mkdirAll(t, dir)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < depth; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			unix.Close(fd)
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
}

// TestADeepTreeInVolumesIsABlockerNotAWalk: a disk emptyDir is the
// workload's to fill, and the inspection runs every pass for every pod dir
// with nothing listed. Walked to its bottom, a chain of empty directories
// costs one open descriptor per level and memory that grows with the square
// of its depth (every level keeps its path): 10,000 levels took more than
// the DaemonSet's 256 MiB limit, so the plugin was OOM-killed at every
// pass. Past a bound the inspection stops and reports a blocker instead:
// kubelet has not torn the volume down, whatever is below.
func TestADeepTreeInVolumesIsABlockerNotAWalk(t *testing.T) {
	ctx := context.Background()
	n := newKubeletNode(t)
	pod := filepath.Join(n.pods, testUUID)
	minimalPod(t, pod)
	const depth = 6000
	chainOfDirs(t, filepath.Join(pod, emptyDirVol), depth)
	// Deep enough to be below the bound, short enough for a path.
	deep := filepath.Join(pod, emptyDirVol) + strings.Repeat("/d", 1000)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	d, err := InspectPodDir(ctx, n.root, testUUID)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("inspecting a %d-level chain allocated %d MiB, want it bounded whatever the depth", depth, alloc>>20)
	}
	if !PodVolumesExist(d) || !strings.Contains(strings.Join(d.Blockers, "; "), "levels below volumes/") {
		t.Fatalf("Blockers = %q, volumes exist = %v; want a blocker for the tree too deep to inspect", d.Blockers, PodVolumesExist(d))
	}
	wantRefused(t, removeAsInspected(ctx, n.root, testUUID), pod)
	mustExist(t, deep, filepath.Join(pod, termMsg))
}

// TestIdentitiesTellADirMadeAgainApart: a volume dir, a leftover where a
// volume dir belongs or the pod dir removed and made again under the same
// name has another identity, even where the file system hands the same
// inode number out again (ext4 does, at once); one left alone keeps its
// identity. A leftover inside a volume dir (the workload's file, which a
// process left in the pod cgroup may rewrite at any time) has none.
func TestIdentitiesTellADirMadeAgainApart(t *testing.T) {
	ctx := context.Background()
	n := newKubeletNode(t)
	pod := filepath.Join(n.pods, testUUID)
	cleanOrphan(t, pod)
	leftover := filepath.Join(pod, "volumes", "kubernetes.io~secret", "odd")
	writeFile(t, leftover, "{}")
	inside := filepath.Join(pod, csiVol, "vol_data.json")
	writeFile(t, inside, "{}")
	before, err := InspectPodDir(ctx, n.root, testUUID)
	if err != nil {
		t.Fatal(err)
	}
	x := filepath.Join(pod, emptyDirVol)
	for _, p := range []string{pod, x, leftover} {
		if before.Identities[p] == "" {
			t.Fatalf("no identity for %s: %q", p, before.Identities)
		}
	}
	if id, ok := before.Identities[inside]; ok {
		t.Errorf("%s, inside a volume dir, has identity %s: the workload's files are not kubelet's", inside, id)
	}
	time.Sleep(10 * time.Millisecond) // a birth time apart, whatever the clock's grain
	if err := os.Remove(x); err != nil {
		t.Fatal(err)
	}
	mkdirAll(t, x)
	if err := os.Remove(leftover); err != nil {
		t.Fatal(err)
	}
	writeFile(t, leftover, "{}")
	after, err := InspectPodDir(ctx, n.root, testUUID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s, then %s", x, before.Identities[x], after.Identities[x])
	for _, p := range []string{x, leftover} {
		if after.Identities[p] == before.Identities[p] {
			t.Errorf("%s made again has the identity it had: %s", p, after.Identities[p])
		}
	}
	for _, p := range []string{pod, filepath.Join(pod, projectedVol)} {
		if after.Identities[p] != before.Identities[p] {
			t.Errorf("%s, left alone, changed identity: %s, then %s", p, before.Identities[p], after.Identities[p])
		}
	}
}

// TestIdentitiesHoldOnAnOverlayThatNumbersDirsAfresh: on an overlayfs
// whose layers are on different file systems and that cannot map their
// inode numbers into one space (xino off, the default build), a directory's
// st_ino is the overlay inode's own number, handed out afresh each time the
// kernel instantiates it again (after the inode was evicted from the cache:
// memory pressure, drop_caches; here, a remount): "the non persistent
// overlay st_ino for directories" (fs/overlayfs/inode.c). The dirs were
// not made again: their identities must not change, or every torn-down
// pod on such a node has its mark dismissed as a re-add and is never
// reclaimed. Their birth time (the upper layer's) does not change.
func TestIdentitiesHoldOnAnOverlayThatNumbersDirsAfresh(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	lower, upper, work, root := filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "kubelet")
	for _, d := range []string{lower, upper, work, root} {
		mkdirAll(t, d)
	}
	mount(t, "tmpfs", lower, "tmpfs") // another file system than upper's
	mkdirAll(t, filepath.Join(lower, "pods"))
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + ",xino=off"
	overlay := func() {
		if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
			t.Skipf("cannot mount an overlay here: %v", err)
		}
	}
	overlay()
	pod := filepath.Join(root, "pods", testUUID)
	cleanOrphan(t, pod)
	before, err := InspectPodDir(ctx, root, testUUID)
	if err != nil {
		unix.Unmount(root, unix.MNT_DETACH)
		t.Fatal(err)
	}
	// The overlay's inodes instantiated again, as after their eviction.
	if err := unix.Unmount(root, 0); err != nil {
		t.Fatal(err)
	}
	overlay()
	defer unix.Unmount(root, unix.MNT_DETACH)
	after, err := InspectPodDir(ctx, root, testUUID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pod, filepath.Join(pod, emptyDirVol), filepath.Join(pod, projectedVol)} {
		if before.Identities[p] == "" {
			t.Fatalf("no identity for %s: %q", p, before.Identities)
		}
		if after.Identities[p] != before.Identities[p] {
			t.Errorf("%s, left alone, changed identity: %s, then %s", p, before.Identities[p], after.Identities[p])
		}
	}
}

// TestASubpathStepErrorStopsBeforeTheOneFilesystemRemoval: as in kubelet,
// an error removing the subpath entries stops the removal before the rest
// of the pod dir is removed recursively: a non-empty subpath entry that
// appeared after the inspection keeps what it holds.
func TestASubpathStepErrorStopsBeforeTheOneFilesystemRemoval(t *testing.T) {
	n := newKubeletNode(t)
	pod := filepath.Join(n.pods, testUUID)
	cleanOrphan(t, pod)
	writeFile(t, filepath.Join(pod, "volume-subpaths/config/app/2/data"), "keep")
	p := openTestPods(t, n)
	err := p.removePodDir(context.Background(), testUUID, pod, nil)
	wantRefused(t, err, filepath.Join(pod, "volume-subpaths/config/app/2"))
	mustExist(t, filepath.Join(pod, "volume-subpaths/config/app/2/data"), filepath.Join(pod, etcHosts))
}

// TestOnlyAnIdentityOfTheSameKindChangedIsMadeAgain: a path whose birth
// time or inode number changed between two looks was made again; one that
// had a birth time on one look and only an inode number on the other (a
// file system that reports btime on some looks only, as NFS may) tells
// nothing, and must not dismiss a mark for good.
func TestOnlyAnIdentityOfTheSameKindChangedIsMadeAgain(t *testing.T) {
	for _, tc := range []struct {
		name        string
		before, now string
		made        bool
	}{
		{"the same birth time", "born 1.000000001", "born 1.000000001", false},
		{"another birth time", "born 1.000000001", "born 2.000000002", true},
		{"another inode number, no birth time", "inode 7", "inode 9", true},
		{"a birth time, then none", "born 1.000000001", "inode 7", false},
		{"no birth time, then one", "inode 7", "born 1.000000001", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RemadeSince(map[string]string{"/x": tc.before}, map[string]string{"/x": tc.now, "/new": "born 3.0"})
			if (len(got) == 1) != tc.made || len(got) > 1 {
				t.Fatalf("RemadeSince = %q, want made again: %v (a path new to this look is growth, not made again)", got, tc.made)
			}
		})
	}
}

// TestTheRemovalTakesNothingItsDecisionDidNotSee: between the inspection a
// removal was decided on (the planner's, checked again right before) and
// the removal's own, kubelet may start setting a pod of that UID up again.
// What it made in that window refuses the whole removal, and nothing is
// removed: the removal only takes the pod dir the decision saw.
func TestTheRemovalTakesNothingItsDecisionDidNotSee(t *testing.T) {
	ctx := context.Background()
	const newVol = "volumes/kubernetes.io~configmap/config"
	for _, tt := range []struct {
		rule string
		// after changes the pod dir once it was inspected; it returns what
		// the refusal must name and the paths (relative to the pod dir)
		// that must survive.
		after func(t *testing.T, pod string) (name string, keep []string)
	}{
		{"an empty volume dir kubelet made since is refused, and kept", func(t *testing.T, pod string) (string, []string) {
			mkdirAll(t, filepath.Join(pod, newVol))
			return newVol + " (new volume dir)", []string{newVol, emptyDirVol, termMsg, etcHosts}
		}},
		{"a volume dir removed and made again since is refused, and kept", func(t *testing.T, pod string) (string, []string) {
			time.Sleep(10 * time.Millisecond) // a birth time apart
			if err := os.Remove(filepath.Join(pod, emptyDirVol)); err != nil {
				t.Fatal(err)
			}
			mkdirAll(t, filepath.Join(pod, emptyDirVol))
			return emptyDirVol + " (made again)", []string{emptyDirVol, projectedVol, termMsg}
		}},
		{"the pod dir removed and made again since is refused, and kept", func(t *testing.T, pod string) (string, []string) {
			time.Sleep(10 * time.Millisecond)
			if err := os.RemoveAll(pod); err != nil {
				t.Fatal(err)
			}
			cleanOrphan(t, pod)
			return pod + " (made again)", []string{emptyDirVol, projectedVol, termMsg, etcHosts}
		}},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			n := newKubeletNode(t)
			pod := filepath.Join(n.pods, testUUID)
			cleanOrphan(t, pod)
			seen, err := InspectPodDir(ctx, n.root, testUUID)
			if err != nil || len(seen.Blockers) > 0 {
				t.Fatalf("InspectPodDir = %+v, %v; want a clean orphan", seen, err)
			}
			name, keep := tt.after(t, pod)
			err = RemoveOrphanedPodDir(ctx, n.root, seen)
			wantRefused(t, err, pod)
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("err = %v, want it to name %q", err, name)
			}
			mustExist(t, joinAll(pod, keep)...)
		})
	}

	t.Run("what kubelet removed since is no change: the rest is removed", func(t *testing.T) {
		n := newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		seen, err := InspectPodDir(ctx, n.root, testUUID)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(pod, emptyDirVol)); err != nil {
			t.Fatal(err)
		}
		if err := RemoveOrphanedPodDir(ctx, n.root, seen); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, pod)
	})

	t.Run("a decision made on another pod dir's inspection is refused", func(t *testing.T) {
		n, other := newKubeletNode(t), newKubeletNode(t)
		pod := filepath.Join(n.pods, testUUID)
		cleanOrphan(t, pod)
		cleanOrphan(t, filepath.Join(other.pods, testUUID))
		seen, err := InspectPodDir(ctx, other.root, testUUID)
		if err != nil {
			t.Fatal(err)
		}
		wantRefused(t, RemoveOrphanedPodDir(ctx, n.root, seen), pod)
		mustExist(t, filepath.Join(pod, emptyDirVol), filepath.Join(pod, termMsg))
	})
}

// TestChangedSinceListsOnlyWhatWasNotSeen: growth is a path in a list the
// earlier look did not have it in, or an identity of the same kind
// that changed; what is gone since, or identified another way, is none.
func TestChangedSinceListsOnlyWhatWasNotSeen(t *testing.T) {
	seen := PodDir{
		VolumeDirs:  []string{"/p/volumes/a/x", "/p/volumes/a/m"},
		MountPoints: []string{"/p/volumes/a/m"},
		Identities:  map[string]string{"/p": "born 1.0", "/p/volumes/a/x": "inode 7", "/p/volumes/a/m": "born 2.0"},
	}
	for _, tt := range []struct {
		rule string
		now  PodDir
		want []string
	}{
		{"the same look is no change", seen, nil},
		{"what is gone since is no change", PodDir{Identities: map[string]string{"/p": "born 1.0"}}, nil},
		{"a new volume dir, also a mount point, is named as both",
			PodDir{VolumeDirs: []string{"/p/volumes/a/x", "/p/volumes/b/y"}, MountPoints: []string{"/p/volumes/b/y"}},
			[]string{"/p/volumes/b/y (new mount point)", "/p/volumes/b/y (new volume dir)"}},
		{"a new leftover", PodDir{Leftovers: []string{"/p/volumes/a/f"}}, []string{"/p/volumes/a/f (new leftover)"}},
		{"a new mount point on a volume dir seen", PodDir{VolumeDirs: []string{"/p/volumes/a/x"}, MountPoints: []string{"/p/volumes/a/x"}},
			[]string{"/p/volumes/a/x (new mount point)"}},
		{"the pod dir made again", PodDir{Identities: map[string]string{"/p": "born 3.0"}}, []string{"/p (made again)"}},
		{"an inode number changed", PodDir{VolumeDirs: []string{"/p/volumes/a/x"}, Identities: map[string]string{"/p/volumes/a/x": "inode 9"}},
			[]string{"/p/volumes/a/x (made again)"}},
		{"identified another way is no change", PodDir{Identities: map[string]string{"/p": "inode 4", "/p/volumes/a/x": "born 5.0"}}, nil},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			if got := tt.now.ChangedSince(seen); !sameStrings(got, tt.want) {
				t.Fatalf("ChangedSince = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestAPodDirInspectorFindsWhatInspectPodDirFinds: inspecting against one
// read of the mount table finds the same as reading it for each pod dir:
// mount points at and below the pod dir, in a pod dir of its own each.
func TestAPodDirInspectorFindsWhatInspectPodDirFinds(t *testing.T) {
	ctx := context.Background()
	n := newKubeletNode(t)
	mounted, clean := filepath.Join(n.pods, testUUID), filepath.Join(n.pods, testMD5UID)
	cleanOrphan(t, mounted)
	cleanOrphan(t, clean)
	mount(t, "tmpfs", filepath.Join(mounted, emptyDirVol), "tmpfs")
	in, err := NewPodDirInspector(n.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{testUUID, testMD5UID, testUUID} { // the table's filtering is kept between looks
		want, wantErr := InspectPodDir(ctx, n.root, uid)
		got, err := in.Inspect(ctx, uid)
		if !reflect.DeepEqual(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("%s: inspector found %+v, %v; InspectPodDir %+v, %v", uid, got, err, want, wantErr)
		}
	}
	if d, _ := in.Inspect(ctx, testUUID); len(d.MountPoints) != 1 || len(d.Blockers) == 0 {
		t.Fatalf("the mounted volume: mount points %q, blockers %q; want it found and blocking", d.MountPoints, d.Blockers)
	}
}

// TestWhatForbidsARemovalNewSinceTheDecisionIsAChange: the plan only
// proposes a pod dir that inspected clean, so whatever forbids its removal
// at the step (a volume mounted, a CSI file written, the pod dir made a
// link) came since: a pod of that UID being set up again, an abort (no
// backoff, no budget unit), not a failure. A pod dir the decision already
// saw blocked stays a plain refusal.
func TestWhatForbidsARemovalNewSinceTheDecisionIsAChange(t *testing.T) {
	for _, tt := range []struct {
		rule        string
		change      func(t *testing.T, pod string)
		seenBlocked bool
		wantChanged bool
	}{
		{"a CSI vol_data.json written since", func(t *testing.T, pod string) {
			writeFile(t, filepath.Join(pod, csiVol, "vol_data.json"), "{}")
		}, false, true},
		{"a volume mounted since", func(t *testing.T, pod string) {
			mount(t, "tmpfs", filepath.Join(pod, projectedVol), "tmpfs")
		}, false, true},
		{"a block volume entry made since", func(t *testing.T, pod string) {
			writeFile(t, filepath.Join(pod, blockVol), "")
		}, false, true},
		{"a blocker the decision saw", func(t *testing.T, pod string) {}, true, false},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			ctx := context.Background()
			n := newKubeletNode(t)
			pod := filepath.Join(n.pods, testUUID)
			cleanOrphan(t, pod)
			if tt.seenBlocked {
				writeFile(t, filepath.Join(pod, csiVol, "vol_data.json"), "{}")
			}
			seen, err := InspectPodDir(ctx, n.root, testUUID)
			if err != nil || (len(seen.Blockers) > 0) != tt.seenBlocked {
				t.Fatalf("the decision's inspection: blockers %q, %v", seen.Blockers, err)
			}
			tt.change(t, pod)
			err = RemoveOrphanedPodDir(ctx, n.root, seen)
			var r *RefusedError
			if !errors.As(err, &r) {
				t.Fatalf("RemoveOrphanedPodDir = %v, want a refusal", err)
			}
			if r.ChangedSinceDecided() != tt.wantChanged {
				t.Fatalf("refusal %q: changed since the decision %v, want %v", err, r.ChangedSinceDecided(), tt.wantChanged)
			}
			mustExist(t, filepath.Join(pod, etcHosts))
		})
	}
}

// TestTheRemovalWalkTakesNoVolumeDirItsInspectionDidNotSee: between the
// removal's own inspection and its walk (milliseconds), kubelet may make
// a volume dir of a pod of that UID set up again, or the pod dir anew; the
// walk refuses them as changed, and removes nothing of the pod dir (it
// removed the volume dirs sorted before the new one).
func TestTheRemovalWalkTakesNoVolumeDirItsInspectionDidNotSee(t *testing.T) {
	for _, tt := range []struct {
		rule   string
		change func(t *testing.T, pod string)
		mustBe string // a path the walk must leave
	}{
		{"a new volume dir", func(t *testing.T, pod string) {
			mkdirAll(t, filepath.Join(pod, "volumes/kubernetes.io~empty-dir/new"))
		}, "volumes/kubernetes.io~empty-dir/new"},
		{"a new volume dir of a new plugin", func(t *testing.T, pod string) {
			mkdirAll(t, filepath.Join(pod, "volumes/kubernetes.io~configmap/cfg"))
		}, "volumes/kubernetes.io~configmap/cfg"},
		{"a volume dir made again", func(t *testing.T, pod string) {
			rmdirAll(t, filepath.Join(pod, projectedVol))
			mkdirAll(t, filepath.Join(pod, projectedVol))
		}, projectedVol},
		{"the pod dir made again", func(t *testing.T, pod string) {
			if err := os.RemoveAll(pod); err != nil {
				t.Fatal(err)
			}
			cleanOrphan(t, pod)
		}, emptyDirVol},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			ctx := context.Background()
			pod, p, path, d := inspectedForRemoval(t)
			if d.Identities[path] == "" || d.Identities[filepath.Join(pod, projectedVol)] == "" {
				t.Fatalf("the inspection identified %v, not the pod dir and its volume dirs", d.Identities)
			}
			tt.change(t, pod)
			err := p.removePodDir(ctx, testUUID, path, d.Identities)
			var r *RefusedError
			if !errors.As(err, &r) || !r.ChangedSinceDecided() {
				t.Fatalf("removePodDir = %v, want a refusal as changed since", err)
			}
			// The whole removal is refused: nothing of the pod dir is
			// taken, the volume dirs kubelet is about to mount onto least.
			mustExist(t, filepath.Join(pod, tt.mustBe), pod, filepath.Join(pod, emptyDirVol), filepath.Join(pod, projectedVol),
				filepath.Join(pod, csiVol, "mount"), filepath.Join(pod, etcHosts), filepath.Join(pod, termMsg))
		})
	}
}

// TestAVolumeDirTheWalkFindsChangedStopsItPartway: a volume dir made in
// the microseconds between the removal's check of every volume dir and its
// walk is found by the walk, which stops there; the empty volume dirs it
// removed before are done, so the removal is no refusal (which says
// nothing was done, an abort) but a failure that says it stopped partway.
func TestAVolumeDirTheWalkFindsChangedStopsItPartway(t *testing.T) {
	ctx := context.Background()
	pod, p, path, d := inspectedForRemoval(t)
	const made = "volumes/kubernetes.io~nfs/share" // sorted after csi and empty-dir, before projected
	p.afterChecks = func() { mkdirAll(t, filepath.Join(pod, made)) }
	err := p.removePodDir(ctx, testUUID, path, d.Identities)
	var r *RefusedError
	if err == nil || errors.As(err, &r) || !strings.Contains(err.Error(), "stopped partway") || !strings.Contains(err.Error(), made) {
		t.Fatalf("removePodDir = %v, want a failure that stopped partway at %s, not a refusal", err, made)
	}
	mustBeGone(t, filepath.Join(pod, emptyDirVol), filepath.Join(pod, csiVol))
	mustExist(t, filepath.Join(pod, made), filepath.Join(pod, projectedVol), filepath.Join(pod, etcHosts))
}

// inspectedForRemoval lays out a clean orphan's pod dir and inspects it as
// RemoveOrphanedPodDir does before its walk: the pod dir's path, its open
// pods dir (closed at the test's end), and what the inspection found.
func inspectedForRemoval(t *testing.T) (pod string, p podsRoot, path string, d PodDir) {
	t.Helper()
	n := newKubeletNode(t)
	pod = filepath.Join(n.pods, testUUID)
	cleanOrphan(t, pod)
	p, path, err := openPods(n.root, testUUID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	d, _, err = p.inspect(context.Background(), testUUID)
	if err != nil || len(d.Blockers) > 0 {
		t.Fatalf("the removal's inspection: %q, %v", d.Blockers, err)
	}
	return pod, p, path, d
}

func rmdirAll(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
