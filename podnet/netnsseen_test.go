package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"golang.org/x/sys/unix"
)

// inAnotherMountNamespace starts a process in a mount namespace of its own,
// its mounts' propagation "private" (none from here) or "unchanged" (a
// shared mount here is in the same peer group there), and returns its PID:
// a runtime whose mounts are not the test's. Skipped where unshare cannot.
func inAnotherMountNamespace(t *testing.T, propagation string) int {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", propagation, "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err
			t.Skipf("unshare --mount: %v (not permitted here?)", err)
		default:
		}
		if same, err := nodefs.SameMountNamespace(pid); err == nil && !same {
			return pid
		}
	}
	t.Fatalf("process %d never left the test's mount namespace", pid)
	return 0
}

// bindOnItself bind-mounts dir on itself, with propagation flag
// (MS_PRIVATE, MS_SHARED), so that what holds it is known whatever the
// machine's own mounts are.
func bindOnItself(t *testing.T, dir string, flag uintptr) {
	t.Helper()
	mkdirAll(t, dir)
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("mounting not permitted: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	setPropagation(t, dir, flag)
}

func setPropagation(t *testing.T, dir string, flag uintptr) {
	t.Helper()
	if err := unix.Mount("none", dir, "", flag, ""); err != nil {
		t.Fatal(err)
	}
}

// mountedThereSeenHere mounts a tmpfs below dir in process pid's mount
// namespace and reports whether this process sees it: what propagation
// does, whatever the mount table's tags say.
func mountedThereSeenHere(t *testing.T, pid int, dir string) bool {
	t.Helper()
	probe := filepath.Join(dir, "probe")
	if out, err := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--mount", "--",
		"sh", "-c", `mkdir -p "$1" && mount -t tmpfs probe "$1"`, "sh", probe).CombinedOutput(); err != nil {
		t.Fatalf("mount in process %d's mount namespace: %v\n%s", pid, err, out)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(probe, &st); err != nil && !errors.Is(err, unix.ENOENT) {
		t.Fatal(err)
	}
	seen := st.Type == unix.TMPFS_MAGIC
	if seen {
		_ = unix.Unmount(probe, unix.MNT_DETACH)
	}
	return seen
}

func TestNetnsMountsAreSeenOnlyFromTheRuntimesMountNamespaceOrItsPeerGroup(t *testing.T) {
	for _, tc := range []struct {
		rule string
		// setup mounts the netns dir and starts the runtime; it returns
		// the runtime's process and the PID the plugin is given (0: the
		// runtime is out of sight).
		setup  func(t *testing.T, dir string) (runtime, given int)
		unseen string // "" when seen, else what the reason must say
	}{
		{"the runtime's own mount namespace sees its mounts, even on a private dir", func(t *testing.T, dir string) (int, int) {
			bindOnItself(t, dir, unix.MS_PRIVATE)
			return os.Getpid(), os.Getpid()
		}, ""},
		{"another mount namespace's mounts do not reach a private dir", func(t *testing.T, dir string) (int, int) {
			other := inAnotherMountNamespace(t, "private")
			bindOnItself(t, dir, unix.MS_PRIVATE)
			return other, other
		}, "receives no mounts from the runtime's"},
		{"a peer group of this namespace's own is not the runtime's", func(t *testing.T, dir string) (int, int) {
			other := inAnotherMountNamespace(t, "private")
			bindOnItself(t, dir, unix.MS_SHARED)
			return other, other
		}, "receives no mounts from the runtime's"},
		{"a dir in the runtime's peer group gets its mounts (Bidirectional)", func(t *testing.T, dir string) (int, int) {
			bindOnItself(t, dir, unix.MS_SHARED)
			other := inAnotherMountNamespace(t, "unchanged")
			return other, other
		}, ""},
		{"a slave of the runtime's peer group gets its mounts (HostToContainer)", func(t *testing.T, dir string) (int, int) {
			bindOnItself(t, dir, unix.MS_SHARED)
			other := inAnotherMountNamespace(t, "unchanged")
			setPropagation(t, dir, unix.MS_SLAVE)
			return other, other
		}, ""},
		{"with the runtime out of sight, even a slave of its group is unseen: nothing of its view can be read", func(t *testing.T, dir string) (int, int) {
			bindOnItself(t, dir, unix.MS_SHARED)
			other := inAnotherMountNamespace(t, "unchanged")
			setPropagation(t, dir, unix.MS_SLAVE)
			return other, 0
		}, "containerd's process is not visible from here"},
		{"another directory bound on the dir, on a slave of the runtime's group, does not have its mounts", func(t *testing.T, dir string) (int, int) {
			bindOnItself(t, dir, unix.MS_SHARED)
			other := inAnotherMountNamespace(t, "unchanged")
			setPropagation(t, dir, unix.MS_SLAVE)
			another := filepath.Join(filepath.Dir(dir), "another")
			mkdirAll(t, another)
			if err := unix.Mount(another, dir, "none", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			return other, other
		}, "here is another directory than there"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "netns")
			runtime, given := tc.setup(t, dir)
			got := NetnsMountsUnseen(given, dir)
			switch {
			case tc.unseen == "" && got != "":
				t.Fatalf("unseen: %s", got)
			case tc.unseen != "" && (!strings.Contains(got, tc.unseen) || !strings.Contains(got, dir) || !strings.Contains(got, "HostToContainer")):
				t.Fatalf("reason %q, want one naming %s, saying %q and what to do", got, dir, tc.unseen)
			}
			// A verdict of seen is what the kernel does (unseen may be
			// more careful than it).
			if seen := mountedThereSeenHere(t, runtime, dir); got == "" && !seen {
				t.Fatalf("NetnsMountsUnseen says seen, and a mount the runtime made below %s is not seen here", dir)
			} else if tc.unseen == "" && !seen {
				t.Fatalf("the test's set-up does not propagate the runtime's mounts below %s", dir)
			}
		})
	}
	t.Run("the dir is found in the runtime's view through a symlink it has and this view has not (/var/run)", func(t *testing.T) {
		// The node: /var/run a symlink to /run, a shared mount. The plugin:
		// a /var of its own, and the node's /run/netns bound at
		// /var/run/netns, HostToContainer.
		base := t.TempDir()
		bindOnItself(t, base, unix.MS_PRIVATE)
		run, vr := filepath.Join(base, "run"), filepath.Join(base, "var")
		mkdirAll(t, filepath.Join(run, "netns"))
		bindOnItself(t, run, unix.MS_SHARED)
		mkdirAll(t, vr)
		if err := os.Symlink(run, filepath.Join(vr, "run")); err != nil {
			t.Fatal(err)
		}
		other := inAnotherMountNamespace(t, "unchanged")
		if err := unix.Mount("var", vr, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(vr, unix.MNT_DETACH) })
		dir := filepath.Join(vr, "run", "netns")
		mkdirAll(t, dir)
		if err := unix.Mount(filepath.Join(run, "netns"), dir, "none", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		setPropagation(t, dir, unix.MS_SLAVE)
		if got := NetnsMountsUnseen(other, dir); got != "" {
			t.Fatalf("unseen: %s", got)
		}
		if !mountedThereSeenHere(t, other, dir) {
			t.Fatalf("the test's set-up does not propagate the runtime's mounts below %s", dir)
		}
	})
	t.Run("a netns dir that is not there is held by its nearest parent's mount", func(t *testing.T) {
		other := inAnotherMountNamespace(t, "private")
		dir := filepath.Join(t.TempDir(), "run")
		bindOnItself(t, dir, unix.MS_PRIVATE)
		if got := NetnsMountsUnseen(other, filepath.Join(dir, "netns")); !strings.Contains(got, "receives no mounts") || !strings.Contains(got, "("+dir+",") {
			t.Fatalf("reason %q, want the private mount at %s named", got, dir)
		}
	})
}

