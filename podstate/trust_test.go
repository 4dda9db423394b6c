package podstate

import (
	"testing"
	"time"
)

// Case 8 of the safety review: containerd calls NRI RunPodSandbox before it
// adds the sandbox to its store, so a listing taken in that window lacks a
// sandbox that is being created. One absence is no evidence of a removal:
// the sandbox is not marked Removed, and a record that an absence did mark
// Removed comes back when a listing shows it again.
func TestASandboxMissingFromAListingRightAfterRunPodSandboxComesBack(t *testing.T) {
	s := New(0)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
	// The listing started after the event, before containerd stored the sandbox.
	s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(100*time.Millisecond))
	if got := sandboxState(t, s, "u", "s1"); got == SandboxRemoved {
		t.Errorf("a listing 100ms after RunPodSandbox marked the sandbox Removed")
	}
	listed := Listing{Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: true, CreatedAt: t0}}}
	listed.StartSeq = s.Seq()
	s.Reconcile(listed, t0.Add(30*time.Second))
	if got := sandboxState(t, s, "u", "s1"); got != SandboxReady {
		t.Fatalf("sandbox = %s after a listing showed it Ready, want Ready", got)
	}
	if p, _ := s.Pod("u"); p.Phase != PhaseRunning {
		t.Fatalf("phase = %s, want Running", p.Phase)
	}

	// Synchronize reports what containerd has stored: no such grace.
	s3 := New(0)
	s3.Synchronize(t0, []SyncedSandbox{{Pod: ident("u"), SandboxID: "s1"}}, nil)
	s3.Reconcile(Listing{StartSeq: s3.Seq()}, t0.Add(100*time.Millisecond))
	if got := sandboxState(t, s3, "u", "s1"); got != SandboxRemoved {
		t.Errorf("a synchronized sandbox missing from the next listing is %s, want Removed", got)
	}

	// A listed sandbox that one listing misses (containerd restarting its
	// CRI store, say) comes back as well.
	s2 := New(0)
	s2.Reconcile(Listing{StartSeq: s2.Seq(), Sandboxes: listed.Sandboxes}, t0)
	s2.Reconcile(Listing{StartSeq: s2.Seq()}, t0.Add(time.Minute))
	s2.Reconcile(Listing{StartSeq: s2.Seq(), Sandboxes: listed.Sandboxes}, t0.Add(2*time.Minute))
	if got := sandboxState(t, s2, "u", "s1"); got != SandboxReady {
		t.Fatalf("sandbox = %s after a listing showed it again, want Ready", got)
	}
}

