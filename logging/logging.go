// Package logging builds the plugin's logrus logger from the [log] section of the
// configuration: log.level, log.target (auto | journald | stderr | file) and log.file.
//
// # Targets
//
//   - auto: journald when its socket accepts connections, otherwise stderr. The fallback is
//     announced once on the returned logger: at info level when the socket does not exist
//     ("journald socket /run/systemd/journal/socket not found, logging to stderr"), at warning
//     level when it exists but refuses (journald stopped, permissions). With stderr
//     discarded, the fallback is a file instead; see below.
//   - journald: structured entries sent with the systemd native journal protocol. New fails
//     when the socket is missing or unusable.
//   - stderr: logrus text lines with millisecond timestamps (colors only on a TTY). With
//     stderr discarded (see below) they go to log.file or DefaultFallbackFile instead, the
//     first line saying why, at warning level: nobody reads a discarded stderr, and a
//     target that loses every entry, executed actions included, is never what was meant.
//   - file: the same text lines, appended to log.file. The file is opened with
//     O_APPEND|O_CREATE and mode 0640 (before umask) when it does not exist yet; its parent
//     directory is NOT created: making directories (owner, mode, SELinux label) is the
//     packaging's job (systemd LogsDirectory=, a hostPath of type DirectoryOrCreate), and a
//     typo in log.file should fail loudly instead of growing a new tree.
//
// Stderr is discarded when Options.Stderr (os.Stderr when nil) is an *os.File on the null
// device (a character device with the rdev of /dev/null) or on a descriptor that is closed or
// invalid (fstat fails with EBADF). That is how containerd starts a pre-registered plugin, and
// with target auto and no journald every executed action would be logged nowhere. The text
// lines then go to log.file, or to DefaultFallbackFile (/var/log/nri-housekeeper.log) when
// log.file is empty, opened as for target file (its directory is not created), and the
// announcement, at the same level as above, names it: "journald socket
// /run/systemd/journal/socket not found and stderr is discarded (/dev/null): logging to
// /var/log/nri-housekeeper.log". When that file cannot be opened, the logger keeps stderr, as
// nothing better is possible, and says so at warning level.
//
// When auto uses journald and stderr is discarded, the same file receives the entries journald
// does not take (see Journald fields), and the choice is announced at info level. The file is
// opened up front, when New runs, rather than at the first failed send: the code stays simpler
// (no open, and no open error to report, in the middle of an outage), and a file that cannot be
// opened is reported, at warning level, while journald still takes the warning. The cost is a
// file that stays empty as long as journald works.
//
// # Why a journald client of our own
//
// github.com/coreos/go-systemd/v22/journal and github.com/ssgreg/journald both hard-code
// /run/systemd/journal/socket (go-systemd's can only be changed with -ldflags -X at build
// time), so they cannot be tested against a socket the test creates. This package implements
// the small native protocol itself (see journald.go), with the socket path in [Options].
//
// # Journald fields
//
// Every entry carries MESSAGE, PRIORITY, SYSLOG_IDENTIFIER=nri-housekeeper, CODE_FILE,
// CODE_LINE and CODE_FUNC when the logger reports callers, and every logrus field. PRIORITY is
// trace/debug 7, info 6, warn 4, error 3, fatal and panic 2 (crit, not emerg: journald walls
// emerg to every terminal). A logrus field name is upper-cased and every character outside [A-Z0-9_] becomes '_'
// (pod_uid → POD_UID, error → ERROR). A name that is then empty, starts with '_' or a digit, or
// equals a field the package sets itself (MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, CODE_FILE,
// CODE_LINE, CODE_FUNC) gets the prefix FIELD_; names are cut to journald's 64 bytes. Values
// are fmt.Sprint'ed (an error becomes its Error() text). Two logrus keys that map to the same
// name (pod-uid and pod_uid) are both sent: journald keeps multi-valued fields.
//
// If a send fails or takes over a second (journald stopped, restarting, stalled), the entry is
// written to stderr as a text line instead (to the fallback file with target auto or journald
// and stderr discarded, see Targets), and the outage is reported there once, not once per
// entry; during the outage each entry is tried once without waiting. When a send succeeds
// again, a recovery notice goes to both journald and there. The log file is opened again when
// its path names another file (logrotate's create mode) or none.
//
// The package is Linux-only (memfd, SCM_RIGHTS), like the plugin.
package logging

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// SyslogIdentifier is the SYSLOG_IDENTIFIER of every journald entry:
// `journalctl -t nri-housekeeper`.
const SyslogIdentifier = "nri-housekeeper"

