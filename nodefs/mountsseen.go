package nodefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MountsUnseen says why this process may not see the mounts made in dir
// in the mount namespace of process runtimePID (the node's: containerd's,
// where kubelet mounts too), or "" when it sees them. The reason is for a
// sentence such as "this process may not see the mounts ... in dir: " +
// reason; the caller says what to change.
//   - it is in the runtime's own mount namespace (runtimePID, 0 when the
//     runtime is out of sight, in another PID namespace: nothing of its view
//     can be read then, and the answer is unseen);
//   - or the dir is the same directory here as in the runtime's view
//     (device and inode; the runtime's view resolved in its own root, where
//     /var/run may be a symlink that it is not here), and the mount it is
//     on here is in the peer group of the mount it is on there (shared:N),
//     or a slave of that group (master:N, propagate_from:N): a DaemonSet's
//     Bidirectional or HostToContainer mount. The mounts are told by their
//     IDs (statx), not by their paths. A peer group of this namespace's own
//     (a mount --make-shared here) gets nothing of the runtime's mounts,
//     and a mount of another directory in its group does not have them.
//
// A group only brings the mounts made after the mount here was: a
// non-recursive bind of the dir has none of those made before.
func MountsUnseen(runtimePID int, dir string) string {
	if runtimePID <= 0 {
		return "containerd's process is not visible from here (another PID namespace), so its mounts cannot be compared; give the plugin the node's PID namespace (hostPID)"
	}
	same, err := SameMountNamespace(runtimePID)
	switch {
	case err != nil:
		return fmt.Sprintf("whether it shares the runtime's (process %d) mount namespace cannot be told (%v)", runtimePID, err)
	case same:
		return ""
	}
	opened, here, err := mountOfDir(mountInfoPath, func(p string) (int, error) {
		return unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}, dir)
	if err != nil {
		return fmt.Sprintf("the mount that holds the dir here cannot be told (%v)", err)
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", runtimePID), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("it is not in the runtime's (process %d) mount namespace, and the runtime's root cannot be opened (%v)", runtimePID, err)
	}
	defer unix.Close(root)
	thereDir, there, err := mountOfDir(fmt.Sprintf("/proc/%d/mountinfo", runtimePID), func(p string) (int, error) {
		fd, err := unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if Openat2Blocked(err) {
			// Before Linux 5.6, or under a seccomp filter that blocks
			// openat2: through the root's magic link, where an
			// absolute symlink resolves in this process's root instead;
			// the directory found must then be the same one as here
			// (below), and its mount one of the runtime's.
			return unix.Open(fmt.Sprintf("/proc/%d/root%s", runtimePID, p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		return fd, err
	}, opened.path)
	switch {
	case err != nil:
		return fmt.Sprintf("it is not in the runtime's (process %d) mount namespace, and the mount that holds the dir there cannot be told (%v)", runtimePID, err)
	case thereDir.dev != opened.dev || thereDir.ino != opened.ino:
		return fmt.Sprintf("it is not in the runtime's (process %d) mount namespace, and %s here is another directory than there (device and inode %d:%d, there %d:%d)",
			runtimePID, opened.path, opened.dev, opened.ino, thereDir.dev, thereDir.ino)
	case !receives(here, there):
		return fmt.Sprintf("it is not in the runtime's (process %d) mount namespace, and the mount that holds the dir here (%s, %q) receives no mounts from the runtime's (%s, %q)",
			runtimePID, here.MountPoint, here.Optional, there.MountPoint, there.Optional)
	}
	return ""
}

// openedDir is a directory as mountOfDir found it.
type openedDir struct {
	path     string // the path opened: the dir, or its nearest existing parent
	dev, ino uint64
}

// mountOfDir opens dir with open (or, when it does not exist, its nearest
// existing parent) and returns it and the line of the mount table at
// mountinfo with the ID of the mount it is on.
func mountOfDir(mountinfo string, open func(path string) (int, error), dir string) (openedDir, MountInfo, error) {
	if !filepath.IsAbs(dir) {
		return openedDir{}, MountInfo{}, fmt.Errorf("%q is not an absolute path", dir)
	}
	path := filepath.Clean(dir)
	var fd int
	for {
		var err error
		if fd, err = open(path); err == nil {
			break
		}
		if !errors.Is(err, unix.ENOENT) || path == "/" {
			return openedDir{}, MountInfo{}, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		path = filepath.Dir(path)
	}
	defer unix.Close(fd)
	dev, ino, mntID, err := Identity(fd)
	if err != nil {
		return openedDir{}, MountInfo{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if mntID == 0 {
		return openedDir{}, MountInfo{}, fmt.Errorf("this kernel does not tell which mount %s is on", path)
	}
	m, err := mountByID(mountinfo, strconv.FormatUint(mntID, 10))
	return openedDir{path: path, dev: dev, ino: ino}, m, err
}

// mountByID is the line of the mount table at mountinfo whose mount ID is id.
func mountByID(mountinfo, id string) (MountInfo, error) {
	var found *MountInfo
	err := ReadMountInfo(mountinfo, func(m MountInfo) bool {
		if m.ID == id {
			found = &m
		}
		return found == nil
	})
	switch {
	case err != nil:
		return MountInfo{}, err
	case found == nil:
		return MountInfo{}, fmt.Errorf("%s lists no mount %s", mountinfo, id)
	}
	return *found, nil
}

// receives reports whether the mount here gets the mounts made on the
// runtime's mount there: it is in there's peer group, or a slave of it.
func receives(here, there MountInfo) bool {
	group := ""
	for _, f := range strings.Fields(there.Optional) {
		if g, ok := strings.CutPrefix(f, "shared:"); ok {
			group = g
		}
	}
	if group == "" {
		return false
	}
	for _, f := range strings.Fields(here.Optional) {
		for _, tag := range []string{"shared:", "master:", "propagate_from:"} {
			if g, ok := strings.CutPrefix(f, tag); ok && g == group {
				return true
			}
		}
	}
	return false
}

// SameMountNamespace reports whether process pid is in this process's mount
// namespace.
func SameMountNamespace(pid int) (bool, error) {
	var self, other unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &self); err != nil {
		return false, &os.PathError{Op: "stat", Path: "/proc/self/ns/mnt", Err: err}
	}
	path := fmt.Sprintf("/proc/%d/ns/mnt", pid)
	if err := unix.Stat(path, &other); err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return self.Dev == other.Dev && self.Ino == other.Ino, nil
}

// Openat2Blocked says whether err is openat2 being unavailable rather than
// an answer: ENOSYS from a kernel before Linux 5.6 or from systemd's
// RestrictSUIDSGID= filter (248+), EPERM from that filter before 248 or
// from a SystemCallFilter= without it. Either way no answer is taken from
// it: the callers refuse, or fall back to a path they check another way.
func Openat2Blocked(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)
}
