package housekeeping

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/bootclock"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// TestARestartAgesTheHoursStepsByTheBootClock: budget.max_per_hour counts
// the steps of the real hour across a restart, whatever the wall clock
// did meanwhile. A node whose RTC is hours ahead until NTP corrects it
// restarts the plugin (a containerd restart, a crash loop) with a clock
// on which the steps it took minutes ago look hours old: aged by the wall
// clock they were forgotten, and the plugin took a whole new hour's
// budget. In the same boot the boot clock (CLOCK_MONOTONIC) ages them; after
// a reboot only the wall clock is left, and it is used.
func TestARestartAgesTheHoursStepsByTheBootClock(t *testing.T) {
	const limit = 3
	for _, tc := range []struct {
		name string
		// the second run starts after (on the boot clock, when
		// the boot is the same) with the wall clock moved by skew more.
		after, skew time.Duration
		rebooted    bool
		// wantStopped is how many live orphans the second run stops.
		wantStopped int
		wantAgedBy  string
	}{
		{"same boot, the wall clock 3 hours ahead at the restart", 5 * time.Minute, 3 * time.Hour, false, 0, "the boot clock"},
		{"same boot, the wall clock 2 hours back at the restart", 5 * time.Minute, -2 * time.Hour, false, 0, "the boot clock"},
		{"same boot, over an hour later on the boot clock though the wall clock was set back", 61 * time.Minute, -30 * time.Minute, false, limit, "the boot clock"},
		{"rebooted, 70 minutes later on the wall clock: the hour is over", 70 * time.Minute, 0, true, limit, "the node booted again"},
		{"rebooted, 20 minutes later on the wall clock: the hour goes on", 20 * time.Minute, 0, true, 0, "the node booted again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := testUIDs(100, 20)
			root := podDirs(t, live...)
			stateFile := filepath.Join(t.TempDir(), "state.json")
			cfg := orphanStopConfig(t, root, stateFile)
			cfg.Budget.MaxPerPass, cfg.Budget.MinPerPass, cfg.Budget.MaxFraction, cfg.Budget.MaxPerHour = 100, 100, 1, limit
			rt := &fakeRuntime{}
			plugin := func(wall time.Time, boot bootclock.Reading) (*Loop, *fakeExecutor, func() string) {
				opts := OptionsFromConfig(cfg)
				exec := &fakeExecutor{}
				opts.Executor = exec
				opts.BootClock = func() (bootclock.Reading, error) { return boot, nil }
				loop, logs := restartedLoop(nil, opts, rt, wall)
				return loop, exec, logs
			}
			bootA := bootclock.Reading{BootID: "0b1f2e3d-aaaa-4bbb-8ccc-000000000001", Since: 10 * time.Hour}

			first, firstExec, _ := plugin(now, bootA)
			stoppedFirst := map[string]bool{}
			for pass := range 4 { // 30 s apart: the orphans are due after leak_grace, then the hour's budget is taken
				at := now.Add(time.Duration(pass) * 30 * time.Second)
				rt.set(orphanEveryPass(live, pass, at, stoppedFirst), nil)
				first.now = func() time.Time { return at }
				passNotingStops(first, firstExec, stoppedFirst)
			}
			if len(stoppedFirst) != limit {
				t.Fatalf("the first run stopped %d live orphans, want the hour's %d: the test proves nothing", len(stoppedFirst), limit)
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}

			restart := now.Add(tc.after + tc.skew)
			boot := bootclock.Reading{BootID: bootA.BootID, Since: bootA.Since + tc.after}
			if tc.rebooted {
				boot = bootclock.Reading{BootID: "0b1f2e3d-aaaa-4bbb-8ccc-000000000002", Since: time.Minute}
			}
			second, secondExec, logs := plugin(restart, boot)
			t.Cleanup(func() { _ = second.Close() })
			stoppedSecond := map[string]bool{}
			for id := range stoppedFirst {
				stoppedSecond[id] = true // NotReady now: not orphans to stop again
			}
			for pass := range 4 {
				at := restart.Add(time.Duration(pass) * 30 * time.Second)
				rt.set(orphanEveryPass(live, limit+pass, at, stoppedSecond), nil)
				second.now = func() time.Time { return at }
				passNotingStops(second, secondExec, stoppedSecond)
			}
			if got := len(stoppedSecond) - len(stoppedFirst); got != tc.wantStopped {
				t.Fatalf("after the restart the plugin stopped %d more live orphans, want %d (budget.max_per_hour = %d, %d stopped %v before on the boot clock); restore said: %q",
					got, tc.wantStopped, limit, limit, tc.after, stateLines(logs()))
			}
			if !strings.Contains(logs(), tc.wantAgedBy) {
				t.Fatalf("the restore does not say which clock aged the file (want %q): %q", tc.wantAgedBy, stateLines(logs()))
			}
		})
	}
}

