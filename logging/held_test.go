package logging

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// pointAt points a held logger at buf, at level, as serve does once the
// configuration is known (its hooks replaced, which drops the Held).
func pointAt(logger *logrus.Logger, buf *bytes.Buffer, level logrus.Level) {
	logger.ReplaceHooks(logrus.LevelHooks{})
	logger.SetFormatter(newTextFormatter())
	logger.SetOutput(buf)
	logger.SetLevel(level)
}

func TestAHeldLoggerWritesNothingUntilReleasedThenAllInOrderWithTheirTimes(t *testing.T) {
	logger, held := NewHeld()
	first := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	logger.WithTime(first).WithField("connection", 1).Info("registered with the runtime over NRI")
	logger.WithTime(first.Add(time.Second)).WithError(errors.New("boom")).Warn("second")
	logger.WithTime(first.Add(2 * time.Second)).Debug("a debug line")
	var buf bytes.Buffer
	pointAt(logger, &buf, logrus.InfoLevel)
	if buf.Len() != 0 {
		t.Fatalf("written before Release: %q", buf.String())
	}
	held.Release(logger)
	got := buf.String()
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 2 {
		t.Fatalf("released %d lines, want the 2 at info and above (the debug one is below the target's level):\n%s", len(lines), got)
	}
	for i, want := range []string{
		`time="2026-11-25T10:00:00.000Z" level=info msg="registered with the runtime over NRI" connection=1`,
		`time="2026-11-25T10:00:01.000Z" level=warning msg=second error=boom`,
	} {
		if lines[i] != want {
			t.Errorf("line %d: %q, want %q", i, lines[i], want)
		}
	}
	buf.Reset()
	held.Release(logger)
	if buf.Len() != 0 {
		t.Errorf("a second Release wrote again: %q", buf.String())
	}
}

func TestAHeldLoggerAtDebugReleasesTheDebugLines(t *testing.T) {
	logger, held := NewHeld()
	logger.Debug("a debug line")
	var buf bytes.Buffer
	pointAt(logger, &buf, logrus.DebugLevel)
	held.Release(logger)
	if !strings.Contains(buf.String(), `level=debug msg="a debug line"`) {
		t.Errorf("the debug line was not kept for a target at debug: %q", buf.String())
	}
}

func TestReleasingAHeldFatalEntryDoesNotEndTheProcess(t *testing.T) {
	logger, held := NewHeld()
	logger.Log(logrus.FatalLevel, "fatal before the target was known") // as Fatal does, before it exits
	var buf bytes.Buffer
	pointAt(logger, &buf, logrus.InfoLevel)
	exited := false
	logger.ExitFunc = func(int) { exited = true }
	held.Release(logger)
	if exited || !strings.Contains(buf.String(), `level=error msg="fatal before the target was known"`) {
		t.Errorf("exited %v; wrote %q, want it as an error", exited, buf.String())
	}
}

func TestAHeldLoggerKeepsABoundedNumberOfEntriesAndSaysHowManyWentMissing(t *testing.T) {
	logger, held := NewHeld()
	for range maxHeld + 7 {
		logger.Info("line")
	}
	var buf bytes.Buffer
	pointAt(logger, &buf, logrus.InfoLevel)
	held.Release(logger)
	if n := strings.Count(buf.String(), `msg=line`); n != maxHeld {
		t.Errorf("released %d lines, want %d", n, maxHeld)
	}
	if !strings.Contains(buf.String(), "7 log entries from before the log target was known were dropped") {
		t.Errorf("the dropped entries are not said:\n%s", buf.String()[len(buf.String())-300:])
	}
}
