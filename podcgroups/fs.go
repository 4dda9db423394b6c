package podcgroups

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// procsFile lists the processes (thread group IDs) of one cgroup, in both
// versions.
const procsFile = "cgroup.procs"

// cgroupDirs returns top and every directory below it, parents before
// children, without following symlinks (a cgroup file system has none, so a
// symlink is not a cgroup and is left out). A top that does not exist gives
// nothing; so does a subdirectory removed while it is listed, since a gone
// cgroup has nothing left in it.
func cgroupDirs(ctx context.Context, top string, buf []byte) ([]string, error) {
	dirs, _, err := cgroupTree(ctx, top, buf)
	return dirs, err
}

// cgroupTree is cgroupDirs, with top's inode number.
func cgroupTree(ctx context.Context, top string, buf []byte) ([]string, uint64, error) {
	// One look for its type, inode and mount: systemd stopping a slice
	// removes its dirs meanwhile, and a second look would find it gone.
	topMount, err := nodefs.StatPathMount(top)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("cgroup %s: %w", top, err)
	case !topMount.IsDir():
		return nil, 0, fmt.Errorf("cgroup %s is not a directory but a %s", top, topMount.Kind())
	}
	ino := topMount.Ino()
	if buf == nil {
		buf = make([]byte, direntBufSize)
	}
	dirs := []string{top}
	for i := 0; i < len(dirs); i++ {
		// Raw entries: a v1 cgroup dir holds a few dozen control files,
		// and only its subdirectories are wanted.
		names, _, err := subdirs(ctx, dirs[i], buf)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("cgroup %s cannot be read: %w", dirs[i], err)
		}
		slices.Sort(names)
		for _, name := range names {
			dir := dirs[i] + "/" + name
			// A cgroup's subdirectories are its child cgroups, on its
			// mount; anything mounted there (a bind mount of another
			// cgroup, another file system) holds processes and dirs that
			// are not this cgroup's to list, kill or remove.
			m, err := nodefs.StatPathMount(dir)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue
			case err != nil:
				return nil, 0, fmt.Errorf("cgroup %s: %w", dir, err)
			}
			if reason := m.OtherMountThan(topMount); reason != "" {
				return nil, 0, fmt.Errorf("cgroup %s below %s is not walked: %s", dir, top, reason)
			}
			dirs = append(dirs, dir)
		}
	}
	return dirs, ino, nil
}

// inode is the inode number of what fi describes.
func inode(fi fs.FileInfo) (uint64, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("no inode number in %T", fi.Sys())
	}
	return st.Ino, nil
}

// maxProcsSize bounds a read of cgroup.procs: a line per process, and no
// more processes than PID_MAX_LIMIT (4194304), each at most 8 bytes
// ("4194304\n").
const maxProcsSize = 32 << 20

// maxValueSize bounds a read of a control file that holds one number
// (cpu.shares, cpu.weight).
const maxValueSize = 4096

// readControlFile reads the control file at path, at most limit bytes of
// it. Discover does not check that what it lists is on a cgroup file system
// (cgroups.mountpoint may name another), so anything but a regular file,
// as control files are, is refused unread (see regularfile). The error
// wraps fs.ErrNotExist when the file is gone.
func readControlFile(path string, limit int64) ([]byte, error) {
	data, _, err := regularfile.Read(path, os.O_RDONLY, limit)
	return data, err
}

// readPids returns the PIDs in dir's cgroup.procs. A cgroup removed
// meanwhile (ENOENT) has none.
func readPids(dir string) ([]int, error) {
	path := filepath.Join(dir, procsFile)
	data, err := readControlFile(path, maxProcsSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return parsePids(dir, data)
}

// parsePids reads the PIDs in data, the content of dir's cgroup.procs: one
// decimal PID a line.
func parsePids(dir string, data []byte) ([]int, error) {
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil || pid < 0 {
			return nil, fmt.Errorf("cgroup %s: %s holds %q, not a PID", dir, procsFile, line)
		}
		pids = append(pids, pid)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cgroup %s: reading %s: %w", dir, procsFile, err)
	}
	return pids, nil
}

// isFile reports whether path exists and is a regular file (cgroup control
// files are). Any error other than "does not exist" is returned.
func isFile(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s cannot be checked: %w", path, err)
	}
	return fi.Mode().IsRegular(), nil
}

// cgroupVersion returns the cgroup version of the file system path is on.
// hierarchy is the part of path before the pod's cgroup root; it must be
// where that cgroup file system is mounted (its parent is on another device),
// so that nothing nested elsewhere in a hierarchy is ever acted on.
func cgroupVersion(hierarchy, path string) (Version, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	var v Version
	switch st.Type {
	case unix.CGROUP_SUPER_MAGIC:
		v = V1
	case unix.CGROUP2_SUPER_MAGIC:
		v = V2
	default:
		return 0, fmt.Errorf("%s is not on a cgroup file system (file system type %#x)", path, st.Type)
	}
	var h, parent, p unix.Stat_t
	if err := unix.Stat(hierarchy, &h); err != nil {
		return 0, fmt.Errorf("stat %s: %w", hierarchy, err)
	}
	if err := unix.Stat(filepath.Dir(hierarchy), &parent); err != nil {
		return 0, fmt.Errorf("stat %s: %w", filepath.Dir(hierarchy), err)
	}
	if err := unix.Stat(path, &p); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	if h.Dev != p.Dev || h.Dev == parent.Dev {
		return 0, fmt.Errorf("%s is not a cgroup hierarchy's mount point, so this is not where kubelet puts a pod cgroup", hierarchy)
	}
	return v, nil
}
