package nodefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mount mounts (a bind mount when fstype is "") and unmounts in Cleanup,
// before t.TempDir's own cleanup runs. It skips the test when mounting is
// not permitted.
func mount(t *testing.T, src, dst, fstype string) {
	t.Helper()
	flags := uintptr(0)
	if fstype == "" {
		flags = unix.MS_BIND
	}
	if err := unix.Mount(src, dst, fstype, flags, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("mounting not permitted: %v", err)
		}
		t.Fatalf("mount %s on %s: %v", src, dst, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func mustExist(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if !exists(t, p) {
			t.Errorf("%s was removed, want it kept", p)
		}
	}
}

func mustBeGone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if exists(t, p) {
			t.Errorf("%s still exists, want it removed", p)
		}
	}
}

// wantRefused checks that err is a refusal that names path.
func wantRefused(t *testing.T, err error, path string) {
	t.Helper()
	t.Logf("refused as wanted: %v", err)
	var r *RefusedError
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a RefusedError", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want it to name %s", err, path)
	}
}

func newRemover(t *testing.T, roots ...string) *Remover {
	t.Helper()
	r, err := NewRemover(roots...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewRemover(t *testing.T) {
	tests := []struct {
		rule  string
		roots []string
		want  []string // nil: an error naming the bad root
	}{
		{"roots are cleaned", []string{"/var/log/pods/", "/var/log//containers"}, []string{"/var/log/containers", "/var/log/pods"}},
		{"closest root first", []string{"/var/log", "/var/log/pods"}, []string{"/var/log/pods", "/var/log"}},
		{"no roots is an error", nil, nil},
		{"a relative root is an error", []string{"var/log/pods"}, nil},
		{"an empty root is an error", []string{""}, nil},
		{"the file system root is an error", []string{"/"}, nil},
		{"a root that cleans to / is an error", []string{"//."}, nil},
		{"a root with .. is an error", []string{"/var/log/../lib"}, nil},
		{"one bad root among good ones is an error", []string{"/var/log/pods", "relative"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			r, err := NewRemover(tt.roots...)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("NewRemover(%q) = %v, want an error", tt.roots, r.Roots())
				}
				if len(tt.roots) > 0 && !strings.Contains(err.Error(), tt.roots[len(tt.roots)-1]) {
					t.Fatalf("err = %v, want it to name the bad root", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Roots(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("Roots() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWithin(t *testing.T) {
	r := newRemover(t, "/var/log/pods", "/var/log/containers", "/data/a", "/data/a/b")
	tests := []struct {
		rule string
		path string
		want bool
	}{
		{"a direct child is within", "/var/log/pods/x", true},
		{"a deeper path is within", "/var/log/pods/x/y/z", true},
		{"a trailing slash is cleaned", "/var/log/pods/x/", true},
		{"a root itself is not within", "/var/log/pods", false},
		{"a root with a trailing slash is not within", "/var/log/pods/", false},
		{"a root spelled with a dot is not within", "/var/log/pods/.", false},
		{"a nested root is not within its parent root", "/data/a/b", false},
		{"below a nested root is within", "/data/a/b/c", true},
		{"a sibling sharing a prefix is not within", "/var/log/pods-old/x", false},
		{"the parent of a root is not within", "/var/log", false},
		{".. escaping the root is not within", "/var/log/pods/../containers", false},
		{".. escaping to another root's parent is not within", "/var/log/pods/x/../../x", false},
		{".. that stays inside is within after Clean", "/var/log/pods/x/../y", true},
		{"a relative path is never within", "var/log/pods/x", false},
		{"an empty path is not within", "", false},
		{"/ is not within", "/", false},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			if got := r.Within(tt.path); got != tt.want {
				t.Fatalf("Within(%q) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

// tree is a crafted node: a pod log root, a container log root and a
// directory outside both.
type tree struct {
	podLogs, containerLogs, outside string
	r                               *Remover
}

func newTree(t *testing.T) tree {
	base := t.TempDir()
	tr := tree{
		podLogs:       filepath.Join(base, "pods"),
		containerLogs: filepath.Join(base, "containers"),
		outside:       filepath.Join(base, "outside"),
	}
	for _, d := range []string{tr.podLogs, tr.containerLogs, tr.outside} {
		mkdirAll(t, d)
	}
	tr.r = newRemover(t, tr.podLogs, tr.containerLogs)
	return tr
}

const podDirName = "default_nginx_" + testUUID

func TestRemovePodLogDir(t *testing.T) {
	ctx := context.Background()

	t.Run("a nested tree is removed", func(t *testing.T) {
		tr := newTree(t)
		pod := filepath.Join(tr.podLogs, podDirName)
		writeFile(t, filepath.Join(pod, "nginx", "0.log"), "log")
		writeFile(t, filepath.Join(pod, "nginx", "1.log.20240101-000000.gz"), "old")
		writeFile(t, filepath.Join(pod, "sidecar", "a", "b", "c", "0.log"), "deep")
		mkdirAll(t, filepath.Join(pod, "empty"))
		if err := os.Chmod(filepath.Join(pod, "sidecar", "a"), 0o500); err != nil { // root can still remove
			t.Fatal(err)
		}
		if err := tr.r.RemovePodLogDir(ctx, pod); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, pod)
		mustExist(t, tr.podLogs)
	})

	t.Run("a legacy <uid> dir and a static pod dir are removed", func(t *testing.T) {
		tr := newTree(t)
		for _, name := range []string{testUUID, "kube-system_etcd-node1_" + testMD5UID} {
			p := filepath.Join(tr.podLogs, name)
			writeFile(t, filepath.Join(p, "c", "0.log"), "log")
			if err := tr.r.RemovePodLogDir(ctx, p); err != nil {
				t.Fatal(err)
			}
			mustBeGone(t, p)
		}
	})

	t.Run("a symlink inside pointing outside the root is unlinked, its target survives", func(t *testing.T) {
		tr := newTree(t)
		pod := filepath.Join(tr.podLogs, podDirName)
		writeFile(t, filepath.Join(tr.outside, "precious", "data"), "keep")
		writeFile(t, filepath.Join(tr.outside, "file"), "keep")
		symlink(t, filepath.Join(tr.outside, "precious"), filepath.Join(pod, "nginx", "dirlink"))
		symlink(t, filepath.Join(tr.outside, "file"), filepath.Join(pod, "nginx", "0.log"))
		symlink(t, "../../../outside", filepath.Join(pod, "relative"))
		if err := tr.r.RemovePodLogDir(ctx, pod); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, pod)
		mustExist(t, filepath.Join(tr.outside, "precious", "data"), filepath.Join(tr.outside, "file"))
	})

	t.Run("a hard link inside is unlinked, the other name survives", func(t *testing.T) {
		tr := newTree(t)
		pod := filepath.Join(tr.podLogs, podDirName)
		writeFile(t, filepath.Join(tr.outside, "file"), "keep")
		mkdirAll(t, pod)
		if err := os.Link(filepath.Join(tr.outside, "file"), filepath.Join(pod, "hard")); err != nil {
			t.Fatal(err)
		}
		if err := tr.r.RemovePodLogDir(ctx, pod); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, pod)
		mustExist(t, filepath.Join(tr.outside, "file"))
	})

	t.Run("a missing path is success", func(t *testing.T) {
		tr := newTree(t)
		if err := tr.r.RemovePodLogDir(ctx, filepath.Join(tr.podLogs, podDirName)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a missing root is success", func(t *testing.T) {
		r := newRemover(t, filepath.Join(t.TempDir(), "nope"))
		if err := r.RemovePodLogDir(ctx, filepath.Join(r.Roots()[0], podDirName)); err != nil {
			t.Fatal(err)
		}
	})

	refusals := []struct {
		rule  string
		setup func(t *testing.T, tr tree) (path string, keep []string)
	}{
		{"a path outside the roots is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.outside, podDirName)
			writeFile(t, filepath.Join(p, "f"), "")
			return p, []string{filepath.Join(p, "f")}
		}},
		{"a root itself is refused", func(t *testing.T, tr tree) (string, []string) {
			writeFile(t, filepath.Join(tr.podLogs, podDirName, "f"), "")
			return tr.podLogs, []string{filepath.Join(tr.podLogs, podDirName, "f")}
		}},
		{"a root spelled with a trailing slash is refused", func(t *testing.T, tr tree) (string, []string) {
			return tr.podLogs + "/", []string{tr.podLogs}
		}},
		{".. in the path is refused even when it stays inside", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.podLogs, podDirName)
			writeFile(t, filepath.Join(p, "f"), "")
			return tr.podLogs + "/x/../" + podDirName, []string{filepath.Join(p, "f")}
		}},
		{".. escaping the root is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.outside, podDirName)
			writeFile(t, filepath.Join(p, "f"), "")
			return tr.podLogs + "/../outside/" + podDirName, []string{filepath.Join(p, "f")}
		}},
		{"a relative path is refused", func(t *testing.T, tr tree) (string, []string) {
			return podDirName, nil
		}},
		{"a pod log dir that is itself a symlink is refused and its target survives", func(t *testing.T, tr tree) (string, []string) {
			writeFile(t, filepath.Join(tr.outside, "target", "f"), "keep")
			p := filepath.Join(tr.podLogs, podDirName)
			symlink(t, filepath.Join(tr.outside, "target"), p)
			return p, []string{p, filepath.Join(tr.outside, "target", "f")}
		}},
		{"a regular file with a pod log dir name is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.podLogs, podDirName)
			writeFile(t, p, "")
			return p, []string{p}
		}},
		{"a name that does not parse is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.podLogs, "my_precious_dir")
			writeFile(t, filepath.Join(p, "f"), "")
			return p, []string{filepath.Join(p, "f")}
		}},
		{"a path that is not a direct child of a root is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.podLogs, "x", podDirName)
			writeFile(t, filepath.Join(p, "f"), "")
			return p, []string{filepath.Join(p, "f")}
		}},
		{"a pod log dir that is a bind mount is refused", func(t *testing.T, tr tree) (string, []string) {
			writeFile(t, filepath.Join(tr.outside, "src", "f"), "keep")
			p := filepath.Join(tr.podLogs, podDirName)
			mkdirAll(t, p)
			mount(t, filepath.Join(tr.outside, "src"), p, "")
			return p, []string{filepath.Join(tr.outside, "src", "f")}
		}},
	}
	for _, tt := range refusals {
		t.Run(tt.rule, func(t *testing.T) {
			tr := newTree(t)
			path, keep := tt.setup(t, tr)
			err := tr.r.RemovePodLogDir(ctx, path)
			wantRefused(t, err, path)
			mustExist(t, keep...)
		})
	}

	t.Run("a bind mount inside is refused, naming the mount point; nothing is removed", func(t *testing.T) {
		tr := newTree(t)
		pod := filepath.Join(tr.podLogs, podDirName)
		writeFile(t, filepath.Join(tr.outside, "src", "data"), "keep")
		writeFile(t, filepath.Join(pod, "a", "0.log"), "log")
		mnt := filepath.Join(pod, "z", "mnt")
		mkdirAll(t, mnt)
		mount(t, filepath.Join(tr.outside, "src"), mnt, "")
		err := tr.r.RemovePodLogDir(ctx, pod)
		wantRefused(t, err, mnt)
		mustExist(t, filepath.Join(tr.outside, "src", "data"), filepath.Join(mnt, "data"), filepath.Join(pod, "a", "0.log"))
	})

	t.Run("a bind-mounted file inside is refused; the file survives", func(t *testing.T) {
		tr := newTree(t)
		pod := filepath.Join(tr.podLogs, podDirName)
		writeFile(t, filepath.Join(tr.outside, "file"), "keep")
		writeFile(t, filepath.Join(pod, "c", "0.log"), "")
		mount(t, filepath.Join(tr.outside, "file"), filepath.Join(pod, "c", "0.log"), "")
		err := tr.r.RemovePodLogDir(ctx, pod)
		wantRefused(t, err, filepath.Join(pod, "c", "0.log"))
		mustExist(t, filepath.Join(tr.outside, "file"))
	})

	t.Run("another file system inside (tmpfs) is refused, its content untouched", func(t *testing.T) {
		tr := newTree(t)
		pod := filepath.Join(tr.podLogs, podDirName)
		mnt := filepath.Join(pod, "tmp")
		mkdirAll(t, mnt)
		mount(t, "tmpfs", mnt, "tmpfs")
		writeFile(t, filepath.Join(mnt, "data"), "keep")
		err := tr.r.RemovePodLogDir(ctx, pod)
		wantRefused(t, err, mnt)
		mustExist(t, filepath.Join(mnt, "data"))
	})

	t.Run("a bind mount is found when the root is reached through a symlink", func(t *testing.T) {
		tr := newTree(t)
		viaLink := filepath.Join(filepath.Dir(tr.podLogs), "pods-link")
		symlink(t, tr.podLogs, viaLink)
		r := newRemover(t, viaLink)
		pod := filepath.Join(viaLink, podDirName)
		writeFile(t, filepath.Join(tr.outside, "src", "data"), "keep")
		mnt := filepath.Join(tr.podLogs, podDirName, "mnt")
		mkdirAll(t, mnt)
		mount(t, filepath.Join(tr.outside, "src"), mnt, "")
		err := r.RemovePodLogDir(ctx, pod)
		wantRefused(t, err, filepath.Join(pod, "mnt"))
		mustExist(t, filepath.Join(tr.outside, "src", "data"))
	})

	t.Run("a root that is a symlink to / is refused", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "root-link")
		symlink(t, "/", link)
		r := newRemover(t, link)
		p := filepath.Join(link, podDirName)
		wantRefused(t, r.RemovePodLogDir(ctx, p), p)
	})

	t.Run("a cancelled context removes nothing", func(t *testing.T) {
		tr := newTree(t)
		pod := filepath.Join(tr.podLogs, podDirName)
		writeFile(t, filepath.Join(pod, "c", "0.log"), "log")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := tr.r.RemovePodLogDir(cctx, pod); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		mustExist(t, filepath.Join(pod, "c", "0.log"))
	})
}

// TestWalkerRefusesMountsWithoutTheMountTable checks the second line of
// defence on its own: even if the mount table check missed a mount (it was
// mounted after the check), the walk never enters or removes it, and keeps
// removing what is safe around it.
// podLogDirWithAMount makes a pod log dir with a log in other/ and a mount
// at mnt/ holding a file named data: a bind mount of a dir outside the
// roots, or (fstype "tmpfs") another file system. It returns both paths.
func (tr tree) podLogDirWithAMount(t *testing.T, fstype string) (pod, mnt string) {
	t.Helper()
	pod = filepath.Join(tr.podLogs, podDirName)
	mnt = filepath.Join(pod, "mnt")
	writeFile(t, filepath.Join(pod, "other", "0.log"), "log")
	mkdirAll(t, mnt)
	src := filepath.Join(tr.outside, "src")
	mkdirAll(t, src)
	if fstype != "" {
		src = "tmpfs"
	}
	mount(t, src, mnt, fstype)
	writeFile(t, filepath.Join(mnt, "data"), "keep")
	return pod, mnt
}

func TestWalkerRefusesMountsWithoutTheMountTable(t *testing.T) {
	for _, tt := range []struct {
		rule   string
		fstype string
	}{
		{"a same-device bind mount is told apart by its mount ID", ""},
		{"another file system is told apart by its device", "tmpfs"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			tr := newTree(t)
			pod, mnt := tr.podLogDirWithAMount(t, tt.fstype)

			rootFd, err := openRoot(tr.podLogs)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(rootFd)
			rootInfo, err := statAt(rootFd, "")
			if err != nil {
				t.Fatal(err)
			}
			w := walker{ctx: context.Background(), root: rootInfo}
			err = w.removeEntry(rootFd, podDirName, pod, true)
			wantRefused(t, err, mnt)
			mustExist(t, filepath.Join(mnt, "data"))
			mustBeGone(t, filepath.Join(pod, "other"))
		})
	}
}

