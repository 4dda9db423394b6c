package logging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

func TestJournaldEntryCarriesMessageIdentifierAndEveryFieldUpperCased(t *testing.T) {
	errGone := errors.New("sandbox 9f2c: not found")
	tests := []struct {
		name string
		log  func(*logrus.Logger)
		want map[string]string // every field of the entry, exactly
	}{
		{
			name: "executed action with every project field",
			log: func(l *logrus.Logger) {
				l.WithFields(logrus.Fields{
					FieldPodUID:       "0b8e6b4a-1111-2222-3333-444455556666",
					FieldPodNamespace: "default",
					FieldPodName:      "web-0",
					FieldSandboxID:    "9f2c",
					FieldContainerID:  "c0ffee",
					FieldAction:       "remove-container",
					FieldRule:         "dead-container-excess",
					FieldReason:       "pod deleted",
				}).WithError(errGone).Info("removed container")
			},
			want: map[string]string{
				"MESSAGE":           "removed container",
				"PRIORITY":          "6",
				"SYSLOG_IDENTIFIER": "nri-housekeeper",
				"POD_UID":           "0b8e6b4a-1111-2222-3333-444455556666",
				"POD_NAMESPACE":     "default",
				"POD_NAME":          "web-0",
				"SANDBOX_ID":        "9f2c",
				"CONTAINER_ID":      "c0ffee",
				"ACTION":            "remove-container",
				"RULE":              "dead-container-excess",
				"REASON":            "pod deleted",
				"ERROR":             "sandbox 9f2c: not found",
			},
		},
		{
			name: "non-string values are printed",
			log: func(l *logrus.Logger) {
				l.WithFields(logrus.Fields{"count": 3, "took": 1500 * time.Millisecond, "ok": true, "none": nil}).Warn("pass slow")
			},
			want: map[string]string{
				"MESSAGE":           "pass slow",
				"PRIORITY":          "4",
				"SYSLOG_IDENTIFIER": "nri-housekeeper",
				"COUNT":             "3",
				"TOOK":              "1.5s",
				"OK":                "true",
				"NONE":              "<nil>",
			},
		},
		{
			name: "field names journald would drop are renamed",
			log: func(l *logrus.Logger) {
				l.WithFields(logrus.Fields{
					"cgroup.path": "/kubepods/x", "_trusted": "a", "1st": "b", "message": "c", "priority": "d", "": "e",
				}).Error("odd names")
			},
			want: map[string]string{
				"MESSAGE":           "odd names",
				"PRIORITY":          "3",
				"SYSLOG_IDENTIFIER": "nri-housekeeper",
				"CGROUP_PATH":       "/kubepods/x",
				"FIELD__TRUSTED":    "a",
				"FIELD_1ST":         "b",
				"FIELD_MESSAGE":     "c",
				"FIELD_PRIORITY":    "d",
				"FIELD_":            "e",
			},
		},
		{
			name: "empty message and empty value",
			log:  func(l *logrus.Logger) { l.WithField(FieldReason, "").Info("") },
			want: map[string]string{"MESSAGE": "", "PRIORITY": "6", "SYSLOG_IDENTIFIER": "nri-housekeeper", "REASON": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := listenJournal(t, journalSocketPath(t))
			logger, stderr := newJournalLogger(t, j.path)
			tt.log(logger)
			r := j.receive()
			if r.viaFD {
				t.Error("small entry was passed as an fd")
			}
			for name, want := range tt.want {
				if got := r.field(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			for name := range r.fields {
				if _, ok := tt.want[name]; !ok {
					t.Errorf("unexpected field %s=%q", name, r.fields[name])
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr: %q", stderr.String())
			}
		})
	}
}

func TestJournaldPriorityFollowsSyslogForEachLogrusLevel(t *testing.T) {
	tests := []struct {
		level logrus.Level
		want  string
	}{
		{logrus.TraceLevel, "7"},
		{logrus.DebugLevel, "7"},
		{logrus.InfoLevel, "6"},
		{logrus.WarnLevel, "4"},
		{logrus.ErrorLevel, "3"},
		{logrus.FatalLevel, "2"},
		{logrus.PanicLevel, "2"}, // crit, not emerg: journald walls emerg to every terminal
	}
	j := listenJournal(t, journalSocketPath(t))
	logger, _ := newJournalLogger(t, j.path)
	for _, tt := range tests {
		t.Run(tt.level.String(), func(t *testing.T) {
			func() {
				defer func() { _ = recover() }() // PanicLevel panics after logging
				logger.Log(tt.level, "at "+tt.level.String())
			}()
			r := j.receive()
			if got := r.field("PRIORITY"); got != tt.want {
				t.Errorf("PRIORITY = %q, want %q", got, tt.want)
			}
			if got := r.field("MESSAGE"); got != "at "+tt.level.String() {
				t.Errorf("MESSAGE = %q", got)
			}
			if got := r.field("SYSLOG_IDENTIFIER"); got != SyslogIdentifier {
				t.Errorf("SYSLOG_IDENTIFIER = %q", got)
			}
		})
	}
}

func TestJournaldFieldNameIsUpperCaseAZ09AndNeverStartsWithUnderscoreOrDigit(t *testing.T) {
	tests := []struct{ key, want string }{
		{"pod_uid", "POD_UID"},
		{"error", "ERROR"},
		{"POD_UID", "POD_UID"},
		{"pod-uid", "POD_UID"},
		{"cgroup.path", "CGROUP_PATH"},
		{"naïve", "NA_VE"},
		{"_hidden", "FIELD__HIDDEN"},
		{"9lives", "FIELD_9LIVES"},
		{"", "FIELD_"},
		{"message", "FIELD_MESSAGE"},
		{"Priority", "FIELD_PRIORITY"},
		{"syslog_identifier", "FIELD_SYSLOG_IDENTIFIER"},
		{"code_line", "FIELD_CODE_LINE"},
		{strings.Repeat("a", 70), strings.Repeat("A", 64)},
		{"_" + strings.Repeat("a", 70), "FIELD__" + strings.Repeat("A", 57)},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			got := journalFieldName(tt.key)
			if got != tt.want {
				t.Errorf("journalFieldName(%q) = %q, want %q", tt.key, got, tt.want)
			}
			if !validJournalName.MatchString(got) {
				t.Errorf("%q is not a valid journald field name", got)
			}
		})
	}
}

func TestJournaldValueWithNewlineArrivesIntactInBinaryForm(t *testing.T) {
	tests := []struct {
		name, message, reason string
	}{
		{"newline inside", "first line\nsecond line", "a\nb"},
		{"trailing newline", "ends with newline\n", "x"},
		{"only newlines", "\n\n", "\n"},
		{"equals sign and newline", "k=v\nk2=v2", "=\n="},
		{"binary bytes", "nul\x00byte\nand \xff", "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := listenJournal(t, journalSocketPath(t))
			logger, _ := newJournalLogger(t, j.path)
			logger.WithField(FieldReason, tt.reason).Info(tt.message)
			r := j.receive()
			if got := r.field("MESSAGE"); got != tt.message {
				t.Errorf("MESSAGE = %q, want %q", got, tt.message)
			}
			if got := r.field("REASON"); got != tt.reason {
				t.Errorf("REASON = %q, want %q", got, tt.reason)
			}
			var size [8]byte
			binary.LittleEndian.PutUint64(size[:], uint64(len(tt.message)))
			wantRaw := "MESSAGE\n" + string(size[:]) + tt.message + "\n"
			if !bytes.HasPrefix(r.datagram, []byte(wantRaw)) {
				t.Errorf("datagram starts %q, want binary form %q", truncate(r.datagram, 64), wantRaw)
			}
		})
	}
}

