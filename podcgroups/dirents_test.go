package podcgroups

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSubdirsKeepsDirectoriesAndSymlinksOnly(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"pod1", "pod2", "burstable"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"cgroup.procs", "tasks", "memory.limit_in_bytes"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("pod1", filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	// A buffer smaller than the directory: the entries come in several reads.
	dirs, links, err := subdirs(context.Background(), dir, make([]byte, 64))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	if want := []string{"burstable", "pod1", "pod2"}; !slices.Equal(dirs, want) || !slices.Equal(links, []string{"alias"}) {
		t.Errorf("subdirs = %q, %q; want %q, [alias]", dirs, links, want)
	}
	if _, _, err := subdirs(context.Background(), filepath.Join(dir, "gone"), make([]byte, 64)); !os.IsNotExist(err) {
		t.Errorf("a missing dir gave %v, want a not-exist error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := subdirs(ctx, dir, make([]byte, 64)); err == nil {
		t.Error("a cancelled context was not an error")
	}
}

// dirent is one linux_dirent64 record, 8-byte aligned as the kernel writes it.
func dirent(ino uint64, typ byte, name string) []byte {
	reclen := (19 + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint64(b[0:], ino)
	binary.NativeEndian.PutUint16(b[16:], uint16(reclen))
	b[18] = typ
	copy(b[19:], name)
	return b
}

func TestEachDirentReadsRecordsAndRefusesTornOnes(t *testing.T) {
	good := slices.Concat(dirent(1, unix.DT_DIR, "."), dirent(1, unix.DT_DIR, ".."), dirent(7, unix.DT_DIR, "pod1"),
		dirent(0, unix.DT_DIR, "deleted"), dirent(8, unix.DT_REG, "cgroup.procs"))
	torn := dirent(9, unix.DT_DIR, "pod2")
	binary.NativeEndian.PutUint16(torn[16:], uint16(len(torn)+8))
	tooShort := dirent(9, unix.DT_DIR, "pod3")
	binary.NativeEndian.PutUint16(tooShort[16:], 19)
	for _, tc := range []struct {
		name    string
		buf     []byte
		want    []string
		wantErr bool
	}{
		{"every live entry but . and ..", good, []string{"pod1/4", "cgroup.procs/8"}, false},
		{"a record longer than the buffer", slices.Concat(good, torn), nil, true},
		{"a record without room for a name", tooShort, nil, true},
		{"a buffer shorter than a header", good[:10], nil, true},
		{"nothing", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := eachDirent(tc.buf, func(name []byte, typ byte) error {
				got = append(got, string(name)+"/"+string(rune('0'+typ)))
				return nil
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, tc.wantErr)
			}
			if !tc.wantErr && !slices.Equal(got, tc.want) {
				t.Errorf("entries %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzEachDirentNeverPanics(f *testing.F) {
	f.Add(slices.Concat(dirent(7, unix.DT_DIR, "pod1"), dirent(8, unix.DT_REG, "tasks")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, buf []byte) {
		_ = eachDirent(buf, func(name []byte, _ byte) error {
			if len(name) > len(buf) {
				t.Fatalf("a name of %d bytes from a buffer of %d", len(name), len(buf))
			}
			return nil
		})
	})
}

func TestKnownTypeLstatsOnlyUnknownEntries(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		typ  byte
		want byte
	}{
		{"d", unix.DT_UNKNOWN, unix.DT_DIR},
		{"f", unix.DT_UNKNOWN, unix.DT_REG},
		{"l", unix.DT_UNKNOWN, unix.DT_LNK},
		{"gone", unix.DT_UNKNOWN, unix.DT_UNKNOWN},
		{"f", unix.DT_DIR, unix.DT_DIR}, // a known type is taken as given
	} {
		if got, err := knownType(dir, []byte(tc.name), tc.typ); err != nil || got != tc.want {
			t.Errorf("knownType(%s, %d) = %d, %v; want %d", tc.name, tc.typ, got, err, tc.want)
		}
	}
}
