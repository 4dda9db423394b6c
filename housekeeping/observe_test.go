package housekeeping

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// partsObserver is an Observer that keeps what it was last told of each
// part of housekeeping (SetDegraded) and drops the rest.
type partsObserver struct {
	mu        sync.Mutex
	degraded  map[string]bool
	untrusted map[string]bool
}

func (o *partsObserver) ObservePass(string, time.Duration, time.Time) {}
func (o *partsObserver) SetTrackedPods(map[[2]string]int)             {}
func (o *partsObserver) SetLeaks(map[string]int)                      {}
func (o *partsObserver) SetOldestLeaks(map[string]time.Duration)      {}
func (o *partsObserver) ObserveAction(string, string, string)         {}
func (o *partsObserver) ObserveBudgetTrips([]string)                  {}
func (o *partsObserver) SetStuckTerminating(int)                      {}

func (o *partsObserver) SetDegraded(part string, degraded bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.degraded == nil {
		o.degraded = map[string]bool{}
	}
	o.degraded[part] = degraded
}

// told returns what the observer was last told of part, and whether it was
// told anything.
func (o *partsObserver) told(part string) (degraded, told bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	degraded, told = o.degraded[part]
	return degraded, told
}

func (o *partsObserver) SetUntrusted(source string, untrusted bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.untrusted == nil {
		o.untrusted = map[string]bool{}
	}
	o.untrusted[source] = untrusted
}

// distrusts says whether the observer was last told source is untrusted.
func (o *partsObserver) distrusts(source string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.untrusted[source]
}

// oldestObserver keeps what SetOldestLeaks was last told.
type oldestObserver struct {
	partsObserver
	oldest map[string]time.Duration
}

func (o *oldestObserver) SetOldestLeaks(byKind map[string]time.Duration) { o.oldest = byKind }

// TestTheOldestLeakIsHowLongItsStepHasBeenProposedPassAfterPass: what an
// alert on a leak that lasts needs, where leaked_objects also counts what
// kubelet collects itself minutes later. A leak found again pass after pass
// grows old; one whose condition stopped holding starts again from 0.
func TestTheOldestLeakIsHowLongItsStepHasBeenProposedPassAfterPass(t *testing.T) {
	root := podDirs(t, testUID(110)) // one live pod: the oracle is not empty
	podLogs := t.TempDir()
	logDir := mkPodLogDir(t, podLogs, testUID(111))
	policy := reviewPolicy(podLogs)
	policy.LeakGrace = 2 * time.Hour // never due here: waits, and grows old
	rt := &fakeRuntime{}
	obs := &oldestObserver{}
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Minute, KubeletRoot: root, Policy: policy, Observer: obs,
		Executor: executor.New(criRecorder{}, &nodeRecorder{}, executor.Options{MaxParallel: 1}, nil)}, log)
	loop.started = now.Add(-time.Hour)
	for _, tc := range []struct {
		at   time.Duration
		gone bool // the pod log dir is gone before the pass
		want time.Duration
	}{
		{0, false, 0},
		{10 * time.Minute, false, 10 * time.Minute},
		{70 * time.Minute, false, 70 * time.Minute},
		{71 * time.Minute, true, 0},
	} {
		if tc.gone {
			if err := os.RemoveAll(logDir); err != nil {
				t.Fatal(err)
			}
		}
		rt.set(cri.Snapshot{TakenAt: now.Add(tc.at)}, nil)
		loop.Pass(context.Background())
		if got := obs.oldest[string(gc.RemovePodLogDir)]; got != tc.want {
			t.Errorf("at +%v: the oldest pod log dir removal proposed for %v, want %v (all: %v)", tc.at, got, tc.want, obs.oldest)
		}
	}
}
