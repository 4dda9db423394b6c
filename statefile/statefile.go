// Package statefile keeps, in one JSON file, what the housekeeping loop
// learned that no source can tell it again after a restart:
//
//   - the pods it saw torn down whose pod dirs are still there (only such a
//     dir may be called orphaned: a pod dir with nothing listed is also what
//     a pod kubelet has not started yet looks like), and
//   - the budgeted steps it took in the last hour (budget.max_per_hour
//     would start afresh on every restart otherwise: a plugin in a restart
//     loop would have no hourly limit).
//
// The file is replaced atomically (a temp file in the same directory,
// fsync, rename), so a crash leaves the old file or the new one. A file
// that cannot be read whole is an error for the caller to act on; nothing
// in it is guessed at. One plugin owns a file at a time (Lock).
//
// Every time in the file is written twice: on the wall clock (at) and, when
// the writer could read it, as the time since boot of the boot the file
// names (boot_id). A reader in the same boot ages each entry by the boot
// clock, which no wall clock step moves; after a reboot only the wall clock
// is left.
package statefile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/google/renameio/v2"

	"github.com/nri-housekeeper/nri-housekeeper/poduid"
	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// Version is the format this package writes. It reads versions 1 (no boot
// clock), 2 (no pod cgroup baseline) and 3.
const Version = 3

// MaxSize bounds the file read: a node has at most a few thousand pods
// seen torn down and budgeted steps in an hour; anything far larger is not
// a file this package wrote.
const MaxSize = 16 << 20

// State is the file's content.
type State struct {
	Version int `json:"version"`
	// BootID is the boot whose clock the since-boot times count on; ""
	// when the writer could not read the boot clock (then no entry has
	// one).
	BootID   string     `json:"boot_id,omitempty"`
	TornDown []TornDown `json:"torn_down"`
	Spent    []Spent    `json:"budget_spent"`
	// BudgetHeldUntil, when set, is the end of the hour after a state file
	// could not be read: until then every budgeted step is held, since what
	// was taken before is unknown. BudgetHeldWhy says so.
	BudgetHeldUntil          time.Time `json:"budget_held_until,omitzero"`
	BudgetHeldUntilSinceBoot SinceBoot `json:"budget_held_until_since_boot_ns,omitempty"`
	BudgetHeldWhy            string    `json:"budget_held_why,omitempty"`
}

// SinceBoot is a time as the time since boot of State.BootID, in
// nanoseconds; 0 when not known.
type SinceBoot int64

