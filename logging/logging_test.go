package logging

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

func TestAutoTargetUsesJournaldWhenItsSocketExists(t *testing.T) {
	for _, target := range []string{TargetAuto, ""} {
		t.Run("target="+target, func(t *testing.T) {
			j := listenJournal(t, journalSocketPath(t))
			var stderr bytes.Buffer
			logger, closeFn, err := New(Options{Target: target, JournalSocket: j.path, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			logger.WithField(FieldPodName, "web-0").Info("hello")
			r := j.receive()
			if r.field("MESSAGE") != "hello" || r.field("POD_NAME") != "web-0" {
				t.Errorf("got %q", r.fields)
			}
			j.expectNothing() // no fallback notice
			if stderr.Len() != 0 {
				t.Errorf("stderr: %q", stderr.String())
			}
		})
	}
}

func TestAutoTargetFallsBackToStderrAndSaysSoExactlyOnce(t *testing.T) {
	tests := []struct {
		name      string
		makeStale bool // a socket file nobody listens on
		wantLine  string
	}{
		{"no socket file", false, `level=info msg="journald socket %s not found, logging to stderr"`},
		{"stale socket file", true, `level=warning msg="journald socket %s not usable, logging to stderr" error="connection refused"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := journalSocketPath(t)
			if tt.makeStale {
				listenJournal(t, path).stop(false)
			}
			var stderr bytes.Buffer
			logger, closeFn, err := New(Options{Level: "info", Target: TargetAuto, JournalSocket: path, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			for range 3 {
				logger.WithField(FieldPodUID, "u1").Info("entry")
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			notice := strings.ReplaceAll(tt.wantLine, "%s", path)
			if len(lines) != 4 || !strings.HasSuffix(lines[0], notice) {
				t.Fatalf("want the notice %q then 3 entries, got:\n%s", notice, stderr.String())
			}
			for _, l := range lines[1:] {
				if !strings.HasSuffix(l, `level=info msg=entry pod_uid=u1`) {
					t.Errorf("entry line %q", l)
				}
			}
		})
	}
}

func TestJournaldTargetWithoutUsableSocketFailsNamingIt(t *testing.T) {
	tests := []struct {
		name      string
		makeStale bool
		want      string
	}{
		{"no socket file", false, "not found"},
		{"stale socket file", true, "not usable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := journalSocketPath(t)
			if tt.makeStale {
				listenJournal(t, path).stop(false)
			}
			var stderr bytes.Buffer
			logger, closeFn, err := New(Options{Target: TargetJournald, JournalSocket: path, Stderr: &stderr})
			if err == nil {
				closeFn()
				t.Fatal("New succeeded")
			}
			if logger != nil || closeFn != nil {
				t.Error("New returned a logger with an error")
			}
			for _, want := range []string{path, tt.want, `log.target = "stderr" or "file"`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr: %q", stderr.String())
			}
		})
	}
}

func TestFileTargetAppendsTextLinesToTheFile(t *testing.T) {
	tests := []struct {
		name     string
		existing string // "" = file does not exist yet
	}{
		{"new file", ""},
		{"existing file is appended to", "earlier line\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "housekeeper.log")
			if tt.existing != "" {
				if err := os.WriteFile(path, []byte(tt.existing), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var stderr bytes.Buffer
			logger, closeFn, err := New(Options{Target: TargetFile, File: path, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			logger.WithFields(logrus.Fields{FieldPodUID: "u1", FieldAction: "remove-sandbox"}).Info("one")
			logger.Warn("two")
			if err := closeFn(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got := string(b)
			if !strings.HasPrefix(got, tt.existing) {
				t.Errorf("earlier content lost:\n%s", got)
			}
			lines := strings.Split(strings.TrimSuffix(strings.TrimPrefix(got, tt.existing), "\n"), "\n")
			if len(lines) != 2 ||
				!strings.HasSuffix(lines[0], "level=info msg=one action=remove-sandbox pod_uid=u1") ||
				!strings.HasSuffix(lines[1], "level=warning msg=two") {
				t.Errorf("file lines:\n%s", got)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if tt.existing == "" && st.Mode().Perm()&^0o640 != 0 {
				t.Errorf("new file mode %v, want at most 0640", st.Mode().Perm())
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr: %q", stderr.String())
			}
		})
	}
}

func TestFileTargetErrorNamesThePath(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file string
		want       []string
	}{
		{"missing directory is not created", filepath.Join(dir, "nope", "x.log"), []string{filepath.Join(dir, "nope", "x.log"), "does not exist"}},
		{"path is a directory", dir, []string{dir, "is a directory"}},
		{"no file given", "", []string{"log.file"}},
		// The open of a FIFO no one reads would wait for ever: the plugin
		// would hang at its start while config check says OK.
		{"a FIFO no one reads is no log file, and its open does not wait", fifo(t, filepath.Join(dir, "fifo")), []string{"fifo", "not a regular file"}},
		{"a device loses every line", os.DevNull, []string{os.DevNull, "character device", "not a regular file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type result struct {
				logger  *logrus.Logger
				closeFn func() error
				err     error
			}
			done := make(chan result, 1)
			go func() {
				logger, closeFn, err := New(Options{Target: TargetFile, File: tt.file})
				done <- result{logger, closeFn, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("New(log.file = %q) still waits after 5s", tt.file)
			}
			logger, closeFn, err := r.logger, r.closeFn, r.err
			if err == nil {
				closeFn()
				t.Fatal("New succeeded")
			}
			if logger != nil || closeFn != nil {
				t.Error("New returned a logger with an error")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "nope")); err == nil {
				t.Error("missing directory was created")
			}
		})
	}
}

func TestTextFormatHasMillisecondTimestampNoColorsAndLogrusFieldNames(t *testing.T) {
	var stderr bytes.Buffer
	logger, closeFn, err := New(Options{Target: TargetStderr, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	logger.WithFields(logrus.Fields{FieldPodUID: "u1", FieldRule: "orphan", FieldReason: ""}).
		WithError(os.ErrNotExist).Error("multi\nline")
	line := stderr.String()
	want := regexp.MustCompile(`^time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)" level=error msg="multi\\nline" error="file does not exist" pod_uid=u1 reason="" rule=orphan\n$`)
	if !want.MatchString(line) {
		t.Errorf("line %q does not match %s", line, want)
	}
	if strings.Contains(line, "\x1b[") {
		t.Errorf("colors in %q", line)
	}
}

func TestLevelDecidesWhichEntriesAreWritten(t *testing.T) {
	tests := []struct {
		level string
		want  []string // messages written, of trace..error
	}{
		{"", []string{"info", "warn", "error"}},
		{"trace", []string{"trace", "debug", "info", "warn", "error"}},
		{"debug", []string{"debug", "info", "warn", "error"}},
		{"info", []string{"info", "warn", "error"}},
		{"warn", []string{"warn", "error"}},
		{"warning", []string{"warn", "error"}},
		{"error", []string{"error"}},
	}
	for _, tt := range tests {
		t.Run("level="+tt.level, func(t *testing.T) {
			var stderr bytes.Buffer
			logger, closeFn, err := New(Options{Level: tt.level, Target: TargetStderr, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			logger.Trace("trace")
			logger.Debug("debug")
			logger.Info("info")
			logger.Warn("warn")
			logger.Error("error")
			var got []string
			for _, m := range regexp.MustCompile(`msg=(\w+)`).FindAllStringSubmatch(stderr.String(), -1) {
				got = append(got, m[1])
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("written %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInvalidOptionsAreErrorsNamingTheKey(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"unknown level", Options{Level: "verbose", Target: TargetStderr}, `log.level "verbose"`},
		{"unknown target", Options{Target: "syslog"}, `log.target "syslog"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// fifo makes a FIFO at path, for a log.file that is one.
func fifo(t *testing.T, path string) string {
	t.Helper()
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
