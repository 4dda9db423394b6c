package nodefs

import (
	"bufio"
	"fmt"
	"os"
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
	f, err := os.Open(mountInfoPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m, err := mountPointField(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mountInfoPath, err)
		}
		found = append(found, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", mountInfoPath, err)
	}
	return found, nil
}

// mountPointField returns the mount point (the fifth field) of one
// mountinfo line, unescaped.
func mountPointField(line string) (string, error) {
	fields := strings.Fields(line)
	if len(fields) < 5 {
		return "", fmt.Errorf("malformed line %q", line)
	}
	return UnescapeMountPath(fields[4]), nil
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
