package nodefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Remover deletes files and directory trees strictly below a fixed set of
// roots (DESIGN.md, "Stricter than kubelet" rule 5):
//
//   - a path must be absolute, free of "..", strictly below a root and not
//     itself a root;
//   - every step is an *at system call relative to an open directory, opened
//     with O_NOFOLLOW below the root, so a concurrent rename or symlink swap
//     cannot redirect it outside the root;
//   - a symlink is never followed: the link itself is unlinked;
//   - it never descends into, or removes, a directory on another device or
//     another mount (this catches same-device bind mounts), and it refuses the
//     whole removal up front when the kernel's mount table shows a mount point
//     at or below the path (a table read at most a second before where the
//     kernel gives mount IDs, which the walk checks; afresh otherwise).
//
// The roots themselves are trusted configuration: symlinks in a root's own
// path are followed when it is opened.
type Remover struct {
	roots []string // absolute, clean, never "/", longest first

	// The mount table as last read, shared by removals for up to
	// mountTableReuse where the walk itself tells mounts apart by mount
	// ID (see mountTable).
	mu       sync.Mutex
	mounts   []string
	mountsAt time.Time
}

// mountTableReuse is how long one read of the mount table serves later
// removals. Reading it costs what the node's mounts cost: 4-7 ms, up to
// 40 ms under load, with 930 mounts (300 live pods); each pod log dir
// removal read it, so a pass that reclaimed 300 leaked pods spent 2 s on
// it. Within a second a reclaim's removals share one read.
const mountTableReuse = time.Second

// RefusedError is returned (wrapped) when a safety rule stops a removal.
// Nothing at Path was removed. Retrying does not help until a person has
// looked at Path, unless Changed: what the decision saw changed since (a
// pod of that UID set up again), and the next plan decides anew.
type RefusedError struct {
	Path    string
	Reason  string
	Changed bool
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refusing to remove %s: %s", e.Path, e.Reason)
}

// ChangedSinceDecided reports whether the refusal is of something changed
// since the decision: not a failure, as when the check right before the
// step finds it.
func (e *RefusedError) ChangedSinceDecided() bool { return e.Changed }

