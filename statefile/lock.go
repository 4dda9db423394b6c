package statefile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// Lock is a plugin's hold on a state file: one running plugin per file.
// Two plugins on one node (a DaemonSet beside a leftover systemd unit, two
// pods of a DaemonSet rollout side by side) would each count only their
// own budgeted steps, so together they could take twice budget.max_per_hour,
// and each would write over what the other kept.
//
// It is an exclusive flock(2) on <file>.lock, not on the file itself: the
// file is replaced on every write (a rename), and a lock on one version
// would not hold the next. The kernel drops a flock when its holder exits,
// however it exits (a SIGKILL, an OOM kill), so a lock file left behind
// holds nothing. The file holds the holder's PID, for the message only.
type Lock struct {
	f *os.File
}

// HeldError is TryLock's error when another process holds the lock.
type HeldError struct {
	Path string // the lock file
	PID  int    // the holder's PID as it wrote it; 0 when unknown
}

func (e *HeldError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		// As its own PID namespace numbers it: a containerized plugin's
		// is not the node's.
		holder = fmt.Sprintf("another process (pid %d, in the holder's PID namespace)", e.PID)
	}
	return fmt.Sprintf("%s is held by %s: another nri-housekeeper uses the same state file", e.Path, holder)
}

// LockPath is the lock file of the state file at path.
func LockPath(path string) string { return path + ".lock" }

// TryLock takes the lock of the state file at path without waiting. When
// another process holds it, the error is a *HeldError. The directory is
// made if missing (0700), as by Write.
func TryLock(ctx context.Context, path string) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lockPath := LockPath(path)
	if _, err := makeDir(lockPath); err != nil {
		return nil, err
	}
	// O_NOFOLLOW: a symlink planted at the lock's name is refused, not
	// followed to truncate what it points at. What is not a regular file
	// (a FIFO, a device) is refused unopened.
	f, _, err := regularfile.Open(lockPath, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the state file's lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer func() { _ = f.Close() }()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{Path: lockPath, PID: holderPID(f)}
		}
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	// Ours now: say who holds it. A failure here costs the message only.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// holderPID reads the PID the holder wrote (0 when it cannot be read).
func holderPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Release gives the lock up. The lock file stays: removing it could let
// two processes lock two different files of the same name.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the only descriptor drops the flock
	l.f = nil
	return err
}
