package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// stoppedBy is the cause (context.Cause) of a context that stopOnSignal
// ended: the signal, named as Go names it ("hangup", "terminated").
type stoppedBy struct {
	signal os.Signal
}

func (s stoppedBy) Error() string { return s.signal.String() }

// stopOnSignal returns a context that ends at the first SIGINT, SIGTERM or
// SIGHUP, with stoppedBy as its cause; the command then stops gracefully:
// its pass is cut short at a safe point and Loop.Close writes the state
// file. SIGHUP stops like SIGTERM: containerd and kubelet end on it too,
// and the configuration is read only at start, so there is nothing to
// reload. The signal is logged at info.
//
// A second one exits the process at once through exit, with status 1,
// said in the log and on stderr after who ("nri-housekeeper once"). Each
// signal waits at most sayBeforeExit for its lines: a log that blocks (a
// journal or a stderr pipe nobody reads) holds neither the stop nor the
// exit for longer. A pass stuck in a call that does not heed its context
// (a read of a hung NFS volume) would otherwise hold the process until
// systemd's SIGKILL, and swallow an operator's second Ctrl-C.
//
// Exiting at once loses nothing the state file must keep: it is what that
// SIGKILL, or the OOM killer, would do, and the file is built to survive
// them. A pass writes its budgeted steps to the file before any of them
// runs (Loop.Pass: spendAhead, then persist), so the hour's budget holds;
// each write replaces the file atomically (statefile.Write), so a write
// cut short leaves the old file; and its lock is an flock the kernel
// drops. What the last write lacks is what any crash loses: steps that
// never ran stay counted, a pod seen torn down since is forgotten (its pod
// dir is reported, not removed), and a mark dropped since comes back, to
// be checked again as every restored one is.
//
// sayBeforeExit bounds how long a signal waits for its lines to be said
// before it is acted on: a log that blocks does not hold it.
const sayBeforeExit = time.Second

// stop ends ctx and lets the signals go (a later one has its default
// effect again), once the first signal's line is written; call it once
// the state file is written, before the log is closed.
func stopOnSignal(parent context.Context, who string, log logrus.FieldLogger, stderr io.Writer, exit func(code int)) (ctx context.Context, stop func()) {
	// Buffered: signal.Notify does not block, and drops what does not fit.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})     // stop was called
	finished := make(chan struct{}) // the goroutine below returned
	var stoppingSaid sync.WaitGroup // the first signal's line is written
	go func() {
		defer close(finished)
		stopping := false
		for {
			select {
			case <-done:
				return
			case sig := <-signals:
				// Said before it is acted on, so that the line comes
				// before what the stop makes the command say; but a log
				// that blocks (a journal or a stderr pipe nobody reads)
				// holds neither the stop nor the exit for more than
				// sayBeforeExit.
				if !stopping {
					stopping = true
					said := make(chan struct{})
					stoppingSaid.Add(1)
					go func() {
						defer stoppingSaid.Done()
						defer close(said)
						log.WithField("signal", sig.String()).Info("stopping: the pass in progress ends at its next safe point, " +
							"then the state file is written (by the commands that write it); a second signal exits at once")
					}()
					select {
					case <-said:
					case <-time.After(sayBeforeExit):
					}
					cancel(stoppedBy{sig})
					continue
				}
				const exiting = "exiting at once (status 1), without waiting for the pass in progress to end and " +
					"without writing the state file; its budgeted steps were written before they ran"
				said := make(chan struct{}, 2)
				go func() {
					log.WithField("signal", sig.String()).Error("a second signal while stopping: " + exiting)
					said <- struct{}{}
				}()
				go func() {
					fmt.Fprintf(stderr, "%s: a second signal (%s) while stopping: %s\n", who, sig, exiting)
					said <- struct{}{}
				}()
				timeout := time.After(sayBeforeExit)
			wait:
				for range 2 {
					select {
					case <-said:
					case <-timeout:
						break wait
					}
				}
				exit(1)
				return
			}
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(signals)
			close(done)
			<-finished
			stoppingSaid.Wait() // before the caller closes the log
			cancel(context.Canceled)
		})
	}
}
