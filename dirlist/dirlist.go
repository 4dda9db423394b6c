// Package dirlist reads a directory's entries sorted by name, the way every
// edge that lists node files (pod dirs, log dirs, cgroup hierarchies, CNI
// caches, netns dirs) needs them: the same order every pass, and a context
// checked between batches so that a huge directory does not outlive a
// pass's deadline.
package dirlist

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// batch is how many entries are read between two checks of the context.
const batch = 1024

// Read returns every entry of dir sorted by name. Entry types have lstat
// semantics: a symlink is reported as a symlink, never followed.
func Read(ctx context.Context, dir string) ([]fs.DirEntry, error) {
	f, entries, err := Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	f.Close()
	return entries, nil
}

// Open is Read that leaves dir open, for the caller to close, when it
// returns no error: a caller that goes on to open entries relative to the
// directory it listed (openat) reads the same directory, not whatever the
// path names later.
func Open(ctx context.Context, dir string) (*os.File, []fs.DirEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	f, err := OpenDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var all []fs.DirEntry
	for {
		entries, err := f.ReadDir(batch)
		all = append(all, entries...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	slices.SortFunc(all, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return f, all, nil
}

// OpenDir opens dir for reading its entries, and refuses anything but a
// directory before opening it (O_DIRECTORY): opening a FIFO put where a
// directory is expected would wait for a writer for ever, and opening a
// device may do what the device does on open. Symlinks in dir are followed,
// as os.Open follows them. The error names dir and, when it is not a
// directory, what it is.
func OpenDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOTDIR) {
		// ENOTDIR also comes from a component on the way that is not a
		// directory; then stat fails too, and the open's error stands.
		if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
			return nil, fmt.Errorf("%s is %s, want a directory: %w", dir, regularfile.TypeName(fi.Mode()), err)
		}
	}
	return f, err
}
