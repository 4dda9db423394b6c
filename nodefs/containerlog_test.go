package nodefs

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRemoveContainerLogFiles(t *testing.T) {
	ctx := context.Background()
	// nginx's first instance (restart count 1) is removed; its pod has a
	// newer instance (2.log), a restart count that shares a prefix (10.log)
	// and a sidecar.
	setup := func(t *testing.T) (tree, string, ContainerLog) {
		tr := newTree(t)
		dir := filepath.Join(tr.podLogs, podDirName, "nginx")
		for _, n := range []string{"1.log", "1.log.20261124-101010", "1.log.20261124-090909.gz", "1.log.20261124-080808.tmp",
			"2.log", "10.log", "10.log.20261124-101010", "1.logfoo", "notes.txt"} {
			writeFile(t, filepath.Join(dir, n), n)
		}
		writeFile(t, filepath.Join(tr.podLogs, podDirName, "sidecar", "1.log"), "sidecar")
		return tr, dir, ContainerLog{Path: filepath.Join(dir, "1.log"), PodUID: testUUID, ContainerName: "nginx"}
	}

	t.Run("the log file and its rotations go, nothing else", func(t *testing.T) {
		tr, dir, l := setup(t)
		removed, err := tr.r.RemoveContainerLogFiles(ctx, l, []string{filepath.Join(dir, "2.log")})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{filepath.Join(dir, "1.log"), filepath.Join(dir, "1.log.20261124-080808.tmp"),
			filepath.Join(dir, "1.log.20261124-090909.gz"), filepath.Join(dir, "1.log.20261124-101010")}
		if !slices.Equal(removed, want) {
			t.Errorf("removed %v, want %v", removed, want)
		}
		mustBeGone(t, want...)
		mustExist(t, filepath.Join(dir, "2.log"), filepath.Join(dir, "10.log"), filepath.Join(dir, "10.log.20261124-101010"),
			filepath.Join(dir, "1.logfoo"), filepath.Join(dir, "notes.txt"), filepath.Join(tr.podLogs, podDirName, "sidecar", "1.log"))
	})

	t.Run("a file another listed container logs to is kept", func(t *testing.T) {
		tr, dir, l := setup(t)
		keep := []string{filepath.Join(dir, "1.log.20261124-101010"), dir + "/./1.log"}
		removed, err := tr.r.RemoveContainerLogFiles(ctx, l, keep)
		if err != nil {
			t.Fatal(err)
		}
		mustExist(t, filepath.Join(dir, "1.log"), filepath.Join(dir, "1.log.20261124-101010"))
		if len(removed) != 2 {
			t.Errorf("removed %v, want the two rotations no other container names", removed)
		}
	})

	t.Run("a file another listed container logs to by another name is kept", func(t *testing.T) {
		tr, dir, l := setup(t)
		alias := filepath.Join(tr.outside, "pods-alias")
		symlink(t, tr.podLogs, alias)
		keep := []string{filepath.Join(alias, podDirName, "nginx", "1.log")}
		removed, err := tr.r.RemoveContainerLogFiles(ctx, l, keep)
		if err != nil {
			t.Fatal(err)
		}
		mustExist(t, filepath.Join(dir, "1.log"))
		if len(removed) != 3 {
			t.Errorf("removed %v, want the three rotations", removed)
		}
	})

	t.Run("a missing file, container dir or pod log dir is success", func(t *testing.T) {
		tr, dir, l := setup(t)
		for _, p := range []string{filepath.Join(dir, "3.log"), filepath.Join(tr.podLogs, podDirName, "gone", "0.log"),
			filepath.Join(tr.podLogs, "default_other_"+testUUID, "nginx", "0.log")} {
			l.Path, l.ContainerName = p, filepath.Base(filepath.Dir(p))
			if removed, err := tr.r.RemoveContainerLogFiles(ctx, l, nil); err != nil || len(removed) > 0 {
				t.Errorf("%s: removed %v, %v; want nothing and no error", p, removed, err)
			}
		}
	})

	t.Run("a rotation that is not a regular file is refused, the rest still goes", func(t *testing.T) {
		tr, dir, l := setup(t)
		odd := filepath.Join(dir, "1.log.odd")
		symlink(t, filepath.Join(tr.outside, "target"), odd)
		writeFile(t, filepath.Join(tr.outside, "target"), "keep")
		removed, err := tr.r.RemoveContainerLogFiles(ctx, l, nil)
		wantRefused(t, err, odd)
		mustExist(t, odd, filepath.Join(tr.outside, "target"))
		if len(removed) != 4 {
			t.Errorf("removed %v, want the log file and its three rotations", removed)
		}
	})

	// A refused file sorts before one whose unlink fails (EPERM from an
	// immutable file stands in for EIO): the failure must come back as
	// one, not hidden behind the refusal, and both files are named.
	t.Run("a file that fails is an error even after a refusal, and every file left is named", func(t *testing.T) {
		tr, dir, l := setup(t)
		odd := filepath.Join(dir, "1.log.20261124-000000")
		symlink(t, filepath.Join(tr.outside, "target"), odd)
		failing := filepath.Join(dir, "1.log.20261124-090909.gz")
		immutable(t, failing)
		removed, err := tr.r.RemoveContainerLogFiles(ctx, l, nil)
		var refused *RefusedError
		if err == nil || errors.As(err, &refused) {
			t.Fatalf("err = %v; want a plain error (the container stays, and the removal is tried again)", err)
		}
		for _, p := range []string{odd, failing} {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("the error does not name %s: %v", p, err)
			}
		}
		mustExist(t, odd, failing)
		if len(removed) != 3 {
			t.Errorf("removed %v, want the log file and the two other rotations", removed)
		}
	})

	t.Run("another container's log path that cannot be examined is an error, not a refusal", func(t *testing.T) {
		tr, dir, l := setup(t)
		loop := filepath.Join(tr.podLogs, podDirName, "sidecar", "2.log")
		symlink(t, loop, loop) // ELOOP stands in for EIO or ESTALE
		removed, err := tr.r.RemoveContainerLogFiles(ctx, l, []string{loop})
		var refused *RefusedError
		if err == nil || errors.As(err, &refused) || !strings.Contains(err.Error(), loop) {
			t.Fatalf("err = %v; want a plain error naming %s", err, loop)
		}
		if len(removed) > 0 {
			t.Errorf("removed %v while another container's files could not be told apart", removed)
		}
		mustExist(t, filepath.Join(dir, "1.log"))
	})

	for _, tt := range []struct {
		rule string
		log  func(tr tree, l ContainerLog) ContainerLog
	}{
		{"a path outside the roots is refused", func(tr tree, l ContainerLog) ContainerLog {
			l.Path = filepath.Join(tr.outside, podDirName, "nginx", "1.log")
			return l
		}},
		{"a path not three levels below the root is refused", func(tr tree, l ContainerLog) ContainerLog {
			l.Path = filepath.Join(tr.podLogs, podDirName, "1.log")
			return l
		}},
		{"a pod log dir of another pod is refused", func(tr tree, l ContainerLog) ContainerLog {
			l.PodUID = "9f2b7c1e-0000-4000-8000-000000000000"
			return l
		}},
		{"a pod log dir whose name does not parse is refused", func(tr tree, l ContainerLog) ContainerLog {
			l.Path = filepath.Join(tr.podLogs, "not-a-pod", "nginx", "1.log")
			return l
		}},
		{"a dir of another container name is refused", func(tr tree, l ContainerLog) ContainerLog {
			l.ContainerName = "sidecar"
			return l
		}},
		{"a file name other than <restart count>.log is refused", func(tr tree, l ContainerLog) ContainerLog {
			l.Path = filepath.Join(filepath.Dir(l.Path), "notes.txt")
			return l
		}},
		{"an empty path is refused", func(tr tree, l ContainerLog) ContainerLog {
			l.Path = ""
			return l
		}},
		{".. in the path is refused", func(tr tree, l ContainerLog) ContainerLog {
			l.Path = filepath.Join(tr.podLogs, podDirName, "sidecar") + "/../nginx/1.log"
			return l
		}},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			tr, dir, l := setup(t)
			l = tt.log(tr, l)
			removed, err := tr.r.RemoveContainerLogFiles(ctx, l, nil)
			if err == nil || len(removed) > 0 {
				t.Fatalf("removed %v, %v; want a refusal", removed, err)
			}
			t.Logf("refused as wanted: %v", err)
			mustExist(t, filepath.Join(dir, "1.log"), filepath.Join(dir, "1.log.20261124-101010"),
				filepath.Join(tr.podLogs, podDirName, "sidecar", "1.log"))
		})
	}

	t.Run("a container dir that is a symlink is refused", func(t *testing.T) {
		tr := newTree(t)
		elsewhere := filepath.Join(tr.outside, "nginx")
		writeFile(t, filepath.Join(elsewhere, "1.log"), "keep")
		mkdirAll(t, filepath.Join(tr.podLogs, podDirName))
		symlink(t, elsewhere, filepath.Join(tr.podLogs, podDirName, "nginx"))
		l := ContainerLog{Path: filepath.Join(tr.podLogs, podDirName, "nginx", "1.log"), PodUID: testUUID, ContainerName: "nginx"}
		_, err := tr.r.RemoveContainerLogFiles(ctx, l, nil)
		wantRefused(t, err, filepath.Join(tr.podLogs, podDirName, "nginx"))
		mustExist(t, filepath.Join(elsewhere, "1.log"))
	})

	t.Run("a container dir on another mount is refused", func(t *testing.T) {
		tr := newTree(t)
		dir := filepath.Join(tr.podLogs, podDirName, "nginx")
		mkdirAll(t, dir)
		mount(t, "tmpfs", dir, "tmpfs")
		writeFile(t, filepath.Join(dir, "1.log"), "keep")
		l := ContainerLog{Path: filepath.Join(dir, "1.log"), PodUID: testUUID, ContainerName: "nginx"}
		_, err := tr.r.RemoveContainerLogFiles(ctx, l, nil)
		wantRefused(t, err, dir)
		mustExist(t, filepath.Join(dir, "1.log"))
	})

	// The mount table is read as for every removal: a mount at or below
	// the container's dir (here a file bound over a rotation, which statx
	// calls a mount root, but the table would also show a same-device bind
	// mount of the dir where statx gives no mount ID) refuses it all.
	t.Run("a mount in the container dir refuses the whole removal", func(t *testing.T) {
		tr, dir, l := setup(t)
		src := filepath.Join(tr.outside, "mounted")
		writeFile(t, src, "not a log")
		mount(t, src, filepath.Join(dir, "1.log.20261124-101010"), "")
		removed, err := tr.r.RemoveContainerLogFiles(ctx, l, nil)
		wantRefused(t, err, filepath.Join(dir, "1.log.20261124-101010"))
		if len(removed) > 0 {
			t.Errorf("removed %v beside a mount point", removed)
		}
		mustExist(t, filepath.Join(dir, "1.log"), src)
	})

	t.Run("a cancelled context removes nothing", func(t *testing.T) {
		tr, dir, l := setup(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := tr.r.RemoveContainerLogFiles(cctx, l, nil); err == nil {
			t.Fatal("want the context's error")
		}
		mustExist(t, filepath.Join(dir, "1.log"))
	})
}

