package housekeeping

import (
	"sync"
	"time"
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
