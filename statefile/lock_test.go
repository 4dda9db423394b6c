package statefile

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile/regularfiletest"
)

func TestASecondPluginOnTheSameStateFileIsRefusedAndToldWho(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "state.json")
	first, err := TryLock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Release() }()
	second, err := TryLock(context.Background(), path)
	var held *HeldError
	if !errors.As(err, &held) {
		_ = second.Release()
		t.Fatalf("a second lock: %v, want a HeldError", err)
	}
	if held.PID != os.Getpid() || held.Path != LockPath(path) {
		t.Fatalf("held by pid %d at %s, want pid %d at %s", held.PID, held.Path, os.Getpid(), LockPath(path))
	}
	if !strings.Contains(err.Error(), "another nri-housekeeper uses the same state file") {
		t.Fatalf("the error does not say what it means: %v", err)
	}
}

func TestAReleasedLockCanBeTakenAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	first, err := TryLock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	second, err := TryLock(context.Background(), path)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	_ = second.Release()
}

// A plugin killed with its lock held holds nothing: the kernel drops a
// flock when its holder exits, and the lock file left behind is no lock.
func TestTheLockOfAKilledHolderIsFree(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatal("flock(1) (util-linux) is needed to hold the lock from another process")
	}
	path := filepath.Join(t.TempDir(), "state.json")
	// One process, our child, holding the lock itself (flock(1) would
	// leave it to a grandchild too).
	holder := exec.Command("sh", "-c", `exec 9>>"$1" && flock --exclusive 9 && exec sleep 60`, "sh", LockPath(path))
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var l *Lock
		if l, err = TryLock(context.Background(), path); err == nil {
			_ = l.Release() // flock(1) has not taken it yet
			continue
		}
		break
	}
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("while flock(1) holds it: %v, want a HeldError", err)
	}
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	l, err := TryLock(context.Background(), path)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	_ = l.Release()
}

func TestALockPathThatIsASymlinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state.json")
	if err := os.Symlink(target, LockPath(path)); err != nil {
		t.Fatal(err)
	}
	if l, err := TryLock(context.Background(), path); err == nil {
		_ = l.Release()
		t.Fatal("a symlinked lock file was followed")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me" {
		t.Fatalf("the symlink's target was changed: %q", b)
	}
}

// What is not a regular file at the lock's name (a FIFO, a device) is
// refused unopened, the error naming it: a device opened read-write may act
// (a watchdog is armed), and flock on a FIFO would "lock" nothing anyone
// else takes.
func TestALockPathThatIsNotARegularFileIsRefusedUnopened(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := unix.Mkfifo(LockPath(path), 0o600); err != nil {
		t.Fatal(err)
	}
	var l *Lock
	var err error
	regularfiletest.ReturnsWithin(t, func() { l, err = TryLock(context.Background(), path) })
	if err == nil {
		_ = l.Release()
		t.Fatal("a FIFO at the lock's name was taken for the lock")
	}
	if want := LockPath(path) + " is a FIFO, not a regular file"; !strings.Contains(err.Error(), want) {
		t.Fatalf("TryLock = %v, want an error saying %q", err, want)
	}
}
