package podnet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netnsPath returns a path in dir named like containerd's namespace mounts.
func netnsPath(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("cni-%08x-1111-2222-3333-%012x", i, i))
}

// testNetns is a real network namespace bind-mounted on Path, as containerd
// makes them (pkg/netns newNS): a new namespace on a locked thread, whose
// /proc/thread-self/ns/net is bind-mounted on an empty file.
type testNetns struct {
	Path  string
	Inode uint64
	// leave takes the thread that stays in the namespace (inUse) out of
	// it; nil when none stayed.
	leave func()
}

// newNetns makes a namespace mount at path. With inUse, a thread stays in
// the namespace until the test ends (or leave is called); without, no thread
// is in it when newNetns returns. Cleanup unmounts and removes it, whatever
// the test did. It skips the test when namespaces cannot be made.
func newNetns(t testing.TB, path string, inUse bool) *testNetns {
	t.Helper()
	mkdirAll(t, filepath.Dir(path))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			t.Errorf("unmount %s: %v", path, err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove %s: %v", path, err)
		}
	})

	made := make(chan error)
	release := make(chan struct{})
	left := make(chan struct{})
	go func() {
		defer close(left)
		runtime.LockOSThread()
		// Not unlocked when something fails: the runtime then ends the
		// thread, which may still be in the new namespace.
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			made <- err
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			made <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		err = unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
		if err != nil || !inUse {
			if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr == nil {
				runtime.UnlockOSThread()
			}
			made <- err
			return
		}
		made <- nil
		<-release
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
	}()
	if err := <-made; err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("cannot make a network namespace: %v", err)
		}
		t.Fatalf("making a network namespace on %s: %v", path, err)
	}
	n := &testNetns{Path: path}
	if inUse {
		var once sync.Once
		n.leave = func() {
			once.Do(func() {
				close(release)
				<-left
			})
		}
		t.Cleanup(n.leave)
	} else {
		<-left
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	n.Inode = st.Ino
	return n
}

// enterNetns starts a process (sleep) in the namespace at path and ends it
// when the test ends.
func enterNetns(t testing.TB, path string) {
	t.Helper()
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skipf("nsenter is needed to start a process in a namespace: %v", err)
	}
	cmd := exec.Command(nsenter, "--net="+path, "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Wait until sleep itself runs in the namespace.
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var st unix.Stat_t
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid), &st) == nil && st.Ino == want.Ino && string(comm) == "sleep\n" {
			return
		}
	}
	t.Fatalf("the process never entered %s", path)
}

// bindMount bind-mounts src on dst (made as an empty file when missing)
// until the test ends.
func bindMount(t testing.TB, src, dst string) {
	t.Helper()
	if !exists(t, dst) {
		writeFile(t, dst, "")
	}
	if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("mounting not permitted: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
}

func isMounted(t testing.TB, path string) bool {
	t.Helper()
	mounts, err := mountsIn(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	return len(mounts[filepath.Base(path)]) > 0
}

// TestTheLastStepOfANetnsRemovalFollowsNothing: once its checks passed, a
// namespace's removal unmounts without following a symlink and removes
// only the regular file a namespace is mounted on. A symlink or a
// directory put there since is refused and kept, with what it points to;
// the file left by an unmount made since is removed; a path gone is done.
func TestTheLastStepOfANetnsRemovalFollowsNothing(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		rule    string
		make    func(path string) error
		refused bool
	}{
		{"a symlink is refused", func(p string) error { return os.Symlink(target, p) }, true},
		{"a directory is refused", func(p string) error { return os.Mkdir(p, 0o755) }, true},
		{"the empty file of a namespace unmounted since is removed", func(p string) error { return os.WriteFile(p, nil, 0o444) }, false},
		{"a path gone is done", func(string) error { return nil }, false},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			path := filepath.Join(dir, "cni-"+strings.ReplaceAll(tt.rule, " ", "-"))
			if err := tt.make(path); err != nil {
				t.Fatal(err)
			}
			err := unmountAndRemove(path, path)
			var refused *RefusedError
			if got := errors.As(err, &refused); got != tt.refused || (!tt.refused && err != nil) {
				t.Fatalf("unmountAndRemove = %v, want refused: %v", err, tt.refused)
			}
			// What the checks saw there is no longer there: an abort.
			if tt.refused && !changedSinceDecided(err) {
				t.Fatalf("unmountAndRemove = %v, want a refusal of a change since the listing", err)
			}
			_, statErr := os.Lstat(path)
			if kept := statErr == nil; kept != tt.refused {
				t.Fatalf("%s there after the removal: %v, want %v", path, kept, tt.refused)
			}
			if b, err := os.ReadFile(target); err != nil || string(b) != "keep" {
				t.Fatalf("the symlink's target: %q, %v", b, err)
			}
		})
	}
}
