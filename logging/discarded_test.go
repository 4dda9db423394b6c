package logging

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// devNull opens the null device for writing, as containerd hands it to a
// pre-registered plugin as stderr.
func devNull(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// alwaysDiscarded stands in for stderrDiscarded, so that a test can read what
// the logger writes to a "discarded" stderr.
func alwaysDiscarded(io.Writer) (string, bool) { return os.DevNull, true }

func TestStderrIsDiscardedOnlyWhenItIsTheNullDeviceOrAClosedDescriptor(t *testing.T) {
	tests := []struct {
		name   string
		stderr func(t *testing.T) io.Writer
		wantAs string // "" = not discarded
	}{
		{"null device", func(t *testing.T) io.Writer { return devNull(t) }, os.DevNull},
		{"closed *os.File", func(t *testing.T) io.Writer {
			f := devNull(t)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			return f
		}, "closed"},
		{"descriptor never opened (EBADF)", func(t *testing.T) io.Writer {
			f := os.NewFile(uintptr(math.MaxInt32), "invalid")
			t.Cleanup(func() { f.Close() })
			return f
		}, "closed"},
		{"another character device", func(t *testing.T) io.Writer {
			f, err := os.OpenFile("/dev/zero", os.O_WRONLY, 0)
			if err != nil {
				t.Skip(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}, ""},
		{"pipe", func(t *testing.T) io.Writer {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close(); w.Close() })
			return w
		}, ""},
		{"regular file", func(t *testing.T) io.Writer {
			f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}, ""},
		{"not a file", func(t *testing.T) io.Writer { return &bytes.Buffer{} }, ""},
		// Only a file descriptor is looked at: a caller passing io.Discard chose it.
		{"io.Discard", func(t *testing.T) io.Writer { return io.Discard }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as, ok := stderrDiscarded(tt.stderr(t))
			if as != tt.wantAs || ok != (tt.wantAs != "") {
				t.Errorf("stderrDiscarded = %q, %v; want %q, %v", as, ok, tt.wantAs, tt.wantAs != "")
			}
		})
	}
}

func TestAutoWithStderrNotDiscardedKeepsTextLinesOnStderr(t *testing.T) {
	tests := []struct {
		name    string
		pipe    bool // an *os.File pipe, else a bytes.Buffer
		logFile bool // log.file is set
	}{
		{"pipe", true, false},
		{"pipe, log.file set", true, true},
		{"buffer", false, false},
		{"buffer, log.file set", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Target: TargetAuto, JournalSocket: filepath.Join(dir, "no-journal"),
				fallbackFile: filepath.Join(dir, "fallback.log")}
			if tt.logFile {
				opts.File = filepath.Join(dir, "configured.log")
			}
			var buf bytes.Buffer
			var r, w *os.File
			if tt.pipe {
				var err error
				if r, w, err = os.Pipe(); err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				defer w.Close()
				opts.Stderr = w
			} else {
				opts.Stderr = &buf
			}
			logger, closeFn, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			logger.WithField(FieldAction, "remove-sandbox").Info("stopped and removed sandbox")
			if err := closeFn(); err != nil {
				t.Fatal(err)
			}
			if tt.pipe {
				w.Close()
				if _, err := buf.ReadFrom(r); err != nil {
					t.Fatal(err)
				}
			}
			notice := "journald socket " + opts.JournalSocket + " not found, logging to stderr"
			if !strings.Contains(buf.String(), notice) || !strings.Contains(buf.String(), `msg="stopped and removed sandbox" action=remove-sandbox`) {
				t.Errorf("stderr lacks the notice or the entry:\n%s", buf.String())
			}
			for _, f := range []string{opts.fallbackFile, opts.File} {
				if f != "" && exists(f) {
					t.Errorf("%s was created", f)
				}
			}
		})
	}
}

