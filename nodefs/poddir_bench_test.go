package nodefs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkInspectPodDirWithAFullEmptyDir: a pod dir whose emptyDir was
// never torn down, holding NRIHK_BENCH_FILES (100,000) files. It is
// inspected every pass while the pod is a candidate, and again right
// before a step: past the leftovers it lists, its cost must not grow with
// the files.
func BenchmarkInspectPodDirWithAFullEmptyDir(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("NRIHK_BENCH_FILES")); err == nil && v > 0 {
		n = v
	}
	root := b.TempDir()
	uid := "7b88465b-12fb-4fef-863c-3de5d3fab50d"
	vol := filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "cache")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(vol, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		d, err := InspectPodDir(context.Background(), root, uid)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Leftovers) != maxLeftovers || len(d.Blockers) == 0 {
			b.Fatalf("%d leftovers listed, blockers %q: want %d, and the removal blocked", len(d.Leftovers), d.Blockers, maxLeftovers)
		}
	}
}

// BenchmarkInspectCandidatePodDirs: a pass inspects every candidate pod dir
// (pods with nothing listed; orphaned dirs kept by a blocker stay
// candidates for ever). Reading the mount table for each cost candidates ×
// mounts; a PodDirInspector reads it once. 200 candidates on a node with
// NRIHK_BENCH_MOUNTS (default 2,000) bind mounts elsewhere.
func BenchmarkInspectCandidatePodDirs(b *testing.B) {
	mounts := 2000
	if v, err := strconv.Atoi(os.Getenv("NRIHK_BENCH_MOUNTS")); err == nil && v >= 0 {
		mounts = v
	}
	base := b.TempDir()
	src := filepath.Join(base, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range mounts {
		dst := filepath.Join(base, "m"+strconv.Itoa(i))
		if err := os.Mkdir(dst, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			b.Skipf("cannot bind mount (%v): the table would not grow", err)
		}
		b.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
	}
	root := filepath.Join(base, "kubelet")
	var uids []string
	for i := range 200 {
		uid := fmt.Sprintf("%08x-12fb-4fef-863c-3de5d3fab50d", i)
		if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "cache"), 0o755); err != nil {
			b.Fatal(err)
		}
		uids = append(uids, uid)
	}
	ctx := context.Background()
	check := func(d PodDir, err error) {
		if err != nil || len(d.VolumeDirs) != 1 {
			b.Fatalf("inspected %+v, %v: want one volume dir", d, err)
		}
	}
	b.Run("table-read-per-dir", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, uid := range uids {
				check(InspectPodDir(ctx, root, uid))
			}
		}
	})
	b.Run("table-read-once", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			in, err := NewPodDirInspector(root)
			if err != nil {
				b.Fatal(err)
			}
			for _, uid := range uids {
				check(in.Inspect(ctx, uid))
			}
		}
	})
}
