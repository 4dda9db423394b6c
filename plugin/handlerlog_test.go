package plugin

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// slowHook records each line's message after a delay: a log sink slower
// than the handlers that write to it.
type slowHook struct {
	mu    sync.Mutex
	delay time.Duration
	msgs  []string
}

func (h *slowHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *slowHook) Fire(e *logrus.Entry) error {
	time.Sleep(h.delay)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, e.Message)
	return nil
}

func (h *slowHook) written() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// TestRunReturnsOnlyOnceTheHandlersLinesAreWritten: the caller of Run exits
// the process right after it returns, and the handlers' lines are written
// by a goroutine of their own; the last of them (why containerd's
// configuration was rejected, what the runtime said when it registered
// the plugin) must not die with the process.
func TestRunReturnsOnlyOnceTheHandlersLinesAreWritten(t *testing.T) {
	t.Setenv(api.PluginSocketEnvVar, "not-a-number") // Run returns at once
	t.Setenv(api.PluginNameEnvVar, "nri-housekeeper")
	t.Setenv(api.PluginIdxEnvVar, "10")
	hook := &slowHook{delay: 20 * time.Millisecond}
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.AddHook(hook)
	p := New(podstate.New(0), &countingWaker{}, log, nil)
	const lines = 10
	for range lines {
		p.log.say(logrus.ErrorLevel, nil, nil, "rejecting the configuration containerd passed")
	}
	if err := p.Run(context.Background(), ConnectOptions{}); err == nil {
		t.Fatal("pre-registered Run with a bad fd returned nil")
	}
	if got := len(hook.written()); got != lines {
		t.Fatalf("%d of the %d handler lines written when Run returned", got, lines)
	}
}
