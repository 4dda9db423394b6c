package podnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/dirlist"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
)

const (
	// mountInfoPath is this process's view of the mount table: the mount
	// namespace the unmounts happen in.
	mountInfoPath = "/proc/self/mountinfo"
	// initPIDNamespaceInode is the inode of the node's own PID namespace
	// (the kernel's PROC_PID_INIT_INO): only from there does /proc show
	// every thread on the node.
	initPIDNamespaceInode = 0xEFFFFFFC
)

// mountEntry is one line of the mount table, the parts used here.
type mountEntry struct {
	id, parent string // mount IDs: the mount's and the one it is on
	root       string // for an nsfs mount, the namespace: "net:[<inode>]"
	fstype     string
}

// oneMount is the one mount that the mounts ms at a path of the netns dir
// stand for: a single mount, or copies of one on several mounts of the dir
// (`ip netns add` bind-mounts /run/netns on itself, shared with /run: from
// then on every mount made in the dir shows once on each). A mount on top
// of another at the path (its parent is one of ms) is not what containerd
// makes, and neither are copies that hold different things.
func oneMount(ms []mountEntry) (mountEntry, error) {
	ids := make(map[string]bool, len(ms))
	for _, m := range ms {
		ids[m.id] = true
	}
	for _, m := range ms {
		if ids[m.parent] {
			return mountEntry{}, fmt.Errorf("%d mounts are stacked on it; containerd makes one", len(ms))
		}
		if m.root != ms[0].root || m.fstype != ms[0].fstype {
			return mountEntry{}, fmt.Errorf("the dir's %d mounts show different mounts there (%s %s, %s %s)", len(ms), ms[0].fstype, ms[0].root, m.fstype, m.root)
		}
	}
	return ms[len(ms)-1], nil
}

