package logging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Case 10 of the safety review: containerd starts a pre-registered plugin
// with stdout and stderr on /dev/null. With log.target = "auto" and no
// journald, every executed action used to be logged there, i.e. nowhere.
// Then the log goes to log.file.
func TestAutoLogsToTheFileWhenJournaldIsAbsentAndStderrIsDiscarded(t *testing.T) {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "nri-housekeeper.log")
	log, closeFn, err := New(Options{Target: TargetAuto, JournalSocket: filepath.Join(dir, "no-journal"), File: file, Stderr: devNull})
	if err != nil {
		t.Fatal(err)
	}
	log.WithField(FieldAction, "remove-sandbox").Info("stopped and removed sandbox")
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), "stopped and removed sandbox") {
		t.Fatalf("the action went nowhere: log file %s: %q, %v", file, b, err)
	}
}
