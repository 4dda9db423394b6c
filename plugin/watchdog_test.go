package plugin

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/stub"
)

// stuckStub is nri's stub (v0.12.5) waiting for a Configure that does not
// come: its Run ignores its context (containerd/nri#298) until released.
type stuckStub struct {
	stub.Stub
	release chan struct{}
}

func (s *stuckStub) Run(context.Context) error {
	<-s.release
	return nil
}

// TestTheWatchdogWaitsForItsOwnConnectionsConfigure: a connection left
// waiting for Configure is abandoned after configureWithin, whatever other
// connections do meanwhile. Another connection's Configure (one of a
// connection left behind earlier, arriving late) used to count as this
// one's: the stuck stub was then never abandoned, and the plugin neither
// reconnected nor stopped.
func TestTheWatchdogWaitsForItsOwnConnectionsConfigure(t *testing.T) {
	for _, tt := range []struct {
		rule          string
		configureOwn  bool
		wantAbandoned bool
	}{
		{"another connection's Configure leaves a stuck one abandoned", false, true},
		{"the connection's own Configure keeps it", true, false},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			p, _, _ := newTestPlugin()
			// The other is an older connection left behind, whose late
			// Configure the plugin refuses (it is not the newest).
			other, own := p.newConnection(), p.newConnection()
			s := &stuckStub{release: make(chan struct{})}
			defer close(s.release)
			var abandoned atomic.Bool
			done := make(chan error, 1)
			go func() {
				done <- p.runStub(context.Background(), s, own.configured.Load, 200*time.Millisecond, func() bool { abandoned.Store(true); return true })
			}()
			time.Sleep(50 * time.Millisecond) // within the watchdog's window, once it runs
			if _, err := other.Configure(context.Background(), "", "containerd", "v2"); err == nil {
				t.Fatal("the Configure of a connection left behind was accepted")
			}
			if tt.configureOwn {
				if _, err := own.Configure(context.Background(), "", "containerd", "v2"); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-done:
				if !tt.wantAbandoned {
					t.Fatalf("a configured connection's stub was left behind: %v", err)
				}
				if err == nil || !strings.Contains(err.Error(), "no Configure within") || !abandoned.Load() {
					t.Fatalf("err = %v, abandoned %v; want the stuck connection closed and left behind", err, abandoned.Load())
				}
			case <-time.After(time.Second):
				if tt.wantAbandoned {
					t.Fatal("a connection that never got its Configure was not left behind: another connection's Configure counted as its own")
				}
			}
		})
	}
}

// TestOneAnswerEndsAStubsWaitForConfigure: the stub takes one answer to
// its wait for Configure, and a second would block its sender for ever. A
// connection left behind answers with the plugin's release, and its
// handler then accepts nothing (the connection is closed); one whose
// runtime Configure reached the handler first is not released.
func TestOneAnswerEndsAStubsWaitForConfigure(t *testing.T) {
	p, _, _ := newTestPlugin()
	left := p.newConnection()
	if !left.configure.CompareAndSwap(configureAwaited, configureLeftBehind) {
		t.Fatal("a connection awaiting Configure could not be left behind")
	}
	if mask, err := left.Configure(context.Background(), "", "none (left behind)", "left-behind"); err != nil || mask != 0 || left.configured.Load() {
		t.Fatalf("the release of a connection left behind: mask %v, err %v, configured %v; want it to accept nothing", mask, err, left.configured.Load())
	}
	p.currentMu.Lock()
	current := p.current
	p.currentMu.Unlock()
	if p.connected.Load() || current == left.n {
		t.Fatalf("a connection left behind was made the current one (connected %v, current %d)", p.connected.Load(), current)
	}
	configured := p.newConnection()
	if _, err := configured.Configure(context.Background(), "", "containerd", "v2"); err != nil {
		t.Fatal(err)
	}
	if configured.configure.CompareAndSwap(configureAwaited, configureLeftBehind) {
		t.Fatal("a connection the runtime configured could still be released: its stub would get two answers")
	}
}

// TestTheWatchdogWaitsOnWhileTheRuntimesConfigureIsHandled: a connection
// whose Configure reached its handler is not left behind at the watchdog's
// time (closing it would leave a session half made); the watchdog waits on.
func TestTheWatchdogWaitsOnWhileTheRuntimesConfigureIsHandled(t *testing.T) {
	p, _, _ := newTestPlugin()
	own := p.newConnection()
	s := &stuckStub{release: make(chan struct{})}
	var asked atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- p.runStub(context.Background(), s, own.configured.Load, 50*time.Millisecond, func() bool {
			asked.Add(1)
			return false // the runtime's Configure is being handled
		})
	}()
	time.Sleep(300 * time.Millisecond)
	close(s.release) // the session ends
	select {
	case err := <-done:
		if err != nil || asked.Load() < 2 {
			t.Fatalf("err = %v after %d watchdog asks; want the session's own end, the watchdog asking again each time", err, asked.Load())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("runStub did not return when the session ended")
	}
}
