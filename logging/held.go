package logging

import (
	"io"
	"maps"
	"sync"

	"github.com/sirupsen/logrus"
)

// maxHeld bounds what a Held keeps: a plugin that never learns its target
// must not grow without end.
const maxHeld = 1000

// Held keeps a logger's entries in memory until where they go is known. A
// plugin containerd launches learns its [log] section from containerd only
// after it registered: its first lines belong where that section says, not
// in the default target's fallback file.
type Held struct {
	mu      sync.Mutex
	entries []logrus.Entry
	dropped int
}

// NewHeld returns a logger that writes nothing yet and keeps every entry,
// at every level, in the returned Held, until Release. Point the logger at
// its target (replacing its hooks, which removes the Held) before that.
func NewHeld() (*logrus.Logger, *Held) {
	h := &Held{}
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	logger.SetFormatter(discardFormatter{})
	logger.SetLevel(logrus.TraceLevel)
	logger.AddHook(h)
	return logger, h
}

// Levels makes the Held see every entry.
func (h *Held) Levels() []logrus.Level { return logrus.AllLevels }

// Fire keeps a copy of e (its fields are the caller's map).
func (h *Held) Fire(e *logrus.Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.entries) >= maxHeld {
		h.dropped++
		return nil
	}
	h.entries = append(h.entries, logrus.Entry{Time: e.Time, Level: e.Level, Message: e.Message, Data: maps.Clone(e.Data)})
	return nil
}

// Release writes the kept entries to logger, in order, with their own times,
// at the levels it now lets through, and forgets them. A panic or fatal
// entry is written as an error: replaying it must not end the process.
func (h *Held) Release(logger *logrus.Logger) {
	h.mu.Lock()
	entries, dropped := h.entries, h.dropped
	h.entries, h.dropped = nil, 0
	h.mu.Unlock()
	for _, e := range entries {
		level := max(e.Level, logrus.ErrorLevel)
		logger.WithFields(e.Data).WithTime(e.Time).Log(level, e.Message)
	}
	if dropped > 0 {
		logger.Warnf("%d log entries from before the log target was known were dropped (%d kept)", dropped, maxHeld)
	}
}
