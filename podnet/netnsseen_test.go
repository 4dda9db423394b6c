package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inAnotherMountNamespace starts a process in a mount namespace of its own
// and returns its PID: a runtime that does not share the test's mounts.
func inAnotherMountNamespace(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if same, err := sameMountNamespace(pid); err == nil && !same {
			return pid
		}
	}
	t.Fatalf("process %d never left the test's mount namespace", pid)
	return 0
}

// propagation bind-mounts dir on itself with the propagation flag
// (MS_PRIVATE, MS_SHARED, MS_SLAVE), so that what holds it is known
// whatever the machine's own mounts are. A slave is bound from a shared
// mount beside it, its master.
func propagation(t *testing.T, dir string, flag uintptr) {
	t.Helper()
	mkdirAll(t, dir)
	src := dir
	if flag == unix.MS_SLAVE {
		src = dir + ".master"
		propagation(t, src, unix.MS_SHARED)
	}
	if err := unix.Mount(src, dir, "none", unix.MS_BIND, ""); err != nil {
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
	if err := unix.Mount("none", dir, "", flag, ""); err != nil {
		t.Fatal(err)
	}
}

func TestNetnsMountsAreSeenOnlyFromTheRuntimesMountNamespaceOrThroughPropagation(t *testing.T) {
	other := inAnotherMountNamespace(t)
	for _, tc := range []struct {
		rule   string
		pid    int
		flag   uintptr // the netns dir's propagation
		unseen string  // "" when seen, else what the reason must say
	}{
		{"the runtime's own mount namespace sees its mounts, even on a private dir", os.Getpid(), unix.MS_PRIVATE, ""},
		{"another mount namespace on a private dir does not", other, unix.MS_PRIVATE, fmt.Sprintf("it is not in the runtime's (process %d) mount namespace", other)},
		{"a runtime in another PID namespace on a private dir cannot be compared", 0, unix.MS_PRIVATE, "the runtime's process is not visible from here"},
		{"a shared dir receives the mounts (Bidirectional)", other, unix.MS_SHARED, ""},
		{"a slave dir receives the mounts (HostToContainer)", 0, unix.MS_SLAVE, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "netns")
			propagation(t, dir, tc.flag)
			got := NetnsMountsUnseen(tc.pid, dir)
			switch {
			case tc.unseen == "" && got != "":
				t.Fatalf("unseen: %s", got)
			case tc.unseen != "" && (!strings.Contains(got, tc.unseen) || !strings.Contains(got, dir) || !strings.Contains(got, "HostToContainer")):
				t.Fatalf("reason %q, want one naming %s, saying %q and what to do", got, dir, tc.unseen)
			}
		})
	}
	t.Run("a netns dir that is not there is held by its nearest parent's mount", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		propagation(t, dir, unix.MS_PRIVATE)
		if got := NetnsMountsUnseen(other, filepath.Join(dir, "netns")); !strings.Contains(got, "receives no mounts") || !strings.Contains(got, "("+dir+")") {
			t.Fatalf("reason %q, want the private mount at %s named", got, dir)
		}
	})
}

// TestADELWhoseNamespaceIsNotSeenHereIsRefused: a namespace containerd
// mounted in a mount namespace whose mounts this process does not receive
// is, here, a plain file: taken for gone, its DEL would run with no
// namespace and no thread in it read, while a pod runs there.
func TestADELWhoseNamespaceIsNotSeenHereIsRefused(t *testing.T) {
	ctx := context.Background()
	id := containerID(7)
	other := inAnotherMountNamespace(t)
	for _, tc := range []struct {
		rule    string
		flag    uintptr
		refused bool
	}{
		{"on a private netns dir, refused without a DEL", unix.MS_PRIVATE, true},
		{"on a slave netns dir (HostToContainer), the namespace is gone: DEL without a namespace", unix.MS_SLAVE, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			n := newNode(t)
			propagation(t, n.netnsDir, tc.flag)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			// What a namespace mounted elsewhere is here: containerd's
			// empty mount point, with nothing on it.
			ns := netnsPath(n.netnsDir, 3)
			writeFile(t, ns, "")
			n.add(t, cfg, "pods", id, ns)
			a := onlyAttachment(t, cfg, n, id)
			r := NewReclaimer(cfg, n.cacheDir, "", func(context.Context) (int, error) { return other, nil })
			err := r.DeleteAttachment(ctx, a)
			calls := n.pluginCalls(t)
			if !tc.refused {
				if err != nil || len(calls) != 4 {
					t.Fatalf("DeleteAttachment = %v, plugin calls:\n%s", err, strings.Join(calls, "\n"))
				}
				return
			}
			var refused *RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), "is not mounted here, which does not tell that it is gone") ||
				!strings.Contains(err.Error(), "HostToContainer") {
				t.Fatalf("err = %v, want a refusal saying the namespace may not be seen here and what to do", err)
			}
			if len(calls) != 2 || !exists(t, a.CacheFile) {
				t.Fatalf("a DEL ran, or the entry went:\n%s", strings.Join(calls, "\n"))
			}
		})
	}
}
