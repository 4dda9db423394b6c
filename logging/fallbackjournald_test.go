package logging

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJournaldTargetDoesNotLoseEntriesWhenStderrIsDiscarded:
// log.target = "journald" in the pre-registered mode (containerd hands the
// plugin /dev/null as stderr). While journald restarts, every entry is
// diverted to stderr, i.e. lost, with no notice anywhere; log.file, set
// right there in the config, is never opened. Target auto in the same
// situation writes them to log.file (TestAutoWithJournaldAndStderrDiscarded
// WritesFailedSendsToTheFile). An explicit choice of journald should not
// lose more than auto does.
func TestJournaldTargetDoesNotLoseEntriesWhenStderrIsDiscarded(t *testing.T) {
	j := listenJournal(t, journalSocketPath(t))
	file := filepath.Join(t.TempDir(), "nri-housekeeper.log")
	logger, closeFn, err := New(Options{Target: TargetJournald, JournalSocket: j.path, File: file, Stderr: devNull(t), fallbackFile: file})
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("before")
	for {
		if r := j.receive(); r.field("MESSAGE") == "before" {
			break
		}
	}
	j.stop(false) // journald restarting
	logger.WithField(FieldAction, "remove-sandbox").Info("stopped and removed sandbox")
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "stopped and removed sandbox") {
		t.Errorf("an action logged while journald was down reached neither journald nor %s (stderr is /dev/null): lost; file holds %q", file, b)
	}
}

// TestAStalledJournaldIsWaitedForOncePerOutageNotOncePerEntry: a
// journald that stops reading (its receive queue full) costs every later
// entry the full one-second send timeout, even after the first timeout has
// declared the outage and every entry is going to the fallback anyway. Every
// goroutine that logs (the housekeeping loop, the executor's max_parallel
// workers, serialized on the hook's mutex) then runs at one line a second:
// a pass that logs 100 actions takes 100 s more, long enough for /healthz
// (3 periods) to fail at short periods.
func TestAStalledJournaldIsWaitedForOncePerOutageNotOncePerEntry(t *testing.T) {
	j := listenJournal(t, journalSocketPath(t)) // never read: stalled
	var stderr bytes.Buffer
	logger, closeFn, err := New(Options{Target: TargetJournald, JournalSocket: j.path, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	const entries = 30 // more than the socket's receive queue holds
	start := time.Now()
	for i := range entries {
		logger.WithField(FieldAction, "remove-sandbox").Infof("entry %d", i)
	}
	if took := time.Since(start); took > 3*sendTimeout {
		t.Errorf("%d entries took %s with journald stalled: each entry after the outage was detected still waited the %s send timeout",
			entries, took.Round(time.Millisecond), sendTimeout)
	}
}
