package nodefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/dirlist"
)

// PodDirs is kubelet's own record of the pods on the node: the
// <kubelet_root>/pods/<uid> directories. kubelet creates a pod's directory
// before its sandbox and removes it only after the pod is deleted and cleaned
// up, so an absent directory means kubelet no longer wants the pod.
type PodDirs struct {
	// Ready is true when the pods dir could be read. When false the oracle
	// knows nothing, and nothing that depends on it may happen.
	Ready bool
	// Err says why the oracle is not ready: it names the path and what to check.
	Err error
	// UIDs holds the name of every directory entry of the pods dir. Like
	// kubelet's listPodsFromDisk, every directory counts, parsed or not: an
	// odd name can only make a pod look present, never gone.
	UIDs map[string]struct{}
	// ModTime is the pods dir's modification time, read after its entries:
	// it changes whenever a pod dir is made or removed there, so a pod dir
	// that is absent while ModTime predates the pod's sandbox was never
	// removed from this dir (the planner's check of the oracle).
	ModTime time.Time
	// Born is the pods dir's birth time, zero where the file system keeps
	// none: an empty pods dir born after a sandbox was created never held
	// that sandbox's pod dir (the planner's check of the oracle).
	Born time.Time
	// Dev and Ino identify the pods dir read (a symlink to it followed):
	// the check right before a step that rests on a pod being gone
	// compares them, so that a pods dir mounted over or put in its place
	// since is not taken for the one the plan read.
	Dev, Ino uint64
}

// Present reports whether uid has a pod directory. It is false for an oracle
// that is not ready; callers must check Ready first.
func (d PodDirs) Present(uid string) bool {
	_, ok := d.UIDs[uid]
	return ok
}

// ListPodDirs reads <kubeletRoot>/pods. It never returns a ready oracle built
// from partial data: any error while reading makes it not ready.
func ListPodDirs(ctx context.Context, kubeletRoot string) PodDirs {
	return listPodDirs(ctx, kubeletRoot, nil)
}

// listPodDirs is ListPodDirs; afterRead, when set, runs between the read of
// the entries and the look at the pods dir after it (a test's seam).
func listPodDirs(ctx context.Context, kubeletRoot string, afterRead func()) PodDirs {
	dir := filepath.Join(kubeletRoot, "pods")
	// Its identity before the entries, compared with the one after: a
	// pods dir mounted over or replaced in between would give the entries
	// of one and the identity of the other.
	var devBefore, inoBefore uint64
	if fi, err := os.Stat(dir); err == nil {
		devBefore, inoBefore, _ = DevIno(fi)
	}
	entries, err := dirlist.Read(ctx, dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("kubelet pods dir %s does not exist: is pods.kubelet_root right? (pods.source = \"none\" disables the oracle): %w", dir, err)
		} else {
			err = fmt.Errorf("kubelet pods dir %s cannot be read: check that it is a directory and that the plugin runs as root with it mounted: %w", dir, err)
		}
		return PodDirs{Err: err}
	}
	uids := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		// Type comes from lstat semantics: a symlink is not a directory,
		// exactly as in kubelet's listPodsFromDisk.
		if e.IsDir() {
			uids[e.Name()] = struct{}{}
		}
	}
	if afterRead != nil {
		afterRead()
	}
	// After the entries: a pod dir removed before the listing has changed
	// the time read here.
	fi, err := os.Stat(dir)
	if err != nil {
		return PodDirs{Err: fmt.Errorf("kubelet pods dir %s cannot be read: %w", dir, err)}
	}
	dev, ino, ok := DevIno(fi)
	switch {
	case !ok:
		return PodDirs{Err: fmt.Errorf("kubelet pods dir %s: no device and inode number in %T", dir, fi.Sys())}
	case dev != devBefore || ino != inoBefore:
		return PodDirs{Err: fmt.Errorf("kubelet pods dir %s was mounted over or replaced while it was read (device %d:%d inode %d, then %d:%d inode %d): read again next pass",
			dir, unix.Major(devBefore), unix.Minor(devBefore), inoBefore, unix.Major(dev), unix.Minor(dev), ino)}
	}
	return PodDirs{Ready: true, UIDs: uids, ModTime: fi.ModTime(), Born: birthTime(dir), Dev: dev, Ino: ino}
}

// DevIno is the device and inode number of what fi (from os.Stat or
// os.Lstat) describes; ok is false when it holds none.
func DevIno(fi fs.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Dev, st.Ino, true
}

