// Package regularfile opens and reads node files that must be regular
// files. Each is opened without blocking and refused unless it is one: a
// FIFO put in its place (a path naming the wrong file, another agent's
// doing) would block the open or the read, and with it every pass, for
// ever, and a device such as /dev/zero would never end. Reads are bounded.
package regularfile

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path with flag (O_RDONLY, O_RDWR, O_CREATE, O_NOFOLLOW...)
// and perm, non-blocking, and returns it with its stat when it is a regular
// file; what is not is closed and refused, the error naming path and what
// it is. Symlinks are followed unless flag has O_NOFOLLOW (then a symlink
// is an open error, ELOOP).
func Open(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, flag|unix.O_NONBLOCK, perm)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s, not a regular file", path, TypeName(fi.Mode()))
	}
	return f, fi, nil
}

// Read returns the content of the regular file at path, opened with flag
// (O_RDONLY, plus O_NOFOLLOW to refuse a symlink), and its stat. A file of
// more than limit bytes is an error, also one that grows past it while read.
func Read(path string, flag int, limit int64) ([]byte, fs.FileInfo, error) {
	f, fi, err := Open(path, flag, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, nil, fmt.Errorf("%s is more than %d bytes (%d), more than its writer ever writes", path, limit, fi.Size())
	}
	// Sized from the stat, so that reading costs one allocation (files of
	// pseudo file systems say 0).
	var buf bytes.Buffer
	buf.Grow(int(fi.Size()) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(buf.Len()) > limit {
		return nil, nil, fmt.Errorf("%s is more than %d bytes, more than its writer ever writes", path, limit)
	}
	return buf.Bytes(), fi, nil
}

// TypeName names the type of a file of mode m, for an error that refuses
// it: "a FIFO", "a character device".
func TypeName(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symlink"
	case fs.ModeNamedPipe:
		return "a FIFO"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice:
		return "a block device"
	case fs.ModeDevice | fs.ModeCharDevice:
		return "a character device"
	}
	return fmt.Sprintf("a file of type %s", m.Type())
}