// datagramLimit returns a size sure to exceed what one datagram from a socket with the
// default send buffer may carry.
func datagramLimit(t *testing.T) int {
	n := 300 << 10
	if b, err := os.ReadFile("/proc/sys/net/core/wmem_default"); err == nil {
		if d, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && d+64<<10 > n {
			n = d + 64<<10
		}
	}
	return n
}

func TestJournaldEntryTooLargeForDatagramArrivesAsSealedMemfd(t *testing.T) {
	size := datagramLimit(t)
	tests := []struct {
		name, message, reason string
	}{
		{"large message", strings.Repeat("m", size), "big"},
		{"large field with newlines", "big reason", strings.Repeat("line\n", size/5+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := listenJournal(t, journalSocketPath(t))
			logger, stderr := newJournalLogger(t, j.path)
			logger.WithFields(logrus.Fields{FieldPodUID: "u1", FieldReason: tt.reason}).Error(tt.message)
			r := j.receive()
			if !r.viaFD {
				t.Fatalf("entry of %d bytes arrived as a datagram", len(r.payload))
			}
			if len(r.datagram) != 0 {
				t.Errorf("fd-passing datagram carries %d bytes, want 0", len(r.datagram))
			}
			const want = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
			if r.seals&want != want {
				t.Errorf("memfd seals %#x, want %#x", r.seals, want)
			}
			if got := r.field("MESSAGE"); got != tt.message {
				t.Errorf("MESSAGE: %d bytes, want %d", len(got), len(tt.message))
			}
			if got := r.field("REASON"); got != tt.reason {
				t.Errorf("REASON: %d bytes, want %d", len(got), len(tt.reason))
			}
			for name, want := range map[string]string{"PRIORITY": "3", "SYSLOG_IDENTIFIER": SyslogIdentifier, "POD_UID": "u1"} {
				if got := r.field(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr: %q", truncate(stderr.Bytes(), 200))
			}
			// The next small entry is a datagram again.
			logger.Info("small")
			if r := j.receive(); r.viaFD || r.field("MESSAGE") != "small" {
				t.Errorf("after a large entry: viaFD=%v MESSAGE=%q", r.viaFD, r.field("MESSAGE"))
			}
		})
	}
}

func TestJournaldOutageDivertsEntriesToStderrAndIsReportedOncePerOutage(t *testing.T) {
	tests := []struct {
		name       string
		removeFile bool
		wantErr    string
	}{
		{"journald stopped, socket file left", false, "connection refused"},
		{"journald stopped, socket file removed", true, "no such file or directory"},
	}
	const outageNotice = "sending to journald socket "
	const recoveryNotice = "works again"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := listenJournal(t, journalSocketPath(t))
			logger, stderr := newJournalLogger(t, j.path)

			logger.Info("before")
			if got := j.receive().field("MESSAGE"); got != "before" {
				t.Fatalf("MESSAGE = %q", got)
			}

			// First outage: three entries, one notice.
			j.stop(tt.removeFile)
			for i := range 3 {
				logger.WithField(FieldPodUID, fmt.Sprint("u", i)).Warnf("during %d", i)
			}
			out := stderr.String()
			if n := strings.Count(out, outageNotice); n != 1 {
				t.Errorf("outage reported %d times, want 1:\n%s", n, out)
			}
			if !strings.Contains(out, tt.wantErr) || !strings.Contains(out, j.path) {
				t.Errorf("outage notice lacks %q or the socket path:\n%s", tt.wantErr, out)
			}
			for i := range 3 {
				if line := fmt.Sprintf(`msg="during %d" pod_uid=u%d`, i, i); !strings.Contains(out, line) {
					t.Errorf("stderr lacks %q:\n%s", line, out)
				}
			}
			if strings.Index(out, outageNotice) > strings.Index(out, "during 0") {
				t.Errorf("notice comes after the first diverted entry:\n%s", out)
			}

			// Recovery: entries reach journald again, followed by a recovery notice.
			j.restart()
			logger.Info("after")
			if got := j.receive().field("MESSAGE"); got != "after" {
				t.Errorf("MESSAGE = %q, want after", got)
			}
			if got := j.receive().field("MESSAGE"); !strings.Contains(got, recoveryNotice) || !strings.Contains(got, "3 entries") {
				t.Errorf("recovery notice MESSAGE = %q", got)
			}
			if strings.Contains(stderr.String(), `msg=after`) {
				t.Errorf("entry sent to journald also went to stderr")
			}
			if n := strings.Count(stderr.String(), recoveryNotice); n != 1 {
				t.Errorf("recovery reported %d times on stderr, want 1", n)
			}
			logger.Info("steady")
			if got := j.receive().field("MESSAGE"); got != "steady" {
				t.Errorf("MESSAGE = %q, want steady", got)
			}
			j.expectNothing()

			// Second outage: reported again, once.
			j.stop(tt.removeFile)
			logger.Error("again 1")
			logger.Error("again 2")
			out = stderr.String()
			if n := strings.Count(out, outageNotice); n != 2 {
				t.Errorf("two outages reported %d times, want 2:\n%s", n, out)
			}
			if !strings.Contains(out, `msg="again 1"`) || !strings.Contains(out, `msg="again 2"`) {
				t.Errorf("second-outage entries missing from stderr:\n%s", out)
			}
		})
	}
}