// TestADELWhoseNamespaceIsNotSeenHereIsRefused: a namespace containerd
// mounted in a mount namespace whose mounts this process does not get is,
// here, a plain file: taken for gone, its DEL would run with no namespace
// and no thread in it read, while a pod runs there. Right before the DEL,
// the path is looked up in containerd's own view.
func TestADELWhoseNamespaceIsNotSeenHereIsRefused(t *testing.T) {
	ctx := context.Background()
	id := containerID(7)
	// mountThere mounts a network namespace (the test's own) on path in
	// process pid's mount namespace, as containerd mounts a pod's.
	mountThere := func(t *testing.T, pid int, path string) {
		t.Helper()
		if out, err := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--mount", "--",
			"mount", "--bind", "/proc/self/ns/net", path).CombinedOutput(); err != nil {
			t.Fatalf("mount in process %d's mount namespace: %v\n%s", pid, err, out)
		}
	}
	for _, tc := range []struct {
		rule string
		// setup makes the netns dir and the namespace's mount point, and
		// returns containerd's process.
		setup   func(t *testing.T, dir, ns string) int
		refused bool
	}{
		{"mounted in containerd's view and not here (a private dir): refused without a DEL", func(t *testing.T, dir, ns string) int {
			other := inAnotherMountNamespace(t, "private")
			bindOnItself(t, dir, unix.MS_PRIVATE)
			writeFile(t, ns, "")
			mountThere(t, other, ns)
			return other
		}, true},
		{"a non-recursive bind here, in containerd's group, lacks a namespace mounted before it: refused", func(t *testing.T, dir, ns string) int {
			bindOnItself(t, dir, unix.MS_SHARED)
			other := inAnotherMountNamespace(t, "unchanged")
			setPropagation(t, dir, unix.MS_SLAVE) // HostToContainer
			writeFile(t, ns, "")
			mountThere(t, other, ns) // propagates here too, until a bind without MS_REC:
			if err := unix.Mount(dir, dir, "none", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			if got := NetnsMountsUnseen(other, dir); got != "" {
				t.Fatalf("the plan's test says unseen (%s); this case is the one it takes for seen", got)
			}
			return other
		}, true},
		{"gone in containerd's view too: DEL without a namespace", func(t *testing.T, dir, ns string) int {
			other := inAnotherMountNamespace(t, "private")
			bindOnItself(t, dir, unix.MS_PRIVATE)
			writeFile(t, ns, "")
			return other
		}, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			n := newNode(t)
			// What a namespace mounted elsewhere is here: containerd's
			// empty mount point, with nothing on it.
			ns := netnsPath(n.netnsDir, 3)
			runtime := tc.setup(t, n.netnsDir, ns)
			if _, _, onNsfs, err := nsfsStat(ns); err != nil || onNsfs {
				t.Fatalf("the namespace is mounted here (%v, %v): the test sets up nothing", onNsfs, err)
			}
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			n.add(t, cfg, "pods", id, ns)
			a := onlyAttachment(t, cfg, n, id)
			r := NewReclaimer(cfg, n.cacheDir, "", func(context.Context) (int, error) { return runtime, nil })
			err := r.DeleteAttachment(ctx, a)
			calls := n.pluginCalls(t)
			if !tc.refused {
				if err != nil || len(calls) != 4 {
					t.Fatalf("DeleteAttachment = %v, plugin calls:\n%s", err, strings.Join(calls, "\n"))
				}
				return
			}
			var refused *RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), "is a namespace mount in containerd's (process") {
				t.Fatalf("err = %v, want a refusal saying the namespace is mounted in containerd's view", err)
			}
			if len(calls) != 2 || !exists(t, a.CacheFile) {
				t.Fatalf("a DEL ran, or the entry went:\n%s", strings.Join(calls, "\n"))
			}
		})
	}
	t.Run("containerd out of sight: refused, saying to give the plugin hostPID", func(t *testing.T) {
		n := newNode(t)
		ns := netnsPath(n.netnsDir, 3)
		writeFile(t, ns, "")
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		n.add(t, cfg, "pods", id, ns)
		a := onlyAttachment(t, cfg, n, id)
		err := NewReclaimer(cfg, n.cacheDir, "", func(context.Context) (int, error) { return 0, nil }).DeleteAttachment(ctx, a)
		if !strings.Contains(fmt.Sprint(err), "hostPID") || len(n.pluginCalls(t)) != 2 {
			t.Fatalf("err = %v, want a refusal without a DEL, saying to give the plugin hostPID", err)
		}
	})
}