func TestIsRestartLogName(t *testing.T) {
	for name, want := range map[string]bool{
		"0.log": true, "12.log": true, "4294967295.log": true,
		".log": false, "a.log": false, "0.log.gz": false, "0.txt": false, "-1.log": false, "12345678901.log": false, "": false,
	} {
		if got := isRestartLogName(name); got != want {
			t.Errorf("isRestartLogName(%q) = %v, want %v", name, got, want)
		}
	}
}

// immutable makes path immutable (chattr +i) until the test ends: its
// unlink then fails with EPERM, even for root.
func immutable(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i %s: %v: %s", path, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
}

// TestRemoveContainerLogFilesRefusesAPathOfAnotherShape: a container's log
// file is exactly <pod log dir>/<container name>/<n>.log below a root. A
// path with fewer or more components is refused, never half-parsed, and
// nothing is removed.
func TestRemoveContainerLogFilesRefusesAPathOfAnotherShape(t *testing.T) {
	tr := newTree(t)
	pod := filepath.Join(tr.podLogs, podDirName)
	writeFile(t, filepath.Join(pod, "nginx", "1.log"), "live")
	writeFile(t, filepath.Join(pod, "nginx", "1.log.20261124-101010"), "live")
	writeFile(t, filepath.Join(pod, "1.log"), "odd")
	for _, p := range []string{
		filepath.Join(pod, "1.log"),
		filepath.Join(pod, "nginx", "1.log", "1.log"),
	} {
		removed, err := tr.r.RemoveContainerLogFiles(context.Background(), ContainerLog{Path: p, PodUID: testUUID, ContainerName: "nginx"}, nil)
		wantRefused(t, err, p)
		if len(removed) != 0 {
			t.Errorf("%s: removed %v", p, removed)
		}
	}
	mustExist(t, filepath.Join(pod, "nginx", "1.log"), filepath.Join(pod, "nginx", "1.log.20261124-101010"), filepath.Join(pod, "1.log"))
}