// One read of the mount table serves the removals of a second (each read
// costs milliseconds on a busy node), and a mount made after that read is
// still refused, by the walk's mount IDs, with what it holds untouched.
func TestAMountMadeAfterTheSharedTableWasReadIsStillRefused(t *testing.T) {
	ctx := context.Background()
	tr := newTree(t)
	first := filepath.Join(tr.podLogs, "default_first_"+testUUID)
	writeFile(t, filepath.Join(first, "app", "0.log"), "log")
	if err := tr.r.RemovePodLogDir(ctx, first); err != nil {
		t.Fatal(err)
	}
	read := tr.r.mountsAt
	// Whether the kernel gives mount IDs is asked of the kernel, not of the
	// code under test: one that stopped taking them must fail here.
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, tr.podLogs, 0, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		t.Skip("this kernel gives no mount IDs: every removal reads the table afresh")
	}
	if read.IsZero() {
		t.Fatal("the kernel gives mount IDs, but the removal did not keep the table it read for the next ones")
	}
	pod, mnt := tr.podLogDirWithAMount(t, "")

	err := tr.r.RemovePodLogDir(ctx, pod)
	if !tr.r.mountsAt.Equal(read) {
		t.Fatal("the table was read again within a second: the test proves nothing")
	}
	wantRefused(t, err, mnt)
	mustExist(t, filepath.Join(mnt, "data"))

	// Once the shared read is older than mountTableReuse, the table is
	// read again and refuses the whole removal up front.
	tr.r.mountsAt = read.Add(-mountTableReuse)
	writeFile(t, filepath.Join(pod, "other", "0.log"), "log")
	err = tr.r.RemovePodLogDir(ctx, pod)
	wantRefused(t, err, mnt)
	mustExist(t, filepath.Join(pod, "other", "0.log"))
	mustExist(t, filepath.Join(mnt, "data"))
}

