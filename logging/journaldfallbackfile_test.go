package logging

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTheJournaldTargetSaysWhenItsFallbackFileCannotBeOpened: with target
// journald and stderr discarded, New opens log.file for the lines journald
// does not take (578f2bc). When it cannot be opened, auto says so
// ("entries journald does not take are lost"); journald says nothing, and
// the outage's lines still go to /dev/null.
func TestTheJournaldTargetSaysWhenItsFallbackFileCannotBeOpened(t *testing.T) {
	j := listenJournal(t, journalSocketPath(t))
	bad := filepath.Join(t.TempDir(), "no-such-dir", "nri-housekeeper.log")
	logger, closeFn, err := New(Options{Target: TargetJournald, JournalSocket: j.path, File: bad, Stderr: devNull(t), fallbackFile: bad})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	// What New said is in journald: read what arrived.
	said := ""
	logger.Info("marker")
	for {
		r := j.receive()
		said += r.field("MESSAGE") + "\n"
		if r.field("MESSAGE") == "marker" {
			break
		}
	}
	if !strings.Contains(said, bad) {
		t.Errorf("log.file %s cannot be opened, and nothing says the lines journald does not take are lost; journald got:\n%s", bad, said)
	}
}
