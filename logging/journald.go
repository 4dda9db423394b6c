package logging

// The systemd native journal protocol, as spoken by sd_journal_sendv and by
// github.com/coreos/go-systemd/v22/journal (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/):
//
//   - one entry is one datagram on the unixgram socket, a sequence of fields;
//   - a field is "NAME=value\n", or, when the value contains '\n',
//     "NAME\n" + <value length, uint64 little-endian> + value + "\n";
//   - an entry too large for one datagram (EMSGSIZE / ENOBUFS) is written to a sealed
//     memfd whose descriptor is passed with SCM_RIGHTS in an otherwise empty datagram.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// sendTimeout bounds one send, so a stalled journald (its receive queue full) diverts
// entries to the fallback writer instead of blocking every goroutine that logs.
const sendTimeout = time.Second

// maxFieldNameLen is journald's limit on field names; longer ones are dropped by journald.
const maxFieldNameLen = 64

// journalHook is the logrus hook that sends every entry to journald.
type journalHook struct {
	addr *net.UnixAddr
	conn *net.UnixConn
	// fallback receives, as text lines, the entries journald does not take: stderr,
	// or the fallback file when stderr is discarded (package doc, Targets). fallbackName names it
	// in the outage and recovery notices.
	fallback     io.Writer
	fallbackName string
	text         *logrus.TextFormatter

	mu       sync.Mutex // serializes sends, fallback writes and the outage state below
	outage   bool       // the last send failed and the failure has been reported
	diverted int        // entries written to the fallback during the current outage
}

func newJournalHook(socket string, fallback io.Writer, fallbackName string) (*journalHook, error) {
	// An unconnected (autobound) socket, addressed on every send: after journald restarts,
	// the next send reaches the new socket, where a connected one would stay refused.
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("socket for journald %s: %w", socket, err)
	}
	return &journalHook{
		addr:         &net.UnixAddr{Name: socket, Net: "unixgram"},
		conn:         conn,
		fallback:     fallback,
		fallbackName: fallbackName,
		text:         newTextFormatter(),
	}, nil
}

// ProbeJournal checks that socket ("" means DefaultJournalSocket) is a
// datagram socket this process may send to, without sending anything: what
// log.target = "journald" needs at start.
func ProbeJournal(socket string) error {
	if socket == "" {
		socket = DefaultJournalSocket
	}
	return probeJournal(socket)
}

// probeJournal checks that socket is a datagram socket this process may send to,
// without sending anything.
func probeJournal(socket string) error {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return errnoOf(err)
	}
	return c.Close()
}

// errnoOf strips a socket error down to its errno ("no such file or directory",
// "connection refused", ...): the messages around it already name the socket.
func errnoOf(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

// Levels implements logrus.Hook.
func (h *journalHook) Levels() []logrus.Level { return logrus.AllLevels }

// Fire implements logrus.Hook. It never returns an error: an entry journald does not
// take is written to the fallback writer instead.
func (h *journalHook) Fire(e *logrus.Entry) error {
	payload := encodeEntry(e)

	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.send(payload)
	if err == nil {
		if h.outage {
			h.outage = false
			n := h.notice(e.Logger, logrus.InfoLevel, nil, fmt.Sprintf(
				"journald socket %s works again; %d entries went to %s meanwhile", h.addr.Name, h.diverted, h.fallbackName))
			_ = h.send(encodeEntry(n))
			h.writeFallback(n)
		}
		return nil
	}
	if !h.outage {
		h.outage = true
		h.diverted = 0
		h.writeFallback(h.notice(e.Logger, logrus.WarnLevel, errnoOf(err), fmt.Sprintf(
			"sending to journald socket %s failed, logging to %s until it recovers", h.addr.Name, h.fallbackName)))
	}
	h.diverted++
	h.writeFallback(e)
	return nil
}

// Close releases the socket. Entries logged afterwards go to the fallback writer.
func (h *journalHook) Close() error { return h.conn.Close() }

func (h *journalHook) notice(logger *logrus.Logger, level logrus.Level, err error, msg string) *logrus.Entry {
	n := logrus.NewEntry(logger)
	n.Time = time.Now()
	n.Level = level
	n.Message = msg
	if err != nil {
		n.Data = logrus.Fields{logrus.ErrorKey: err}
	}
	return n
}

func (h *journalHook) writeFallback(e *logrus.Entry) {
	line, err := h.text.Format(e)
	if err != nil {
		line = []byte(fmt.Sprintf("%s level=%s msg=%q (formatting failed: %v)\n",
			e.Time.Format(time.RFC3339Nano), e.Level, e.Message, err))
	}
	_, _ = h.fallback.Write(line) // nowhere left to report a failure
}

// send delivers one entry: a datagram, or a sealed memfd when it is too large for one.
func (h *journalHook) send(payload []byte) error {
	write := h.write
	if h.outage {
		// journald is known to be down or stalled: one try without waiting,
		// so that each entry of the outage does not wait sendTimeout.
		write = h.tryWrite
	}
	err := write(payload, nil)
	if err == nil || !(errors.Is(err, unix.EMSGSIZE) || errors.Is(err, unix.ENOBUFS)) {
		return err
	}
	f, err := sealedMemfd(payload)
	if err != nil {
		return err
	}
	defer f.Close()
	return write(nil, unix.UnixRights(int(f.Fd())))
}

// write sends one datagram, waiting at most sendTimeout.
func (h *journalHook) write(b, oob []byte) error {
	if err := h.conn.SetWriteDeadline(time.Now().Add(sendTimeout)); err != nil {
		return err
	}
	_, _, err := h.conn.WriteMsgUnix(b, oob, h.addr)
	return err
}

// tryWrite sends one datagram if the socket takes it at once.
func (h *journalHook) tryWrite(b, oob []byte) error {
	rc, err := h.conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, &unix.SockaddrUnix{Name: h.addr.Name}, unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		return err
	}
	return serr
}