// A removal root that is itself a mount point (the DaemonSet mounts
// /var/log/pods from the node) is not a mount in the way of what lies
// below it, whether the mount table is read afresh or shared.
func TestARootThatIsAMountPointDoesNotRefuseWhatIsBelowIt(t *testing.T) {
	ctx := context.Background()
	tr := newTree(t)
	mount(t, tr.podLogs, tr.podLogs, "")
	for _, name := range []string{"default_first_" + testUUID, podDirName} {
		dir := filepath.Join(tr.podLogs, name)
		writeFile(t, filepath.Join(dir, "app", "0.log"), "log")
		if err := tr.r.RemovePodLogDir(ctx, dir); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		mustBeGone(t, dir)
	}
}

func TestRemoveContainerLogLink(t *testing.T) {
	ctx := context.Background()
	const name = "nginx_default_nginx-" + testCID + ".log"

	t.Run("a live link is unlinked, its target survives", func(t *testing.T) {
		tr := newTree(t)
		target := filepath.Join(tr.podLogs, podDirName, "nginx", "0.log")
		writeFile(t, target, "log")
		link := filepath.Join(tr.containerLogs, name)
		symlink(t, target, link)
		if err := tr.r.RemoveContainerLogLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, link)
		mustExist(t, target)
	})

	t.Run("a dangling link is unlinked", func(t *testing.T) {
		tr := newTree(t)
		link := filepath.Join(tr.containerLogs, name)
		symlink(t, filepath.Join(tr.outside, "gone"), link)
		if err := tr.r.RemoveContainerLogLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, link)
	})

	t.Run("a missing link is success", func(t *testing.T) {
		tr := newTree(t)
		if err := tr.r.RemoveContainerLogLink(ctx, filepath.Join(tr.containerLogs, name)); err != nil {
			t.Fatal(err)
		}
	})

	for _, tt := range []struct {
		rule  string
		setup func(t *testing.T, tr tree) (path string, keep []string)
	}{
		{"a regular file is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.containerLogs, name)
			writeFile(t, p, "log")
			return p, []string{p}
		}},
		{"a directory is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.containerLogs, name)
			mkdirAll(t, p)
			return p, []string{p}
		}},
		{"a link whose name does not parse is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.containerLogs, "nginx_default_nginx.log")
			symlink(t, "/nonexistent", p)
			return p, []string{p}
		}},
		{"a link outside the roots is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.outside, name)
			symlink(t, "/nonexistent", p)
			return p, []string{p}
		}},
		{"a link that is not a direct child of a root is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.containerLogs, "sub", name)
			symlink(t, "/nonexistent", p)
			return p, []string{p}
		}},
		{".. in the path is refused", func(t *testing.T, tr tree) (string, []string) {
			p := filepath.Join(tr.containerLogs, name)
			symlink(t, "/nonexistent", p)
			return tr.containerLogs + "/sub/../" + name, []string{p}
		}},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			tr := newTree(t)
			path, keep := tt.setup(t, tr)
			wantRefused(t, tr.r.RemoveContainerLogLink(ctx, path), path)
			mustExist(t, keep...)
		})
	}
}