// TestAVersion1StateFileIsAgedByTheWallClock: a file written before the
// boot clock (an upgrade) is read, its times on the wall clock, and the
// next write names the boot.
func TestAVersion1StateFileIsAgedByTheWallClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	v1 := `{"version": 1, "torn_down": [], "budget_spent": [{"at": "` + now.Add(-10*time.Minute).Format(time.RFC3339Nano) + `", "class": "pod-dirs", "unit": "pod-dir/x"}]}`
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := Options{StateFile: path, BootClock: func() (bootclock.Reading, error) {
		return bootclock.Reading{BootID: "0b1f2e3d-aaaa-4bbb-8ccc-000000000001", Since: time.Hour}, nil
	}}
	loop, logs := restartedLoop(nil, opts, &fakeRuntime{}, now)
	if !loop.budgetSpent(now.Add(49 * time.Minute))["pod-dirs/pod-dir/x"] {
		t.Fatalf("a version 1 file's step, 10 minutes old, is not counted 49 minutes later; restore said %q", stateLines(logs()))
	}
	if loop.budgetSpent(now.Add(51 * time.Minute))["pod-dirs/pod-dir/x"] {
		t.Fatal("a version 1 file's step, 10 minutes old, still counts 51 minutes later")
	}
	if !strings.Contains(logs(), "no boot clock times") {
		t.Fatalf("the restore does not say the file has no boot clock times: %q", stateLines(logs()))
	}
	loop.spent = append(loop.spent, spent{at: now, class: "pod-dirs", unit: "pod-dir/y"})
	if err := loop.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := statefile.Load(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != statefile.Version || s.BootID == "" {
		t.Fatalf("written again as version %d, boot %q", s.Version, s.BootID)
	}
	for _, sp := range s.Spent {
		if want := statefile.SinceBoot(time.Hour - now.Sub(sp.At)); sp.AtBoot != want {
			t.Fatalf("step %s at %s written %v after boot, want %v", sp.Unit, sp.At, time.Duration(sp.AtBoot), time.Duration(want))
		}
	}
}

// TestATornDownMarkIsAgedByTheBootClock: a pod's leak_grace runs from its
// teardown on the boot clock too: a wall clock hours ahead at the restart
// does not make the pod's mark hours old (its dir due at once), nor one set
// back make it younger than it is.
func TestATornDownMarkIsAgedByTheBootClock(t *testing.T) {
	uid := testUID(42)
	boot := bootclock.Reading{BootID: "0b1f2e3d-aaaa-4bbb-8ccc-000000000001", Since: 10 * time.Hour}
	path := writeStateFile(t, statefile.State{BootID: boot.BootID, TornDown: []statefile.TornDown{
		{UID: uid, At: now.Add(-5 * time.Minute), AtBoot: statefile.SinceBoot(boot.Since - 5*time.Minute)},
	}})
	for _, skew := range []time.Duration{3 * time.Hour, -3 * time.Hour} {
		restart := now.Add(time.Minute + skew)
		later := bootclock.Reading{BootID: boot.BootID, Since: boot.Since + time.Minute}
		loop, _ := restartedLoop(nil, Options{StateFile: path, StateReadOnly: true,
			BootClock: func() (bootclock.Reading, error) { return later, nil }}, &fakeRuntime{}, restart)
		mark := loop.tornDown[uid]
		if mark == nil {
			t.Fatal("the mark was not restored")
		}
		if age := restart.Sub(mark.at); age != 6*time.Minute {
			t.Fatalf("wall clock moved %v: the mark restored %v old, want the 6 minutes the boot clock says", skew, age)
		}
	}
}

// TestAFileRestoredOnTheWallClockIsDatedOnTheBootClockBeforeTheNextRestart:
// a file the boot clock cannot age (version 1 after an upgrade, or one
// written before a reboot) is read on the wall clock, which is right at
// that start. The run must write it again on this boot's clock, or a
// second restart in the same boot under a wall clock since set forward (the
// case version 2 is for) ages the hour's steps by that clock and forgets
// them. The run wrote nothing when nothing changed: the file kept the old
// boot (or no boot) until the first budgeted step or teardown.
func TestAFileRestoredOnTheWallClockIsDatedOnTheBootClockBeforeTheNextRestart(t *testing.T) {
	bootA := "0b1f2e3d-aaaa-4bbb-8ccc-000000000001"
	bootB := "0b1f2e3d-aaaa-4bbb-8ccc-000000000002"
	stepAt := now.Add(-10 * time.Minute)
	for _, tc := range []struct {
		name string
		file string
	}{
		{"version 1 (an upgrade)", `{"version": 1, "torn_down": [], "budget_spent": [{"at": "` + stepAt.Format(time.RFC3339Nano) + `", "class": "pod-dir", "unit": "pod-dir/x"}]}`},
		{"version 2 of the boot before", `{"version": 2, "boot_id": "` + bootA + `", "torn_down": [], "budget_spent": [{"at": "` + stepAt.Format(time.RFC3339Nano) + `", "at_since_boot_ns": 36000000000000, "class": "pod-dir", "unit": "pod-dir/x"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			// The node runs boot B, an hour since boot; the wall clock is right.
			clock := bootclock.Reading{BootID: bootB, Since: time.Hour}
			opts := Options{StateFile: path, BootClock: func() (bootclock.Reading, error) { return clock, nil }}
			first, _ := restartedLoop(nil, opts, &fakeRuntime{}, now)
			if !first.budgetSpent(now)["pod-dir/pod-dir/x"] {
				t.Fatal("the step, 10 minutes old, is not restored: the test proves nothing")
			}
			first.now = func() time.Time { return now.Add(time.Minute) }
			first.persist(t.Context(), now.Add(time.Minute)) // a pass that changed nothing

			// Two minutes later, same boot, the wall clock set 3 hours ahead
			// meanwhile: the plugin restarts.
			clock = bootclock.Reading{BootID: bootB, Since: time.Hour + 2*time.Minute}
			restart := now.Add(2*time.Minute + 3*time.Hour)
			second, logs := restartedLoop(first, opts, &fakeRuntime{}, restart)
			t.Cleanup(func() { _ = second.Close() })
			if !second.budgetSpent(restart)["pod-dir/pod-dir/x"] {
				s, _ := statefile.Load(t.Context(), path)
				t.Fatalf("a step taken 12 minutes before is forgotten by a restart in the same boot under a wall clock 3 hours ahead: "+
					"the file still names boot %q (version %d), not this boot; restore said %q", s.BootID, s.Version, stateLines(logs()))
			}
		})
	}
}
