package nodefs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
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