func TestRemoveTreeOneFilesystem(t *testing.T) {
	ctx := context.Background()

	t.Run("a deeper path below a root is removed, its parents kept", func(t *testing.T) {
		tr := newTree(t)
		p := filepath.Join(tr.podLogs, "uid", "volumes", "x")
		writeFile(t, filepath.Join(p, "a", "f"), "")
		if err := tr.r.RemoveTreeOneFilesystem(ctx, p); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, p)
		mustExist(t, filepath.Join(tr.podLogs, "uid", "volumes"))
	})

	t.Run("a top-level symlink is unlinked, not followed", func(t *testing.T) {
		tr := newTree(t)
		writeFile(t, filepath.Join(tr.outside, "d", "f"), "keep")
		p := filepath.Join(tr.podLogs, "link")
		symlink(t, filepath.Join(tr.outside, "d"), p)
		if err := tr.r.RemoveTreeOneFilesystem(ctx, p); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, p)
		mustExist(t, filepath.Join(tr.outside, "d", "f"))
	})

	t.Run("a symlink on the way to the path is refused, never followed", func(t *testing.T) {
		tr := newTree(t)
		writeFile(t, filepath.Join(tr.outside, "victim", "f"), "keep")
		symlink(t, tr.outside, filepath.Join(tr.podLogs, "a"))
		err := tr.r.RemoveTreeOneFilesystem(ctx, filepath.Join(tr.podLogs, "a", "victim"))
		wantRefused(t, err, filepath.Join(tr.podLogs, "a"))
		mustExist(t, filepath.Join(tr.outside, "victim", "f"))
	})

	t.Run("a mount point on the way to the path is refused", func(t *testing.T) {
		tr := newTree(t)
		writeFile(t, filepath.Join(tr.outside, "src", "victim", "f"), "keep")
		mnt := filepath.Join(tr.podLogs, "a")
		mkdirAll(t, mnt)
		mount(t, filepath.Join(tr.outside, "src"), mnt, "")
		err := tr.r.RemoveTreeOneFilesystem(ctx, filepath.Join(mnt, "victim"))
		wantRefused(t, err, mnt)
		mustExist(t, filepath.Join(tr.outside, "src", "victim", "f"))
	})

	t.Run("a mount point at the path itself is refused", func(t *testing.T) {
		tr := newTree(t)
		writeFile(t, filepath.Join(tr.outside, "src", "f"), "keep")
		mnt := filepath.Join(tr.podLogs, "a")
		mkdirAll(t, mnt)
		mount(t, filepath.Join(tr.outside, "src"), mnt, "")
		err := tr.r.RemoveTreeOneFilesystem(ctx, mnt)
		wantRefused(t, err, mnt)
		mustExist(t, filepath.Join(tr.outside, "src", "f"), mnt)
	})

	t.Run("a regular file is removed", func(t *testing.T) {
		tr := newTree(t)
		p := filepath.Join(tr.podLogs, "f")
		writeFile(t, p, "")
		if err := tr.r.RemoveTreeOneFilesystem(ctx, p); err != nil {
			t.Fatal(err)
		}
		mustBeGone(t, p)
	})

	t.Run("a missing parent is success", func(t *testing.T) {
		tr := newTree(t)
		if err := tr.r.RemoveTreeOneFilesystem(ctx, filepath.Join(tr.podLogs, "no", "such", "dir")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a root is refused", func(t *testing.T) {
		tr := newTree(t)
		writeFile(t, filepath.Join(tr.containerLogs, "f"), "")
		wantRefused(t, tr.r.RemoveTreeOneFilesystem(ctx, tr.containerLogs), tr.containerLogs)
		mustExist(t, filepath.Join(tr.containerLogs, "f"))
	})
}