// birthTime is path's birth time, or zero where the kernel or the file
// system does not say (statx before Linux 4.11, tmpfs before 6.x).
func birthTime(path string) time.Time {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_SYNC_AS_STAT, unix.STATX_BTIME, &stx); err != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return time.Time{}
	}
	return time.Unix(stx.Btime.Sec, int64(stx.Btime.Nsec))
}

// PodLogDir is one directory of the pod logs dir whose name parses.
type PodLogDir struct {
	Path      string // Dir joined with Name
	Name      string // the directory's name
	Namespace string // empty for a legacy <uid> name
	PodName   string // empty for a legacy <uid> name
	UID       string
}

// Skipped is a directory entry that a listing left out, and why. Skipped
// entries are never removed.
type Skipped struct {
	Path   string
	Reason string
}

// ListPodLogDirs lists the pod log directories in dir (logs.pod_logs_dir).
// Only real directories (not symlinks) whose names parse are returned; every
// other entry is in skipped with the reason. err is set when dir itself
// cannot be read, and then nothing is returned.
func ListPodLogDirs(ctx context.Context, dir string) (dirs []PodLogDir, skipped []Skipped, err error) {
	entries, err := dirlist.Read(ctx, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("pod logs dir %s: %w", dir, err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			skipped = append(skipped, Skipped{path, "a symlink, not a directory kubelet created"})
			continue
		case !e.IsDir():
			skipped = append(skipped, Skipped{path, "not a directory"})
			continue
		}
		d, err := ParsePodLogDirName(e.Name())
		if err != nil {
			skipped = append(skipped, Skipped{path, err.Error()})
			continue
		}
		d.Path = path
		dirs = append(dirs, d)
	}
	return dirs, skipped, nil
}

// ContainerLogLink is one legacy container log symlink whose name parses.
type ContainerLogLink struct {
	Path          string // Dir joined with Name
	Name          string // the link's name
	Target        string // what the link points to, as stored in the link
	ContainerID   string // may be a prefix of the real ID, see Truncated
	PodName       string
	Namespace     string
	ContainerName string
	// PodUID is the UID in the name of the pod log dir the target points
	// into, when that dir's namespace and pod name are the link's; else
	// empty. Only for naming the pod in logs.
	PodUID string
	// TargetLogDir is the pod log dir (a direct child of logs.pod_logs_dir,
	// as a path) the target lies strictly below, from the path alone; ""
	// when it lies below none. The link dangles once that dir is removed.
	TargetLogDir string
	// Truncated is true when the name is at the 255-byte limit, where kubelet
	// cuts it: ContainerID (rarely ContainerName) may be cut short, so match
	// it as a prefix, as the runtime does for short IDs.
	Truncated bool
	// Dangling is true when the target does not exist, kubelet's condition
	// for looking at the container. Unlike kubelet's stat, it is decided
	// without following the link: the target is looked at only inside
	// logs.pod_logs_dir, where kubelet points its links, one component at a
	// time with lstat, and it dangles when one of them is missing (ENOENT).
	// A link whose target cannot be judged that way is never listed.
	Dangling bool
}