func TestJournaldConcurrentEntriesAllArriveWhole(t *testing.T) {
	const goroutines, perGoroutine = 8, 25
	j := listenJournal(t, journalSocketPath(t))
	logger, stderr := newJournalLogger(t, j.path)

	seen := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range goroutines * perGoroutine {
			r, err := j.tryReceive(5 * time.Second)
			if err != nil {
				t.Errorf("receive: %v", err)
				return
			}
			if r.field("MESSAGE") != r.field("POD_UID") {
				t.Errorf("fields of different entries mixed: %q", r.fields)
			}
			seen[r.field("MESSAGE")] = true
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				id := fmt.Sprintf("g%d-%d", g, i)
				logger.WithField(FieldPodUID, id).Info(id)
			}
		})
	}
	wg.Wait()
	<-done
	if len(seen) != goroutines*perGoroutine {
		t.Errorf("%d distinct entries arrived, want %d", len(seen), goroutines*perGoroutine)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %q", stderr.String())
	}
}

func TestJournaldReportsCallerAsCodeFields(t *testing.T) {
	j := listenJournal(t, journalSocketPath(t))
	logger, _ := newJournalLogger(t, j.path)
	logger.SetReportCaller(true)
	logger.Info("with caller")
	r := j.receive()
	if got := r.field("CODE_FILE"); !strings.HasSuffix(got, "journald_test.go") {
		t.Errorf("CODE_FILE = %q", got)
	}
	if got := r.field("CODE_FUNC"); !strings.HasSuffix(got, "TestJournaldReportsCallerAsCodeFields") {
		t.Errorf("CODE_FUNC = %q", got)
	}
	if n, err := strconv.Atoi(r.field("CODE_LINE")); err != nil || n <= 0 {
		t.Errorf("CODE_LINE = %q", r.field("CODE_LINE"))
	}
}