func TestUnescapeMountPath(t *testing.T) {
	for _, tt := range []struct{ rule, in, want string }{
		{"plain paths are unchanged", "/var/log/pods", "/var/log/pods"},
		{"space, tab, newline and backslash are unescaped", `/a\040b\011c\012d\134e`, "/a b\tc\nd\\e"},
		{"a lone backslash is kept", `/a\b`, `/a\b`},
		{"a short escape at the end is kept", `/a\04`, `/a\04`},
		{"escapes above \\377 are kept", `/a\400`, `/a\400`},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			if got := UnescapeMountPath(tt.in); got != tt.want {
				t.Fatalf("UnescapeMountPath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestRemoveRacingSymlinkSwap: while a tree is being removed, another
// goroutine keeps swapping a directory in it for a symlink to a directory
// outside the root. Whatever the removal returns, nothing outside is removed.
func TestRemoveRacingSymlinkSwap(t *testing.T) {
	tr := newTree(t)
	victim := filepath.Join(tr.outside, "victim")
	for i := 0; i < 20; i++ {
		writeFile(t, filepath.Join(victim, "f"+strings.Repeat("x", i)), "keep")
	}
	pod := filepath.Join(tr.podLogs, podDirName)
	ctx := context.Background()
	for round := 0; round < 200; round++ {
		for i := 0; i < 20; i++ {
			writeFile(t, filepath.Join(pod, "d", "f"+strings.Repeat("x", i)), "")
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			d, tmp := filepath.Join(pod, "d"), filepath.Join(pod, "d.tmp")
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Errors are expected: the remover is deleting the same names.
				_ = os.Rename(d, tmp)
				_ = os.Symlink(victim, d)
				_ = os.Remove(d)
				_ = os.Rename(tmp, d)
			}
		}()
		_ = tr.r.RemovePodLogDir(ctx, pod)
		close(stop)
		<-done
		for i := 0; i < 20; i++ {
			mustExist(t, filepath.Join(victim, "f"+strings.Repeat("x", i)))
		}
		if t.Failed() {
			t.Fatalf("round %d: removal reached outside the root", round)
		}
		if err := os.RemoveAll(pod); err != nil { // reset for the next round
			t.Fatal(err)
		}
	}
}

// TestRemovePodLogDirRefusesAPathBelowAPodLogDir: a pod log dir is a direct
// child of a root. A container's dir inside one, whose first component
// parses as a pod log dir name, is refused and nothing is removed: the rule
// is on the whole path, not on its first component.
func TestRemovePodLogDirRefusesAPathBelowAPodLogDir(t *testing.T) {
	tr := newTree(t)
	pod := filepath.Join(tr.podLogs, podDirName)
	writeFile(t, filepath.Join(pod, "nginx", "0.log"), "live")
	for _, p := range []string{filepath.Join(pod, "nginx"), filepath.Join(pod, "nginx", "0.log")} {
		wantRefused(t, tr.r.RemovePodLogDir(context.Background(), p), p)
	}
	mustExist(t, filepath.Join(pod, "nginx", "0.log"))
}

// TestWithoutMountIDsTheMountTableIsReadAfresh: where the kernel gives no
// mount IDs, a same-device bind mount made after the shared table was read
// is seen only in the table, so a removal reads it again rather than reuse
// the one read a moment ago.
func TestWithoutMountIDsTheMountTableIsReadAfresh(t *testing.T) {
	tr := newTree(t)
	pod := filepath.Join(tr.podLogs, podDirName)
	mnt := filepath.Join(pod, "c")
	mkdirAll(t, mnt)
	// A table read a moment ago, before the mount.
	tr.r.mounts, tr.r.mountsAt = []string{}, time.Now()
	mount(t, "tmpfs", mnt, "tmpfs")
	rootFd, err := openRoot(tr.podLogs)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFd)
	info, err := statAt(rootFd, "")
	if err != nil {
		t.Fatal(err)
	}
	info.mntID = 0 // a kernel (or seccomp filter) that gives no mount IDs
	wantRefused(t, tr.r.refuseMountsAt(rootFd, info, tr.podLogs, []string{podDirName}, pod), mnt)
}

// TestParseMountInfoLineSplitsAtSpacesOnly: the kernel separates mountinfo
// fields with one space and escapes only space, tab, newline and backslash,
// so any other white space in a root or mount point is part of the path.
// Split at it, a bind mount from a dir named "my<NBSP>dir" onto a pod's
// volume was read as mounted on "dir", and the removal of the pod dir did
// not see it.
func TestParseMountInfoLineSplitsAtSpacesOnly(t *testing.T) {
	pod := "/var/lib/kubelet/pods/" + testUUID + "/volumes/kubernetes.io~empty-dir/cache"
	for _, tt := range []struct {
		rule, line string
		want       MountInfo
		wantErr    bool
	}{
		{"a plain line", "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue",
			MountInfo{ID: "36", Parent: "35", Root: "/mnt1", MountPoint: "/mnt2", Optional: "master:1", FSType: "ext3"}, false},
		{"two optional fields", "36 35 98:0 / /mnt2 rw shared:3 master:1 - ext3 /dev/root rw",
			MountInfo{ID: "36", Parent: "35", Root: "/", MountPoint: "/mnt2", Optional: "shared:3 master:1", FSType: "ext3"}, false},
		{"no optional fields", "36 35 98:0 / /mnt2 rw - ext3 /dev/root rw",
			MountInfo{ID: "36", Parent: "35", Root: "/", MountPoint: "/mnt2", FSType: "ext3"}, false},
		{"an empty source", "36 35 0:5 / /mnt2 rw - tmpfs  rw",
			MountInfo{ID: "36", Parent: "35", Root: "/", MountPoint: "/mnt2", FSType: "tmpfs"}, false},
		{"escaped paths", `36 35 98:0 /a\040b /c\011d rw - ext3 /dev/root rw`,
			MountInfo{ID: "36", Parent: "35", Root: "/a b", MountPoint: "/c\td", FSType: "ext3"}, false},
		{"a no-break space in the root", "36 35 98:0 /data/my\u00a0dir " + pod + " rw - ext4 /dev/sda1 rw",
			MountInfo{ID: "36", Parent: "35", Root: "/data/my\u00a0dir", MountPoint: pod, FSType: "ext4"}, false},
		{"a carriage return in the mount point", "36 35 98:0 / /mnt/a\rb rw - ext4 /dev/sda1 rw",
			MountInfo{ID: "36", Parent: "35", Root: "/", MountPoint: "/mnt/a\rb", FSType: "ext4"}, false},
		{"a vertical tab and dash in the mount point", "36 35 0:4 / /run/netns/a\vx\v-\vnsfs rw - tmpfs tmpfs rw",
			MountInfo{ID: "36", Parent: "35", Root: "/", MountPoint: "/run/netns/a\vx\v-\vnsfs", FSType: "tmpfs"}, false},
		{"too few fields", "36 35 98:0 /mnt1", MountInfo{}, true},
		{"no separator", "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 ext3 /dev/root rw", MountInfo{}, true},
		{"no type", "36 35 98:0 /mnt1 /mnt2 rw -", MountInfo{}, true},
		{"an empty mount point", "36 35 98:0 /mnt1  rw - ext3 /dev/root rw", MountInfo{}, true},
		{"an empty line", "", MountInfo{}, true},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			got, err := ParseMountInfoLine(tt.line)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseMountInfoLine(%q) = %+v, %v; want %+v (error %v)", tt.line, got, err, tt.want, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.line)) {
				t.Fatalf("error %q does not name the line", err)
			}
		})
	}
}

