package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// TestStopOnSignal: the first signal ends the context, with the signal as
// its cause, said at info; the second exits through exit, with status 1,
// said in the log and on stderr. The signals are real, sent to this
// process; exit is not.
func TestStopOnSignal(t *testing.T) {
	// Locked: the race detector does not see that the signal sent below
	// orders the test's reads before the writes it makes.
	var logs, stderr lockedBuffer
	log := logrus.New()
	log.SetOutput(&logs)
	log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	exited := make(chan int, 1)
	ctx, stop := stopOnSignal(context.Background(), "nri-housekeeper test", log, &stderr, func(code int) { exited <- code })
	defer stop()

	hangUpAndWait(t, ctx, "")
	var cause stoppedBy
	if !errors.As(context.Cause(ctx), &cause) || cause.signal != syscall.SIGHUP {
		t.Errorf("cause %v, want stoppedBy SIGHUP", context.Cause(ctx))
	}
	// Said after it is acted on.
	if !eventually(func() bool { return containsAll(logs.String(), `level=info msg="stopping`, "signal=hangup") }) {
		t.Errorf("log:\n%s", logs.String())
	}

	terminateAndWaitForExit(t, exited, 4*time.Second, "")
	if !containsAll(logs.String(), "level=error", "exiting at once", "signal=terminated") {
		t.Errorf("log:\n%s", logs.String())
	}
	if want := "nri-housekeeper test: a second signal (terminated) while stopping: exiting at once (status 1)"; !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("stderr %q, want it to start %q", stderr.String(), want)
	}
}

// TestStopOnSignalStopEndsTheContext: stop ends the context (with no
// signal as its cause) and can be called twice.
func TestStopOnSignalStopEndsTheContext(t *testing.T) {
	ctx, stop := stopOnSignal(context.Background(), "nri-housekeeper test", logrus.New(), &bytes.Buffer{},
		func(int) { t.Error("exit called") })
	stop()
	stop()
	if ctx.Err() == nil {
		t.Fatal("the context did not end at stop")
	}
	if errors.As(context.Cause(ctx), new(stoppedBy)) {
		t.Errorf("cause %v: no signal came", context.Cause(ctx))
	}
}

// containsAll says whether s contains each of want.
func containsAll(s string, want ...string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// lockedBuffer is a bytes.Buffer safe for use by several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually says whether cond holds within 4s.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// blockedWriter is a log or stderr that takes nothing: every Write blocks
// until the test ends.
type blockedWriter struct{ release <-chan struct{} }

func (w blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	return len(p), nil
}

// TestASignalIsNotHeldByALogThatBlocks: a journal or a stderr pipe that
// stops reading blocks every log line; the first signal still ends the
// context, and the second still exits, after at most sayBeforeExit.
// Before, each signal was said before it was acted on: the first never
// ended the context, and the second was never read.
func TestASignalIsNotHeldByALogThatBlocks(t *testing.T) {
	release := make(chan struct{})
	log := logrus.New()
	log.SetOutput(blockedWriter{release})
	exited := make(chan int, 1)
	ctx, stop := stopOnSignal(context.Background(), "nri-housekeeper test", log, blockedWriter{release}, func(code int) { exited <- code })
	defer stop()
	defer close(release) // first: stop waits for a goroutine a write may hold
	hangUpAndWait(t, ctx, " while the log blocks")
	terminateAndWaitForExit(t, exited, sayBeforeExit+4*time.Second, " while the log blocks")
}

// hangUpAndWait sends this process SIGHUP and waits at most 4 s for ctx
// to end; while says what else goes on, for the failure.
func hangUpAndWait(t *testing.T, ctx context.Context, while string) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(4 * time.Second):
		t.Fatal("the context did not end at SIGHUP" + while)
	}
}

// terminateAndWaitForExit sends this process SIGTERM, a second signal,
// and waits at most within for exit(1); while says what else goes on, for
// the failure.
func terminateAndWaitForExit(t *testing.T, exited <-chan int, within time.Duration, while string) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 1 {
			t.Errorf("exit(%d), want exit(1)", code)
		}
	case <-time.After(within):
		t.Fatal("a second signal did not exit" + while)
	}
}
