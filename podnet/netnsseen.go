package podnet

import (
	"bufio"
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
// the runtime makes in netnsDir, or "" when it sees them:
//   - it is in the runtime's own mount namespace (runtimePID, 0 when the
//     runtime is out of sight, in another PID namespace);
//   - or the dir is the same directory here as in the runtime's view
//     (device and inode; the runtime's view resolved in its own root, where
//     /var/run may be a symlink that it is not here), and the mount it is
//     on here is in the peer group of the mount it is on there (shared:N),
//     or a slave of that group (master:N, propagate_from:N): a DaemonSet's
//     Bidirectional or HostToContainer mount. The mounts are told by their
//     IDs (statx), not by their paths. A peer group of this namespace's own
//     (a mount --make-shared here) gets nothing of the runtime's mounts,
//     and a mount of another directory in its group does not have them;
//   - or, with the runtime out of sight, the dir itself is a slave mount
//     here (HostToContainer), the best that can be told without its view.
//
// Otherwise a namespace containerd mounted after this process's mount
// namespace was made is, from here, an empty file or nothing: it would look
// gone, and a CNI DEL would run with no namespace, no thread in it read,
// though a pod may still run there (a plugin started under `docker run -v
// /var/run/netns:/var/run/netns`, private by default). So a namespace that
// is not there is taken for gone only where this returns "".
func NetnsMountsUnseen(runtimePID int, netnsDir string) string {
	unseen := func(format string, args ...any) string {
		return fmt.Sprintf("this process may not see the namespaces containerd mounts in %s: ", netnsDir) + fmt.Sprintf(format, args...) + ": " + netnsAdvice
	}
	if runtimePID > 0 {
		same, err := sameMountNamespace(runtimePID)
		switch {
		case err != nil:
			return unseen("whether it shares the runtime's (process %d) mount namespace cannot be told (%v)", runtimePID, err)
		case same:
			return ""
		}
	}
	dir, here, err := mountOfDir(mountInfoPath, func(p string) (int, error) {
		return unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}, netnsDir)
	if err != nil {
		return unseen("the mount that holds the dir here cannot be told (%v)", err)
	}
	if runtimePID <= 0 {
		if dir.path == filepath.Clean(netnsDir) && here.MountPoint == dir.resolved && hasTag(here, "master:") {
			return ""
		}
		return unseen("the runtime's process is not visible from here (another PID namespace), so its mounts cannot be compared, "+
			"and the dir is no slave mount of its own here (%s, %q)", here.MountPoint, here.Optional)
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", runtimePID), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return unseen("it is not in the runtime's (process %d) mount namespace, and the runtime's root cannot be opened (%v)", runtimePID, err)
	}
	defer unix.Close(root)
	thereDir, there, err := mountOfDir(fmt.Sprintf("/proc/%d/mountinfo", runtimePID), func(p string) (int, error) {
		fd, err := unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if errors.Is(err, unix.ENOSYS) {
			// Before Linux 5.6: through the root's magic link, where an
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
	resolved string // path with its symlinks resolved, as the opener's view has it ("" when not asked)
	dev, ino uint64
}

// mountOfDir opens dir with open (or, when it does not exist, its nearest
// existing parent) and returns it and the line of the mount table at
// mountinfo with the ID of the mount it is on.
func mountOfDir(mountinfo string, open func(path string) (int, error), dir string) (openedDir, nodefs.MountInfo, error) {
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
	opened := openedDir{path: path, dev: dev, ino: ino}
	if target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
		opened.resolved = target
	}
	m, err := mountByID(mountinfo, strconv.FormatUint(mntID, 10))
	return opened, m, err
}

// mountByID is the line of the mount table at mountinfo whose mount ID is id.
func mountByID(mountinfo, id string) (nodefs.MountInfo, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nodefs.MountInfo{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m, err := nodefs.ParseMountInfoLine(sc.Text())
		if err != nil {
			return nodefs.MountInfo{}, fmt.Errorf("%s: %w", mountinfo, err)
		}
		if m.ID == id {
			return m, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nodefs.MountInfo{}, fmt.Errorf("reading %s: %w", mountinfo, err)
	}
	return nodefs.MountInfo{}, fmt.Errorf("%s lists no mount %s", mountinfo, id)
}

// hasTag reports whether the mount's optional fields have one with prefix.
func hasTag(m nodefs.MountInfo, prefix string) bool {
	for _, f := range strings.Fields(m.Optional) {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
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