// TestWithoutStatxMountIDsADirectorysMountIsAskedOfItsFileHandle: statx
// gives no mount ID before Linux 5.8 (RHEL 8, Ubuntu 20.04), and a
// same-device bind mount made during a walk was then not told apart.
// name_to_handle_at gives the same mount ID on every kernel since 2.6.39.
// statAt must ask it where statx has none, and where there is no statx
// (ENOSYS, or EPERM from a seccomp filter): each old kernel is this one's
// statx with the mount ID (and the mount-root attribute, also 5.8+) taken
// out, or refused, and the mount IDs must be the ones this kernel's statx
// gives, asked of the kernel, not of the code under test.
func TestWithoutStatxMountIDsADirectorysMountIsAskedOfItsFileHandle(t *testing.T) {
	dir := t.TempDir()
	plain, bound, src := filepath.Join(dir, "plain"), filepath.Join(dir, "bound"), filepath.Join(dir, "src")
	for _, d := range []string{plain, bound, src} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount(t, src, bound, "")
	dirFd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirFd)
	statxMountID := func(name string) uint64 {
		flags := unix.AT_SYMLINK_NOFOLLOW
		if name == "" {
			flags |= unix.AT_EMPTY_PATH
		}
		var stx unix.Statx_t
		if err := unix.Statx(dirFd, name, flags, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
			t.Skipf("this kernel's statx gives no mount ID to compare with (%v)", err)
		}
		return stx.Mnt_id
	}
	before58 := func(dirFd int, path string, flags, mask int, stx *unix.Statx_t) error {
		err := unix.Statx(dirFd, path, flags, mask&^unix.STATX_MNT_ID, stx)
		stx.Mask &^= unix.STATX_MNT_ID
		stx.Mnt_id = 0
		stx.Attributes_mask &^= unix.STATX_ATTR_MOUNT_ROOT
		stx.Attributes &^= unix.STATX_ATTR_MOUNT_ROOT
		return err
	}
	refused := func(errno unix.Errno) statxFunc {
		return func(int, string, int, int, *unix.Statx_t) error { return errno }
	}
	for _, kernel := range []struct {
		name  string
		statx statxFunc
	}{
		{"statx without mount IDs (4.11-5.7)", before58},
		{"no statx (before 4.11)", refused(unix.ENOSYS)},
		{"statx refused by a seccomp filter", refused(unix.EPERM)},
	} {
		t.Run(kernel.name, func(t *testing.T) {
			root, err := statWith(kernel.statx, dirFd, "")
			if err != nil {
				t.Fatal(err)
			}
			if want := statxMountID(""); root.mntID != want {
				t.Fatalf("the directory's own mount ID is %d, statx says %d", root.mntID, want)
			}
			for _, tt := range []struct {
				rule, name string
				other      bool
			}{
				{"a plain directory is on its parent's mount", "plain", false},
				{"a same-device bind mount is on a mount of its own", "bound", true},
			} {
				fi, err := statWith(kernel.statx, dirFd, tt.name)
				if err != nil {
					t.Fatal(err)
				}
				if fi.mountRoot {
					t.Fatalf("%s: the old kernel told the mount root: the test proves nothing", tt.rule)
				}
				if want := statxMountID(tt.name); fi.mntID != want {
					t.Errorf("%s: mount ID %d, statx says %d", tt.rule, fi.mntID, want)
				}
				if why := otherMount(root, fi); (why != "") != tt.other {
					t.Errorf("%s: otherMount = %q, want another mount: %v", tt.rule, why, tt.other)
				}
			}
		})
	}
	if id := handleMountID(dirFd, "missing"); id != 0 {
		t.Errorf("a name that is not there has mount ID %d, want 0 (unknown)", id)
	}
}

