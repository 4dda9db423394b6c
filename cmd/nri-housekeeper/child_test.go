package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childArgsEnv, set in the environment of the test binary, makes it
// nri-housekeeper run with these arguments (a JSON list) instead of the
// tests: a test that needs real signals and a real os.Exit runs the
// command in a child process (startChild).
const childArgsEnv = "NRIHK_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if encoded := os.Getenv(childArgsEnv); encoded != "" {
		var args []string
		if err := json.Unmarshal([]byte(encoded), &args); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", childArgsEnv, err)
			os.Exit(3)
		}
		os.Exit(run(args, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// child is nri-housekeeper running in a child process.
type child struct {
	cmd    *exec.Cmd
	stdout strings.Builder // read once exited is closed
	exited chan struct{}   // closed once it exited and its output is read

	mu     sync.Mutex
	stderr strings.Builder
	lines  chan string   // each line of stderr, as it comes; closed at its end
	held   chan struct{} // while not nil, stderr is not read (holdStderr)
}

// startChild starts the test binary as nri-housekeeper with args; it is
// killed when the test ends, if it is still running then.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	encoded, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: exec.Command(os.Args[0]), exited: make(chan struct{}), lines: make(chan string, 1000)}
	c.cmd.Env = append(os.Environ(), childArgsEnv+"="+string(encoded))
	c.cmd.Stdout = &c.stdout
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.mu.Lock()
			c.stderr.WriteString(sc.Text() + "\n")
			held := c.held
			c.mu.Unlock()
			if held != nil {
				<-held
			}
			select {
			case c.lines <- sc.Text():
			default: // nobody waits for that many
			}
		}
		close(c.lines)
		_ = c.cmd.Wait() // after the pipe is read: Wait closes it
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

// Stderr is what the child wrote to stderr so far.
func (c *child) Stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// signal sends sig to the child.
func (c *child) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitLine waits up to timeout for a line of stderr containing each of
// want, and says whether one came. When none came because the child
// exited, it has exited (c.exited is closed) when waitLine returns.
func (c *child) waitLine(timeout time.Duration, want ...string) bool {
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				<-c.exited // follows the end of stderr at once
				return false
			}
			if containsAll(line, want...) {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// wait waits up to timeout for the child to exit and returns its exit
// status; the test fails if it did not exit then, or if a signal ended it.
func (c *child) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		t.Fatalf("still running %v later; killed. stderr:\n%s", timeout, tail(c.Stderr(), 1500))
	}
	state := c.cmd.ProcessState
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("ended by signal %v (its default action: the signal is not handled), not by an exit; stderr:\n%s",
			ws.Signal(), tail(c.Stderr(), 1500))
	}
	return state.ExitCode()
}

// holdStderr stops reading the child's stderr and fills the pipe, as a
// journal that stopped reading would: the child's next write to stderr
// blocks until release is called.
func (c *child) holdStderr(t *testing.T) (release func()) {
	t.Helper()
	held := make(chan struct{})
	c.mu.Lock()
	c.held = held
	c.mu.Unlock()
	// The pipe's write end, as the child has it.
	fd, err := syscall.Open(fmt.Sprintf("/proc/%d/fd/2", c.cmd.Process.Pid), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	line := []byte(strings.Repeat("x", 127) + "\n")
	// One line for the reader to take and stop at, then the pipe full.
	if _, err := syscall.Write(fd, line); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	for {
		if _, err := syscall.Write(fd, line); err != nil {
			if err != syscall.EAGAIN {
				t.Fatal(err)
			}
			break
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.held = nil
			c.mu.Unlock()
			close(held)
		})
	}
}

// exitsWithin says whether the child exits within timeout, told by the
// kernel (a zombie, or gone), not by the end of its stderr, which may be
// held.
func (c *child) exitsWithin(timeout time.Duration) bool {
	stat := fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return true // reaped
		}
		// pid (comm) state ...: comm may hold spaces, not ")".
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			return true
		}
	}
	return false
}
