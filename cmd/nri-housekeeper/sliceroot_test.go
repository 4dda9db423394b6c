package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
)

// TestACgroupfsRootInsideASliceWorksWithAuto: kubelet's cgroupfs driver
// with a root below a dir named *.slice (cgroups.root =
// "system.slice/kubepods"): driver auto cannot name it for systemd, picks
// cgroupfs, and finds the pod cgroups. Config check must not reject it.
func TestACgroupfsRootInsideASliceWorksWithAuto(t *testing.T) {
	mnt := t.TempDir()
	if err := os.WriteFile(filepath.Join(mnt, "cgroup.controllers"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pod := filepath.Join(mnt, "system.slice", "kubepods", "besteffort", "pod0b1e5e54-5b2b-4b0e-9f3a-1c2d3e4f5a6b")
	if err := os.MkdirAll(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	l := podcgroups.Discover(context.Background(), podcgroups.Options{Mountpoint: mnt, Root: "system.slice/kubepods", Driver: "auto"}, nil)
	if !l.Ready || len(l.Pods) != 1 {
		t.Fatalf("the test proves nothing: ready %v, pods %d, driver %s, err %v", l.Ready, len(l.Pods), l.Driver, l.Err)
	}
	if _, err := config.Parse([]byte("[cgroups]\nmountpoint = \""+mnt+"\"\nroot = \"system.slice/kubepods\"\n"), "test.toml"); err != nil {
		t.Errorf("driver auto finds the pod cgroup under this root (driver %s), but config check rejects it: %v", l.Driver, err)
	}
}