// TestARemovalDoesNotWalkATreeDeeperThanItsBound: each level a removal
// walks keeps an open directory and its path; a chain of directories
// thousands deep (anything that can write into a pod log dir, or a pod dir
// outside volumes/, can make one) took gigabytes and thousands of
// descriptors, every pass. Past maxRemoveDepth the removal refuses, and
// what it could not empty stays; a tree within the bound goes whole.
func TestARemovalDoesNotWalkATreeDeeperThanItsBound(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	r := newRemover(t, root)
	deep := filepath.Join(root, "default_deep_"+testUUID)
	chainOfDirs(t, filepath.Join(deep, "app"), 2*maxRemoveDepth)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := r.RemovePodLogDir(ctx, deep)
	runtime.ReadMemStats(&after)
	wantRefused(t, err, deep)
	if !strings.Contains(err.Error(), fmt.Sprintf("more than %d levels below", maxRemoveDepth)) {
		t.Fatalf("err = %v, want the depth named", err)
	}
	mustExist(t, filepath.Join(deep, "app"))
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("the refused removal allocated %d KiB", alloc>>10)
	}

	shallow := filepath.Join(root, "default_shallow_"+testMD5UID)
	chainOfDirs(t, filepath.Join(shallow, "app"), maxRemoveDepth-2)
	if err := r.RemovePodLogDir(ctx, shallow); err != nil {
		t.Fatalf("a tree within the bound: %v", err)
	}
	mustBeGone(t, shallow)
}
