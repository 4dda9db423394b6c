package housekeeping

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/bootclock"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// killHard simulates a SIGKILL/OOM/crash: the kernel drops the flock, nothing
// else runs (no Close, no persist).
func killHard(l *Loop) {
	_ = l.stateLock.Release()
	l.stateLock = nil
}

// An unreadable state file is moved aside at the start, and its hour's hold
// written at once: kept in memory until a pass with a trusted listing wrote
// it, a plugin killed before (containerd not up yet: passes fail their
// listing) left no file at all, and the next start found "no state file
// yet": no hold, a fresh hour of budget.
func TestTheHoldAfterAnUnreadableFileSurvivesAKillBeforeTheFirstPass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		passes int
	}{{"killed before any pass", 0}, {"killed after passes whose listing failed", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(`{"version": 2, "torn_down": [`), 0o600); err != nil {
				t.Fatal(err)
			}
			rt := &fakeRuntime{}
			opts := Options{Period: time.Minute, StateFile: path, KubeletRoot: t.TempDir()}
			first, _ := restartedLoop(nil, opts, rt, now)
			if first.budgetHeld(now) == "" {
				t.Fatal("first run does not hold the budget: the test proves nothing")
			}
			for i := range tc.passes {
				rt.set(cri.Snapshot{}, errors.New("containerd not up yet"))
				first.now = func() time.Time { return now.Add(time.Duration(i) * time.Second) }
				first.Pass(context.Background())
			}
			killHard(first)
			second, logs := restartedLoop(nil, opts, rt, now.Add(time.Minute))
			t.Cleanup(func() { _ = second.Close() })
			if second.budgetHeld(now.Add(time.Minute)) == "" {
				_, statErr := os.Stat(path)
				t.Fatalf("after a kill 1 minute into the hold, the restarted plugin holds no budgeted step (state file: %v)\n%s", statErr, logs())
			}
		})
	}
}

// A SIGTERM while the start reads the state file ends the read: that says
// nothing of the file, which must not be moved aside as unreadable (its
// pods seen torn down forgotten, an hour of budgeted steps held).
func TestAStartStoppedWhileItReadsTheStateFileLeavesTheFileAsItIs(t *testing.T) {
	uid := testUID(7)
	path := writeStateFile(t, statefile.State{
		TornDown: []statefile.TornDown{{UID: uid, At: now.Add(-time.Minute), Inspected: true, CgroupsInspected: true}},
		Spent:    []statefile.Spent{{At: now.Add(-time.Minute), Class: "pod-dir", Unit: "x"}},
	})
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log, buf := testLogger()
	loop := New(nil, &fakeRuntime{}, Options{StateFile: path}, log)
	loop.now = func() time.Time { return now }
	// SIGTERM arrives between taking the lock and reading the file.
	ctx := &lateCancel{Context: context.Background()}
	loop.Restore(ctx)
	_ = loop.Close()
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the state file changed (%v):\nbefore %s\nafter  %s\n%s", err, before, after, buf.String())
	}
	if _, err := os.Stat(path + ".unreadable"); err == nil {
		s, _ := statefile.Load(context.Background(), path)
		t.Fatalf("a valid state file was moved aside as unreadable on a canceled context; the new file keeps torn_down=%d spent=%d\n%s",
			len(s.TornDown), len(s.Spent), buf.String())
	}
}

// lateCancel ends after its first Err check.
type lateCancel struct {
	context.Context
	n int
}

func (c *lateCancel) Err() error {
	c.n++
	if c.n > 1 {
		return context.Canceled
	}
	return nil
}

// README: the file is written at the first pass, so that a path it cannot
// be written to is said at once: after a restart in the same boot too,
// when nothing changed.
func TestTheFirstPassAfterARestartWritesTheStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	boot := bootclock.Reading{BootID: "0b1f2e3d-aaaa-4bbb-8ccc-000000000001", Since: 10 * time.Hour}
	rt := &fakeRuntime{}
	opts := Options{Period: time.Minute, StateFile: path, KubeletRoot: t.TempDir(),
		BootClock: func() (bootclock.Reading, error) { return boot, nil }}
	first, _ := restartedLoop(nil, opts, rt, now)
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	first.Pass(context.Background())
	_ = first.Close()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	boot.Since += time.Minute
	second, _ := restartedLoop(nil, opts, rt, now.Add(time.Minute))
	t.Cleanup(func() { _ = second.Close() })
	rt.set(cri.Snapshot{TakenAt: now.Add(time.Minute)}, nil)
	second.Pass(context.Background())
	after, _ := os.Stat(path)
	if os.SameFile(before, after) {
		t.Fatal("the first pass after a restart did not write the state file (same inode): an unwritable path is not said at once")
	}
}