// DefaultJournalSocket is journald's native-protocol socket.
const DefaultJournalSocket = "/run/systemd/journal/socket"

// DefaultFallbackFile is where target auto writes when journald is not usable (or for the
// entries journald does not take) while stderr is discarded and log.file is empty.
const DefaultFallbackFile = "/var/log/nri-housekeeper.log"

// Structured field keys used across the project. They are logrus field names in
// stderr and file output; journald receives them upper-cased (POD_UID, ...), so
// `journalctl -t nri-housekeeper POD_UID=…` works.
const (
	FieldPodUID       = "pod_uid"
	FieldPodNamespace = "pod_namespace"
	FieldPodName      = "pod_name"
	FieldSandboxID    = "sandbox_id"
	FieldContainerID  = "container_id"
	FieldAction       = "action"
	FieldRule         = "rule"
	FieldReason       = "reason"
)

// Targets accepted in Options.Target (the log.target key).
const (
	TargetAuto     = "auto"
	TargetJournald = "journald"
	TargetStderr   = "stderr"
	TargetFile     = "file"
)

// Options selects where and how much the logger writes.
type Options struct {
	// Level is trace, debug, info, warn, warning or error; "" means info.
	Level string
	// Target is auto, journald, stderr or file; "" means auto.
	Target string
	// File is the log file for Target "file", and for Target auto when stderr is
	// discarded ("" then means DefaultFallbackFile).
	File string
	// JournalSocket is journald's socket; "" means DefaultJournalSocket.
	JournalSocket string
	// Stderr receives stderr output and the journald fallback; nil means os.Stderr.
	Stderr io.Writer
	// StderrAsGiven keeps Target stderr on Stderr even when nobody reads
	// it: for a command that acts on nothing (report), whose user chose
	// where its stderr goes.
	StderrAsGiven bool

	// For tests, which must not write to /var/log nor depend on where their own stderr
	// goes: fallbackFile replaces DefaultFallbackFile when not "", and discarded
	// replaces stderrDiscarded when not nil.
	fallbackFile string
	discarded    func(io.Writer) (as string, ok bool)
}

// New returns a logger configured by opts and a func that releases what it holds
// (the log file or the journald socket). Call the func once, when nothing logs any more.
func New(opts Options) (*logrus.Logger, func() error, error) {
	level := opts.Level
	if level == "" {
		level = "info"
	}
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, nil, fmt.Errorf("log.level %q: want trace, debug, info, warn or error", opts.Level)
	}
	socket := opts.JournalSocket
	if socket == "" {
		socket = DefaultJournalSocket
	}
	stderr := opts.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}

	logger := logrus.New()
	logger.SetLevel(lvl)
	noop := func() error { return nil }

	switch opts.Target {
	case TargetAuto, "":
		return logger, useAuto(logger, opts, socket, stderr), nil

	case TargetJournald:
		if err := probeJournal(socket); err != nil {
			what := "not usable"
			if errors.Is(err, fs.ErrNotExist) {
				what = "not found"
			}
			return nil, nil, fmt.Errorf("log.target = %q: journald socket %s %s (%v); use log.target = %q or %q",
				TargetJournald, socket, what, err, TargetStderr, TargetFile)
		}
		// As with auto: entries journald does not take go where someone
		// reads them, not to a discarded stderr.
		fallback, fallbackName, closeFile := io.Writer(stderr), "stderr", func() error { return nil }
		discarded := opts.discarded
		if discarded == nil {
			discarded = stderrDiscarded
		}
		var fileErr error
		discardedAs, isDiscarded := discarded(stderr)
		path := cmp.Or(opts.File, opts.fallbackFile, DefaultFallbackFile)
		if isDiscarded {
			var f *logFile
			if f, fileErr = openLogFile(path); fileErr == nil {
				fallback, fallbackName, closeFile = f, path, f.Close
			}
		}
		closeFn, err := useJournal(logger, socket, fallback, fallbackName)
		if err != nil {
			_ = closeFile()
			return nil, nil, err
		}
		if fileErr != nil {
			logger.WithError(fileErr).Warnf("stderr is discarded (%s) and log file %s cannot be opened: entries journald does not take are lost",
				discardedAs, path)
		}
		return logger, func() error { return errors.Join(closeFn(), closeFile()) }, nil

	case TargetStderr:
		// Stderr as asked, unless nobody reads it: then every entry,
		// executed actions included, would be lost without a word. The
		// file is what auto and journald fall back to as well.
		discarded := opts.discarded
		if discarded == nil {
			discarded = stderrDiscarded
		}
		discardedAs, isDiscarded := discarded(stderr)
		if !isDiscarded || opts.StderrAsGiven {
			useText(logger, stderr)
			return logger, noop, nil
		}
		path := cmp.Or(opts.File, opts.fallbackFile, DefaultFallbackFile)
		f, err := openLogFile(path)
		if err != nil {
			// Nothing better is possible; the warning is for a stderr
			// that is only closed now and read again later.
			useText(logger, stderr)
			logger.WithError(err).Warnf("logs go to stderr, but stderr is discarded (%s), and log file %s cannot be opened: entries are lost",
				discardedAs, path)
			return logger, noop, nil
		}
		useText(logger, f)
		logger.Warnf("logs go to stderr, but stderr is discarded (%s; containerd discards a launched plugin's too): logging to %s instead, so that what is done is not lost",
			discardedAs, path)
		return logger, f.Close, nil

	case TargetFile:
		if opts.File == "" {
			return nil, nil, fmt.Errorf("log.target = %q needs log.file", TargetFile)
		}
		f, err := openLogFile(opts.File)
		if err != nil {
			return nil, nil, fmt.Errorf("log.file %s: %w", opts.File, err)
		}
		useText(logger, f)
		return logger, f.Close, nil

	default:
		return nil, nil, fmt.Errorf("log.target %q: want %q, %q, %q or %q",
			opts.Target, TargetAuto, TargetJournald, TargetStderr, TargetFile)
	}
}