// TestRemoveContainerLogFilesNeverEntersAPodLogDirThatIsAMount: the walk
// down checks every directory on the way by device and mount ID, so a pod
// log dir mounted after the shared mount table was read (which would show
// it) is still not entered.
func TestRemoveContainerLogFilesNeverEntersAPodLogDirThatIsAMount(t *testing.T) {
	tr := newTree(t)
	pod := filepath.Join(tr.podLogs, podDirName)
	mkdirAll(t, pod)
	if _, err := tr.r.mountTable(true); err != nil {
		t.Fatal(err)
	}
	read := tr.r.mountsAt
	mount(t, "tmpfs", pod, "tmpfs")
	dir := filepath.Join(pod, "nginx")
	writeFile(t, filepath.Join(dir, "1.log"), "on another file system")
	removed, err := tr.r.RemoveContainerLogFiles(context.Background(), ContainerLog{Path: filepath.Join(dir, "1.log"), PodUID: testUUID, ContainerName: "nginx"}, nil)
	if root, _ := statAt(unix.AT_FDCWD, tr.podLogs); root.mntID != 0 && !tr.r.mountsAt.Equal(read) {
		t.Fatal("the table was read again within a second: the test proves nothing")
	}
	wantRefused(t, err, pod)
	if len(removed) != 0 {
		t.Errorf("removed %v", removed)
	}
	mustExist(t, filepath.Join(dir, "1.log"))
}