// "Torn down" needs evidence of a teardown: an NRI RemovePodSandbox, or a
// stop then a removal seen across listings; never one absence.
func TestTornDownNeedsEvidenceOfATeardown(t *testing.T) {
	ready := func(uid, id string) ListedSandbox {
		return ListedSandbox{Pod: ident(uid), ID: id, Ready: true, CreatedAt: t0}
	}
	stopped := func(uid, id string) ListedSandbox { return ListedSandbox{Pod: ident(uid), ID: id, CreatedAt: t0} }
	for _, tc := range []struct {
		name     string
		history  func(s *State)
		tornDown bool
		removal  Removal
	}{
		{"NRI RemovePodSandbox", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(CreateContainer, "u", "s1", "c1", time.Second),
				ctrEvent(StopContainer, "u", "s1", "c1", 2*time.Second), podEvent(StopPodSandbox, "u", "s1", 2*time.Second),
				ctrEvent(RemoveContainer, "u", "s1", "c1", 3*time.Second), podEvent(RemovePodSandbox, "u", "s1", 3*time.Second))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
		}, true, RemovedByEvent},
		// A plugin before this one failed NRI's RunPodSandbox: containerd
		// tells every plugin a StopPodSandbox, then a RemovePodSandbox,
		// and fails the start (internal/cri/nri RunPodSandbox); the
		// sandbox never reached its store, and kubelet retries the pod.
		{"NRI RunPodSandbox, StopPodSandbox, RemovePodSandbox, never stored (a plugin failed the hook)", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), podEvent(StopPodSandbox, "u", "s1", time.Millisecond),
				podEvent(RemovePodSandbox, "u", "s1", 2*time.Millisecond))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
		}, false, RemovedByRollback},
		// An attempt rolled back, retried by a sandbox that ran and was
		// torn down: the rollback is history. A rollback after the
		// teardown is kubelet setting the pod up again: no teardown.
		{"a start rolled back, then a sandbox run and torn down", func(s *State) {
			mustApply(t, s, podEvent(StopPodSandbox, "u", "s0", 0), podEvent(RemovePodSandbox, "u", "s0", time.Millisecond),
				podEvent(RunPodSandbox, "u", "s1", 10*time.Second), ctrEvent(CreateContainer, "u", "s1", "c1", 11*time.Second),
				podEvent(StopPodSandbox, "u", "s1", time.Minute), ctrEvent(RemoveContainer, "u", "s1", "c1", time.Minute),
				podEvent(RemovePodSandbox, "u", "s1", time.Minute))
		}, true, RemovedByRollback},
		{"a sandbox run and torn down, then a start rolled back", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(CreateContainer, "u", "s1", "c1", time.Second),
				podEvent(StopPodSandbox, "u", "s1", time.Minute), ctrEvent(RemoveContainer, "u", "s1", "c1", time.Minute),
				podEvent(RemovePodSandbox, "u", "s1", time.Minute),
				podEvent(StopPodSandbox, "u", "s2", 2*time.Minute), podEvent(RemovePodSandbox, "u", "s2", 2*time.Minute))
		}, false, RemovedByEvent},
		{"NRI StopPodSandbox, RemovePodSandbox, never stored (a plugin ahead of this one failed the hook)", func(s *State) {
			mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", 0), podEvent(RemovePodSandbox, "u", "s1", time.Millisecond))
		}, false, RemovedByRollback},
		{"NRI RunPodSandbox, StopPodSandbox, RemovePodSandbox of a sandbox a listing showed", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{ready("u", "s1")}}, t0.Add(30*time.Second))
			mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", time.Minute), podEvent(RemovePodSandbox, "u", "s1", time.Minute))
		}, true, RemovedByEvent},
		{"NRI RunPodSandbox, StopPodSandbox, RemovePodSandbox of a sandbox a Synchronize showed", func(s *State) {
			s.Synchronize(t0, []SyncedSandbox{{Pod: ident("u"), SandboxID: "s1"}}, nil)
			mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", time.Minute), podEvent(RemovePodSandbox, "u", "s1", time.Minute))
		}, true, RemovedByEvent},
		{"listed NotReady, then absent", func(s *State) {
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{ready("u", "s1")}}, t0)
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{stopped("u", "s1")}}, t0.Add(time.Minute))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(2*time.Minute))
		}, true, RemovedAfterStop},
		{"NRI StopPodSandbox, then absent", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(CreateContainer, "u", "s1", "c1", time.Second),
				podEvent(StopPodSandbox, "u", "s1", time.Second))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
		}, true, RemovedAfterStop},
		{"NRI StopPodSandbox, then absent, never stored (the removal's event lost)", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), podEvent(StopPodSandbox, "u", "s1", time.Second))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
		}, false, RemovedByAbsence},
		{"Ready, then absent", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
		}, false, RemovedByAbsence},
		{"listed NotReady, then listed Ready twice, then absent", func(s *State) {
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{stopped("u", "s1")}}, t0)
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{ready("u", "s1")}}, t0.Add(time.Minute))
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{ready("u", "s1")}}, t0.Add(2*time.Minute))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(3*time.Minute))
		}, false, RemovedByAbsence},
		{"listed Ready, then absent", func(s *State) {
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{ready("u", "s1")}}, t0)
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
		}, false, RemovedByAbsence},
		{"the runtime, asked by ID, does not know it", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
			s.MarkGone([]string{"s1"}, t0.Add(time.Minute))
		}, false, RemovedByAbsence},
		{"absent, then a late NRI StopPodSandbox and RemovePodSandbox", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(CreateContainer, "u", "s1", "c1", time.Second))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
			mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", 61*time.Second), podEvent(RemovePodSandbox, "u", "s1", 61*time.Second))
		}, true, RemovedByEvent},
		{"listed, then an NRI RemovePodSandbox whose stop was not seen", func(s *State) {
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{ready("u", "s1")}}, t0)
			mustApply(t, s, podEvent(RemovePodSandbox, "u", "s1", time.Minute))
		}, true, RemovedByEvent},
		// containerd rolls back a RunPodSandbox that failed after NRI's
		// hook with an NRI RemovePodSandbox and no stop; the sandbox never
		// reached its store, and kubelet retries the pod.
		{"a RunPodSandbox rolled back", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), podEvent(RemovePodSandbox, "u", "s1", time.Second))
		}, false, RemovedByRollback},
		{"absent, then a late NRI RemovePodSandbox alone", func(s *State) {
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
			mustApply(t, s, podEvent(RemovePodSandbox, "u", "s1", 61*time.Second))
		}, false, RemovedByRollback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(0)
			tc.history(s)
			p, _ := s.Pod("u")
			if p.Phase != PhaseRemoved || p.TornDown != tc.tornDown || p.Sandboxes[0].Removal != tc.removal {
				t.Fatalf("phase %s, torn down %v, removal %q; want Removed, %v, %q", p.Phase, p.TornDown, p.Sandboxes[0].Removal, tc.tornDown, tc.removal)
			}
		})
	}
}

