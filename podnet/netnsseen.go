package podnet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
)

// RuntimePID returns the process ID of the runtime, as this process's PID
// namespace names it (0 when it cannot see it): cri.Client.PeerPID.
type RuntimePID func(ctx context.Context) (int, error)

// netnsAdvice is what to change when the namespaces may not be seen.
const netnsAdvice = "run the plugin in the node's mount namespace, or mount the netns dir with HostToContainer (rslave) or Bidirectional (rshared) propagation"

// NetnsMountsUnseen says why this process may not see the namespace mounts
// the runtime makes in netnsDir, or "" when it sees them, for a plan: one
// that may not see them keeps what ran in a namespace not mounted here.
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
// non-recursive bind of the dir has none of those made before. So the step
// asks the exact question right before it runs (NetnsMountedForRuntime).
// Otherwise a namespace containerd mounted after this process's mount
// namespace was made is, from here, an empty file or nothing: it would look
// gone, and a CNI DEL would run with no namespace, no thread in it read,
// though a pod may still run there (a plugin started under `docker run -v
// /var/run/netns:/var/run/netns`, private by default).
func NetnsMountsUnseen(runtimePID int, netnsDir string) string {
	unseen := func(format string, args ...any) string {
		return fmt.Sprintf("this process may not see the namespaces containerd mounts in %s: ", netnsDir) + fmt.Sprintf(format, args...) + ": " + netnsAdvice
	}
	if runtimePID <= 0 {
		return unseen("containerd's process is not visible from here (another PID namespace), so its mounts cannot be compared; give the plugin the node's PID namespace (hostPID)")
	}
	same, err := sameMountNamespace(runtimePID)
	switch {
	case err != nil:
		return unseen("whether it shares the runtime's (process %d) mount namespace cannot be told (%v)", runtimePID, err)
	case same:
		return ""
	}
	dir, here, err := mountOfDir(mountInfoPath, func(p string) (int, error) {
		return unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}, netnsDir)
	if err != nil {
		return unseen("the mount that holds the dir here cannot be told (%v)", err)
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", runtimePID), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return unseen("it is not in the runtime's (process %d) mount namespace, and the runtime's root cannot be opened (%v)", runtimePID, err)
	}
	defer unix.Close(root)
	thereDir, there, err := mountOfDir(fmt.Sprintf("/proc/%d/mountinfo", runtimePID), func(p string) (int, error) {
		fd, err := unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if openat2Blocked(err) {
			// Before Linux 5.6, or under a seccomp filter that blocks
			// openat2: through the root's magic link, where an
			// absolute symlink resolves in this process's root instead;
			// the directory found must then be the same one as here
			// (below), and its mount one of the runtime's.
			return unix.Open(fmt.Sprintf("/proc/%d/root%s", runtimePID, p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		return fd, err
	}, dir.path)
	switch {
	case err != nil:
		return unseen("it is not in the runtime's (process %d) mount namespace, and the mount that holds the dir there cannot be told (%v)", runtimePID, err)
	case thereDir.dev != dir.dev || thereDir.ino != dir.ino:
		return unseen("it is not in the runtime's (process %d) mount namespace, and %s here is another directory than there (device and inode %d:%d, there %d:%d)",
			runtimePID, dir.path, dir.dev, dir.ino, thereDir.dev, thereDir.ino)
	case !receives(here, there):
		return unseen("it is not in the runtime's (process %d) mount namespace, and the mount that holds the dir here (%s, %q) receives no mounts from the runtime's (%s, %q)",
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
func mountOfDir(mountinfo string, open func(path string) (int, error), dir string) (openedDir, nodefs.MountInfo, error) {
	if !filepath.IsAbs(dir) {
		return openedDir{}, nodefs.MountInfo{}, fmt.Errorf("%q is not an absolute path", dir)
	}
	path := filepath.Clean(dir)
	var fd int
	for {
		var err error
		if fd, err = open(path); err == nil {
			break
		}
		if !errors.Is(err, unix.ENOENT) || path == "/" {
			return openedDir{}, nodefs.MountInfo{}, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		path = filepath.Dir(path)
	}
	defer unix.Close(fd)
	dev, ino, mntID, err := nodefs.Identity(fd)
	if err != nil {
		return openedDir{}, nodefs.MountInfo{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if mntID == 0 {
		return openedDir{}, nodefs.MountInfo{}, fmt.Errorf("this kernel does not tell which mount %s is on", path)
	}
	m, err := mountByID(mountinfo, strconv.FormatUint(mntID, 10))
	return openedDir{path: path, dev: dev, ino: ino}, m, err
}

// mountByID is the line of the mount table at mountinfo whose mount ID is id.
func mountByID(mountinfo, id string) (nodefs.MountInfo, error) {
	var found *nodefs.MountInfo
	err := nodefs.ReadMountInfo(mountinfo, func(m nodefs.MountInfo) bool {
		if m.ID == id {
			found = &m
		}
		return found == nil
	})
	switch {
	case err != nil:
		return nodefs.MountInfo{}, err
	case found == nil:
		return nodefs.MountInfo{}, fmt.Errorf("%s lists no mount %s", mountinfo, id)
	}
	return *found, nil
}

// receives reports whether the mount here gets the mounts made on the
// runtime's mount there: it is in there's peer group, or a slave of it.
func receives(here, there nodefs.MountInfo) bool {
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

// sameMountNamespace reports whether process pid is in this process's mount
// namespace.
func sameMountNamespace(pid int) (bool, error) {
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

// NetnsMountedForRuntime says why the namespace path, not mounted here,
// may not be gone, or "" when it is not a namespace mount in the view of
// the runtime (process runtimePID, in another mount namespace) either:
// looked up in the runtime's own root (openat2 RESOLVE_IN_ROOT), and asked
// of the file system there (nsfs). It is the exact question a DEL without a
// namespace rests on, asked right before it; a kernel without openat2
// (before Linux 5.6) cannot answer it.
func NetnsMountedForRuntime(runtimePID int, path string) string {
	if !filepath.IsAbs(path) {
		return fmt.Sprintf("its namespace path %q is not absolute", path)
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", runtimePID), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("containerd's (process %d) root cannot be opened to look at %s there (%v)", runtimePID, path, err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
	switch {
	case errors.Is(err, unix.ENOENT):
		return ""
	case openat2Blocked(err):
		return fmt.Sprintf("whether %s is mounted in containerd's (process %d) view cannot be told: openat2 is not available here (%v: a kernel before Linux 5.6, or a seccomp filter that blocks it, such as systemd's RestrictSUIDSGID=yes)", path, runtimePID, err)
	case err != nil:
		return fmt.Sprintf("whether %s is mounted in containerd's (process %d) view cannot be told (%v)", path, runtimePID, err)
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Sprintf("whether %s is mounted in containerd's (process %d) view cannot be told (%v)", path, runtimePID, err)
	}
	if st.Type == unix.NSFS_MAGIC {
		return fmt.Sprintf("%s is a namespace mount in containerd's (process %d) view, though not here: a pod may still run in it", path, runtimePID)
	}
	return ""
}

// openat2Blocked says whether err is openat2 being unavailable rather than
// an answer: ENOSYS from a kernel before Linux 5.6 or from systemd's
// RestrictSUIDSGID= filter (248+), EPERM from that filter before 248 or
// from a SystemCallFilter= without it. Either way no answer is taken from
// it: the callers refuse, or fall back to a path they check another way.
func openat2Blocked(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)
}
