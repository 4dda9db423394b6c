package nodefs

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
)

// mountInfoPath is this process's view of the mount table: the same mount
// namespace the removals happen in.
const mountInfoPath = "/proc/self/mountinfo"

// mountPointsOn returns the mount points that make removing target unsafe:
// those strictly below root that are target itself, below target, or on the
// way from root to target. Both arguments are real paths (no symlinks),
// as the kernel shows them. An unreadable mount table is an error: without
// it a same-device bind mount could go unnoticed on kernels without mount
// IDs, so removal fails closed.
func mountPointsOn(root, target string) ([]string, error) {
	below, err := mountPointsBelow(root)
	if err != nil {
		return nil, err
	}
	return mountsOnTarget(below, target), nil
}

// strictlyBelow returns the mount points of mounts strictly below root.
func strictlyBelow(mounts []string, root string) []string {
	var below []string
	for _, m := range mounts {
		if strings.HasPrefix(m, root+"/") {
			below = append(below, m)
		}
	}
	return below
}

// mountsOnTarget returns the mount points of mounts (real paths) that are
// target itself, below it, or on the way to it.
func mountsOnTarget(mounts []string, target string) []string {
	var found []string
	for _, m := range mounts {
		if m == target || strings.HasPrefix(m, target+"/") || strings.HasPrefix(target, m+"/") {
			found = append(found, m)
		}
	}
	return found
}

// mountPointsBelow returns every mount point strictly below root, in the
// mount table's order. root is a real path (no symlinks), as the kernel
// shows it; the root itself, or a mount above it, is not ours to judge.
func mountPointsBelow(root string) ([]string, error) {
	all, err := readMountPoints()
	if err != nil {
		return nil, err
	}
	return strictlyBelow(all, root), nil
}

// readMountPoints returns every mount point of the mount table, in the
// table's order.
func readMountPoints() ([]string, error) {
	var found []string
	err := ReadMountInfo(mountInfoPath, func(m MountInfo) bool {
		found = append(found, m.MountPoint)
		return true
	})
	return found, err
}

// ReadMountInfo parses the mountinfo file at path line by line and hands
// each line to each, in the table's order, until each returns false. A
// line that does not parse ends the read with an error naming the file: a
// mount table read in part could hide a mount below a path to be removed.
func ReadMountInfo(path string, each func(MountInfo) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m, err := ParseMountInfoLine(sc.Text())
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if !each(m) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}

// MountInfo is one line of a mountinfo file (proc_pid_mountinfo(5)), the
// parts of it this project reads.
type MountInfo struct {
	ID, Parent string // mount IDs: the mount's and the one it is on
	Root       string // the path in its file system the mount shows, unescaped
	MountPoint string // unescaped
	// Optional are the optional fields, space separated: the mount's
	// propagation ("shared:1", "master:2", "shared:3 master:1"; "" for a
	// private mount).
	Optional string
	FSType   string
}

// ParseMountInfoLine parses one line of a mountinfo file:
//
//	<id> <parent> <major:minor> <root> <mount point> <options> [<optional>...] - <fstype> <source> <super options>
//
// The kernel separates the fields with one space and escapes only space,
// tab, newline and backslash in them (fs/proc_namespace.c), so a path may
// hold any other byte, \r, \v, \f and Unicode spaces included. The line is
// split at single spaces only: split at every white space (strings.Fields),
// a root or mount point holding such a byte falls in two and every later
// field shifts, so that a mount below a pod dir is read as mounted
// elsewhere, or a part of a path is read as the file system type.
func ParseMountInfoLine(line string) (MountInfo, error) {
	fields := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+1 >= len(fields) || fields[sep+1] == "" || slices.Contains(fields[:6], "") {
		return MountInfo{}, fmt.Errorf("malformed line %q", line)
	}
	return MountInfo{
		ID:         fields[0],
		Parent:     fields[1],
		Root:       UnescapeMountPath(fields[3]),
		MountPoint: UnescapeMountPath(fields[4]),
		Optional:   strings.Join(fields[6:sep], " "),
		FSType:     fields[sep+1],
	}, nil
}

// UnescapeMountPath undoes the kernel's octal escaping of space, tab,
// newline and backslash (\040, \011, \012, \134) in mountinfo paths. Any
// other backslash is kept as it is (the kernel escapes nothing else, and
// every escape it writes is at most \377).
func UnescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && '0' <= s[i+1] && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