// NRISandboxes is what a listing of the same runtime must agree with: what
// NRI reported and did not report removed, live while no stop was seen.
func TestNRISandboxesAreWhatNRIReported(t *testing.T) {
	s := New(0)
	s.Synchronize(t0, []SyncedSandbox{{Pod: ident("a"), SandboxID: "synced"}}, nil)
	mustApply(t, s, podEvent(RunPodSandbox, "b", "run", time.Second),
		podEvent(RunPodSandbox, "c", "stopped", 0), podEvent(StopPodSandbox, "c", "stopped", time.Second),
		podEvent(RunPodSandbox, "d", "removed", 0), podEvent(RemovePodSandbox, "d", "removed", time.Second))
	s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{
		{Pod: ident("a"), ID: "synced", Ready: false, CreatedAt: t0}, // Synchronize does not say NotReady; the listing does
		{Pod: ident("b"), ID: "run", Ready: true, CreatedAt: t0}, {Pod: ident("c"), ID: "stopped", CreatedAt: t0},
		{Pod: ident("e"), ID: "listed-only", Ready: true, CreatedAt: t0},
	}}, t0.Add(time.Minute))
	got := map[string]bool{}
	for _, n := range s.NRISandboxes() {
		got[n.ID] = n.Live
	}
	want := map[string]bool{"synced": false, "run": true, "stopped": false}
	if len(got) != len(want) {
		t.Fatalf("NRI sandboxes = %v, want %v", got, want)
	}
	for id, live := range want {
		if l, ok := got[id]; !ok || l != live {
			t.Fatalf("NRI sandboxes = %v, want %v", got, want)
		}
	}
	if n := s.Syncs(); n != 1 {
		t.Fatalf("Syncs = %d, want 1", n)
	}
}

