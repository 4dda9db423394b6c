package podcgroups

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// sleeper is a process started by the test and reaped by it.
type sleeper struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startSleeper(t *testing.T, args ...string) *sleeper {
	t.Helper()
	if len(args) == 0 {
		args = []string{"sleep", "600"}
	}
	s := &sleeper{cmd: exec.Command(args[0], args[1:]...), exited: make(chan struct{})}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.exited
	})
	return s
}

func (s *sleeper) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// killedWithin reports whether the process was killed by SIGKILL and reaped
// within d.
func (s *sleeper) killedWithin(d time.Duration) bool {
	select {
	case <-s.exited:
		ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
		return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	case <-time.After(d):
		return false
	}
}