// ListContainerLogLinks lists the legacy container log links in dir
// (logs.container_logs_dir). Only symlinks whose names parse and whose target
// state is known are returned; every other entry is in skipped with the
// reason. err is set when dir itself cannot be read or podLogsDir
// (logs.pod_logs_dir) cannot be opened (looked at only when a link needs
// examining), and then nothing is returned.
//
// Whether a link dangles is decided without ever following a symlink or
// leaving podLogsDir's file system, so that a link onto a dead NFS mount
// cannot hang the listing (kubelet's own check, a stat, would):
//
//   - a relative target is taken relative to dir; the target is cleaned and
//     only examined when it is strictly below podLogsDir (cleaned). Kubelet
//     always points its links there: any other link was made by someone
//     else, or the configuration does not match kubelet's, and it is skipped;
//   - a target at or below a mount point inside podLogsDir (from the mount
//     table, read once per listing) is skipped without any system call on
//     it: even lstat of a mount point can hang on a dead NFS server;
//   - otherwise the target's components are lstat'ed one by one, relative to
//     podLogsDir opened once per listing. A missing component means dangling;
//     a symlink or non-directory on the way, a component on another file
//     system, or any other error means the state is unknown, and the link is
//     skipped.
//
// Each link costs one readlink and at most one lstat per component of its
// target below podLogsDir; ctx is checked between links. A link whose name
// parses but that candidate says no to (nil: every link) costs nothing
// more and is left out: the caller knows no rule can act on it, e.g. the
// link of a listed running container.
func ListContainerLogLinks(ctx context.Context, dir, podLogsDir string, candidate func(ContainerLogLink) bool) ([]ContainerLogLink, []Skipped, error) {
	entries, err := dirlist.Read(ctx, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("container logs dir %s: %w", dir, err)
	}
	// Opened at the first link that needs it: reading the mount table
	// costs more than the rest of the listing on a node with hundreds of
	// pods, and most passes have no candidate link at all.
	var targets *logTargets
	defer func() {
		if targets != nil {
			targets.close()
		}
	}()
	var (
		links   []ContainerLogLink
		skipped []Skipped
	)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("container logs dir %s: %w", dir, err)
		}
		path := filepath.Join(dir, e.Name())
		if e.Type()&fs.ModeSymlink == 0 {
			skipped = append(skipped, Skipped{path, "not a symlink (kubelet's container log links are symlinks)"})
			continue
		}
		l, err := ParseContainerLogLinkName(e.Name())
		if err != nil {
			skipped = append(skipped, Skipped{path, err.Error()})
			continue
		}
		if candidate != nil && !candidate(l) {
			continue
		}
		if targets == nil {
			t, err := openLogTargets(podLogsDir)
			if err != nil {
				return nil, nil, err
			}
			targets = &t
		}
		l.Path = path
		l.Target, err = os.Readlink(path)
		if err != nil {
			skipped = append(skipped, Skipped{path, fmt.Sprintf("cannot read the link: %v", err)})
			continue
		}
		dangling, reason := targets.examine(dir, l.Target)
		if reason != "" {
			skipped = append(skipped, Skipped{path, reason})
			continue
		}
		l.Dangling = dangling
		l.TargetLogDir = targets.logDirOf(dir, l.Target)
		l.PodUID = targets.podUID(l)
		links = append(links, l)
	}
	return links, skipped, nil
}

// logTargets is the pod logs dir, open for one listing of container log
// links: the only place their targets are looked at.
type logTargets struct {
	dir    string   // as configured, cleaned
	fd     int      // open on dir
	info   fileInfo // dir's device and mount
	mounts []string // mount points strictly below dir, as paths below dir
}

// openLogTargets opens the pod logs dir and reads the mount points in it.
// Errors name the dir.
func openLogTargets(podLogsDir string) (logTargets, error) {
	dir := filepath.Clean(podLogsDir)
	switch {
	case !filepath.IsAbs(dir):
		return logTargets{}, fmt.Errorf("pod logs dir %q is not an absolute path", podLogsDir)
	case dir == "/":
		// Every absolute target would be "inside", and the mount table
		// check below does not work for "/".
		return logTargets{}, fmt.Errorf("pod logs dir %q is the whole file system", podLogsDir)
	}
	// Symlinks in the dir's own path are followed, as everywhere else in
	// this package: it is trusted configuration. Nothing below it is.
	fd, err := openRoot(dir)
	if err != nil {
		return logTargets{}, fmt.Errorf("pod logs dir %s, where container log links point, cannot be opened: %w", dir, err)
	}
	t := logTargets{dir: dir, fd: fd}
	if t.info, err = statAt(fd, ""); err != nil {
		t.close()
		return logTargets{}, fmt.Errorf("stat pod logs dir %s: %w", dir, err)
	}
	// The kernel's name for the dir, which is what the mount table shows
	// when the configured path goes through a symlink.
	realDir, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		t.close()
		return logTargets{}, fmt.Errorf("resolving pod logs dir %s through /proc/self/fd (needed to find the mount points in it): %w", dir, err)
	}
	if realDir == "/" {
		t.close()
		return logTargets{}, fmt.Errorf("pod logs dir %s resolves to /", dir)
	}
	mounts, err := mountPointsBelow(realDir)
	if err != nil {
		// Without the mount table a dead NFS mount inside the dir could
		// hang the listing: fail closed.
		t.close()
		return logTargets{}, fmt.Errorf("pod logs dir %s: finding the mount points in it: %w", dir, err)
	}
	for _, m := range mounts {
		t.mounts = append(t.mounts, dir+strings.TrimPrefix(m, realDir))
	}
	return t, nil
}

