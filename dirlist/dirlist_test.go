package dirlist

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile/regularfiletest"
)

func TestEntriesComeSortedByNameWithSymlinksNotFollowed(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b", "a", "c"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A link to a dir must read as a link: an edge never walks through one.
	if err := os.Symlink("d", filepath.Join(dir, "0link")); err != nil {
		t.Fatal(err)
	}
	entries, err := Read(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"0link", "a", "b", "c", "d"}; !slices.Equal(names, want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	if entries[0].Type() != fs.ModeSymlink || !entries[4].IsDir() {
		t.Fatalf("types: %v %v, want a symlink and a dir", entries[0].Type(), entries[4].Type())
	}
}

func TestAListingLongerThanABatchIsWhole(t *testing.T) {
	dir := t.TempDir()
	n := 2*batch + 3
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%05d", n-i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, entries, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(entries) != n || entries[0].Name() != "00001" || entries[n-1].Name() != fmt.Sprintf("%05d", n) {
		t.Fatalf("%d entries from %s to %s, want %d sorted", len(entries), entries[0].Name(), entries[len(entries)-1].Name(), n)
	}
	// Open leaves the listed dir open: entries are reachable through it.
	if _, err := os.Stat(filepath.Join(f.Name(), entries[0].Name())); err != nil {
		t.Fatal(err)
	}
}

func TestListingStopsWhenTheContextIsDone(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Read(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read with a done context: %v, want context.Canceled", err)
	}
	if _, _, err := Open(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a done context: %v, want context.Canceled", err)
	}
}

// TestASymlinkToADirectoryIsListed: dir itself may be a symlink (a
// configured root often is); only the entries are not followed.
func TestASymlinkToADirectoryIsListed(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "real", "a"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	entries, err := Read(context.Background(), filepath.Join(base, "link"))
	if err != nil || len(entries) != 1 || entries[0].Name() != "a" {
		t.Fatalf("Read through a symlink: %v, %v; want the entry a", entries, err)
	}
}

func TestAMissingDirIsNotExist(t *testing.T) {
	_, err := Read(context.Background(), filepath.Join(t.TempDir(), "gone"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read of a missing dir: %v, want fs.ErrNotExist (callers treat it as empty)", err)
	}
}

// TestWhatIsNotADirectoryIsRefusedWithoutBlocking: a FIFO where a directory
// is expected (a misconfigured key, another agent's file) is refused, not
// opened: an open for reading waits for a writer for ever, and so would
// every later pass. A device is refused as well, and every error names the
// path and what is there.
func TestWhatIsNotADirectoryIsRefusedWithoutBlocking(t *testing.T) {
	base := t.TempDir()
	fifo := filepath.Join(base, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"a FIFO", fifo, fifo + " is a FIFO, want a directory"},
		{"a character device", os.DevNull, os.DevNull + " is a character device, want a directory"},
		{"a regular file", file, file + " is a regular file, want a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var readErr, openErr error
			regularfiletest.ReturnsWithin(t, func() {
				_, readErr = Read(context.Background(), tt.path)
				var f *os.File
				if f, _, openErr = Open(context.Background(), tt.path); f != nil {
					f.Close()
				}
			})
			for _, err := range []error{readErr, openErr} {
				if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, unix.ENOTDIR) {
					t.Fatalf("err = %v, want one saying %q and wrapping ENOTDIR", err, tt.want)
				}
			}
		})
	}
}
