package podnet

import (
	"context"
	"io/fs"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A Lister lists like List, but remembers what each cache entry and
// reservation file held when it last read it, and reads a file again only
// when it changed: a listing of an unchanged node costs a readdir of each
// dir and an lstat of each file, with no open, no read and no JSON.
//
// libcni writes a cache entry once, after a successful ADD, and removes it
// after DEL; host-local writes a reservation once and removes it at release.
// Neither ever modifies a file in place, but a Lister does not rely on it: a
// file whose identity changed in any way is read again (see fileID).
//
// The listing is exactly what List returns on the same files (a randomized
// test, TestListerListsWhatListLists, checks it after every kind of change).
// The Attachments of a listing share their CniArgs and CapabilityArgs with
// those of later listings: they are read-only, as they are to the planner.
// The netns dir's names are read every time; what each is, InspectNetns
// reads.
//
// A Lister remembers only the files it saw in its last listing. The zero
// Lister is ready to use; it is safe for concurrent use (listings run one at
// a time) and must not be copied after first use.
type Lister struct {
	mu    sync.Mutex
	cache fileCache
}

// List reads the pod networking objects of cfg's networks, as the
// package's List does.
func (l *Lister) List(ctx context.Context, cfg Config, cacheDir, netnsDir string) (Listing, error) {
	listing, err := l.listFiles(ctx, cfg, cacheDir)
	if err != nil {
		return Listing{}, err
	}
	return addNetns(ctx, listing, netnsDir)
}

func (l *Lister) listFiles(ctx context.Context, cfg Config, cacheDir string) (Listing, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cache.begin()
	// Forget the files this listing did not see (gone, of a network no
	// longer in cfg, or not reached when the listing failed), so that
	// the cache never outgrows one listing.
	defer l.cache.sweep()
	return listFiles(ctx, cfg, cacheDir, &l.cache)
}

// fileID is what identifies one version of a file: its device and inode,
// size, and modification and status change times in nanoseconds, from one
// fstat when it was read and from one lstat since. A file written in place,
// truncated, touched, chmod'ed or replaced (rename, or remove and create,
// even when the new file gets the old inode) gets another fileID: the kernel
// sets ctime to the current time on every such change, and no system call
// sets it to anything else. The one change it can miss is a rewrite of the same size within
// the same timestamp tick after the file was read. On ext4, xfs, btrfs and
// tmpfs since Linux 6.13, a change after a stat gets a fine-grained
// timestamp (multigrain timestamps), so it is never missed; before, the tick
// is the kernel's coarse clock (one jiffy, 1-10 ms). Neither libcni nor
// host-local ever rewrites a file, and the Reclaimer reads a file again
// before any step on it, so such a miss could only make one listing stale,
// never make a step act on a changed file.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // ns
}

// fileIDOf is the identity of the file whose fstat is info; ok is false when
// info holds no stat_t.
func fileIDOf(info fs.FileInfo) (id fileID, ok bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), size: int64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}

// lstatID is the identity of the regular file name in the directory open as
// dirFD, without following a symlink (an lstat of the file, without looking
// up its directory's path again); ok is false when it cannot be stat'ed or is
// not a regular file.
func lstatID(dirFD int, name string) (id fileID, ok bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), size: int64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}

// fileCache is a Lister's memory: per file, the identity of what was read
// and what it was read as. Only verdicts drawn from a regular file's content
// are kept (a file that could not be opened or read is tried again each
// listing). An attachment's verdict depends on its path alone (its name is
// the path's last element); a reservation's also on the network it is
// listed for, which it names, so both are its key.
type fileCache struct {
	gen          uint64 // the listing under way
	attachments  map[string]*cachedAttachment
	reservations map[reservationKey]*cachedReservation
	// reads counts the files read (opened) by the listing under way;
	// hits, the files whose remembered verdict it used (for tests).
	reads, hits int
}

type cachedAttachment struct {
	id     fileID
	seen   uint64 // the last listing that saw it
	a      Attachment
	reason string
}

type reservationKey struct{ network, path string }

type cachedReservation struct {
	id     fileID
	seen   uint64
	r      Reservation
	reason string
}

// begin starts a listing.
func (c *fileCache) begin() {
	c.gen++
	c.reads, c.hits = 0, 0
	if c.attachments == nil {
		c.attachments = map[string]*cachedAttachment{}
		c.reservations = map[reservationKey]*cachedReservation{}
	}
}

// sweep forgets the files the listing did not see.
func (c *fileCache) sweep() {
	for k, e := range c.attachments {
		if e.seen != c.gen {
			delete(c.attachments, k)
		}
	}
	for k, e := range c.reservations {
		if e.seen != c.gen {
			delete(c.reservations, k)
		}
	}
}

// readCacheEntry is the package's readCacheEntry, answered from memory when
// the file at path, name in the directory open as dirFD, is the one last
// read there (a nil c always reads).
func (c *fileCache) readCacheEntry(dirFD int, path, name string) (Attachment, string, error) {
	if c == nil {
		return readCacheEntry(path, name)
	}
	if e, ok := c.attachments[path]; ok {
		if id, ok := lstatID(dirFD, name); ok && id == e.id {
			e.seen = c.gen
			c.hits++
			return e.a, e.reason, nil
		}
	}
	c.reads++
	a, reason, info, err := readCacheEntryFile(path, name)
	id, ok := fileID{}, false
	if err == nil && info != nil {
		id, ok = fileIDOf(info)
	}
	if !ok {
		delete(c.attachments, path)
		return a, reason, err
	}
	c.attachments[path] = &cachedAttachment{id: id, seen: c.gen, a: a, reason: reason}
	return a, reason, nil
}

// readReservation is the package's readReservation, answered from memory
// when the file at path, name in the directory open as dirFD, is the one
// last read there for network (a nil c always reads).
func (c *fileCache) readReservation(dirFD int, network, path, name string) (Reservation, string, error) {
	if c == nil {
		return readReservation(network, path)
	}
	key := reservationKey{network, path}
	if e, ok := c.reservations[key]; ok {
		if id, ok := lstatID(dirFD, name); ok && id == e.id {
			e.seen = c.gen
			c.hits++
			return e.r, e.reason, nil
		}
	}
	c.reads++
	r, reason, info, err := readReservationFile(network, path)
	id, ok := fileID{}, false
	if err == nil && info != nil {
		id, ok = fileIDOf(info)
	}
	if !ok {
		delete(c.reservations, key)
		return r, reason, err
	}
	c.reservations[key] = &cachedReservation{id: id, seen: c.gen, r: r, reason: reason}
	return r, reason, nil
}
