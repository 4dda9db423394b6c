package plugin

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// handlerLogQueue bounds the log lines of NRI handlers waiting to be
// written.
const handlerLogQueue = 256

// handlerLogFlush bounds how long Run waits for the handlers' queued lines
// to be written when it returns.
const handlerLogFlush = 2 * time.Second

// handlerLog hands the log lines of NRI handlers (and of the NRI stub) to a
// goroutine of their own: a log sink that stalls, such as a journald that
// does not read its socket, must not hold a handler past containerd's NRI
// request timeout (2 s by default), after which containerd drops the
// plugin. A line that finds the queue full is dropped and counted, and the
// next line written says how many were.
type handlerLog struct {
	log     logrus.FieldLogger
	once    sync.Once
	lines   chan handlerLine
	dropped atomic.Uint64
	pending atomic.Int64 // queued and not yet written
}

type handlerLine struct {
	level  logrus.Level
	fields logrus.Fields
	err    error
	msg    string
}

func newHandlerLog(log logrus.FieldLogger) *handlerLog {
	return &handlerLog{log: log, lines: make(chan handlerLine, handlerLogQueue)}
}

// say queues one line; it never waits. The writer starts with the first
// line and lives as long as the process.
func (h *handlerLog) say(level logrus.Level, fields logrus.Fields, err error, msg string) {
	h.once.Do(func() { go h.write() })
	h.pending.Add(1)
	select {
	case h.lines <- handlerLine{level: level, fields: fields, err: err, msg: msg}:
	default:
		h.pending.Add(-1)
		h.dropped.Add(1)
	}
}

// flush waits, at most within, until the lines queued so far are written:
// before the process exits, so that the last handler lines (the one saying
// why containerd's configuration was rejected) are not lost with it.
func (h *handlerLog) flush(within time.Duration) bool {
	for deadline := time.Now().Add(within); h.pending.Load() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func (h *handlerLog) write() {
	for l := range h.lines {
		if n := h.dropped.Swap(0); n > 0 {
			h.log.WithField("dropped", n).Warn("log lines of the NRI handlers were dropped: the log did not keep up")
		}
		e := h.log.WithFields(l.fields)
		if l.err != nil {
			e = e.WithError(l.err)
		}
		e.Log(l.level, l.msg)
		h.pending.Add(-1)
	}
}