// A record one absence marked Removed comes back when Synchronize reports
// it: containerd still has it.
func TestSynchronizeBringsBackWhatOneAbsenceRemoved(t *testing.T) {
	s := New(0)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
	s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
	s.Synchronize(t0.Add(2*time.Minute), []SyncedSandbox{{Pod: ident("u"), SandboxID: "s1"}}, nil)
	if got := sandboxState(t, s, "u", "s1"); got != SandboxReady {
		t.Fatalf("sandbox = %s, want Ready", got)
	}
	// An NRI removal is not undone by Synchronize's view.
	mustApply(t, s, podEvent(RemovePodSandbox, "u", "s1", 3*time.Minute))
	s.Synchronize(t0.Add(4*time.Minute), []SyncedSandbox{{Pod: ident("u"), SandboxID: "s1"}}, nil)
	if got := sandboxState(t, s, "u", "s1"); got != SandboxRemoved {
		t.Fatalf("sandbox = %s after an NRI removal, want Removed", got)
	}
}

// A sandbox seen stopped and then absent from a listing comes back, NotReady,
// when Synchronize reports it: containerd has it, and its pod is no longer
// torn down. (It stayed Removed, its pod torn down and out of the view
// listings are checked against, until a listing showed it again.)
func TestSynchronizeBringsBackASandboxRemovedAfterAStop(t *testing.T) {
	s := New(time.Hour)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
	s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: false, CreatedAt: t0}}}, t0.Add(time.Minute))
	s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(2*time.Minute))
	if p, _ := s.Pod("u"); !p.TornDown {
		t.Fatal("the pod is not seen torn down after its stop and absence: the test proves nothing")
	}
	s.Synchronize(t0.Add(3*time.Minute), []SyncedSandbox{{Pod: ident("u"), SandboxID: "s1"}}, nil)
	if got := sandboxState(t, s, "u", "s1"); got != SandboxNotReady {
		t.Fatalf("sandbox = %s after Synchronize reported it, want NotReady (it was seen stopped)", got)
	}
	if p, _ := s.Pod("u"); p.TornDown || p.Phase == PhaseRemoved {
		t.Fatalf("pod is %s, torn down %v, though Synchronize reports its sandbox", p.Phase, p.TornDown)
	}
}

// TestAContainerForgottenKeepsItsSandboxStored: a container made in a
// sandbox shows the sandbox was in containerd's store; when the container's
// record is forgotten (removed for the retention, while listings failed),
// the sandbox's later removal is still evidence of a teardown, not taken
// for a start rolled back.
func TestAContainerForgottenKeepsItsSandboxStored(t *testing.T) {
	s := New(time.Hour)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(CreateContainer, "u", "s1", "c1", time.Second),
		ctrEvent(StopContainer, "u", "s1", "c1", time.Minute), ctrEvent(RemoveContainer, "u", "s1", "c1", time.Minute))
	s.Forget(t0.Add(2 * time.Hour))
	if p, _ := s.Pod("u"); len(p.Containers) != 0 {
		t.Fatalf("the container is still known: the test proves nothing")
	}
	mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", 2*time.Hour), podEvent(RemovePodSandbox, "u", "s1", 2*time.Hour))
	if p, _ := s.Pod("u"); !p.TornDown || p.Sandboxes[0].Removal != RemovedByEvent {
		t.Fatalf("torn down %v, removal %q; want true, %q", p.TornDown, p.Sandboxes[0].Removal, RemovedByEvent)
	}
}

// TestARollbackIsALifeEvent: a start rolled back is kubelet starting the
// pod, though this plugin may never have been told its RunPodSandbox (a
// plugin ahead of it failed the hook, and containerd told the others only
// the stop and the removal): its removal is a life event, which aborts a
// step planned before it and starts the pod's grace clocks again.
func TestARollbackIsALifeEvent(t *testing.T) {
	s := New(0)
	mustApply(t, s, podEvent(StopPodSandbox, "u", "x1", time.Minute), podEvent(RemovePodSandbox, "u", "x1", time.Minute+time.Millisecond))
	if p, _ := s.Pod("u"); !p.LastLifeEvent.Equal(t0.Add(time.Minute + time.Millisecond)) {
		t.Fatalf("last life event %v, want the rollback's removal", p.LastLifeEvent)
	}
}