// useAuto sets logger up for TargetAuto, as the package doc describes, and returns
// the func that releases the journald socket and the fallback file.
func useAuto(logger *logrus.Logger, opts Options, socket string, stderr io.Writer) func() error {
	discarded := opts.discarded
	if discarded == nil {
		discarded = stderrDiscarded
	}
	// out is where text lines go when journald is not used, and journald's own
	// fallback: stderr, unless nobody reads it and the fallback file opens.
	out, outName := stderr, "stderr"
	closeFile := func() error { return nil }
	discardedAs, isDiscarded := discarded(stderr)
	var path string
	var fileErr error
	if isDiscarded {
		path = opts.File
		if path == "" {
			path = cmp.Or(opts.fallbackFile, DefaultFallbackFile)
		}
		var f *logFile
		if f, fileErr = openLogFile(path); fileErr == nil {
			out, outName, closeFile = f, path, f.Close
		}
	}

	probeErr := probeJournal(socket)
	if probeErr == nil {
		closeHook, err := useJournal(logger, socket, out, outName)
		if err == nil {
			switch {
			case !isDiscarded:
				// Nothing to announce: journald failures go to stderr, as always.
			case fileErr != nil:
				logger.WithError(fileErr).Warnf("stderr is discarded (%s) and log file %s cannot be opened: entries journald does not take are lost",
					discardedAs, path)
			default:
				logger.Infof("stderr is discarded (%s): entries journald does not take go to %s", discardedAs, path)
			}
			return func() error { return errors.Join(closeHook(), closeFile()) }
		}
		probeErr = err
	}

	useText(logger, out)
	// A missing socket is the normal state of a host without journald (info); one
	// that exists and refuses is worth a warning.
	what, level := "not found", logrus.InfoLevel
	var journalErr error // nil when the socket does not exist
	if !errors.Is(probeErr, fs.ErrNotExist) {
		what, level, journalErr = "not usable", logrus.WarnLevel, probeErr
	}
	notice := logrus.NewEntry(logger)
	switch {
	case !isDiscarded:
		if journalErr != nil {
			notice = notice.WithError(journalErr)
		}
		notice.Logf(level, "journald socket %s %s, logging to stderr", socket, what)
	case fileErr == nil:
		if journalErr != nil {
			notice = notice.WithError(journalErr)
		}
		notice.Logf(level, "journald socket %s %s and stderr is discarded (%s): logging to %s", socket, what, discardedAs, path)
	default:
		// Probably lost too, but stderr is all there is left.
		notice = notice.WithError(fileErr)
		if journalErr != nil {
			notice = notice.WithField("journald_error", journalErr)
		}
		notice.Warnf("journald socket %s %s and stderr is discarded (%s), but log file %s cannot be opened: logging to stderr anyway",
			socket, what, discardedAs, path)
	}
	return closeFile
}

