package soak

import (
	"testing"
	"time"
)

func TestTheSameSeedGivesTheSameSchedule(t *testing.T) {
	a, b := NewPlan(42, 30*time.Minute, 2*time.Second), NewPlan(42, 30*time.Minute, 2*time.Second)
	if a.String() != b.String() || a.Fingerprint() != b.Fingerprint() {
		t.Fatal("two plans from one seed differ")
	}
	if c := NewPlan(43, 30*time.Minute, 2*time.Second); c.Fingerprint() == a.Fingerprint() {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
}

func TestAThirtyMinuteScheduleHasTheFaultsIssue11AsksFor(t *testing.T) {
	for seed := range uint64(20) {
		p := NewPlan(seed, 30*time.Minute, 2*time.Second)
		faults, leaks := p.Counts()
		if faults[FaultContainerdKill] < 20 || faults[FaultPluginKill] < 10 || faults[FaultContainerdPause] < 1 || faults[FaultDiskFull] < 1 || faults[FaultPluginPause] < 1 {
			t.Fatalf("seed %d: faults %v", seed, faults)
		}
		for _, k := range LeakKinds {
			if leaks[k] == 0 {
				t.Errorf("seed %d: no %s leak in 30 minutes: %v", seed, k, leaks)
			}
		}
		for _, f := range p.Faults {
			if f.At < p.FaultsFrom || f.At >= p.FaultsUntil || f.Kind == FaultPluginKill && f.At >= p.PluginKillsUntil {
				t.Fatalf("seed %d: fault %+v outside its window", seed, f)
			}
			if (f.Kind == FaultContainerdPause || f.Kind == FaultPluginPause) && f.Param <= p.NRITimeout {
				t.Fatalf("seed %d: pause %s not longer than the NRI timeout", seed, f.Param)
			}
		}
	}
}

// Every smoke schedule, whatever its seed, leaks every kind at least
// minLeaksPerKind times: "every leak is reclaimed" then speaks of each.
func TestEverySmokeScheduleLeaksEveryKind(t *testing.T) {
	for seed := uint64(0); seed < 1000; seed++ {
		_, leaks := NewPlan(seed, 2*time.Minute, 2*time.Second).Counts()
		for _, k := range LeakKinds {
			if leaks[k] < minLeaksPerKind {
				t.Fatalf("seed %d: %d %s leak(s) planned, want at least %d (planned: %v)", seed, leaks[k], k, minLeaksPerKind, leaks)
			}
		}
	}
}

func TestTheSmokeScheduleHasEveryFaultAndAStablePopulation(t *testing.T) {
	p := NewPlan(7, 2*time.Minute, 2*time.Second)
	faults, _ := p.Counts()
	for _, k := range FaultKinds {
		if faults[k] < minFaults[k] {
			t.Errorf("%s: %d planned", k, faults[k])
		}
	}
	live := map[int]bool{}
	for _, o := range p.Ops {
		switch o.Kind {
		case OpCreate:
			live[o.Pod] = true
		case OpDelete:
			if !live[o.Pod] || p.Pods[o.Pod].Anchor {
				t.Fatalf("op %+v deletes a pod that is not a live churn pod", o)
			}
			delete(live, o.Pod)
		case OpRestartContainer, OpRestartSandbox:
			if !live[o.Pod] {
				t.Fatalf("op %+v restarts a pod that is not live", o)
			}
		}
		if len(live) > anchors+maxChurn+1 {
			t.Fatalf("%d live pods at %s", len(live), o.At)
		}
	}
}