// TornDown is a pod the plugin saw torn down.
type TornDown struct {
	UID       string    `json:"uid"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
	At        time.Time `json:"at"` // when it was first seen torn down
	AtBoot    SinceBoot `json:"at_since_boot_ns,omitempty"`
	// Inspected: its pod dir was inspected after the mark; Seen are the
	// volume dirs, mount points and leftovers found then (more of them
	// later means kubelet is setting up a pod of that UID again).
	Inspected bool     `json:"inspected"`
	Seen      []string `json:"seen,omitempty"`
	// CgroupsInspected: its pod cgroups were looked at after the mark;
	// Cgroups are the directories found then, path to inode number (none:
	// it had no pod cgroup). One made since (a new path, another inode) is
	// kubelet setting up a pod of that UID again. Inode numbers hold only
	// in the boot the file names (boot_id): a reader in another boot does
	// not use them. Version 3.
	CgroupsInspected bool              `json:"cgroups_inspected,omitempty"`
	Cgroups          map[string]uint64 `json:"cgroups,omitempty"`
}

// Spent is one budgeted step taken: a unit of a budget class.
type Spent struct {
	At     time.Time `json:"at"`
	AtBoot SinceBoot `json:"at_since_boot_ns,omitempty"`
	Class  string    `json:"class"`
	Unit   string    `json:"unit"`
}

// ErrTooLarge is Encode's error for a state larger than a reader takes.
var ErrTooLarge = errors.New("too large for a state file")

// Encode returns the file's bytes for s, in a stable order (pods by UID,
// steps by time), so that equal states encode equally. A state larger than
// MaxSize is an error: Load would refuse the file.
func Encode(s State) ([]byte, error) {
	s.Version = Version
	s.TornDown = slices.Clone(s.TornDown)
	slices.SortFunc(s.TornDown, func(a, b TornDown) int { return strings.Compare(a.UID, b.UID) })
	s.Spent = slices.Clone(s.Spent)
	slices.SortStableFunc(s.Spent, func(a, b Spent) int { return a.At.Compare(b.At) })
	if s.TornDown == nil {
		s.TornDown = []TornDown{}
	}
	if s.Spent == nil {
		s.Spent = []Spent{}
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the state: %w", err)
	}
	if len(data) >= MaxSize {
		return nil, fmt.Errorf("encode the state: %d bytes (%d pods seen torn down, %d budgeted steps), over the %d a state file may have: %w",
			len(data), len(s.TornDown), len(s.Spent), MaxSize, ErrTooLarge)
	}
	return append(data, '\n'), nil
}

// Write replaces the file at path with data: the directory is made if
// missing (0700), the file is written 0600 (it names pods) and synced
// before it replaces the old one, and the directory is synced after. A
// FIFO, socket, device or symlink at path is an error, and is left as it
// is.
func Write(ctx context.Context, path string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, err := makeDir(path)
	if err != nil {
		return err
	}
	// The rename would replace whatever is at path. A FIFO, a socket or a
	// device there is another program's (housekeeping.state_file naming
	// the wrong file), which Load refuses and Restore leaves in place: it
	// is not written over either. (A directory fails the rename by
	// itself.) A symlink is someone's too: renamed over, the link would be
	// gone and the state kept beside it, not where it points; followed, a
	// link planted where others can write (state_file in a shared
	// directory) would turn the write onto any file. Neither is a guess
	// to make: the write fails, naming the file to configure instead.
	if fi, err := os.Lstat(path); err == nil {
		switch typ := fi.Mode().Type(); {
		case typ == fs.ModeSymlink:
			return fmt.Errorf("write the state file: %s is a symlink (to %s): not written over, nor what it points to; "+
				"set housekeeping.state_file to the file itself", path, linkTarget(path))
		case typ != 0 && typ != fs.ModeDir:
			return fmt.Errorf("write the state file: %s is %s, not a regular file: not written over", path, regularfile.TypeName(fi.Mode()))
		}
	}
	// The temp file in the same directory: a rename across file systems
	// (a private /tmp) would fail.
	if err := writeAtomically(path, dir, data); err != nil {
		return fmt.Errorf("write the state file %s: %w", path, err)
	}
	// renameio syncs the file, not the directory: until the directory is
	// synced, a power cut can bring the old file back, and with it an hour
	// that lacks the steps just taken.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync the state file's directory %s: %w", dir, err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync the state file's directory %s: %w", dir, err)
	}
	return nil
}

// linkTarget names what the symlink at path leads to: the file at the end
// of its chain, or, where that cannot be resolved (a link to nothing), its
// own target.
func linkTarget(path string) string {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		return resolved
	}
	if target, err := os.Readlink(path); err == nil {
		return target
	}
	return "an unreadable target"
}

// makeDir makes the directory of the file at path if it is missing (0700:
// the file names pods) and returns it.
func makeDir(path string) (string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("make the state file's directory: %w", err)
	}
	return dir, nil
}

// writeAtomically writes data to a temp file in dir, synced, and renames it
// over path, always 0600: renameio.WriteFile would copy the mode of the
// file it replaces, and one someone made world-writable would stay so.
func writeAtomically(path, dir string, data []byte) error {
	t, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithStaticPermissions(0o600))
	if err != nil {
		return err
	}
	defer func() { _ = t.Cleanup() }()
	if _, err := t.Write(data); err != nil {
		return err
	}
	return t.CloseAtomicallyReplace()
}

// Load reads the file at path. An absent file is an error wrapping
// fs.ErrNotExist (nothing was kept yet); any other problem (unreadable,
// too large, not this format, an entry that is not valid) is an error
// naming the path and, where it can, the line.
func Load(ctx context.Context, path string) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, err
	}
	// A FIFO at path (housekeeping.state_file naming the wrong file)
	// would block the open, and the plugin's start, for ever: it is
	// refused with anything else that is not a regular file.
	f, _, err := regularfile.Open(path, os.O_RDONLY, 0)
	if err != nil {
		return State{}, fmt.Errorf("open the state file: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return State{}, fmt.Errorf("read the state file %s: %w", path, err)
	}
	if len(data) > MaxSize {
		return State{}, fmt.Errorf("state file %s: larger than %d bytes: not a file nri-housekeeper wrote", path, MaxSize)
	}
	s, err := Decode(data)
	if err != nil {
		return State{}, fmt.Errorf("state file %s: %w", path, err)
	}
	return s, nil
}

// Decode parses and checks a file's bytes.
func Decode(data []byte) (State, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		// This package never writes one: a file made by hand, or one a
		// crash left on a file system that does not keep the order of a
		// write and a rename.
		return State{}, errors.New("the file is empty: not a file nri-housekeeper wrote")
	}
	var s State
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return State{}, decodeError(data, err)
	}
	if dec.More() {
		return State{}, errors.New("more than one JSON value")
	}
	// encoding/json keeps the last of two equal keys and drops the first
	// without a word: a "budget_spent" given twice would lose the steps of
	// the first, and let more through than the hour's budget.
	if err := duplicateKey(data); err != nil {
		return State{}, err
	}
	if s.Version < 1 || s.Version > Version {
		return State{}, fmt.Errorf("version %d, this nri-housekeeper reads versions 1 to %d", s.Version, Version)
	}
	if s.Version == 1 && s.BootID != "" {
		return State{}, errors.New("boot_id in a version 1 file")
	}
	// Since-boot times count on boot_id's clock: all are there with it, or
	// none is.
	boot := func(what string, b SinceBoot) error {
		switch {
		case s.BootID != "" && b <= 0:
			return fmt.Errorf("%s: no since-boot time, and the file names boot %s", what, s.BootID)
		case s.BootID == "" && b != 0:
			return fmt.Errorf("%s: a since-boot time, and the file names no boot_id", what)
		}
		return nil
	}
	for i, t := range s.TornDown {
		if err := boot(fmt.Sprintf("torn_down[%d] (pod %s)", i, t.UID), t.AtBoot); err != nil {
			return State{}, err
		}
		switch {
		case !poduid.Valid(t.UID):
			return State{}, fmt.Errorf("torn_down[%d]: uid %q is not a pod UID", i, t.UID)
		case t.At.IsZero():
			return State{}, fmt.Errorf("torn_down[%d] (pod %s): no time", i, t.UID)
		case !t.Inspected && len(t.Seen) > 0:
			return State{}, fmt.Errorf("torn_down[%d] (pod %s): seen entries without inspected", i, t.UID)
		case s.Version < 3 && t.CgroupsInspected:
			return State{}, fmt.Errorf("torn_down[%d] (pod %s): cgroups_inspected in a version %d file", i, t.UID, s.Version)
		case !t.CgroupsInspected && len(t.Cgroups) > 0:
			return State{}, fmt.Errorf("torn_down[%d] (pod %s): cgroups without cgroups_inspected", i, t.UID)
		}
		for p := range t.Cgroups {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				return State{}, fmt.Errorf("torn_down[%d] (pod %s): cgroup path %q is not a clean absolute path", i, t.UID, p)
			}
		}
	}
	if s.BudgetHeldUntil.IsZero() != (s.BudgetHeldWhy == "") {
		return State{}, errors.New("budget_held_until and budget_held_why must be set together")
	}
	if !s.BudgetHeldUntil.IsZero() {
		if err := boot("budget_held_until", s.BudgetHeldUntilSinceBoot); err != nil {
			return State{}, err
		}
	} else if s.BudgetHeldUntilSinceBoot != 0 {
		return State{}, errors.New("budget_held_until_since_boot_ns without budget_held_until")
	}
	for i, sp := range s.Spent {
		if err := boot(fmt.Sprintf("budget_spent[%d]", i), sp.AtBoot); err != nil {
			return State{}, err
		}
		switch {
		case sp.At.IsZero():
			return State{}, fmt.Errorf("budget_spent[%d]: no time", i)
		case sp.Class == "" || sp.Unit == "":
			return State{}, fmt.Errorf("budget_spent[%d]: class and unit must both be set", i)
		}
	}
	return s, nil
}

// duplicateKey returns an error naming the line of the first key that an
// object of data (one valid JSON value) has twice, in any case.
func duplicateKey(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	// One frame per open object or array: an object's keys so far, and
	// whether its next string token is a key; nil keys for an array.
	type frame struct {
		keys      map[string]bool
		expectKey bool
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return decodeError(data, err)
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].keys != nil {
			if stack[top].expectKey {
				if key, ok := tok.(string); ok {
					// encoding/json matches a key to a field whatever its
					// case, folded as it folds ("Budget_Spent", and
					// "budget_ſpent" with a long s, fill budget_spent too).
					folded := strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, key)
					if stack[top].keys[folded] {
						line := 1 + bytes.Count(data[:dec.InputOffset()], []byte("\n"))
						return fmt.Errorf("line %d: key %q given twice in one object, in this case or another (JSON keeps only the last, and the first would be lost)", line, key)
					}
					stack[top].keys[folded] = true
					stack[top].expectKey = false
					continue
				}
			} else {
				stack[top].expectKey = true // the value is this token
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, expectKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
		}
	}
}

// decodeError names the line of a syntax or type error.
func decodeError(data []byte, err error) error {
	var offset int64 = -1
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		offset = syntax.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	case errors.Is(err, io.ErrUnexpectedEOF):
		offset = int64(len(data)) // cut short: the last line
	}
	if offset < 0 || offset > int64(len(data)) {
		return fmt.Errorf("not valid JSON of this format: %w", err)
	}
	line := 1 + bytes.Count(data[:offset], []byte("\n"))
	return fmt.Errorf("line %d: not valid JSON of this format: %w", line, err)
}

// RemoveTempFiles removes the temp files a write that never finished left
// beside the file at path (a crash, a SIGKILL or a power cut between the
// temp file's creation and its rename: renameio names them "." + the
// file's name + a number), and returns the paths it removed. Only its
// lock's holder may call it: another writer's temp file is live. What has
// that name but is not a regular file (a directory, a symlink) is someone
// else's and is left alone, as is anything else in the directory.
//
// The number has no fixed length, so the temp files of a sibling whose name
// is this one's and digits ("state.json7" beside "state.json"), or this
// one's less digits it ends with ("state" beside "state1"), have names ours
// could have: while such a sibling or its lock is there, a temp file whose
// name could be its is left alone too (it may be a live write).
func RemoveTempFiles(path string) ([]string, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("look for temp files beside the state file in %s: %w", dir, err)
	}
	// digitsAfter says whether name is prefix + one digit or more.
	digitsAfter := func(name, prefix string) bool {
		suffix, ok := strings.CutPrefix(name, prefix)
		return ok && suffix != "" && strings.Trim(suffix, "0123456789") == ""
	}
	// Siblings: this name and digits, or this name less digits it ends
	// with ("state" beside "state1": ".state1234" may be its).
	var siblings []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lock")
		if name != base && (digitsAfter(name, base) || digitsAfter(base, name)) {
			siblings = append(siblings, "."+name)
		}
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !digitsAfter(e.Name(), "."+base) || !e.Type().IsRegular() ||
			slices.ContainsFunc(siblings, func(s string) bool { return strings.HasPrefix(e.Name(), s) }) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove the temp file %s a write left: %w", p, err))
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}
