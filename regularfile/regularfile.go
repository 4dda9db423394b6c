// Package regularfile opens and reads node files that must be regular
// files. Each is looked at before it is opened, and refused unopened unless
// it is one: a FIFO put in its place (a path naming the wrong file, another
// agent's doing) would block the open or the read, and with it every pass,
// for ever; a device such as /dev/zero would never end, and opening some
// devices acts on them. Opens do not block, and reads are bounded.
package regularfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path with flag (O_RDONLY, O_RDWR, O_CREATE, O_NOFOLLOW...)
// and perm, non-blocking, and returns it with its stat when it is a regular
// file; what is not is refused without being opened, the error naming path
// and what it is. Symlinks are followed unless flag has O_NOFOLLOW (then a
// symlink is an open error, ELOOP).
//
// The file is looked at through an O_PATH descriptor first and opened
// through that very descriptor (/proc/self/fd), only when it is regular:
// opening is itself an act on what is not (a FIFO's blocked writer is let
// go and then gets EPIPE, a watchdog device is armed and reboots the node
// when its opener closes it, a tape rewinds).
func Open(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	// Two tries: a file made by someone else between the look that found
	// none and our exclusive create (which never opens what is there) is
	// looked at again.
	for range 2 {
		f, fi, err := openExisting(path, flag)
		if !errors.Is(err, fs.ErrNotExist) || flag&os.O_CREATE == 0 {
			return f, fi, err
		}
		f, fi, err = create(path, flag, perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, fi, err
		}
	}
	return nil, nil, fmt.Errorf("%s is not there to open, and cannot be made: a symlink to nothing, or made and removed by another while opened", path)
}

// openExisting opens the regular file at path, looked at first through an
// O_PATH descriptor (see Open).
func openExisting(path string, flag int) (*os.File, fs.FileInfo, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|flag&unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	pathFile := os.NewFile(uintptr(fd), path)
	defer pathFile.Close()
	looked, err := pathFile.Stat()
	if err != nil {
		return nil, nil, err
	}
	switch {
	case looked.Mode()&fs.ModeSymlink != 0:
		// O_PATH|O_NOFOLLOW opens the link itself; an open would fail.
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: unix.ELOOP}
	case !looked.Mode().IsRegular():
		return nil, nil, fmt.Errorf("%s is %s, not a regular file", path, TypeName(looked.Mode()))
	}
	reopen := flag&^(os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW) | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	opened, err := openRetryingEINTR(fmt.Sprintf("/proc/self/fd/%d", fd), reopen)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			// The file was there a moment ago (its descriptor is held):
			// it is /proc/self/fd that is not.
			return nil, nil, fmt.Errorf("opening %s through its O_PATH descriptor (is /proc mounted?): %w", path, err)
		}
		// The file's own answer (permission denied, ...), as an open of
		// the path gives it.
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(opened), path)
	fi, err := f.Stat()
	if err == nil && !os.SameFile(fi, looked) {
		err = fmt.Errorf("%s was opened as another file than the one looked at", path)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// openRetryingEINTR is open(2) again while interrupted, as os.OpenFile does.
func openRetryingEINTR(path string, flag int) (int, error) {
	for {
		fd, err := unix.Open(path, flag, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// create makes the file at path, exclusively (fs.ErrExist when another
// made it first: it is looked at again, see Open).
func create(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, flag|os.O_EXCL|unix.O_NONBLOCK|unix.O_NOCTTY, perm)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
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
