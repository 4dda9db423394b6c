package podnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
)

// RuntimePID returns the process ID of the runtime, as this process's PID
// namespace names it (0 when it cannot see it): cri.Client.PeerPID.
type RuntimePID func(ctx context.Context) (int, error)

// NetnsMountsUnseen says why this process may not see the namespace mounts
// the runtime makes in netnsDir, or "" when it sees them: when it is in the
// runtime's own mount namespace (runtimePID, 0 when not known), or when the
// mount that holds netnsDir here receives the mounts made in another
// namespace (shared or slave propagation: a DaemonSet's HostToContainer or
// Bidirectional mount).
//
// Otherwise a namespace containerd mounted after this process's mount
// namespace was made is, from here, an empty file or nothing: it would look
// gone, and a CNI DEL would run with no namespace, no thread in it read,
// though a pod may still run there (a plugin started under `docker run -v
// /var/run/netns:/var/run/netns`, private by default). So a namespace that
// is not there is taken for gone only where this returns "".
func NetnsMountsUnseen(runtimePID int, netnsDir string) string {
	var sameNS string
	if runtimePID > 0 {
		same, err := sameMountNamespace(runtimePID)
		if err == nil && same {
			return ""
		}
		if err != nil {
			sameNS = fmt.Sprintf("whether it shares the runtime's (process %d) mount namespace cannot be told (%v)", runtimePID, err)
		} else {
			sameNS = fmt.Sprintf("it is not in the runtime's (process %d) mount namespace", runtimePID)
		}
	} else {
		sameNS = "the runtime's process is not visible from here (another PID namespace), so its mount namespace cannot be compared"
	}
	m, err := mountHolding(netnsDir)
	if err != nil {
		return fmt.Sprintf("this process may not see the namespaces containerd mounts in %s: %s, and the mount that holds the dir cannot be read: %v", netnsDir, sameNS, err)
	}
	for _, f := range strings.Fields(m.Optional) {
		if strings.HasPrefix(f, "shared:") || strings.HasPrefix(f, "master:") {
			return ""
		}
	}
	return fmt.Sprintf("this process may not see the namespaces containerd mounts in %s: %s, and the mount that holds the dir here (%s) receives no mounts from another namespace "+
		"(private): run the plugin in the node's mount namespace, or mount the netns dir with HostToContainer (rslave) or Bidirectional (rshared) propagation", netnsDir, sameNS, m.MountPoint)
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

// mountHolding returns the mount the path dir (or, when it does not exist,
// its nearest existing parent) is on, as this process's mount table shows
// it: of the mounts at the longest mount point that is the path or a parent
// of it, the last (the one on top).
func mountHolding(dir string) (nodefs.MountInfo, error) {
	path := filepath.Clean(dir)
	for {
		resolved, err := filepath.EvalSymlinks(path)
		if err == nil {
			path = resolved
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || path == "/" {
			return nodefs.MountInfo{}, err
		}
		path = filepath.Dir(path)
	}
	f, err := os.Open(mountInfoPath)
	if err != nil {
		return nodefs.MountInfo{}, err
	}
	defer f.Close()
	var holding nodefs.MountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m, err := nodefs.ParseMountInfoLine(sc.Text())
		if err != nil {
			return nodefs.MountInfo{}, fmt.Errorf("%s: %w", mountInfoPath, err)
		}
		under := m.MountPoint == "/" || path == m.MountPoint || strings.HasPrefix(path, m.MountPoint+"/")
		if under && len(m.MountPoint) >= len(holding.MountPoint) {
			holding = m
		}
	}
	if err := sc.Err(); err != nil {
		return nodefs.MountInfo{}, fmt.Errorf("reading %s: %w", mountInfoPath, err)
	}
	if holding.MountPoint == "" {
		return nodefs.MountInfo{}, fmt.Errorf("%s: no mount holds %s", mountInfoPath, path)
	}
	return holding, nil
}
