package executor

import (
	"context"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-housekeeper/nri-housekeeper/gc"
)

// cutRemover: RemovePodSandbox removes the sandbox's containers, then the
// pass is stopped (SIGTERM) and the call returns the context's error, as a
// gRPC client does. ContainerLogPaths honours ctx, as the real client does.
type cutRemover struct {
	*fake
	cancel     context.CancelFunc
	containers map[string]bool
}

func (p *cutRemover) RemovePodSandbox(ctx context.Context, id string) error {
	_ = p.fake.RemovePodSandbox(ctx, id)
	p.mu.Lock()
	p.containers = map[string]bool{}
	p.mu.Unlock()
	p.cancel()
	return ctx.Err()
}

func (p *cutRemover) ContainerLogPaths(ctx context.Context, _ string) (map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for c := range p.containers {
		out[c] = ""
	}
	return out, nil
}

// TestContainersASandboxCarriedAreReportedRemovedWhenAStopCutsItsRemoval:
// a SIGTERM that cuts a carrying RemovePodSandbox after containerd removed
// the containers. The follow-up listing was asked with the ended context,
// failed at once, and the removed containers were said "not known whether
// done"; the next listing no longer has them, so their removal was never
// logged, counted or summed up. The listing is asked past the stop.
func TestContainersASandboxCarriedAreReportedRemovedWhenAStopCutsItsRemoval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := &cutRemover{fake: newFake(), cancel: cancel, containers: map[string]bool{"c1": true, "c2": true}}
	e := New(rt, rt.fake, Options{MaxParallel: 4}, nil)
	e.jitter, e.since = noJitter, frozen
	out := e.Execute(ctx, []gc.Action{rmCtr("c1"), rmCtr("c2"), rmSb("sb", "container/c1", "container/c2")}, t0, nil)
	got := results(out)
	for i, k := range []string{"container/c1", "container/c2"} {
		if got[k] != Success {
			t.Errorf("%s: %s (%v), want success: the runtime no longer has it", k, got[k], out[i].Err)
		}
	}
}

// TestAContainerNamedTwiceAsADependencyIsCarriedOnce: a sandbox action
// naming one container twice in DependsOn carried it twice: its outcome
// settled twice and its "removed" line logged twice.
func TestAContainerNamedTwiceAsADependencyIsCarriedOnce(t *testing.T) {
	f := newFake()
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	e := New(f, f, Options{MaxParallel: 1}, log)
	out := e.Execute(context.Background(), []gc.Action{rmCtr("c1"), rmSb("sb", "container/c1", "container/c1")}, t0, nil)
	n := 0
	for _, en := range hook.AllEntries() {
		if en.Data["container_id"] == "c1" && strings.Contains(en.Message, "with its sandbox") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("container c1's removal logged %d times, want once (%v)", n, results(out))
	}
}