// stderrDiscarded reports whether w is an *os.File nobody reads: the null device
// (as = "/dev/null"), or a descriptor that is closed or invalid (as = "closed").
// Anything else, including a file whose state cannot be told, is not discarded:
// writing to it may reach someone.
func stderrDiscarded(w io.Writer) (as string, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile {
		return "", false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return "closed", true // a nil *os.File
	}
	var st unix.Stat_t
	var statErr error
	if err := rc.Control(func(fd uintptr) { statErr = unix.Fstat(int(fd), &st) }); err != nil {
		return "closed", true // f.Close was called
	}
	if errors.Is(statErr, unix.EBADF) {
		return "closed", true
	}
	if statErr != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return "", false
	}
	// Compared with /dev/null's own rdev rather than a hard-coded 1:3.
	var null unix.Stat_t
	if err := unix.Stat(os.DevNull, &null); err != nil || null.Mode&unix.S_IFMT != unix.S_IFCHR || null.Rdev != st.Rdev {
		return "", false
	}
	return os.DevNull, true
}

// openLogFile opens path for appending, creating the file (mode 0640 before umask)
// but never its directory. The error does not repeat the path.
func openLogFile(path string) (*logFile, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	return &logFile{path: path, f: f}, nil
}

// logFile is the log file at path, opened again when path no longer names
// the open file: logrotate (its default, create mode) renames the file and
// makes a new one, or a person removes it; a plugin that runs for months
// must go on in the new one, or the old one grows and its space is never
// freed. One stat a line: lines are few, and a write costs more.
type logFile struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	closed bool
}

func (l *logFile) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, os.ErrClosed
	}
	if cur, err := os.Stat(l.path); err != nil || !sameFile(cur, l.f) {
		// Not there (removed), or another file: open what path names now.
		// When that fails (its directory gone), the open file goes on.
		if f, err := openAppend(l.path); err == nil {
			_ = l.f.Close()
			l.f = f
		}
	}
	return l.f.Write(b)
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return l.f.Close()
}

// sameFile reports whether cur is the file f has open.
func sameFile(cur fs.FileInfo, f *os.File) bool {
	open, err := f.Stat()
	return err == nil && os.SameFile(cur, open)
}

// openAppend opens path for appending (see openLogFile). Only a regular
// file is a log (regularfile.Open: a FIFO would block the open or every
// line, a device such as /dev/null would lose every line); what is not is
// refused unopened.
func openAppend(path string) (*os.File, error) {
	f, _, err := regularfile.Open(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err == nil {
		return f, nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the caller's message names the path
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("directory %s does not exist (it is not created): %w", filepath.Dir(path), err)
	}
	return nil, err
}

// useText makes logger write text lines to w.
func useText(logger *logrus.Logger, w io.Writer) {
	logger.SetOutput(w)
	logger.SetFormatter(newTextFormatter())
}

// useJournal makes logger send every entry to journald through a hook; logrus'
// own output path is disabled (discarded, not even formatted). Entries journald
// does not take are written to fallback, named fallbackName in notices.
func useJournal(logger *logrus.Logger, socket string, fallback io.Writer, fallbackName string) (func() error, error) {
	hook, err := newJournalHook(socket, fallback, fallbackName)
	if err != nil {
		return nil, err
	}
	logger.SetOutput(io.Discard)
	logger.SetFormatter(discardFormatter{})
	logger.AddHook(hook)
	return hook.Close, nil
}

// newTextFormatter is the stderr/file format, also used for journald fallback lines:
// full millisecond timestamps, logrus field names, colors only on a TTY.
func newTextFormatter() *logrus.TextFormatter {
	return &logrus.TextFormatter{
		FullTimestamp:    true,
		TimestampFormat:  "2006-01-02T15:04:05.000Z07:00",
		QuoteEmptyFields: true,
	}
}

// discardFormatter stands in for logrus' formatter when the journald hook does the
// writing, so entries are not formatted only to be thrown away.
type discardFormatter struct{}

func (discardFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }
