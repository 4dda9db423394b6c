package regularfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile/regularfiletest"
)

// TestWhatIsNotARegularFileIsRefusedUnreadAndReadsAreBounded: the rules
// every reader of node files rests on.
func TestWhatIsNotARegularFileIsRefusedUnreadAndReadsAreBounded(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		rule  string
		path  string
		flag  int
		limit int64
		want  string // "" reads "0123456789"
	}{
		{"a regular file is read", regular, os.O_RDONLY, 10, ""},
		{"a file larger than the limit is refused", regular, os.O_RDONLY, 9, regular + " is more than 9 bytes (10), more than its writer ever writes"},
		{"a file that reads past the limit is refused, whatever its stat says", "/proc/self/mountinfo", os.O_RDONLY, 10, "/proc/self/mountinfo is more than 10 bytes, more than its writer ever writes"},
		{"a FIFO is refused unread", fifo, os.O_RDONLY, 10, fifo + " is a FIFO, not a regular file"},
		{"a character device is refused unread", "/dev/null", os.O_RDONLY, 10, "/dev/null is a character device, not a regular file"},
		{"a directory is refused unread", dir, os.O_RDONLY, 10, dir + " is a directory, not a regular file"},
		{"a symlink is followed", link, os.O_RDONLY, 10, ""},
		{"a symlink is refused with O_NOFOLLOW", link, os.O_RDONLY | unix.O_NOFOLLOW, 10, "too many levels of symbolic links"},
		{"a missing file is fs.ErrNotExist", filepath.Join(dir, "missing"), os.O_RDONLY, 10, "no such file or directory"},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			var r struct {
				data []byte
				fi   fs.FileInfo
				err  error
			}
			regularfiletest.ReturnsWithin(t, func() { r.data, r.fi, r.err = Read(tc.path, tc.flag, tc.limit) })
			if tc.want == "" {
				if r.err != nil || string(r.data) != "0123456789" || r.fi == nil || !r.fi.Mode().IsRegular() {
					t.Fatalf("Read(%s) = %q, %v, %v; want its content and its stat", tc.path, r.data, r.fi, r.err)
				}
				return
			}
			if r.err == nil || !strings.Contains(r.err.Error(), tc.want) || r.data != nil {
				t.Fatalf("Read(%s) = %q, %v; want no data and an error saying %q", tc.path, r.data, r.err, tc.want)
			}
			if strings.Contains(tc.rule, "missing") && !errors.Is(r.err, fs.ErrNotExist) {
				t.Errorf("error %v does not wrap fs.ErrNotExist", r.err)
			}
		})
	}
}

// TestOpenCreatesARegularFileAndRefusesAFIFO: host-local's lock is opened
// with O_CREATE, and a FIFO in its place must not block the open.
func TestOpenCreatesARegularFileAndRefusesAFIFO(t *testing.T) {
	dir := t.TempDir()
	made := filepath.Join(dir, "lock")
	f, fi, err := Open(made, os.O_CREATE|os.O_RDONLY, 0o750)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("Open(%s, O_CREATE) = %v, %v", made, fi, err)
	}
	f.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	regularfiletest.ReturnsWithin(t, func() { f, _, err = Open(fifo, os.O_CREATE|os.O_RDONLY, 0o750) })
	if err == nil || f != nil || !strings.Contains(err.Error(), fifo+" is a FIFO, not a regular file") {
		t.Fatalf("Open(FIFO) = %v, %v, want it refused", f, err)
	}
}

// TestWhatIsNotARegularFileIsNotEvenOpened: opening acts on a FIFO (its
// writer blocked in open is let go, then gets EPIPE) and on some devices (a
// watchdog is armed): what is refused is looked at, never opened.
func TestWhatIsNotARegularFileIsNotEvenOpened(t *testing.T) {
	for _, flag := range []int{os.O_RDONLY, os.O_RDONLY | unix.O_NOFOLLOW, os.O_CREATE | os.O_RDONLY} {
		t.Run(fmt.Sprintf("flag %#x", flag), func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "fifo")
			if err := unix.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			writerOpened := make(chan error, 1)
			go func() {
				// Blocks until a reader opens the FIFO.
				w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err == nil {
					w.Close()
				}
				writerOpened <- err
			}()
			// Let the writer block in its open first.
			time.Sleep(50 * time.Millisecond)
			var f *os.File
			var err error
			regularfiletest.ReturnsWithin(t, func() { f, _, err = Open(fifo, flag, 0o600) })
			if err == nil || f != nil || !strings.Contains(err.Error(), fifo+" is a FIFO, not a regular file") {
				t.Fatalf("Open(FIFO) = %v, %v, want it refused", f, err)
			}
			select {
			case err := <-writerOpened:
				t.Fatalf("the FIFO's writer got through its open (err %v): Open opened the FIFO it refused", err)
			case <-time.After(200 * time.Millisecond):
			}
			// Let the writer go.
			r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := <-writerOpened; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOpenReadsAndWritesTheFileItLookedAt: the file opened through the
// O_PATH descriptor is the one at path, with the flags asked for.
func TestOpenReadsAndWritesTheFileItLookedAt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "file")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, fi, err := Open(path, os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name() != path || fi.Size() != 0 {
		t.Errorf("opened %s of %d bytes, want %s truncated", f.Name(), fi.Size(), path)
	}
	if _, err := f.WriteString("new"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if data, err := os.ReadFile(path); err != nil || string(data) != "new" {
		t.Errorf("%s holds %q, %v; want what was written through Open", path, data, err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nothing"), dangling); err != nil {
		t.Fatal(err)
	}
	if f, _, err := Open(dangling, os.O_CREATE|os.O_RDONLY, 0o600); err == nil || !strings.Contains(err.Error(), "a symlink to nothing") {
		t.Errorf("Open(symlink to nothing, O_CREATE) = %v, %v; want it refused as such", f, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nothing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the symlink's target was made: %v", err)
	}
}

// TestTheFilesOwnRefusalIsSaidAsAnOpensWould: the file's own answer to the
// open through its O_PATH descriptor (permission denied, a read-only file
// system) was said as "is /proc mounted?", pointing away from the file.
func TestTheFilesOwnRefusalIsSaidAsAnOpensWould(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ro.conf")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(path, path, "none", unix.MS_BIND, ""); err != nil {
		t.Skipf("mounting not permitted: %v", err)
	}
	defer func() { _ = unix.Unmount(path, unix.MNT_DETACH) }()
	if err := unix.Mount("none", path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	f, _, err := Open(path, os.O_RDWR, 0)
	if err == nil {
		f.Close()
		t.Fatal("a read-only file was opened for writing")
	}
	var pathErr *fs.PathError
	if !errors.Is(err, unix.EROFS) || !errors.As(err, &pathErr) || pathErr.Path != path || strings.Contains(err.Error(), "/proc") {
		t.Fatalf("err = %v, want open %s: read-only file system", err, path)
	}
}
