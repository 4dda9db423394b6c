package statefile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/google/renameio/v2"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile/regularfiletest"
)

const (
	uidA   = "0b8e6b4a-1111-2222-3333-444455556666"
	uidB   = "9f8e6b4a1111222233334444555566ff"
	bootID = "c0381419-68cf-440b-93f2-0bfbd3b3eed4"
)

func sample() State {
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	boot := SinceBoot(time.Hour)
	return State{
		BootID: bootID,
		TornDown: []TornDown{
			{UID: uidB, At: at, AtBoot: boot},
			{UID: uidA, Namespace: "ns", Name: "web", At: at.Add(time.Second), AtBoot: boot + SinceBoot(time.Second), Inspected: true, Seen: []string{"volumes/kubernetes.io~empty-dir/cache"}},
		},
		Spent: []Spent{
			{At: at.Add(2 * time.Second), AtBoot: boot + SinceBoot(2*time.Second), Class: "pod-dirs", Unit: "pod-dir/" + uidA},
			{At: at, AtBoot: boot, Class: "log-dirs", Unit: "pod-log-dir/ns_web_" + uidA},
		},
		BudgetHeldUntil: at.Add(time.Hour), BudgetHeldUntilSinceBoot: boot + SinceBoot(time.Hour), BudgetHeldWhy: "a file could not be read",
	}
}

// writeAndLoad writes s to path and reads it back; it returns the bytes
// written and what was read.
func writeAndLoad(t *testing.T, path string, s State) ([]byte, State) {
	t.Helper()
	data, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(context.Background(), path, data); err != nil {
		t.Fatal(err)
	}
	got, err := Load(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return data, got
}

func TestWhatIsWrittenIsReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "made", "state.json")
	data, got := writeAndLoad(t, path, sample())
	again, err := Encode(got)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(data) {
		t.Fatalf("read back differs:\n%s\nwant\n%s", again, data)
	}
	if got.TornDown[0].UID != uidA || got.Spent[0].Class != "log-dirs" {
		t.Fatalf("not in stable order (pods by UID, steps by time): %+v", got)
	}
	if !got.TornDown[0].Inspected || got.TornDown[1].Inspected || !reflect.DeepEqual(got.TornDown[0].Seen, sample().TornDown[1].Seen) {
		t.Fatalf("inspection lost: %+v", got.TornDown)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600: the file names pods", fi.Mode().Perm())
	}
}

// TestAVersion1FileIsRead: a file written before the boot clock (version
// 1) is read as it is, its times on the wall clock only; an upgrade keeps
// the pods seen torn down and the hour's budgeted steps.
func TestAVersion1FileIsRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	v1 := `{
  "version": 1,
  "torn_down": [{"uid": "` + uidA + `", "at": "2026-11-23T08:00:00Z", "inspected": false}],
  "budget_spent": [{"at": "2026-11-23T08:00:01Z", "class": "pod-dirs", "unit": "pod-dir/` + uidA + `"}]
}
`
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if got.BootID != "" || len(got.TornDown) != 1 || len(got.Spent) != 1 || got.Spent[0].AtBoot != 0 {
		t.Fatalf("read %+v", got)
	}
	data, err := Encode(got)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), fmt.Sprintf(`"version": %d`, Version)) {
		t.Fatalf("written again as:\n%s\nwant version %d", data, Version)
	}
}

func TestEqualStatesEncodeEqually(t *testing.T) {
	a, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	s := sample()
	s.TornDown[0], s.TornDown[1] = s.TornDown[1], s.TornDown[0]
	b, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatalf("the order of the input shows in the file:\n%s\n%s", a, b)
	}
}

