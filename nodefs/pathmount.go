package nodefs

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// PathMount is what a path is (its file type and inode) and which mount it
// is on, as the walks here see it: statx's mount ID and mount-root flag,
// with the fallbacks of statAt for kernels before 5.8. Other walks that
// must not cross a mount (a pod cgroup's) use it so that they tell a mount
// apart the same way.
type PathMount struct {
	fi fileInfo
}

// StatPathMount is lstat of path: a symlink is not followed. The error
// names the path and wraps fs.ErrNotExist when it is gone.
func StatPathMount(path string) (PathMount, error) {
	fi, err := statAt(unix.AT_FDCWD, path)
	if err != nil {
		return PathMount{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return PathMount{fi: fi}, nil
}

// IsDir says whether the path is a directory.
func (p PathMount) IsDir() bool { return p.fi.mode == unix.S_IFDIR }

// Kind names the file type: "directory", "symlink", "regular file" or
// "special file".
func (p PathMount) Kind() string { return p.fi.kind() }

// Ino is the inode number.
func (p PathMount) Ino() uint64 { return p.fi.ino }

// OtherMountThan says why p, a path below root, is not on root's mount (on
// another device, a mount point, or another mount of the same device); ""
// means it is on root's mount.
func (p PathMount) OtherMountThan(root PathMount) string { return otherMount(root.fi, p.fi) }
