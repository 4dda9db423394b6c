package logging

// Test side of the journald native protocol: a socket standing in for journald and a
// decoder that accepts exactly what journald accepts.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// fakeJournal is a unixgram socket standing in for journald's.
type fakeJournal struct {
	t    *testing.T
	path string
	conn *net.UnixConn
}

// journalSocketPath returns a socket path in a fresh temporary directory, short enough
// for sun_path (108 bytes).
func journalSocketPath(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "j.sock")
	if len(p) < 100 {
		return p
	}
	dir, err := os.MkdirTemp("", "nhk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "j.sock")
}

func listenJournal(t *testing.T, path string) *fakeJournal {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %s: %v", path, err)
	}
	j := &fakeJournal{t: t, path: path, conn: conn}
	t.Cleanup(func() { j.conn.Close() })
	return j
}

// stop makes the socket refuse datagrams; with remove, the socket file goes too.
func (j *fakeJournal) stop(remove bool) {
	j.t.Helper()
	if err := j.conn.Close(); err != nil {
		j.t.Fatal(err)
	}
	if remove {
		if err := os.Remove(j.path); err != nil {
			j.t.Fatal(err)
		}
	}
}

// restart replaces a stopped socket by a new one at the same path, as journald does.
func (j *fakeJournal) restart() {
	j.t.Helper()
	if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		j.t.Fatal(err)
	}
	*j = *listenJournal(j.t, j.path)
}

// received is one entry as journald would see it.
type received struct {
	datagram []byte              // the datagram's own bytes (empty when viaFD)
	payload  []byte              // the native-protocol bytes, from the datagram or the fd
	fields   map[string][]string // decoded payload
	viaFD    bool                // the payload came in a passed file descriptor
	seals    int                 // F_GET_SEALS of the passed fd
}

func (r received) field(name string) string {
	if len(r.fields[name]) != 1 {
		return fmt.Sprintf("<%d values: %q>", len(r.fields[name]), r.fields[name])
	}
	return r.fields[name][0]
}

func (j *fakeJournal) receive() received {
	j.t.Helper()
	r, err := j.tryReceive(5 * time.Second)
	if err != nil {
		j.t.Fatalf("receive: %v", err)
	}
	return r
}

func (j *fakeJournal) tryReceive(timeout time.Duration) (received, error) {
	if err := j.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return received{}, err
	}
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := j.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return received{}, err
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return received{}, fmt.Errorf("truncated datagram (flags %#x)", flags)
	}
	r := received{datagram: buf[:n], payload: buf[:n]}
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return received{}, err
		}
		var fds []int
		for _, m := range msgs {
			rights, err := unix.ParseUnixRights(&m)
			if err != nil {
				return received{}, err
			}
			fds = append(fds, rights...)
		}
		for _, fd := range fds[min(1, len(fds)):] {
			unix.Close(fd)
		}
		if len(fds) != 1 {
			return received{}, fmt.Errorf("got %d fds, want 1", len(fds))
		}
		f := os.NewFile(uintptr(fds[0]), "passed")
		defer f.Close()
		seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
		if err != nil {
			return received{}, fmt.Errorf("F_GET_SEALS: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			return received{}, err
		}
		payload, err := io.ReadAll(io.NewSectionReader(f, 0, st.Size()))
		if err != nil {
			return received{}, err
		}
		r.viaFD, r.seals, r.payload = true, seals, payload
	}
	r.fields, err = decodeNative(r.payload)
	if err != nil {
		return received{}, fmt.Errorf("decode %q: %w", truncate(r.payload, 200), err)
	}
	return r, nil
}

// expectNothing asserts that no datagram arrives within a short while.
func (j *fakeJournal) expectNothing() {
	j.t.Helper()
	r, err := j.tryReceive(100 * time.Millisecond)
	if err == nil {
		j.t.Fatalf("unexpected journald entry %q", r.fields)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		j.t.Fatalf("receive: %v", err)
	}
}

var validJournalName = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)

// decodeNative parses the native protocol, rejecting what journald would drop or refuse:
// field names outside [A-Z0-9_], starting with '_' or a digit, longer than 64 bytes.
func decodeNative(p []byte) (map[string][]string, error) {
	fields := map[string][]string{}
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			return nil, errors.New("field not terminated by a newline")
		}
		var name, value string
		if eq := bytes.IndexByte(p[:nl], '='); eq >= 0 {
			name, value = string(p[:eq]), string(p[eq+1:nl])
			p = p[nl+1:]
		} else {
			name = string(p[:nl])
			p = p[nl+1:]
			if len(p) < 8 {
				return nil, fmt.Errorf("binary field %s: no length", name)
			}
			size := binary.LittleEndian.Uint64(p[:8])
			p = p[8:]
			if uint64(len(p)) < size+1 {
				return nil, fmt.Errorf("binary field %s: length %d, %d bytes left", name, size, len(p))
			}
			if p[size] != '\n' {
				return nil, fmt.Errorf("binary field %s: value not followed by a newline", name)
			}
			value = string(p[:size])
			p = p[size+1:]
		}
		if !validJournalName.MatchString(name) {
			return nil, fmt.Errorf("invalid field name %q", name)
		}
		fields[name] = append(fields[name], value)
	}
	return fields, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// newJournalLogger returns a trace-level logger sending to path and its stderr buffer.
// Fatal does not exit.
func newJournalLogger(t *testing.T, path string) (*logrus.Logger, *bytes.Buffer) {
	t.Helper()
	var stderr bytes.Buffer
	logger, closeFn, err := New(Options{Level: "trace", Target: TargetJournald, JournalSocket: path, Stderr: &stderr})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	logger.ExitFunc = func(int) {}
	t.Cleanup(func() {
		if err := closeFn(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return logger, &stderr
}