func TestAnAbsentFileIsNotExist(t *testing.T) {
	_, err := Load(context.Background(), filepath.Join(t.TempDir(), "state.json"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want one wrapping fs.ErrNotExist", err)
	}
}

func TestAWriteReplacesTheFileWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for i := range 3 {
		s := sample()
		s.Spent = s.Spent[:i]
		_, got := writeAndLoad(t, path, s)
		if len(got.Spent) != i {
			t.Fatalf("write %d: %d steps read back, want %d", i, len(got.Spent), i)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d entries, want only the state file (no temp files left)", len(entries))
	}
}

// TestAWriteMakesTheFile0600WhateverTheModeOfTheOneItReplaces: the file
// names pods and the hour's budgeted steps; a copy of the old file's mode
// (renameio.WriteFile's) would keep one someone made world-writable so, and
// anyone could then erase the hour's budget.
func TestAWriteMakesTheFile0600WhateverTheModeOfTheOneItReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	writeAndLoad(t, path, sample())
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	writeAndLoad(t, path, sample())
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after writing over a file of mode 0666, want 0600", fi.Mode().Perm())
	}
}

func TestABadFileIsAnErrorNamingWhere(t *testing.T) {
	valid, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "", "the file is empty"},
		{"blank", "\n  \n", "the file is empty"},
		{"truncated", string(valid[:len(valid)/2]), "not valid JSON"},
		{"syntax error on line 3", "{\n\"version\": 1,\n\"torn_down\": [,]\n}", "line 3"},
		{"wrong type", "{\n\"version\": \"one\"\n}", "line 2"},
		{"unknown key", `{"version": 1, "torn_down": [], "budget_spent": [], "extra": 1}`, `unknown field "extra"`},
		{"newer version", `{"version": 4, "torn_down": [], "budget_spent": []}`, "version 4, this nri-housekeeper reads versions 1 to 3"},
		{"boot ID in version 1", `{"version": 1, "boot_id": "` + bootID + `"}`, "boot_id in a version 1 file"},
		{"pod without since-boot time", `{"version": 2, "boot_id": "` + bootID + `", "torn_down": [{"uid": "` + uidA + `", "at": "2026-11-23T08:00:00Z"}]}`, "torn_down[0] (pod " + uidA + "): no since-boot time"},
		{"step without since-boot time", `{"version": 2, "boot_id": "` + bootID + `", "budget_spent": [{"at": "2026-11-23T08:00:00Z", "class": "pod-dirs", "unit": "x"}]}`, "budget_spent[0]: no since-boot time"},
		{"since-boot time without a boot", `{"version": 2, "budget_spent": [{"at": "2026-11-23T08:00:00Z", "at_since_boot_ns": 5, "class": "pod-dirs", "unit": "x"}]}`, "budget_spent[0]: a since-boot time, and the file names no boot_id"},
		{"hold without since-boot time", `{"version": 2, "boot_id": "` + bootID + `", "budget_held_until": "2026-11-23T09:00:00Z", "budget_held_why": "x"}`, "budget_held_until: no since-boot time"},
		{"since-boot hold without a hold", `{"version": 2, "boot_id": "` + bootID + `", "budget_held_until_since_boot_ns": 5}`, "budget_held_until_since_boot_ns without budget_held_until"},
		{"no version", `{"torn_down": [], "budget_spent": []}`, "version 0"},
		{"not a pod UID", `{"version": 1, "torn_down": [{"uid": "../../etc", "at": "2026-11-23T08:00:00Z"}]}`, `torn_down[0]: uid "../../etc" is not a pod UID`},
		{"pod without time", `{"version": 1, "torn_down": [{"uid": "` + uidA + `"}]}`, "torn_down[0] (pod " + uidA + "): no time"},
		{"seen without inspected", `{"version": 1, "torn_down": [{"uid": "` + uidA + `", "at": "2026-11-23T08:00:00Z", "seen": ["volumes"]}]}`, "seen entries without inspected"},
		{"cgroups_inspected in version 2", `{"version": 2, "torn_down": [{"uid": "` + uidA + `", "at": "2026-11-23T08:00:00Z", "cgroups_inspected": true}]}`, "cgroups_inspected in a version 2 file"},
		{"cgroups without cgroups_inspected", `{"version": 3, "torn_down": [{"uid": "` + uidA + `", "at": "2026-11-23T08:00:00Z", "cgroups": {"/sys/fs/cgroup/x": 5}}]}`, "cgroups without cgroups_inspected"},
		{"a relative cgroup path", `{"version": 3, "torn_down": [{"uid": "` + uidA + `", "at": "2026-11-23T08:00:00Z", "cgroups_inspected": true, "cgroups": {"x/../y": 5}}]}`, `cgroup path "x/../y" is not a clean absolute path`},
		{"step without time", `{"version": 1, "budget_spent": [{"class": "pod-dirs", "unit": "x"}]}`, "budget_spent[0]: no time"},
		{"step without class", `{"version": 1, "budget_spent": [{"at": "2026-11-23T08:00:00Z", "unit": "x"}]}`, "budget_spent[0]: class and unit"},
		{"held without why", `{"version": 1, "budget_held_until": "2026-11-23T09:00:00Z"}`, "must be set together"},
		{"two values", `{"version": 1} {"version": 1}`, "more than one JSON value"},
		{"a key twice", "{\n\"version\": 1,\n\"budget_spent\": [{\"at\": \"2026-11-23T08:00:00Z\", \"class\": \"pod-dirs\", \"unit\": \"x\"}],\n\"budget_spent\": []\n}",
			`line 4: key "budget_spent" given twice in one object`},
		{"a key twice in another case", "{\"version\": 1, \"budget_spent\": [{\"at\": \"2026-11-23T08:00:00Z\", \"class\": \"pod-dirs\", \"unit\": \"x\"}],\n\"Budget_Spent\": []}",
			`line 2: key "Budget_Spent" given twice in one object`},
		{"a key twice, folded as encoding/json folds", "{\"version\": 1, \"budget_spent\": [{\"at\": \"2026-11-23T08:00:00Z\", \"class\": \"pod-dirs\", \"unit\": \"x\"}],\n\"budget_\u017fpent\": []}",
			`line 2: key`},
		{"a key twice in an entry", "{\"version\": 1, \"torn_down\": [{\"uid\": \"" + uidA + "\", \"at\": \"2026-11-23T08:00:00Z\"},\n{\"uid\": \"" + uidA + "\", \"at\": \"2026-11-23T08:00:00Z\", \"at\": \"2026-11-23T09:00:00Z\"}]}",
			`line 2: key "at" given twice in one object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(context.Background(), path)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q, want it to name %s and say %q", err, path, tc.want)
			}
		})
	}
}

// The writer refuses what the reader would: a file over MaxSize would be
// moved aside at the next start, its pods forgotten and the budget held.
func TestAStateTooLargeToReadIsNotWritten(t *testing.T) {
	var s State
	for i := 0; len(s.TornDown)*200 < MaxSize; i++ {
		s.TornDown = append(s.TornDown, TornDown{UID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), At: time.Now(), Inspected: true,
			Seen: []string{"volumes/kubernetes.io~empty-dir/a-long-enough-volume-name-to-fill-the-file"}})
	}
	if _, err := Encode(s); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Fatalf("a state of %d pods encoded: %v; want an error saying it is over the size a reader takes", len(s.TornDown), err)
	}
}

// A mark's pod cgroup baseline is kept as it was: "looked, had none" is
// not "not looked at".
func TestAPodCgroupBaselineRoundTrips(t *testing.T) {
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	in := State{BootID: bootID, TornDown: []TornDown{
		{UID: uidA, At: at, AtBoot: 7, Inspected: true, CgroupsInspected: true, Cgroups: map[string]uint64{"/sys/fs/cgroup/cpu/kubepods/pod" + uidA: 4242}},
		{UID: uidB, At: at, AtBoot: 7, CgroupsInspected: true},
	}}
	data, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := out.TornDown[0], out.TornDown[1]; !a.CgroupsInspected || a.Cgroups["/sys/fs/cgroup/cpu/kubepods/pod"+uidA] != 4242 ||
		!b.CgroupsInspected || len(b.Cgroups) != 0 {
		t.Fatalf("read back %+v from:\n%s", out.TornDown, data)
	}
}

func TestAnOversizedFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(path, make([]byte, MaxSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(context.Background(), path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err %v, want one saying it is too large", err)
	}
}

// TestWhatIsNotARegularFileIsRefusedWithoutBlocking: housekeeping.state_file
// naming a FIFO must not block the plugin's start for ever waiting for a
// writer; it, a device and a directory are errors naming the path and what
// is there, as for any file that cannot be read.
func TestWhatIsNotARegularFileIsRefusedWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"a FIFO", fifo, "open the state file: " + fifo + " is a FIFO, not a regular file"},
		{"a link to a character device", zero, "open the state file: " + zero + " is a character device, not a regular file"},
		{"a directory", dir, "open the state file: " + dir + " is a directory, not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			regularfiletest.ReturnsWithin(t, func() { _, err = Load(context.Background(), tc.path) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestWriteSaysWhyItCannot(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := Write(context.Background(), filepath.Join(blocker, "state.json"), []byte("{}"))
	if err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("err %v, want one about the state file's directory", err)
	}
}

// TestWriteDoesNotReplaceAFIFOASocketOrADevice: housekeeping.state_file
// naming a FIFO, a socket or a device names a node another program made,
// which Load refuses and the plugin leaves in place; a write must not
// rename a file over it either. It is an error naming the path and what
// is there, and the node is left as it was.
func TestWriteDoesNotReplaceAFIFOASocketOrADevice(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tc := range []struct {
		name, path, want string
		typ              fs.FileMode
	}{
		{"a FIFO", fifo, fifo + " is a FIFO, not a regular file", fs.ModeNamedPipe},
		{"a socket", sock, sock + " is a socket, not a regular file", fs.ModeSocket},
		{"a character device", filepath.Join(dir, "null"), filepath.Join(dir, "null") + " is a character device, not a regular file", fs.ModeDevice | fs.ModeCharDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.typ&fs.ModeCharDevice != 0 {
				// A node of /dev/null's numbers: mknod needs CAP_MKNOD.
				if err := unix.Mknod(tc.path, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
					t.Skipf("cannot make a device node: %v", err)
				}
			}
			err := Write(context.Background(), tc.path, []byte("{}"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if fi, err := os.Lstat(tc.path); err != nil || fi.Mode().Type() != tc.typ {
				t.Fatalf("%s after the write: %v, %v; want it left as it was", tc.path, fi, err)
			}
		})
	}
}

func FuzzDecodeNeverPanics(f *testing.F) {
	valid, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{"version": 1, "torn_down": [{"uid": "x"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to what encodes the same
		// (Encode writes the current version, sorted, with empty lists).
		again, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Decode(again)
		if err != nil {
			t.Fatalf("a decoded state does not decode after encoding: %v", err)
		}
		twice, err := Encode(s2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, twice) {
			t.Fatalf("a decoded state changes through an encoding:\n%s\n%s", again, twice)
		}
	})
}

// TestWriteDoesNotReplaceASymlinkNorWriteThroughIt: a symlink at
// housekeeping.state_file was renamed over by the first write (the link
// gone, the state kept beside where it pointed, said nowhere). Followed
// instead, a link planted in a shared directory would turn the write onto
// any file. The write fails, naming the file to configure; the link and
// what it points to are left as they were.
func TestWriteDoesNotReplaceASymlinkNorWriteThroughIt(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "kept", "state.json")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	old := []byte("what the target held\n")
	if err := os.WriteFile(target, old, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, to, want string
	}{
		{"a link to a file", target, target},
		{"a link to nothing", filepath.Join(dir, "absent.json"), filepath.Join(dir, "absent.json")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link := filepath.Join(t.TempDir(), "state.json")
			if err := os.Symlink(tc.to, link); err != nil {
				t.Fatal(err)
			}
			err := Write(context.Background(), link, []byte("{}\n"))
			want := link + " is a symlink (to " + tc.want + "): not written over"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "housekeeping.state_file") {
				t.Fatalf("err %v, want one saying %q and which key to set", err, want)
			}
			if got, err := os.Readlink(link); err != nil || got != tc.to {
				t.Fatalf("the link after the write: %q, %v; want it left pointing to %s", got, err, tc.to)
			}
			if data, err := os.ReadFile(target); err != nil || !bytes.Equal(data, old) {
				t.Fatalf("the file the link pointed to after the write: %q, %v; want it as it was", data, err)
			}
			if _, err := os.Lstat(tc.to); tc.to != target && !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the link's target was made: %v", err)
			}
		})
	}
}

// TestOnlyTheTempFilesOfUnfinishedWritesAreRemoved: a write killed between
// its temp file and the rename leaves the temp file for ever (one per
// crash); only those are removed, nothing else in the directory.
func TestOnlyTheTempFilesOfUnfinishedWritesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := Write(context.Background(), path, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// A write that never finished, as renameio leaves it.
	pending, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pending.WriteString(`{"torn_down": [`); err != nil {
		t.Fatal(err)
	}
	if err := pending.File.Close(); err != nil {
		t.Fatal(err)
	}
	left := []string{"state.json", "state.json.lock", ".state.json", ".state.json.lock", ".state.json12x", ".other.json123", "state.json.123"}
	for _, name := range left[1:] {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".state.json77"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("state.json", filepath.Join(dir, ".state.json78")); err != nil {
		t.Fatal(err)
	}
	left = append(left, ".state.json77", ".state.json78")
	if err := os.WriteFile(filepath.Join(dir, ".state.json4242"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	removed, err := RemoveTempFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{filepath.Join(dir, ".state.json4242"), pending.Name()}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want the unfinished writes' temp files %q", removed, want)
	}
	names := dirNames(t, dir)
	slices.Sort(left)
	if !slices.Equal(names, left) {
		t.Errorf("the directory holds %q, want %q", names, left)
	}
}

// TestTheTempFilesASiblingCouldOwnAreLeftAlone: a temp file's number has no
// fixed length, so ".state.json7123" is as much "state.json7"'s temp file
// (a live write of another writer) as ours; while that sibling or its lock
// is there, it is left alone.
func TestTheTempFilesASiblingCouldOwnAreLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		rule          string
		files         []string
		removed, left []string
		base          string // the state file's name; "" is state.json
	}{
		{"with no sibling, every temp file of ours is removed",
			[]string{".state.json7123", ".state.json42"},
			[]string{".state.json42", ".state.json7123"}, nil, ""},
		{"a sibling's possible temp files are left, ours removed",
			[]string{"state.json7", ".state.json7123", ".state.json42"},
			[]string{".state.json42"}, []string{".state.json7123", "state.json7"}, ""},
		{"a sibling's lock is enough (its first write has no file yet)",
			[]string{"state.json71.lock", ".state.json71123", ".state.json7234"},
			[]string{".state.json7234"}, []string{".state.json71123", "state.json71.lock"}, ""},
		{"a sibling whose name is ours less the digits it ends with owns temp files like ours",
			[]string{"state", ".state1234", ".state15"}, nil, []string{".state1234", ".state15", "state"}, "state1"},
		{"a state file whose name ends in digits, with no sibling, has its temp files removed",
			[]string{".state1234"}, []string{".state1234"}, nil, "state1"},
		{"a sibling whose name is not ours and digits does not count",
			[]string{"state.json.7", "state.json7x", ".state.json7123"},
			[]string{".state.json7123"}, []string{"state.json.7", "state.json7x"}, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			base := tc.base
			if base == "" {
				base = "state.json"
			}
			removed, err := RemoveTempFiles(filepath.Join(dir, base))
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, name := range tc.removed {
				want = append(want, filepath.Join(dir, name))
			}
			slices.Sort(removed)
			if !slices.Equal(removed, want) {
				t.Errorf("removed %q, want %q", removed, want)
			}
			names := dirNames(t, dir)
			if !slices.Equal(names, tc.left) {
				t.Errorf("the directory holds %q, want %q", names, tc.left)
			}
		})
	}
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestRemoveTempFilesSaysWhyItCannotLook(t *testing.T) {
	_, err := RemoveTempFiles(filepath.Join(t.TempDir(), "missing", "state.json"))
	if err == nil || !strings.Contains(err.Error(), "missing") || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want one naming the directory that cannot be read", err)
	}
}
