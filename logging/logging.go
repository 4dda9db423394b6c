// Package logging builds the plugin's logrus logger from the [log] section of the
// configuration: log.level, log.target (auto | journald | stderr | file) and log.file.
//
// # Targets
//
//   - auto: journald when its socket accepts connections, otherwise stderr. The fallback is
//     announced once on the returned logger: at info level when the socket does not exist
//     ("journald socket /run/systemd/journal/socket not found, logging to stderr"), at warning
//     level when it exists but refuses (journald stopped, permissions).
//   - journald: structured entries sent with the systemd native journal protocol. New fails
//     when the socket is missing or unusable.
//   - stderr: logrus text lines with millisecond timestamps (colors only on a TTY).
//   - file: the same text lines, appended to log.file. The file is opened with
//     O_APPEND|O_CREATE and mode 0640 (before umask) when it does not exist yet; its parent
//     directory is NOT created: making directories (owner, mode, SELinux label) is the
//     packaging's job (systemd LogsDirectory=, a hostPath of type DirectoryOrCreate), and a
//     typo in log.file should fail loudly instead of growing a new tree.
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
// If a send fails or takes over a second (journald stopped, restarting, stalled), the entry is written to stderr as a text
// line instead, and the outage is reported on stderr once, not once per entry; when a send
// succeeds again, a recovery notice goes to both journald and stderr.
//
// The package is Linux-only (memfd, SCM_RIGHTS), like the plugin.
package logging

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
)

// SyslogIdentifier is the SYSLOG_IDENTIFIER of every journald entry:
// `journalctl -t nri-housekeeper`.
const SyslogIdentifier = "nri-housekeeper"

// DefaultJournalSocket is journald's native-protocol socket.
const DefaultJournalSocket = "/run/systemd/journal/socket"

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
	// File is the log file for Target "file".
	File string
	// JournalSocket is journald's socket; "" means DefaultJournalSocket.
	JournalSocket string
	// Stderr receives stderr output and the journald fallback; nil means os.Stderr.
	Stderr io.Writer
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
		probeErr := probeJournal(socket)
		if probeErr == nil {
			closeFn, err := useJournal(logger, socket, stderr)
			if err == nil {
				return logger, closeFn, nil
			}
			probeErr = err
		}
		useText(logger, stderr)
		if errors.Is(probeErr, fs.ErrNotExist) {
			logger.Infof("journald socket %s not found, logging to stderr", socket)
		} else {
			logger.WithError(probeErr).Warnf("journald socket %s not usable, logging to stderr", socket)
		}
		return logger, noop, nil

	case TargetJournald:
		if err := probeJournal(socket); err != nil {
			what := "not usable"
			if errors.Is(err, fs.ErrNotExist) {
				what = "not found"
			}
			return nil, nil, fmt.Errorf("log.target = %q: journald socket %s %s (%v); use log.target = %q or %q",
				TargetJournald, socket, what, err, TargetStderr, TargetFile)
		}
		closeFn, err := useJournal(logger, socket, stderr)
		if err != nil {
			return nil, nil, err
		}
		return logger, closeFn, nil

	case TargetStderr:
		useText(logger, stderr)
		return logger, noop, nil

	case TargetFile:
		if opts.File == "" {
			return nil, nil, fmt.Errorf("log.target = %q needs log.file", TargetFile)
		}
		f, err := os.OpenFile(opts.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the message names the path already
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil, fmt.Errorf("log.file %s: directory %s does not exist (it is not created): %w",
					opts.File, filepath.Dir(opts.File), err)
			}
			return nil, nil, fmt.Errorf("log.file %s: %w", opts.File, err)
		}
		useText(logger, f)
		return logger, f.Close, nil

	default:
		return nil, nil, fmt.Errorf("log.target %q: want %q, %q, %q or %q",
			opts.Target, TargetAuto, TargetJournald, TargetStderr, TargetFile)
	}
}

// useText makes logger write text lines to w.
func useText(logger *logrus.Logger, w io.Writer) {
	logger.SetOutput(w)
	logger.SetFormatter(newTextFormatter())
}

// useJournal makes logger send every entry to journald through a hook; logrus'
// own output path is disabled (discarded, not even formatted).
func useJournal(logger *logrus.Logger, socket string, stderr io.Writer) (func() error, error) {
	hook, err := newJournalHook(socket, stderr)
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
