package podnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
// mount that holds netnsDir here receives the mounts made on the runtime's
// (a DaemonSet's HostToContainer or Bidirectional mount): it is in the
// peer group of the runtime's mount there (shared:N), or its slave
// (master:N, propagate_from:N). A peer group of this namespace's own (a
// mount --make-shared here, systemd as a container's init) receives
// nothing from the runtime, and is not taken for one. With the runtime's
// process out of sight (another PID namespace), its mounts cannot be read:
// only a slave mount (master:) is taken for one that receives, as
// HostToContainer makes.
//
// Otherwise a namespace containerd mounted after this process's mount
// namespace was made is, from here, an empty file or nothing: it would look
// gone, and a CNI DEL would run with no namespace, no thread in it read,
// though a pod may still run there (a plugin started under `docker run -v
// /var/run/netns:/var/run/netns`, private by default). So a namespace that
// is not there is taken for gone only where this returns "".
func NetnsMountsUnseen(runtimePID int, netnsDir string) string {
	const advice = "run the plugin in the node's mount namespace, or mount the netns dir with HostToContainer (rslave) or Bidirectional (rshared) propagation"
	unseen := func(format string, args ...any) string {
		return fmt.Sprintf("this process may not see the namespaces containerd mounts in %s: ", netnsDir) + fmt.Sprintf(format, args...) + ": " + advice
	}
	resolved, err := resolvedHere(netnsDir)
	if err != nil {
		return unseen("the dir cannot be resolved here (%v)", err)
	}
	here, err := mountHolding(mountInfoPath, resolved)
	if err != nil {
		return unseen("the mount that holds the dir here cannot be read (%v)", err)
	}
	if runtimePID <= 0 {
		if slices.ContainsFunc(strings.Fields(here.Optional), func(f string) bool { return strings.HasPrefix(f, "master:") }) {
			return ""
		}
		return unseen("the runtime's process is not visible from here (another PID namespace), so neither its mount namespace nor its mounts can be compared, "+
			"and the mount that holds the dir here (%s) is no slave (%q)", here.MountPoint, here.Optional)
	}
	same, err := sameMountNamespace(runtimePID)
	switch {
	case err != nil:
		return unseen("whether it shares the runtime's (process %d) mount namespace cannot be told (%v)", runtimePID, err)
	case same:
		return ""
	}
	// The dir's path in the runtime's view: as resolved here, or as
	// written (a /var/run that is a symlink on the node and not here).
	var there nodefs.MountInfo
	for _, path := range []string{resolved, filepath.Clean(netnsDir)} {
		if there, err = mountHolding(fmt.Sprintf("/proc/%d/mountinfo", runtimePID), path); err != nil {
			return unseen("it is not in the runtime's (process %d) mount namespace, and the runtime's mount that holds the dir cannot be read (%v)", runtimePID, err)
		}
		if receives(here, there) {
			return ""
		}
	}
	return unseen("it is not in the runtime's (process %d) mount namespace, and the mount that holds the dir here (%s, %q) receives no mounts from the runtime's (%s, %q)",
		runtimePID, here.MountPoint, here.Optional, there.MountPoint, there.Optional)
}

// receives reports whether the mount here gets the mounts made below the
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

// resolvedHere is dir with its symlinks resolved as this process sees them;
// for a dir that does not exist, its nearest existing parent.
func resolvedHere(dir string) (string, error) {
	path := filepath.Clean(dir)
	for {
		resolved, err := filepath.EvalSymlinks(path)
		if err == nil {
			return resolved, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || path == "/" {
			return "", err
		}
		path = filepath.Dir(path)
	}
}

// mountHolding returns the mount the absolute path is on, as the mount
// table at mountinfo shows it (this process's, or the runtime's): of the
// mounts at the longest mount point that is the path or a parent of it,
// the last (the one on top).
func mountHolding(mountinfo, path string) (nodefs.MountInfo, error) {
	f, err := os.Open(mountinfo)
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
			return nodefs.MountInfo{}, fmt.Errorf("%s: %w", mountinfo, err)
		}
		under := m.MountPoint == "/" || path == m.MountPoint || strings.HasPrefix(path, m.MountPoint+"/")
		if under && len(m.MountPoint) >= len(holding.MountPoint) {
			holding = m
		}
	}
	if err := sc.Err(); err != nil {
		return nodefs.MountInfo{}, fmt.Errorf("reading %s: %w", mountinfo, err)
	}
	if holding.MountPoint == "" {
		return nodefs.MountInfo{}, fmt.Errorf("%s: no mount holds %s", mountinfo, path)
	}
	return holding, nil
}