// sealedMemfd returns a memfd holding payload, sealed against any change, which is
// what journald requires of a memfd it maps.
func sealedMemfd(payload []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("nri-housekeeper-journal", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create for a %d-byte journal entry: %w", len(payload), err)
	}
	f := os.NewFile(uintptr(fd), "memfd:nri-housekeeper-journal")
	if _, err := f.Write(payload); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing journal entry to memfd: %w", err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("sealing journal memfd: %w", err)
	}
	return f, nil
}

// encodeEntry serializes e in the native protocol: MESSAGE, PRIORITY,
// SYSLOG_IDENTIFIER, CODE_* when logrus reports the caller, then the fields sorted by key.
func encodeEntry(e *logrus.Entry) []byte {
	var b bytes.Buffer
	appendField(&b, "MESSAGE", e.Message)
	appendField(&b, "PRIORITY", strconv.Itoa(priority(e.Level)))
	appendField(&b, "SYSLOG_IDENTIFIER", SyslogIdentifier)
	if e.Caller != nil {
		appendField(&b, "CODE_FILE", e.Caller.File)
		appendField(&b, "CODE_LINE", strconv.Itoa(e.Caller.Line))
		appendField(&b, "CODE_FUNC", e.Caller.Function)
	}
	for _, k := range slices.Sorted(maps.Keys(e.Data)) {
		appendField(&b, journalFieldName(k), fieldValue(e.Data[k]))
	}
	return b.Bytes()
}

// appendField appends one field, in the binary form when value contains a newline.
func appendField(b *bytes.Buffer, name, value string) {
	b.WriteString(name)
	if !strings.Contains(value, "\n") {
		b.WriteByte('=')
		b.WriteString(value)
		b.WriteByte('\n')
		return
	}
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(len(value)))
	b.WriteByte('\n')
	b.Write(size[:])
	b.WriteString(value)
	b.WriteByte('\n')
}

// priority maps a logrus level to a syslog priority. Panic and fatal are crit (2), not
// emerg (0): journald broadcasts emerg to every logged-in terminal (MaxLevelWall), and one
// process dying does not make the system unusable.
func priority(l logrus.Level) int {
	switch l {
	case logrus.PanicLevel, logrus.FatalLevel:
		return 2
	case logrus.ErrorLevel:
		return 3
	case logrus.WarnLevel:
		return 4
	case logrus.InfoLevel:
		return 6
	default: // debug, trace
		return 7
	}
}

// journalFieldName turns a logrus key into a name journald accepts: upper case, every
// other character than [A-Z0-9_] replaced by '_', prefixed with FIELD_ when it would be
// empty, start with '_' (journald's trusted fields) or a digit, or collide with a field
// encodeEntry sets itself; at most 64 bytes.
func journalFieldName(key string) string {
	var b strings.Builder
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name == "" || name[0] == '_' || (name[0] >= '0' && name[0] <= '9') || isOwnField(name) {
		name = "FIELD_" + name
	}
	if len(name) > maxFieldNameLen {
		name = name[:maxFieldNameLen]
	}
	return name
}

func isOwnField(name string) bool {
	switch name {
	case "MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC":
		return true
	}
	return false
}

// fieldValue renders a logrus field value; fmt.Sprint prints an error as its Error().
func fieldValue(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}
