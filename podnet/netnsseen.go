package podnet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
)

// RuntimePID returns the process ID of the runtime, as this process's PID
// namespace names it (0 when it cannot see it): cri.Client.PeerPID.
type RuntimePID func(ctx context.Context) (int, error)

// netnsAdvice is what to change when the namespaces may not be seen.
const netnsAdvice = "run the plugin in the node's mount namespace, or mount the netns dir with HostToContainer (rslave) or Bidirectional (rshared) propagation"

// NetnsMountsUnseen says why this process may not see the namespace mounts
// the runtime makes in netnsDir, or "" when it sees them (nodefs.MountsUnseen),
// for a plan: one that may not see them keeps what ran in a namespace not
// mounted here. A group only brings the mounts made after the mount here
// was, so the step asks the exact question right before it runs
// (NetnsMountedForRuntime). Otherwise a namespace containerd mounted after
// this process's mount namespace was made is, from here, an empty file or
// nothing: it would look gone, and a CNI DEL would run with no namespace, no
// thread in it read, though a pod may still run there (a plugin started
// under `docker run -v /var/run/netns:/var/run/netns`, private by default).
func NetnsMountsUnseen(runtimePID int, netnsDir string) string {
	if why := nodefs.MountsUnseen(runtimePID, netnsDir); why != "" {
		return fmt.Sprintf("this process may not see the namespaces containerd mounts in %s: %s: %s", netnsDir, why, netnsAdvice)
	}
	return ""
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
	case nodefs.Openat2Blocked(err):
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