func (t logTargets) close() { unix.Close(t.fd) }

// logDirOf is the pod log dir a link's target, as stored in a link in
// linkDir, lies strictly below; "" when none. It only parses the path.
func (t logTargets) logDirOf(linkDir, target string) string {
	abs := target
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(linkDir, abs)
	}
	rel, ok := strings.CutPrefix(filepath.Clean(abs), t.dir+"/")
	if !ok {
		return ""
	}
	first, below, _ := strings.Cut(rel, "/")
	if below == "" {
		return ""
	}
	return t.dir + "/" + first
}

// podUID is the UID of the pod log dir a link's target points into, when
// that dir names the link's pod; "" otherwise. It only parses the path.
func (t logTargets) podUID(l ContainerLogLink) string {
	if l.TargetLogDir == "" {
		return ""
	}
	d, err := ParsePodLogDirName(filepath.Base(l.TargetLogDir))
	if err != nil || d.Namespace != l.Namespace || d.PodName != l.PodName {
		return ""
	}
	return d.UID
}

// dotDotAfterAName: path has a ".." that follows a name of its own (not
// one that climbs from where a relative path starts, as ../pods/x does).
func dotDotAfterAName(path string) bool {
	named := false
	for _, e := range strings.Split(path, "/") {
		switch e {
		case "", ".":
		case "..":
			if named {
				return true
			}
		default:
			named = true
		}
	}
	return false
}

// maxLinkTargetDepth is how many levels below the pod logs dir a link's
// target may be and still be examined; kubelet's are 3 levels deep.
const maxLinkTargetDepth = 8

// examine says whether target, as stored in a link in linkDir, dangles.
// reason is set instead (and dangling is meaningless) when that cannot be
// told without leaving the pod logs dir, following a symlink or entering
// another file system.
func (t logTargets) examine(linkDir, target string) (dangling bool, reason string) {
	if dotDotAfterAName(target) {
		// Cleaned, a/sym/../b names a/b; the kernel resolves sym first,
		// wherever it points. kubelet writes no "..".
		return false, fmt.Sprintf("target %s has a '..' after a name, which the kernel resolves through that name (perhaps a symlink): not examined", target)
	}
	abs := target
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(linkDir, abs)
	}
	abs = filepath.Clean(abs)
	rel, ok := strings.CutPrefix(abs, t.dir+"/")
	if !ok {
		return false, fmt.Sprintf("target %s points outside logs.pod_logs_dir (%s): not followed", abs, t.dir)
	}
	for _, m := range t.mounts {
		if abs == m || strings.HasPrefix(abs, m+"/") {
			return false, fmt.Sprintf("target %s crosses into another file system at %s, a mount point in logs.pod_logs_dir: not examined", abs, m)
		}
	}
	// One lstat per component, each relative to the dir's descriptor. The
	// kernel follows symlinks on the way to the last component of a path,
	// so each component is checked to be a real directory on the dir's
	// file system before the next one is looked up through it.
	names := strings.Split(rel, "/")
	if len(names) > maxLinkTargetDepth {
		// Each level costs a look from the top: a target thousands of
		// levels deep would cost millions, for every such link, every pass.
		return false, fmt.Sprintf("target %s is %d levels below logs.pod_logs_dir, deeper than kubelet's <pod log dir>/<container>/<n>.log: not examined", abs, len(names))
	}
	for i := range names {
		sofar := strings.Join(names[:i+1], "/")
		path := t.dir + "/" + sofar
		fi, err := statAt(t.fd, sofar)
		switch {
		case errors.Is(err, unix.ENOENT):
			return true, ""
		case err != nil:
			return false, fmt.Sprintf("cannot tell whether the target %s exists: lstat %s: %v", abs, path, err)
		}
		if r := otherMount(t.info, fi); r != "" {
			return false, fmt.Sprintf("target %s crosses into another file system at %s: %s; not examined", abs, path, r)
		}
		if i < len(names)-1 && fi.mode != unix.S_IFDIR {
			what := fmt.Sprintf("a %s, not a directory", fi.kind())
			if fi.mode == unix.S_IFLNK {
				what = "a symlink, which is not followed"
			}
			return false, fmt.Sprintf("cannot tell whether the target %s exists: %s is %s", abs, path, what)
		}
	}
	return false, "" // the last component exists, whatever it is
}