func TestAutoWithoutJournaldAndStderrDiscardedUsesDefaultFallbackFileWhenLogFileIsEmpty(t *testing.T) {
	tests := []struct {
		name   string
		stderr func(t *testing.T) *os.File
		as     string
	}{
		{"null device", devNull, os.DevNull},
		{"closed", func(t *testing.T) *os.File {
			f := devNull(t)
			f.Close()
			return f
		}, "closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			fallback := filepath.Join(dir, "nri-housekeeper.log")
			socket := filepath.Join(dir, "no-journal")
			logger, closeFn, err := New(Options{Target: TargetAuto, JournalSocket: socket, Stderr: tt.stderr(t), fallbackFile: fallback})
			if err != nil {
				t.Fatal(err)
			}
			logger.WithField(FieldAction, "remove-sandbox").Info("stopped and removed sandbox")
			out, ok := logger.Out.(*logFile)
			if !ok || out.path != fallback {
				t.Fatalf("logger writes to %v, want the file %s", logger.Out, fallback)
			}
			if err := closeFn(); err != nil {
				t.Fatal(err)
			}
			if _, err := out.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
				t.Errorf("after close, writing to the file: %v, want it closed", err)
			}
			b, err := os.ReadFile(fallback)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			notice := `level=info msg="journald socket ` + socket + " not found and stderr is discarded (" + tt.as + "): logging to " + fallback + `"`
			if len(lines) != 2 || !strings.HasSuffix(lines[0], notice) ||
				!strings.HasSuffix(lines[1], `msg="stopped and removed sandbox" action=remove-sandbox`) {
				t.Errorf("want the notice %q then the entry, got:\n%s", notice, b)
			}
		})
	}
}

func TestAutoFallbackFileInAMissingDirectoryKeepsStderrAndWarns(t *testing.T) {
	tests := []struct {
		name      string
		logFile   bool // log.file is set (else the default fallback file is used)
		makeStale bool // a journald socket file nobody listens on
		want      []string
	}{
		{"log.file, no journald", true, false, []string{`level=warning`, "not found and stderr is discarded (/dev/null), but log file"}},
		{"default file, no journald", false, false, []string{`level=warning`, "not found and stderr is discarded (/dev/null), but log file"}},
		{"log.file, journald refuses", true, true, []string{`level=warning`, "not usable and stderr is discarded (/dev/null), but log file", `journald_error="connection refused"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			missing := filepath.Join(dir, "missing", "nri-housekeeper.log")
			opts := Options{Target: TargetAuto, JournalSocket: journalSocketPath(t), discarded: alwaysDiscarded,
				fallbackFile: filepath.Join(dir, "unused.log")}
			if tt.logFile {
				opts.File = missing
			} else {
				opts.fallbackFile = missing
			}
			if tt.makeStale {
				listenJournal(t, opts.JournalSocket).stop(false)
			}
			var stderr bytes.Buffer
			opts.Stderr = &stderr
			logger, closeFn, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			logger.Info("entry")
			if err := closeFn(); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			want := append(tt.want, missing+" cannot be opened: logging to stderr anyway",
				`error="directory `+filepath.Dir(missing)+" does not exist (it is not created)")
			if len(lines) != 2 || !strings.HasSuffix(lines[1], "level=info msg=entry") {
				t.Fatalf("want a warning then the entry on stderr, got:\n%s", stderr.String())
			}
			for _, w := range want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("warning %q lacks %q", lines[0], w)
				}
			}
			if exists(filepath.Dir(missing)) {
				t.Error("the missing directory was created")
			}
		})
	}
}

func TestAutoWithJournaldAndStderrDiscardedWritesFailedSendsToTheFile(t *testing.T) {
	j := listenJournal(t, journalSocketPath(t))
	file := filepath.Join(t.TempDir(), "nri-housekeeper.log")
	logger, closeFn, err := New(Options{Target: TargetAuto, JournalSocket: j.path, Stderr: devNull(t), fallbackFile: file})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			closeFn()
		}
	}()
	if got, want := j.receive().field("MESSAGE"), "stderr is discarded (/dev/null): entries journald does not take go to "+file; got != want {
		t.Errorf("announcement MESSAGE = %q, want %q", got, want)
	}
	logger.Info("before")
	if got := j.receive().field("MESSAGE"); got != "before" {
		t.Fatalf("MESSAGE = %q, want before", got)
	}

	j.stop(false)
	logger.WithField(FieldAction, "remove-sandbox").Info("stopped and removed sandbox")
	closed = true
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 ||
		!strings.Contains(lines[0], "sending to journald socket "+j.path+" failed, logging to "+file+" until it recovers") ||
		!strings.HasSuffix(lines[1], `msg="stopped and removed sandbox" action=remove-sandbox`) {
		t.Errorf("want the outage notice then the entry in %s, got:\n%s", file, b)
	}
}