func refuse(path, format string, args ...any) error {
	return &RefusedError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// NewRemover returns a Remover for the given roots. Each root must be an
// absolute path without ".." and must not be "/"; it is cleaned (a trailing
// slash is fine).
func NewRemover(roots ...string) (*Remover, error) {
	if len(roots) == 0 {
		return nil, errors.New("nodefs: a Remover needs at least one root")
	}
	r := &Remover{}
	for _, root := range roots {
		switch {
		case !filepath.IsAbs(root):
			return nil, fmt.Errorf("nodefs: removal root %q is not an absolute path", root)
		case hasDotDot(root):
			return nil, fmt.Errorf("nodefs: removal root %q contains \"..\"", root)
		case strings.IndexByte(root, 0) >= 0:
			return nil, fmt.Errorf("nodefs: removal root %q contains a NUL byte", root)
		case filepath.Clean(root) == "/":
			return nil, fmt.Errorf("nodefs: removal root %q is the whole file system", root)
		}
		r.roots = append(r.roots, filepath.Clean(root))
	}
	// Longest first, so that with nested roots a path is handled relative to
	// the closest one (fewer components to walk, and the tighter check).
	sort.SliceStable(r.roots, func(i, j int) bool { return len(r.roots[i]) > len(r.roots[j]) })
	return r, nil
}

// Roots returns the cleaned roots, longest first.
func (r *Remover) Roots() []string { return append([]string(nil), r.roots...) }

// Within reports whether path, after filepath.Clean, is strictly below one of
// the roots. It is false for relative paths, for a root itself, and for any
// path whose ".." elements lead out of the roots.
func (r *Remover) Within(path string) bool {
	_, ok := r.rootOf(path)
	return ok
}

// rootOf returns the closest root strictly above path (see Within).
func (r *Remover) rootOf(path string) (string, bool) {
	if !filepath.IsAbs(path) {
		return "", false
	}
	c := filepath.Clean(path)
	for _, root := range r.roots {
		if c == root {
			// Equal to a root, even if below another (nested) root: a
			// root is never removed.
			return "", false
		}
	}
	for _, root := range r.roots {
		if strings.HasPrefix(c, root+"/") {
			return root, true
		}
	}
	return "", false
}

// target validates path for removal and returns its root and the path's
// components below that root. Removal is stricter than Within: a ".."
// element anywhere is refused rather than resolved.
func (r *Remover) target(path string) (root string, rel []string, err error) {
	switch {
	case !filepath.IsAbs(path):
		return "", nil, refuse(path, "not an absolute path")
	case hasDotDot(path):
		return "", nil, refuse(path, "the path contains \"..\"")
	case strings.IndexByte(path, 0) >= 0:
		return "", nil, refuse(path, "the path contains a NUL byte")
	}
	root, ok := r.rootOf(path)
	if !ok {
		for _, root := range r.roots {
			if filepath.Clean(path) == root {
				return "", nil, refuse(path, "it is a removal root")
			}
		}
		return "", nil, refuse(path, "not strictly below a removal root %v", r.roots)
	}
	return root, strings.Split(strings.TrimPrefix(filepath.Clean(path), root+"/"), "/"), nil
}

// RemovePodLogDir removes a pod log directory and everything in it. path
// must be a direct child of a root, a real directory (not a symlink), and its
// name must parse as a pod log dir name (ParsePodLogDirName). A missing path
// is success.
func (r *Remover) RemovePodLogDir(ctx context.Context, path string) error {
	_, rel, err := r.target(path)
	if err != nil {
		return err
	}
	if len(rel) != 1 {
		return refuse(path, "a pod log dir must be directly in a removal root %v", r.roots)
	}
	if _, err := ParsePodLogDirName(rel[0]); err != nil {
		return refuse(path, "%v", err)
	}
	return r.removeTree(ctx, path, true)
}

// RemoveContainerLogLink removes one legacy container log symlink: path must
// be a direct child of a root, a symlink, and its name must parse
// (ParseContainerLogLinkName). The link is unlinked, never its target. A
// missing path is success.
func (r *Remover) RemoveContainerLogLink(ctx context.Context, path string) error {
	root, rel, err := r.target(path)
	if err != nil {
		return err
	}
	if len(rel) != 1 {
		return refuse(path, "a container log link must be directly in a removal root %v", r.roots)
	}
	name := rel[0]
	if _, err := ParseContainerLogLinkName(name); err != nil {
		return refuse(path, "%v", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	rootFd, err := openRoot(root)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	defer unix.Close(rootFd)
	fi, err := statAt(rootFd, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: lstat: %w", path, err)
	}
	if fi.mode != unix.S_IFLNK {
		return refuse(path, "it is not a symlink (%s)", fi.kind())
	}
	// A swap between the lstat above and the unlink below can at worst
	// unlink whatever now has this kubelet-format name in the root; unlink
	// never follows a link and never removes a directory.
	return unlink(rootFd, name, path)
}

// RemoveTreeOneFilesystem removes path and, if it is a directory, everything
// below it, like `rm -rf --one-file-system` but stricter (see Remover). A
// symlink anywhere, including path itself, is unlinked, not followed. A
// missing path is success. On a refusal or error deeper in the tree it keeps
// removing what it safely can and returns the first error.
func (r *Remover) RemoveTreeOneFilesystem(ctx context.Context, path string) error {
	return r.removeTree(ctx, path, false)
}

// removeTree is RemoveTreeOneFilesystem; with dirOnly, path itself must be
// a real directory.
func (r *Remover) removeTree(ctx context.Context, path string, dirOnly bool) error {
	root, rel, err := r.target(path)
	if err != nil {
		return err
	}
	path = filepath.Clean(path)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	// Walk down to the parent of path; the mount table is checked at path.
	d, found, err := r.descend(root, rel[:len(rel)-1], rel, path)
	if !found || err != nil {
		return err
	}
	defer d.close()

	w := walker{ctx: ctx, root: d.root}
	return wrapRemoving(path, w.removeEntry(d.dirFd, rel[len(rel)-1], path, dirOnly))
}

// descent is a walk from a root down to a directory below it.
type descent struct {
	root    fileInfo
	dirFd   int    // the directory reached (the root's when no dirs were given)
	dirPath string // its path, for messages
	fds     []int  // every descriptor opened, the root's first
}

func (d *descent) close() {
	for _, fd := range d.fds {
		unix.Close(fd)
	}
}

// descend opens root and walks down through dirs, one O_NOFOLLOW open at a
// time, refusing a symlink, a non-directory or another mount on the way,
// then checks the mount table at root/mountCheck (refuseMountsAt). found is
// false, with a nil error, when the root or a dir is missing: nothing to
// remove. path names the removal in errors. The caller closes d when found.
func (r *Remover) descend(root string, dirs, mountCheck []string, path string) (d *descent, found bool, err error) {
	rootFd, err := openRoot(root)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("removing %s: %w", path, err)
	}
	d = &descent{dirFd: rootFd, dirPath: root, fds: []int{rootFd}}
	defer func() {
		if !found || err != nil {
			d.close()
			d = nil
		}
	}()
	if d.root, err = statAt(rootFd, ""); err != nil {
		return d, false, fmt.Errorf("removing %s: stat root %s: %w", path, root, err)
	}
	for _, name := range dirs {
		p := d.dirPath + "/" + name
		fd, err := openDir(d.dirFd, name)
		switch {
		case errors.Is(err, unix.ENOENT):
			return d, false, nil
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return d, false, wrapRemoving(path, refuse(p, "it is a %s, not a directory", kindAt(d.dirFd, name)))
		case err != nil:
			return d, false, fmt.Errorf("removing %s: opening %s: %w", path, p, err)
		}
		d.fds = append(d.fds, fd)
		fi, err := statAt(fd, "")
		if err != nil {
			return d, false, fmt.Errorf("removing %s: stat %s: %w", path, p, err)
		}
		if reason := otherMount(d.root, fi); reason != "" {
			return d, false, wrapRemoving(path, refuse(p, "%s", reason))
		}
		d.dirFd, d.dirPath = fd, p
	}
	// Nothing below the root is a symlink now: the mount table can be
	// checked by path.
	if err := r.refuseMountsAt(rootFd, d.root, root, mountCheck, path); err != nil {
		return d, false, err
	}
	return d, true, nil
}

// refuseMountsAt refuses a removal at root/rel when the kernel's mount
// table shows a mount point at or below it (what catches a same-device
// bind mount where statx gives no mount ID), or when the root resolves to
// "/". Every component of rel must be known not to be a symlink: the
// root's real path plus rel is then the path the mount table shows.
func (r *Remover) refuseMountsAt(rootFd int, rootInfo fileInfo, root string, rel []string, path string) error {
	// The kernel's name for the root, which is what the mount table uses
	// when the configured root goes through a symlink.
	realRoot, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(rootFd))
	if err != nil {
		return fmt.Errorf("removing %s: resolving root %s through /proc/self/fd (needed to check for mount points): %w", path, root, err)
	}
	if realRoot == "/" {
		// NewRemover refuses "/", but a root can be a symlink to it.
		return refuse(path, "its root %s resolves to /", root)
	}
	table, err := r.mountTable(rootInfo.mntID != 0)
	if err != nil {
		return fmt.Errorf("removing %s: checking for mount points: %w", path, err)
	}
	// Only mounts strictly below the root count: the root itself (a
	// DaemonSet's hostPath) or a mount above it is not ours to judge.
	mounts := mountsOnTarget(strictlyBelow(table, realRoot), realRoot+"/"+strings.Join(rel, "/"))
	if len(mounts) == 0 {
		return nil
	}
	// Name them as the caller knows them, below the configured root.
	for i, m := range mounts {
		mounts[i] = root + strings.TrimPrefix(m, realRoot)
	}
	reason := "it is a mount point"
	if len(mounts) > 1 {
		reason += fmt.Sprintf(" (so are %s)", strings.Join(mounts[1:], ", "))
	}
	return wrapRemoving(path, refuse(mounts[0], "%s", reason))
}

// mountTable returns every mount point of the mount table. With shared, a
// table read less than mountTableReuse ago serves: the root has a mount ID
// (statx's, or its file handle's before Linux 5.8), so every directory of
// the walk has one too (a same-device directory is on the same file
// system, whose handles the root's proved), and the walk refuses any mount
// made since in the tree it enters (otherMount), as it refuses one made
// between this read and the walk. Without mount IDs a same-device bind
// mount is seen only in the table, so it is read afresh for every removal.
func (r *Remover) mountTable(shared bool) ([]string, error) {
	if !shared {
		return readMountPoints()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mounts != nil && time.Since(r.mountsAt) < mountTableReuse {
		return r.mounts, nil
	}
	at := time.Now()
	mounts, err := readMountPoints()
	if err != nil {
		return nil, err
	}
	if mounts == nil {
		mounts = []string{}
	}
	r.mounts, r.mountsAt = mounts, at
	return mounts, nil
}

// wrapRemoving adds "removing <path>" to err, unless err already is a
// refusal naming path itself.
func wrapRemoving(path string, err error) error {
	if r, ok := err.(*RefusedError); err == nil || ok && r.Path == path {
		return err
	}
	return fmt.Errorf("removing %s: %w", path, err)
}

// kindAt names what name in dirFd is, for an error message.
func kindAt(dirFd int, name string) string {
	fi, err := statAt(dirFd, name)
	if err != nil {
		return fmt.Sprintf("file that cannot be examined (%v)", err)
	}
	return fi.kind()
}

// maxRmdirAttempts bounds how often a directory is re-read when entries keep
// appearing in it while it is being emptied (a process still writing logs).
const maxRmdirAttempts = 3

// walker removes one tree. It carries what every step compares against.
type walker struct {
	ctx  context.Context
	root fileInfo
	// depth is how many directories below where the removal started the
	// walker is: each level keeps an open directory and its path, so a
	// tree deeper than maxRemoveDepth is refused, not walked.
	depth int
	// inspected, when not nil, is the pod dir removal's own inspection
	// (PodDir.Identities): rmdirTree takes no volume dir it lacks.
	inspected map[string]string
}

// maxRemoveDepth bounds how deep a removal walks, as maxVolumesDepth bounds
// the inspection: what kubelet writes is a few levels deep, and a chain of
// directories thousands deep (anything that can write there can make one)
// cost a file descriptor and a path per level, gigabytes of paths at a few
// thousand levels of long names.
const maxRemoveDepth = 64

// below is w one directory further down, or a refusal of path past
// maxRemoveDepth.
func (w walker) below(path string) (walker, error) {
	if w.depth >= maxRemoveDepth {
		return w, refuse(path, "it is more than %d levels below what is removed: not walked further", maxRemoveDepth)
	}
	w.depth++
	return w, nil
}

// removeEntry removes name in the directory dirFd; path is its full path,
// for errors only.
func (w walker) removeEntry(dirFd int, name, path string, dirOnly bool) error {
	fi, err := statAt(dirFd, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lstat %s: %w", path, err)
	}
	if fi.mode != unix.S_IFDIR {
		if dirOnly {
			return refuse(path, "it is a %s, not a directory", fi.kind())
		}
		return unlink(dirFd, name, path)
	}
	if reason := otherMount(w.root, fi); reason != "" {
		return refuse(path, "%s", reason)
	}
	return w.removeDir(dirFd, name, path)
}

// removeDir empties and removes the directory name in dirFd.
func (w walker) removeDir(parentFd int, name, path string) error {
	inside, err := w.below(path)
	if err != nil {
		return err
	}
	fd, err := openDir(parentFd, name)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return refuse(path, "it was replaced by a %s while being removed", kindAt(parentFd, name))
	case err != nil:
		return fmt.Errorf("opening %s: %w", path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	defer dir.Close()
	// Check again on the open descriptor: this is what we descend into,
	// whatever happened to the name since the lstat.
	fi, err := statAt(fd, "")
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if reason := otherMount(w.root, fi); reason != "" {
		return refuse(path, "%s", reason)
	}

	for attempt := 0; attempt < maxRmdirAttempts; attempt++ {
		names, err := readNames(w.ctx, dir)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		var first error
		failed := 0
		for _, n := range names {
			if err := w.ctx.Err(); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			// Keep going after an error, like rm -rf: the rest is still
			// safe to remove, and the first error is reported.
			if err := inside.removeEntry(fd, n, path+"/"+n, false); err != nil {
				if first == nil {
					first = err
				}
				failed++
			}
		}
		if first != nil {
			if failed > 1 {
				return fmt.Errorf("%w (and %d more errors below %s)", first, failed-1, path)
			}
			return first
		}
		err = unix.Unlinkat(parentFd, name, unix.AT_REMOVEDIR)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
			continue // something was created meanwhile: read it again
		case errors.Is(err, unix.EBUSY):
			return refuse(path, "it is in use, most likely a mount point")
		default:
			return fmt.Errorf("rmdir %s: %w", path, err)
		}
	}
	return fmt.Errorf("rmdir %s: still not empty after %d attempts: something keeps creating files in it", path, maxRmdirAttempts)
}

// readNames reads all names in dir from the start, checking ctx between
// batches.
func readNames(ctx context.Context, dir *os.File) ([]string, error) {
	if _, err := dir.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	var all []string
	for {
		batch, err := dir.Readdirnames(1024)
		all = append(all, batch...)
		if errors.Is(err, io.EOF) {
			return all, nil
		}
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// unlink removes a non-directory; missing is success.
func unlink(dirFd int, name, path string) error {
	err := unix.Unlinkat(dirFd, name, 0)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EBUSY):
		// A file bind-mounted over this name.
		return refuse(path, "it is in use, most likely a mount point")
	case errors.Is(err, unix.EISDIR):
		return refuse(path, "it was replaced by a directory while being removed")
	default:
		return fmt.Errorf("unlink %s: %w", path, err)
	}
}

// openRoot opens a configured root. Symlinks in the root's own path are
// followed: the roots are trusted configuration.
func openRoot(root string) (int, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open root", Path: root, Err: err}
	}
	return fd, nil
}

// openDir opens the directory name in dirFd without following a symlink
// (ELOOP) and without opening a non-directory (ENOTDIR).
func openDir(dirFd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

// fileInfo is what removal needs to know about one file.
type fileInfo struct {
	mode      uint32 // the S_IFMT bits
	dev       uint64
	ino       uint64
	mntID     uint64 // 0 when unknown (statx before Linux 5.8, and no file handle)
	mountRoot bool   // the root of a mount (Linux 5.8+)
	// born is the birth time (statx btime) as "seconds.nanoseconds", ""
	// when the kernel or the file system does not report it.
	born string
}

func (fi fileInfo) kind() string {
	switch fi.mode {
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFREG:
		return "regular file"
	}
	return "special file"
}

// statAt is lstat of name in dirFd; an empty name is dirFd itself. statx
// also reports the mount ID, which tells a same-device bind mount apart.
// Kernels before 5.8 (RHEL 8's 4.18, Ubuntu 20.04's 5.4) have statx without
// it: a directory's mount ID is then asked of name_to_handle_at (2.6.39+).
// When neither gives one (statx refused by a seccomp filter, a file system
// without file handles), the device number and the mount table check still
// apply.
func statAt(dirFd int, name string) (fileInfo, error) {
	return statWith(unix.Statx, dirFd, name)
}

// statxFunc is unix.Statx; statWith takes it so that a test can be a
// kernel whose statx has no mount ID, or no statx at all.
type statxFunc func(dirFd int, path string, flags, mask int, stat *unix.Statx_t) error

func statWith(statx statxFunc, dirFd int, name string) (fileInfo, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var stx unix.Statx_t
	err := statx(dirFd, name, flags, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_MNT_ID|unix.STATX_BTIME, &stx)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		var st unix.Stat_t
		if err := unix.Fstatat(dirFd, name, &st, flags); err != nil {
			return fileInfo{}, err
		}
		fi := fileInfo{mode: st.Mode & unix.S_IFMT, dev: st.Dev, ino: st.Ino}
		if fi.mode == unix.S_IFDIR {
			fi.mntID = handleMountID(dirFd, name)
		}
		return fi, nil
	}
	if err != nil {
		return fileInfo{}, err
	}
	fi := fileInfo{
		mode: uint32(stx.Mode) & unix.S_IFMT,
		dev:  unix.Mkdev(stx.Dev_major, stx.Dev_minor),
		ino:  stx.Ino,
	}
	if stx.Mask&unix.STATX_MNT_ID != 0 {
		fi.mntID = stx.Mnt_id
	} else if fi.mode == unix.S_IFDIR {
		fi.mntID = handleMountID(dirFd, name)
	}
	if stx.Mask&unix.STATX_BTIME != 0 {
		fi.born = fmt.Sprintf("%d.%09d", stx.Btime.Sec, stx.Btime.Nsec)
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		fi.mountRoot = stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
	}
	return fi, nil
}

// handleMountID is the mount ID of name in dirFd (dirFd itself when name
// is empty) as name_to_handle_at reports it, the number statx's
// STATX_MNT_ID gives on later kernels; 0 when it cannot tell (a file system
// without file handles). A symlink is not followed: swapped in since the
// stat, it is on the mount of the directory it is in, and the walk opens
// nothing through it (O_NOFOLLOW) and checks the directory it opened again
// by its descriptor.
func handleMountID(dirFd int, name string) uint64 {
	flags := 0
	if name == "" {
		flags = unix.AT_EMPTY_PATH
	}
	_, id, err := unix.NameToHandleAt(dirFd, name, flags)
	if err != nil || id <= 0 {
		return 0
	}
	return uint64(id)
}

// otherMount says why fi, a directory below the root, must not be entered
// or removed: it is on another device, or on another mount of the same
// device. "" means it is on the root's mount.
func otherMount(root, fi fileInfo) string {
	switch {
	case fi.dev != root.dev:
		return fmt.Sprintf("it is on another file system (device %d:%d, the root's is %d:%d)",
			unix.Major(fi.dev), unix.Minor(fi.dev), unix.Major(root.dev), unix.Minor(root.dev))
	case fi.mountRoot:
		return "it is a mount point"
	case fi.mntID != 0 && root.mntID != 0 && fi.mntID != root.mntID:
		return fmt.Sprintf("it is on another mount (mount ID %d, the root's is %d): a bind mount or mount point", fi.mntID, root.mntID)
	}
	return ""
}

func hasDotDot(path string) bool {
	for _, el := range strings.Split(path, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

// Identity is the device and inode of the file open at fd, and the ID of
// the mount it is on (0 when the kernel cannot tell: see statAt), as the
// mount table's first field names it.
func Identity(fd int) (dev, ino, mntID uint64, err error) {
	fi, err := statAt(fd, "")
	if err != nil {
		return 0, 0, 0, err
	}
	return fi.dev, fi.ino, fi.mntID, nil
}