// mountsIn returns the mounts whose mount point is directly in dir (a real
// path: no symlinks, as the kernel shows it), by the mount point's base name,
// in mount table order (the last one is on top).
func mountsIn(dir string) (map[string][]mountEntry, error) {
	found := map[string][]mountEntry{}
	err := nodefs.ReadMountInfo(mountInfoPath, func(mi nodefs.MountInfo) bool {
		if point := mi.MountPoint; filepath.Dir(point) == dir && point != dir {
			name := filepath.Base(point)
			found[name] = append(found[name], mountEntry{id: mi.ID, parent: mi.Parent, root: mi.Root, fstype: mi.FSType})
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// netnsInode returns the inode of the network namespace an nsfs mount
// holds, from its root in the mount table ("net:[4026532177]").
func netnsInode(m mountEntry) (uint64, bool) {
	if m.fstype != "nsfs" {
		return 0, false
	}
	s, ok := strings.CutPrefix(m.root, "net:[")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return 0, false
	}
	ino, err := strconv.ParseUint(s, 10, 64)
	return ino, err == nil
}

// nsfsStat stats path (following it: the mount on it) and returns the inode
// of the namespace there and the inode's modification time; ok is false when
// it is not on nsfs.
func nsfsStat(path string) (ino uint64, mtime time.Time, ok bool, err error) {
	var fsst unix.Statfs_t
	if err := unix.Statfs(path, &fsst); err != nil {
		return 0, time.Time{}, false, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	if fsst.Type != unix.NSFS_MAGIC {
		return 0, time.Time{}, false, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, time.Time{}, false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return st.Ino, time.Unix(st.Mtim.Unix()), true, nil
}

// listNetnsPaths reads the names in netnsDir that have containerd's format
// for a namespace mount, as paths under netnsDir.
func listNetnsPaths(ctx context.Context, netnsDir string) ([]string, error) {
	entries, err := dirlist.Read(ctx, netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns dir %s: %w", netnsDir, err)
	}
	var paths []string
	for _, e := range entries {
		if IsNetnsName(e.Name()) {
			paths = append(paths, filepath.Join(netnsDir, e.Name()))
		}
	}
	return paths, nil
}

// InspectNetns reads what each of paths (entries directly in netnsDir, as
// in Listing.NetnsPaths) is: a namespace mount (the mount table and a stat
// agree on its inode) and, if so, whether some thread on the node is in it
// (/proc/<pid>/task/<tid>/ns/net of every thread). A path that is gone, not
// mounted or not a namespace mount is left out.
//
// An error reading netnsDir's mount table is an error, and nothing is
// returned. When whether a thread is in a namespace cannot be told (this
// process is not in the node's PID namespace, or some thread's namespace
// cannot be read), no namespace is known to be unused, and every namespace
// mount is Unreadable with the reason.
func InspectNetns(ctx context.Context, netnsDir string, paths []string) ([]Netns, []Unreadable, error) {
	if len(paths) == 0 {
		return nil, nil, nil
	}
	realDir, err := filepath.EvalSymlinks(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("netns dir %s: %w", netnsDir, err)
	}
	mounts, err := mountsIn(realDir)
	if err != nil {
		return nil, nil, fmt.Errorf("netns dir %s: reading the mount table: %w", netnsDir, err)
	}
	var (
		found      []Netns
		unreadable []Unreadable
	)
	for _, path := range paths {
		name := filepath.Base(path)
		ms := mounts[name]
		if filepath.Dir(path) != filepath.Clean(netnsDir) || !IsNetnsName(name) || len(ms) == 0 {
			continue // not containerd's, or not mounted: not a namespace
		}
		m, err := oneMount(ms)
		if err != nil {
			unreadable = append(unreadable, Unreadable{KindNetns, path, "", err.Error()})
			continue
		}
		ino, ok := netnsInode(m)
		if !ok {
			continue // another kind of mount: not a network namespace
		}
		statIno, mtime, onNsfs, err := nsfsStat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed since the directory was read
		case err != nil:
			unreadable = append(unreadable, Unreadable{KindNetns, path, "", err.Error()})
			continue
		case !onNsfs || statIno != ino:
			unreadable = append(unreadable, Unreadable{KindNetns, path, "", fmt.Sprintf("the mount table says net:[%d], a stat says otherwise (nsfs %v, inode %d): changed while being read", ino, onNsfs, statIno)})
			continue
		}
		found = append(found, Netns{Path: path, Inode: ino, ModTime: mtime})
	}
	if len(found) == 0 {
		return nil, unreadable, nil
	}
	inUse, err := netnsInUse(ctx)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, nil, fmt.Errorf("netns dir %s: %w", netnsDir, ctxErr)
	}
	if err != nil {
		// Without every thread's namespace, none of them is known
		// to be unused.
		for _, n := range found {
			unreadable = append(unreadable, Unreadable{KindNetns, n.Path, "", err.Error()})
		}
		return nil, unreadable, nil
	}
	for i := range found {
		found[i].InUse = inUse[found[i].Inode]
	}
	return found, unreadable, nil
}

// netnsInUse returns the inodes of the network namespaces some thread on the
// node is in. The error says why that cannot be told: this process is not in
// the node's PID namespace (/proc then shows only some threads, and every
// namespace would look unused), or the namespace of some thread cannot be
// read (e.g. a security module that denies it). PID 1 is passed over when it
// cannot be read: the node's init never joins a pod's network namespace (and
// sandboxes that run this process often hide their own init).
func netnsInUse(ctx context.Context) (map[uint64]bool, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return nil, fmt.Errorf("cannot tell whether a thread is in it: stat /proc/self/ns/pid: %w", err)
	}
	if st.Ino != initPIDNamespaceInode {
		return nil, fmt.Errorf("cannot tell whether a thread is in it: this process is in PID namespace pid:[%d], not the node's (pid:[%d]), so /proc does not show every thread (run it in the host's PID namespace)", st.Ino, uint64(initPIDNamespaceInode))
	}
	return threadsNetns(ctx, "/proc", statInode, unreadableRereads, unreadableRereadDelay)
}

// A thread that exits while /proc is read can fail the stat of its
// namespace with EACCES, not ENOENT: the kernel (fs/proc/namespaces.c,
// proc_ns_get_link) finds no task behind the entry any more, and says
// "permission denied" until the entry itself goes. So a process with an
// unreadable thread is read again, a little later, a few times: gone then,
// it is in no namespace; readable, it counts; still unreadable, nothing
// can be told.
const (
	unreadableRereads     = 3
	unreadableRereadDelay = 20 * time.Millisecond
)

// statInode is the inode of what path names, following links.
func statInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// threadsNetns reads the network namespace of every thread under proc
// (proc/<pid>/task/<tid>/ns/net) with stat. A process with a thread it
// cannot read (neither read nor gone) is read again after delay, up to
// rereads times; one still unreadable then is an error, unless it is PID 1.
func threadsNetns(ctx context.Context, proc string, stat func(string) (uint64, error), rereads int, delay time.Duration) (map[uint64]bool, error) {
	names, err := readNames(ctx, proc)
	if err != nil {
		return nil, fmt.Errorf("cannot tell whether a thread is in it: %w", err)
	}
	var pids []string
	for _, pid := range names {
		if pid != "" && pid[0] >= '0' && pid[0] <= '9' {
			pids = append(pids, pid)
		}
	}
	inUse := map[uint64]bool{}
	// read reads the threads of pid, and returns how many of them could be
	// neither read nor found gone, with the first such error.
	read := func(pid string) (unknown int, first error) {
		taskDir := proc + "/" + pid + "/task"
		tids, err := readNames(ctx, taskDir)
		if err != nil {
			if gone(err) {
				return 0, nil
			}
			return 1, err
		}
		for _, tid := range tids {
			path := taskDir + "/" + tid + "/ns/net"
			ino, err := stat(path)
			switch {
			case err == nil:
				inUse[ino] = true
			case !gone(err):
				unknown++
				first = cmp.Or(first, error(&os.PathError{Op: "stat", Path: path, Err: err}))
			}
		}
		return unknown, first
	}
	// pending: the processes with threads not read yet, in /proc's order;
	// unknown and first: their threads, and the first error, as last read.
	var pending []string
	unknown, first := 0, error(nil)
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if n, err := read(pid); n > 0 && pid != "1" {
			unknown += n
			first = cmp.Or(first, err)
			pending = append(pending, pid)
		}
	}
	for reread := 0; len(pending) > 0; reread++ {
		if reread == rereads {
			return nil, fmt.Errorf("cannot tell whether a thread is in it: the network namespace of %d threads cannot be read (read %d more times, %v apart), e.g. %w",
				unknown, rereads, delay, first)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		still := pending[:0]
		unknown, first = 0, nil
		for _, pid := range pending {
			if n, err := read(pid); n > 0 {
				unknown += n
				first = cmp.Or(first, err)
				still = append(still, pid)
			}
		}
		pending = still
	}
	return inUse, nil
}

// gone reports whether err says a /proc entry's process or thread is gone.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// readNames reads the names in dir, checking ctx between batches. A dir
// that is not a directory (a FIFO would block the open for ever) is
// refused before it is opened.
func readNames(ctx context.Context, dir string) ([]string, error) {
	f, err := dirlist.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []string
	for {
		batch, err := f.Readdirnames(1024)
		all = append(all, batch...)
		if errors.Is(err, io.EOF) {
			return all, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", dir, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}