func TestAutoWithJournaldAndStderrDiscardedWarnsThroughJournaldWhenTheFileCannotBeOpened(t *testing.T) {
	j := listenJournal(t, journalSocketPath(t))
	missing := filepath.Join(t.TempDir(), "missing", "nri-housekeeper.log")
	_, closeFn, err := New(Options{Target: TargetAuto, JournalSocket: j.path, Stderr: devNull(t), File: missing})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	r := j.receive()
	if got := r.field("PRIORITY"); got != "4" {
		t.Errorf("PRIORITY = %q, want 4 (warning)", got)
	}
	msg := "stderr is discarded (/dev/null) and log file " + missing + " cannot be opened: entries journald does not take are lost"
	if got := r.field("MESSAGE"); got != msg {
		t.Errorf("MESSAGE = %q, want %q", got, msg)
	}
	if got := r.field("ERROR"); !strings.Contains(got, "does not exist (it is not created)") {
		t.Errorf("ERROR = %q", got)
	}
	if exists(filepath.Dir(missing)) {
		t.Error("the missing directory was created")
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestStderrTargetWritesToTheFileWhenStderrIsDiscardedAndSaysWhy(t *testing.T) {
	tests := []struct {
		name    string
		logFile bool // log.file is set, else the default fallback file is used
	}{
		{"log.file set", true},
		{"log.file empty", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			fallback := filepath.Join(dir, "default.log")
			opts := Options{Target: TargetStderr, Stderr: devNull(t), fallbackFile: fallback}
			want := fallback
			if tt.logFile {
				opts.File = filepath.Join(dir, "set.log")
				want = opts.File
			}
			logger, closeFn, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			logger.WithField(FieldAction, "remove-sandbox").Info("stopped and removed sandbox")
			if err := closeFn(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("nothing logged to %s: %v", want, err)
			}
			lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			notice := `level=warning msg="logs go to stderr, but stderr is discarded (` + os.DevNull +
				`; containerd discards a launched plugin's too): logging to ` + want + ` instead, so that what is done is not lost"`
			if len(lines) != 2 || !strings.HasSuffix(lines[0], notice) ||
				!strings.HasSuffix(lines[1], `msg="stopped and removed sandbox" action=remove-sandbox`) {
				t.Errorf("want the notice %q then the entry, got:\n%s", notice, b)
			}
		})
	}
}

// TestStderrAsGivenKeepsADiscardedStderr: report acts on nothing; its
// user's 2>/dev/null is kept, not turned into lines in the plugin's log.
func TestStderrAsGivenKeepsADiscardedStderr(t *testing.T) {
	fallback := filepath.Join(t.TempDir(), "default.log")
	logger, closeFn, err := New(Options{Target: TargetStderr, Stderr: devNull(t), fallbackFile: fallback, StderrAsGiven: true})
	if err != nil {
		t.Fatal(err)
	}
	logger.Warn("a report's line")
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fallback); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the fallback file was made: %v", err)
	}
}

func TestStderrTargetKeepsAStderrThatIsReadAndOpensNoFile(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	logFile := filepath.Join(dir, "set.log")
	logger, closeFn, err := New(Options{Target: TargetStderr, Stderr: w, File: logFile, fallbackFile: filepath.Join(dir, "default.log")})
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("stopped and removed sandbox")
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), "\n"); got != 1 || !strings.Contains(string(out), `msg="stopped and removed sandbox"`) {
		t.Errorf("stderr got %q, want the one entry", out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files made in %s: %v, want none", dir, entries)
	}
}
