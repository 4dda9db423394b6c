package podstate

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func ident(uid string) PodIdentity {
	return PodIdentity{UID: uid, Namespace: "ns", Name: "pod-" + uid}
}

func podEvent(kind EventKind, uid, sandbox string, at time.Duration) Event {
	return Event{Kind: kind, At: t0.Add(at), Pod: ident(uid), SandboxID: sandbox}
}

func ctrEvent(kind EventKind, uid, sandbox, id string, at time.Duration) Event {
	return Event{Kind: kind, At: t0.Add(at), Pod: ident(uid), SandboxID: sandbox, ContainerID: id, ContainerName: "app"}
}

// mustApply applies evs and stops the test at the first refused; call it
// from the test's goroutine only (it calls t.Fatalf).
func mustApply(t *testing.T, s *State, evs ...Event) {
	t.Helper()
	for _, ev := range evs {
		if err := s.Apply(ev); err != nil {
			t.Fatalf("Apply(%v): %v", ev.Kind, err)
		}
	}
}

func sandboxState(t *testing.T, s *State, uid, id string) SandboxState {
	t.Helper()
	p, ok := s.Pod(uid)
	if !ok {
		t.Fatalf("pod %s unknown", uid)
	}
	for _, sb := range p.Sandboxes {
		if sb.ID == id {
			return sb.State
		}
	}
	t.Fatalf("sandbox %s unknown", id)
	return 0
}

func containerState(t *testing.T, s *State, uid, id string) ContainerState {
	t.Helper()
	p, ok := s.Pod(uid)
	if !ok {
		t.Fatalf("pod %s unknown", uid)
	}
	for _, c := range p.Containers {
		if c.ID == id {
			return c.State
		}
	}
	t.Fatalf("container %s unknown", id)
	return 0
}

func TestKubeletPodRequiresAllThreeLabels(t *testing.T) {
	full := map[string]string{LabelPodUID: "u", LabelPodNamespace: "n", LabelPodName: "p"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		ok     bool
	}{
		{"all three", full, true},
		{"nil labels", nil, false},
		{"no uid", map[string]string{LabelPodNamespace: "n", LabelPodName: "p"}, false},
		{"empty name", map[string]string{LabelPodUID: "u", LabelPodNamespace: "n", LabelPodName: ""}, false},
		{"no namespace", map[string]string{LabelPodUID: "u", LabelPodName: "p"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := KubeletPod(tc.labels)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && id != (PodIdentity{UID: "u", Namespace: "n", Name: "p"}) {
				t.Fatalf("identity = %+v", id)
			}
		})
	}
}

func TestApplyRejectsEventsWithoutIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   Event
		want string
	}{
		{"no kind", Event{Pod: ident("u"), SandboxID: "s"}, "not a lifecycle event"},
		{"no uid", Event{Kind: RunPodSandbox, SandboxID: "s"}, "no pod UID"},
		{"no sandbox", Event{Kind: RunPodSandbox, Pod: ident("u")}, "no sandbox ID"},
		{"container event without container id", Event{Kind: StartContainer, Pod: ident("u"), SandboxID: "s"}, "no container ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(0)
			err := s.Apply(tc.ev)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if len(s.View().Pods) != 0 {
				t.Fatal("a rejected event changed the state")
			}
		})
	}
}

func TestEventsNeverMoveStateBack(t *testing.T) {
	s := New(0)
	mustApply(t, s,
		podEvent(RunPodSandbox, "u", "s1", 0),
		ctrEvent(CreateContainer, "u", "s1", "c1", 1*time.Second),
		ctrEvent(StartContainer, "u", "s1", "c1", 2*time.Second),
		ctrEvent(StopContainer, "u", "s1", "c1", 3*time.Second),
		podEvent(StopPodSandbox, "u", "s1", 4*time.Second),
		// Late or duplicate events must not revive anything.
		ctrEvent(StartContainer, "u", "s1", "c1", 5*time.Second),
		ctrEvent(CreateContainer, "u", "s1", "c1", 5*time.Second),
		podEvent(RunPodSandbox, "u", "s1", 5*time.Second),
	)
	if got := sandboxState(t, s, "u", "s1"); got != SandboxNotReady {
		t.Errorf("sandbox = %s, want NotReady", got)
	}
	if got := containerState(t, s, "u", "c1"); got != ContainerExited {
		t.Errorf("container = %s, want Exited", got)
	}
	mustApply(t, s, ctrEvent(RemoveContainer, "u", "s1", "c1", 6*time.Second), podEvent(RemovePodSandbox, "u", "s1", 7*time.Second),
		ctrEvent(StopContainer, "u", "s1", "c1", 8*time.Second), podEvent(StopPodSandbox, "u", "s1", 8*time.Second))
	if got := sandboxState(t, s, "u", "s1"); got != SandboxRemoved {
		t.Errorf("sandbox = %s, want Removed", got)
	}
	if got := containerState(t, s, "u", "c1"); got != ContainerRemoved {
		t.Errorf("container = %s, want Removed", got)
	}
}

// TestALifeEventAppliedLateDoesNotMoveLastLifeEventBack: handlers stamp an
// event before they take the state's lock, so a pod's two life events can
// be applied in the opposite order; the newest stays the pod's last.
func TestALifeEventAppliedLateDoesNotMoveLastLifeEventBack(t *testing.T) {
	s := New(0)
	mustApply(t, s,
		podEvent(RunPodSandbox, "u", "s1", 0),
		ctrEvent(CreateContainer, "u", "s1", "c1", 1*time.Second),
		ctrEvent(StartContainer, "u", "s1", "c1", 10*time.Second),
		ctrEvent(StartContainer, "u", "s1", "c2", 9*time.Second), // stamped before c1's, applied after
	)
	p, ok := s.Pod("u")
	if !ok {
		t.Fatal("pod u unknown")
	}
	if got := p.LastLifeEvent; !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("LastLifeEvent = %s after the start at 10s, want 10s", got.Sub(t0))
	}
}

func TestContainerEventDoesNotInventASandbox(t *testing.T) {
	s := New(0)
	mustApply(t, s, ctrEvent(StopContainer, "u", "s1", "c1", 0))
	p, _ := s.Pod("u")
	if len(p.Sandboxes) != 0 {
		t.Fatalf("sandboxes = %+v, want none", p.Sandboxes)
	}
	if p.Phase != PhaseTerminated {
		t.Fatalf("phase = %s, want Terminated", p.Phase)
	}
}

func TestPhaseIsDerivedFromRecords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []Event
		want   Phase
	}{
		{"ready sandbox is running", []Event{podEvent(RunPodSandbox, "u", "s1", 0)}, PhaseRunning},
		{"ready sandbox with exited container is running", []Event{
			podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StopContainer, "u", "s1", "c1", 1)}, PhaseRunning},
		{"one ready sandbox among stopped ones is running", []Event{
			podEvent(StopPodSandbox, "u", "old", 0), podEvent(RunPodSandbox, "u", "new", 1)}, PhaseRunning},
		{"stopped sandbox with running container is terminating", []Event{
			podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 1), podEvent(StopPodSandbox, "u", "s1", 2)}, PhaseTerminating},
		{"stopped sandbox and exited container is terminated", []Event{
			podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 1),
			ctrEvent(StopContainer, "u", "s1", "c1", 2), podEvent(StopPodSandbox, "u", "s1", 3)}, PhaseTerminated},
		{"created container counts as left, not running", []Event{
			podEvent(StopPodSandbox, "u", "s1", 0), ctrEvent(CreateContainer, "u", "s1", "c1", 1)}, PhaseTerminated},
		{"nothing left is removed", []Event{
			podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 1),
			ctrEvent(RemoveContainer, "u", "s1", "c1", 2), podEvent(RemovePodSandbox, "u", "s1", 3)}, PhaseRemoved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(0)
			mustApply(t, s, tc.events...)
			p, _ := s.Pod("u")
			if p.Phase != tc.want {
				t.Fatalf("phase = %s, want %s", p.Phase, tc.want)
			}
		})
	}
}

func TestUnknownContainerCountsAsRunning(t *testing.T) {
	s := New(0)
	mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", 0))
	s.Reconcile(Listing{StartSeq: s.Seq(),
		Sandboxes:  []ListedSandbox{{Pod: ident("u"), ID: "s1"}},
		Containers: []ListedContainer{{Pod: ident("u"), ID: "c1", SandboxID: "s1", Name: "app", State: ContainerUnknown}},
	}, t0)
	if p, _ := s.Pod("u"); p.Phase != PhaseTerminating {
		t.Fatalf("phase = %s, want Terminating", p.Phase)
	}
}

func TestListingMarksAbsentRecordsRemoved(t *testing.T) {
	s := New(0)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 0))
	r := s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(time.Minute))
	if r.Removed != 2 {
		t.Fatalf("Removed = %d, want 2", r.Removed)
	}
	p, _ := s.Pod("u")
	if p.Phase != PhaseRemoved || p.RemovedSince != t0.Add(time.Minute) {
		t.Fatalf("phase = %s since %v, want Removed since %v", p.Phase, p.RemovedSince, t0.Add(time.Minute))
	}
}

func TestUnreadableListingEntriesAreNotRemoved(t *testing.T) {
	s := New(0)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 0))
	r := s.Reconcile(Listing{StartSeq: s.Seq(), Unreadable: []string{"s1", "c1"}}, t0)
	if r.Removed != 0 {
		t.Fatalf("Removed = %d, want 0: the runtime still lists them", r.Removed)
	}
}

func TestListingOlderThanAnEventLeavesTheRecordAlone(t *testing.T) {
	s := New(0)
	start := s.Seq() // the listing is requested here ...
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 0))
	// ... and does not contain what was created while it ran.
	r := s.Reconcile(Listing{StartSeq: start}, t0)
	if r.Removed != 0 {
		t.Fatalf("Removed = %d, want 0", r.Removed)
	}
	if got := sandboxState(t, s, "u", "s1"); got != SandboxReady {
		t.Fatalf("sandbox = %s, want Ready", got)
	}
	// A stale listing that still shows the sandbox Ready must not undo a stop.
	mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", time.Second))
	s.Reconcile(Listing{StartSeq: start, Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: true}}}, t0)
	if got := sandboxState(t, s, "u", "s1"); got != SandboxNotReady {
		t.Fatalf("sandbox = %s, want NotReady", got)
	}
}

func TestNewerListingCorrectsAnEventClaim(t *testing.T) {
	// containerd sends NRI StopPodSandbox before stopping; if the stop fails
	// the sandbox stays Ready, and a later listing must say so.
	s := New(0)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), podEvent(StopPodSandbox, "u", "s1", time.Second))
	r := s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: true}}}, t0.Add(time.Minute))
	if r.Corrected != 1 {
		t.Fatalf("Corrected = %d, want 1", r.Corrected)
	}
	if got := sandboxState(t, s, "u", "s1"); got != SandboxReady {
		t.Fatalf("sandbox = %s, want Ready", got)
	}
	// A listing's NotReady that a newer listing shows Ready again (a
	// status containerd could not load, then could) is moved back too, and
	// its stop is void: the stop is evidence of a teardown, which a Ready
	// sandbox is not.
	s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: false}}}, t0.Add(2*time.Minute))
	s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: true}}}, t0.Add(3*time.Minute))
	if got := sandboxState(t, s, "u", "s1"); got != SandboxReady {
		t.Fatalf("sandbox = %s, want Ready", got)
	}
	if p, _ := s.Pod("u"); p.Sandboxes[0].StopSeen {
		t.Fatal("the stop a newer listing voided is still seen")
	}
}

func TestListingLaggingBehindAnEventDoesNotCorrectIt(t *testing.T) {
	// containerd sends NRI StopContainer for an exit before its CRI store
	// says EXITED: a listing taken in between still shows Running.
	s := New(0)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 0),
		ctrEvent(StopContainer, "u", "s1", "c1", time.Second))
	s.Reconcile(Listing{StartSeq: s.Seq(),
		Sandboxes:  []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: true}},
		Containers: []ListedContainer{{Pod: ident("u"), ID: "c1", SandboxID: "s1", State: ContainerRunning}},
	}, t0.Add(2*time.Second))
	if got := containerState(t, s, "u", "c1"); got != ContainerExited {
		t.Fatalf("container = %s, want Exited: the listing is only lagging", got)
	}
}

// TestAPodNRIReportsIsNoOrphanOnceItDoes: a pass before Synchronize (a
// containerd restart, the plugin's start) learns pods from the listing;
// Synchronize then reports them, and they are NRI's, as if it had first.
func TestAPodNRIReportsIsNoOrphanOnceItDoes(t *testing.T) {
	s := New(0)
	s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: true, CreatedAt: t0}}}, t0)
	if p, _ := s.Pod("u"); !p.Orphan {
		t.Fatal("a pod only a listing knows is not an orphan: the test proves nothing")
	}
	s.Synchronize(t0.Add(time.Second), []SyncedSandbox{{Pod: ident("u"), SandboxID: "s1"}}, nil)
	if p, _ := s.Pod("u"); p.Orphan {
		t.Error("still an orphan after NRI's Synchronize reported it")
	}
}

func TestListingAddsUnknownObjectsAsOrphans(t *testing.T) {
	s := New(0)
	created := t0.Add(-time.Hour)
	r := s.Reconcile(Listing{StartSeq: s.Seq(),
		Sandboxes:  []ListedSandbox{{Pod: ident("u"), ID: "s1", Attempt: 2, CreatedAt: created}},
		Containers: []ListedContainer{{Pod: ident("u"), ID: "c1", SandboxID: "s1", Name: "app", Attempt: 3, State: ContainerExited, CreatedAt: created}},
	}, t0)
	if r.Added != 2 {
		t.Fatalf("Added = %d, want 2", r.Added)
	}
	p, _ := s.Pod("u")
	if !p.Orphan || p.Phase != PhaseTerminated || p.Namespace != "ns" {
		t.Fatalf("pod = %+v, want an orphan, Terminated, namespace ns", p)
	}
	sb, c := p.Sandboxes[0], p.Containers[0]
	if sb.Source != SourceListing || sb.Attempt != 2 || !sb.CreatedAt.Equal(created) || sb.State != SandboxNotReady {
		t.Errorf("sandbox = %+v", sb)
	}
	if c.Source != SourceListing || c.Attempt != 3 || c.State != ContainerExited || c.Name != "app" {
		t.Errorf("container = %+v", c)
	}
}

func TestSynchronizeNeverRemovesAndFillsIn(t *testing.T) {
	s := New(0)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StopContainer, "u", "s1", "dead", 0))
	r := s.Synchronize(t0, []SyncedSandbox{{Pod: ident("v"), SandboxID: "s2"}, {SandboxID: "bad"}},
		[]SyncedContainer{{Pod: ident("v"), SandboxID: "s2", ID: "c2", Name: "app", State: ContainerRunning}})
	if r.Added != 2 || r.Skipped != 1 {
		t.Fatalf("result = %+v, want 2 added, 1 skipped", r)
	}
	if got := containerState(t, s, "u", "dead"); got != ContainerExited {
		t.Fatalf("exited container absent from Synchronize = %s, want Exited", got)
	}
	if got := containerState(t, s, "v", "c2"); got != ContainerRunning {
		t.Fatalf("synchronized container = %s, want Running", got)
	}
	if p, _ := s.Pod("v"); p.Orphan || p.Sandboxes[0].Source != SourceSync {
		t.Fatalf("synchronized pod = %+v, want source sync, not orphan", p)
	}
}

func TestRemovedPodsAreForgottenAfterRetention(t *testing.T) {
	s := New(time.Minute)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), podEvent(RemovePodSandbox, "u", "s1", time.Second))
	if r := s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(30*time.Second)); r.Forgotten != 0 {
		t.Fatalf("forgot %d pods before the retention", r.Forgotten)
	}
	// A late event about the removed pod finds the tombstone.
	mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", 40*time.Second))
	if got := sandboxState(t, s, "u", "s1"); got != SandboxRemoved {
		t.Fatalf("sandbox = %s after a late event, want Removed", got)
	}
	if r := s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(62*time.Second)); r.Forgotten != 1 {
		t.Fatalf("Forgotten = %d, want 1", r.Forgotten)
	}
	if _, ok := s.Pod("u"); ok {
		t.Fatal("pod still known after the retention")
	}
}

func TestRemovedRecordsOfALivePodArePruned(t *testing.T) {
	s := New(time.Minute)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
	// A crash-looping container leaves a removed record every restart.
	for i := range 5 {
		id := fmt.Sprintf("c%d", i)
		at := time.Duration(i) * time.Second
		mustApply(t, s, ctrEvent(StartContainer, "u", "s1", id, at), ctrEvent(StopContainer, "u", "s1", id, at), ctrEvent(RemoveContainer, "u", "s1", id, at))
	}
	mustApply(t, s, ctrEvent(StartContainer, "u", "s1", "live", 10*time.Second))
	s.Reconcile(Listing{StartSeq: 0}, t0.Add(2*time.Minute))
	p, _ := s.Pod("u")
	if len(p.Containers) != 1 || p.Containers[0].ID != "live" {
		t.Fatalf("containers = %+v, want only the live one", p.Containers)
	}
}

func TestMismatchesFindEveryDisagreement(t *testing.T) {
	s := New(0)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 0),
		ctrEvent(StartContainer, "u", "s1", "c2", 0))
	l := Listing{
		Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: false}, {Pod: ident("w"), ID: "s9"}},
		Containers: []ListedContainer{{Pod: ident("u"), ID: "c1", SandboxID: "s1", State: ContainerRunning},
			{Pod: ident("u"), ID: "c3", SandboxID: "s1", State: ContainerExited}},
	}
	got := s.View().Mismatches(l)
	want := []string{"sandbox s1", "sandbox s9", "container c2", "container c3"}
	if len(got) != len(want) {
		t.Fatalf("mismatches = %q, want %d", got, len(want))
	}
	for _, w := range want {
		if !strings.Contains(strings.Join(got, "\n"), w) {
			t.Errorf("no mismatch about %s in %q", w, got)
		}
	}
	s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: l.Sandboxes, Containers: l.Containers}, t0)
	if m := s.View().Mismatches(l); len(m) != 0 {
		t.Fatalf("after Reconcile: %q", m)
	}
}

// TestRandomHistoriesKeepInvariants drives random histories of a simulated
// runtime through the state. Most steps change the sandboxes and containers
// the history already made (create, start, stop, remove; stop and remove a
// sandbox), some without telling NRI; others tear a whole pod down as kubelet
// does, replay an event already delivered, or deliver a Synchronize report or
// a fresh or stale listing. After every step it checks that:
//   - the state stays consistent (checkConsistent);
//   - a stale listing never moves a record back, and a record only moves
//     back when a newer listing corrects an event's claim;
//   - a delivered event leaves the record it names in the runtime's state,
//     an NRI removal Removed by the event;
//   - a replayed (duplicate or late) event changes no record's state;
//   - a pod NRI saw torn down in full, with nothing else left, is Removed
//     and TornDown;
//   - a reconcile from a fresh, complete listing leaves no mismatch.
//
// It fails when an event kind or step kind was exercised too rarely: a
// generator drawing events about objects that do not exist (as this one did
// once, with a fresh ID at almost every step) passes while judging nothing.
func TestRandomHistoriesKeepInvariants(t *testing.T) {
	const seeds = 200
	stats := historyStats{transitions: map[EventKind]int{}}
	for seed := int64(1); seed <= seeds; seed++ {
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runRandomHistory(t, seed, 300, &stats) }) {
			return // the first failing history says enough
		}
	}
	if stats.histories < seeds {
		t.Logf("%d of %d histories ran (-run picked some): what they exercised is not counted", stats.histories, seeds)
		return
	}
	// About a quarter of what 200 histories of 300 steps give (the least
	// delivered kind, StartContainer, some 4000 times): room to change the
	// generator's weights, none for a generator that stopped drawing a kind.
	const minTransitions = 1000
	for kind := RunPodSandbox; kind <= RemoveContainer; kind++ {
		if n := stats.transitions[kind]; n < minTransitions {
			t.Errorf("NRI delivered %d %s events that changed the runtime in all histories, want at least %d: its transitions are barely judged", n, kind, minTransitions)
		}
	}
	for _, c := range []struct {
		what   string
		n, min int
	}{
		{"events not delivered to NRI", stats.silent, 1000},
		{"pod teardowns", stats.teardowns, 1000},
		{"teardowns that left their pod nothing else (checked TornDown)", stats.tornDown, 1000},
		{"replayed events", stats.replays, 1000},
		{"Synchronize reports", stats.syncs, 1000},
		{"stale listings", stats.stale, 1000},
		{"fresh listings", stats.fresh, 1000},
	} {
		if c.n < c.min {
			t.Errorf("%d %s in all histories, want at least %d", c.n, c.what, c.min)
		}
	}
	t.Logf("delivered transitions per kind %v; %d not delivered, %d teardowns (%d checked TornDown), %d replays, %d Synchronize, %d stale and %d fresh listings",
		stats.transitions, stats.silent, stats.teardowns, stats.tornDown, stats.replays, stats.syncs, stats.stale, stats.fresh)
}

// historyStats counts what the random histories exercised.
type historyStats struct {
	histories   int
	transitions map[EventKind]int // runtime changes NRI delivered, per event kind
	silent      int               // runtime changes NRI was not told of
	teardowns   int
	tornDown    int // teardowns after which the pod had nothing else left
	replays     int
	syncs       int
	stale       int
	fresh       int
}

// truth is the simulated runtime: what a CRI listing would show.
type truth struct {
	sandboxes  map[string]ListedSandbox
	containers map[string]ListedContainer
	gone       map[string]bool // removed IDs, never created again
}

// sortedSandboxes and sortedContainers list the runtime's objects in ID
// order, so a seed draws the same history every run.
func (tr truth) sortedSandboxes() []ListedSandbox {
	out := make([]ListedSandbox, 0, len(tr.sandboxes))
	for _, sb := range tr.sandboxes {
		out = append(out, sb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (tr truth) sortedContainers() []ListedContainer {
	out := make([]ListedContainer, 0, len(tr.containers))
	for _, c := range tr.containers {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (tr truth) listing(seq uint64) Listing {
	return Listing{StartSeq: seq, Sandboxes: tr.sortedSandboxes(), Containers: tr.sortedContainers()}
}

// history is one random history in progress.
type history struct {
	t      *testing.T
	seed   int64
	step   int
	rng    *rand.Rand
	s      *State
	tr     truth
	now    time.Time
	nextID int
	sent   map[string]Event // the last event delivered about each object ID, for replays
	stats  *historyStats
}

// maxSandboxes bounds the runtime's sandboxes, so a history keeps working on
// a few objects rather than spreading over many untouched ones.
const maxSandboxes = 6

func runRandomHistory(t *testing.T, seed int64, steps int, stats *historyStats) {
	h := &history{t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), s: New(time.Minute),
		tr:  truth{map[string]ListedSandbox{}, map[string]ListedContainer{}, map[string]bool{}},
		now: t0, sent: map[string]Event{}, stats: stats}
	stats.histories++
	for h.step = 0; h.step < steps; h.step++ {
		h.now = h.now.Add(time.Duration(h.rng.Intn(20)) * time.Second)
		before := h.s.View()
		stale := false
		switch op := h.rng.Intn(20); {
		case op < 11: // the runtime changes something and (mostly) tells NRI
			h.change(h.drawEvent(), h.rng.Intn(5) == 0) // silent: e.g. the pause process died
		case op < 12:
			h.teardown()
		case op < 14:
			h.replay(before)
		case op < 15:
			h.synchronize()
		case op < 17: // a stale listing: taken, then an event arrives before it is applied
			l := h.tr.listing(h.s.Seq())
			h.change(h.drawEvent(), false)
			h.s.Reconcile(l, h.now)
			stale = true
			h.stats.stale++
		default:
			l := h.tr.listing(h.s.Seq())
			h.s.Reconcile(l, h.now)
			h.stats.fresh++
			if m := settledMismatches(h.s.View(), l, h.now); len(m) != 0 {
				h.fatalf("after a fresh reconcile: %q", m)
			}
		}
		after := h.s.View()
		checkConsistent(t, h.step, after)
		checkNoBackwardMoves(t, seed, h.step, before, after, stale)
	}
}

func (h *history) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("seed %d step %d: "+format, append([]any{h.seed, h.step}, args...)...)
}

func (h *history) newID(prefix string) string {
	h.nextID++
	return fmt.Sprintf("%s%d", prefix, h.nextID)
}

// drawEvent draws a change the runtime can make now: a kind among those some
// object can take, then one such object. Only RunPodSandbox and
// CreateContainer make new IDs (never reused, as in a real runtime); every
// other event is about a sandbox or container the history made.
func (h *history) drawEvent() Event {
	sbs, cs := h.tr.sortedSandboxes(), h.tr.sortedContainers()
	var ready, stopped []ListedSandbox
	for _, sb := range sbs {
		if sb.Ready {
			ready = append(ready, sb)
		} else {
			stopped = append(stopped, sb)
		}
	}
	var created, stoppable []ListedContainer
	for _, c := range cs {
		switch c.State {
		case ContainerCreated:
			created = append(created, c)
			stoppable = append(stoppable, c)
		case ContainerRunning:
			stoppable = append(stoppable, c)
		}
	}
	// Weighted so containers live long enough to start and stop, not
	// mostly go with a sandbox stopped or removed under them.
	var kinds []EventKind
	can := func(ok bool, kind EventKind, weight int) {
		for ; ok && weight > 0; weight-- {
			kinds = append(kinds, kind)
		}
	}
	can(len(sbs) < maxSandboxes, RunPodSandbox, 2)
	can(len(ready) > 0, StopPodSandbox, 1)
	can(len(stopped) > 0 || len(sbs) == maxSandboxes, RemovePodSandbox, 1)
	can(len(ready) > 0, CreateContainer, 3)
	can(len(created) > 0, StartContainer, 3)
	can(len(stoppable) > 0, StopContainer, 2)
	can(len(cs) > 0, RemoveContainer, 2)
	pickSandbox := func(in []ListedSandbox) ListedSandbox { return in[h.rng.Intn(len(in))] }
	onContainer := func(kind EventKind, in []ListedContainer) Event {
		c := in[h.rng.Intn(len(in))]
		return Event{Kind: kind, At: h.now, Pod: c.Pod, SandboxID: c.SandboxID, ContainerID: c.ID, ContainerName: c.Name}
	}
	switch kind := kinds[h.rng.Intn(len(kinds))]; kind {
	case RunPodSandbox:
		// A new pod, or a new sandbox for a pod that has one (kubelet
		// recreates a sandbox that died).
		pod := ident(h.newID("u"))
		if len(sbs) > 0 && h.rng.Intn(3) == 0 {
			pod = pickSandbox(sbs).Pod
		}
		return Event{Kind: kind, At: h.now, Pod: pod, SandboxID: h.newID("s")}
	case StopPodSandbox:
		sb := pickSandbox(ready)
		return Event{Kind: kind, At: h.now, Pod: sb.Pod, SandboxID: sb.ID}
	case RemovePodSandbox:
		// Kubelet removes a stopped sandbox; now and then the runtime
		// loses a Ready one with what runs in it.
		sb := pickSandbox(sbs)
		if len(stopped) > 0 && h.rng.Intn(4) != 0 {
			sb = pickSandbox(stopped)
		}
		return Event{Kind: kind, At: h.now, Pod: sb.Pod, SandboxID: sb.ID}
	case CreateContainer:
		sb := pickSandbox(ready)
		return Event{Kind: kind, At: h.now, Pod: sb.Pod, SandboxID: sb.ID, ContainerID: h.newID("c"), ContainerName: "app"}
	case StartContainer:
		return onContainer(kind, created)
	case StopContainer:
		return onContainer(kind, stoppable)
	default:
		return onContainer(RemoveContainer, cs)
	}
}

// change makes the runtime take ev and, unless silent, NRI report it; the
// record it names must then show what the runtime has: an event is applied
// at once, and an NRI removal is evidence of a teardown.
func (h *history) change(ev Event, silent bool) {
	if !applyTruth(h.tr, ev.Kind, ev.Pod, ev.SandboxID, ev.ContainerID, ev.At) {
		h.fatalf("the generator drew %s for sandbox %s container %q, which the runtime cannot take", ev.Kind, ev.SandboxID, ev.ContainerID)
	}
	if silent {
		h.stats.silent++
		return
	}
	mustApply(h.t, h.s, ev)
	h.stats.transitions[ev.Kind]++
	v := h.s.View()
	if ev.Kind.IsContainerEvent() {
		h.sent[ev.ContainerID] = ev
		want := ContainerRemoved
		if c, ok := h.tr.containers[ev.ContainerID]; ok {
			want = c.State
		}
		c, ok := findContainer(v, ev.ContainerID)
		if !ok || c.State != want || want == ContainerRemoved && c.Removal != RemovedByEvent {
			h.fatalf("after %s the record of container %s is %+v (known %v), want %s", ev.Kind, ev.ContainerID, c, ok, want)
		}
		return
	}
	h.sent[ev.SandboxID] = ev
	want := SandboxRemoved
	if sb, ok := h.tr.sandboxes[ev.SandboxID]; ok {
		want = SandboxNotReady
		if sb.Ready {
			want = SandboxReady
		}
	}
	sb, ok := findSandbox(v, ev.SandboxID)
	if !ok || sb.State != want || want == SandboxRemoved && sb.Removal != RemovedByEvent && sb.Removal != RemovedByRollback {
		h.fatalf("after %s the record of sandbox %s is %+v (known %v), want %s", ev.Kind, ev.SandboxID, sb, ok, want)
	}
}

// teardown removes one pod as kubelet and containerd do: stop its
// containers, stop its sandboxes, remove the containers, remove the
// sandboxes, NRI told of each.
// Every record it named is then Removed by an NRI event; a pod with nothing
// else left (or only what was Removed before, a sandbox with evidence) is
// Removed and torn down.
func (h *history) teardown() {
	sbs := h.tr.sortedSandboxes()
	if len(sbs) == 0 {
		return
	}
	uid := sbs[h.rng.Intn(len(sbs))].Pod.UID
	named := map[string]bool{}
	var ctrs []ListedContainer
	for _, c := range h.tr.sortedContainers() {
		if c.Pod.UID == uid {
			ctrs = append(ctrs, c)
		}
	}
	for _, c := range ctrs {
		if c.State == ContainerCreated || c.State == ContainerRunning {
			h.change(Event{Kind: StopContainer, At: h.now, Pod: c.Pod, SandboxID: c.SandboxID, ContainerID: c.ID, ContainerName: c.Name}, false)
		}
	}
	// containerd's RemovePodSandbox stops the sandbox, and tells NRI,
	// whatever its state (v2.4.2 sandbox_remove.go → stopPodSandbox): a
	// stopped one's stop is told again.
	for _, sb := range sbs {
		switch {
		case sb.Pod.UID != uid:
		case sb.Ready:
			h.change(Event{Kind: StopPodSandbox, At: h.now, Pod: sb.Pod, SandboxID: sb.ID}, false)
		default:
			mustApply(h.t, h.s, Event{Kind: StopPodSandbox, At: h.now, Pod: sb.Pod, SandboxID: sb.ID})
		}
	}
	for _, c := range ctrs {
		h.change(Event{Kind: RemoveContainer, At: h.now, Pod: c.Pod, SandboxID: c.SandboxID, ContainerID: c.ID, ContainerName: c.Name}, false)
		named[c.ID] = true
	}
	for _, sb := range sbs {
		if sb.Pod.UID == uid {
			h.change(Event{Kind: RemovePodSandbox, At: h.now, Pod: sb.Pod, SandboxID: sb.ID}, false)
			named[sb.ID] = true
		}
	}
	h.stats.teardowns++
	p, ok := h.s.Pod(uid)
	if !ok {
		h.fatalf("pod %s unknown right after NRI reported its teardown", uid)
	}
	alone := true // nothing of the pod left but what the teardown removed
	for _, sb := range p.Sandboxes {
		// A sandbox never listed, synchronized or given a container is
		// one containerd's store may never have had: its removal is a
		// rollback's, no evidence.
		want := RemovedByRollback
		if sb.Stored || slices.ContainsFunc(p.Containers, func(c Container) bool { return c.SandboxID == sb.ID }) {
			want = RemovedByEvent
		}
		switch {
		case named[sb.ID] && (sb.State != SandboxRemoved || sb.Removal != want):
			h.fatalf("after the teardown of pod %s its sandbox is %+v, want Removed: %s", uid, sb, want)
		case !sb.Removal.Evidence():
			// Left, or gone with no evidence (a start rolled back, which
			// is also kubelet setting the pod up): no teardown seen.
			alone = false
		}
	}
	for _, c := range p.Containers {
		switch {
		case named[c.ID] && (c.State != ContainerRemoved || c.Removal != RemovedByEvent):
			h.fatalf("after the teardown of pod %s its container is %+v, want Removed by the NRI event", uid, c)
		case !named[c.ID] && c.State != ContainerRemoved:
			alone = false
		}
	}
	if alone {
		h.stats.tornDown++
		if p.Phase != PhaseRemoved || !p.TornDown {
			h.fatalf("pod %s NRI saw torn down, nothing else left: phase %s, torn down %v; want Removed and torn down", uid, p.Phase, p.TornDown)
		}
	}
}

// replay delivers again the last event NRI delivered about an object the
// state still knows, as a duplicate or late event: it changes no record's
// state (events move records forward only, and this one's move is done).
func (h *history) replay(before View) {
	known := map[string]bool{}
	for _, p := range before.Pods {
		for _, sb := range p.Sandboxes {
			known[sb.ID] = true
		}
		for _, c := range p.Containers {
			known[c.ID] = true
		}
	}
	var ids []string
	for id := range h.sent {
		if known[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	sort.Strings(ids)
	ev := h.sent[ids[h.rng.Intn(len(ids))]]
	ev.At = h.now
	mustApply(h.t, h.s, ev)
	h.stats.replays++
	after := h.s.View()
	for _, p := range before.Pods {
		for _, was := range p.Sandboxes {
			if sb, _ := findSandbox(after, was.ID); sb.State != was.State || sb.Removal != was.Removal {
				h.fatalf("replayed %s about %s moved sandbox %s from %s (%s) to %s (%s)", ev.Kind, ev.SandboxID, was.ID, was.State, was.Removal, sb.State, sb.Removal)
			}
		}
		for _, was := range p.Containers {
			if c, _ := findContainer(after, was.ID); c.State != was.State || c.Removal != was.Removal {
				h.fatalf("replayed %s about %s moved container %s from %s (%s) to %s (%s)", ev.Kind, ev.ContainerID, was.ID, was.State, was.Removal, c.State, c.Removal)
			}
		}
	}
}

// synchronize delivers what NRI Synchronize reports after a reconnect: every
// sandbox, and the containers that have not exited.
func (h *history) synchronize() {
	var sbs []SyncedSandbox
	var cs []SyncedContainer
	for _, sb := range h.tr.sortedSandboxes() {
		sbs = append(sbs, SyncedSandbox{Pod: sb.Pod, SandboxID: sb.ID})
	}
	for _, c := range h.tr.sortedContainers() {
		if c.State == ContainerCreated || c.State == ContainerRunning {
			cs = append(cs, SyncedContainer{Pod: c.Pod, SandboxID: c.SandboxID, ID: c.ID, Name: c.Name, State: c.State})
		}
	}
	h.s.Synchronize(h.now, sbs, cs)
	h.stats.syncs++
}

// settledMismatches is View.Mismatches without the sandboxes NRI reported
// less than SettleTime ago and the listing lacks: containerd reports
// RunPodSandbox before it stores the sandbox, so one absence so soon is not
// taken for a removal.
func settledMismatches(v View, l Listing, now time.Time) []string {
	var out []string
	for _, m := range v.Mismatches(l) {
		young := false
		for _, p := range v.Pods {
			for _, sb := range p.Sandboxes {
				if strings.HasPrefix(m, "sandbox "+sb.ID+" ") && strings.HasSuffix(m, "not listed") && now.Sub(sb.ReportedAt) < SettleTime {
					young = true
				}
			}
		}
		if !young {
			out = append(out, m)
		}
	}
	return out
}

// applyTruth changes the simulated runtime; it reports whether anything changed.
func applyTruth(tr truth, kind EventKind, pod PodIdentity, sid, cid string, now time.Time) bool {
	sb, sbOK := tr.sandboxes[sid]
	c, cOK := tr.containers[cid]
	switch kind {
	case RunPodSandbox:
		if sbOK || tr.gone[sid] {
			return false
		}
		tr.sandboxes[sid] = ListedSandbox{Pod: pod, ID: sid, Ready: true, CreatedAt: now}
	case StopPodSandbox:
		if !sbOK || !sb.Ready {
			return false
		}
		sb.Ready = false
		tr.sandboxes[sid] = sb
	case RemovePodSandbox:
		if !sbOK {
			return false
		}
		delete(tr.sandboxes, sid)
		tr.gone[sid] = true
		for id, c := range tr.containers {
			if c.SandboxID == sid {
				delete(tr.containers, id)
				tr.gone[id] = true
			}
		}
	case CreateContainer:
		if cOK || !sbOK || !sb.Ready || tr.gone[cid] {
			return false
		}
		tr.containers[cid] = ListedContainer{Pod: pod, ID: cid, SandboxID: sid, Name: "app", State: ContainerCreated, CreatedAt: now}
	case StartContainer:
		if !cOK || c.State != ContainerCreated {
			return false
		}
		c.State = ContainerRunning
		tr.containers[cid] = c
	case StopContainer:
		if !cOK || c.State == ContainerExited {
			return false
		}
		c.State = ContainerExited
		tr.containers[cid] = c
	case RemoveContainer:
		if !cOK {
			return false
		}
		delete(tr.containers, cid)
		tr.gone[cid] = true
	}
	return true
}

func checkNoBackwardMoves(t *testing.T, seed int64, step int, before, after View, stale bool) {
	t.Helper()
	prevSandbox := map[string]Sandbox{}
	prevContainer := map[string]Container{}
	for _, p := range before.Pods {
		for _, sb := range p.Sandboxes {
			prevSandbox[sb.ID] = sb
		}
		for _, c := range p.Containers {
			prevContainer[c.ID] = c
		}
	}
	for _, p := range after.Pods {
		for _, sb := range p.Sandboxes {
			if old, ok := prevSandbox[sb.ID]; ok && sb.State < old.State && (stale || !old.fromEvent) {
				t.Fatalf("seed %d step %d: sandbox %s moved back %s -> %s (stale=%v fromEvent=%v)", seed, step, sb.ID, old.State, sb.State, stale, old.fromEvent)
			}
		}
		for _, c := range p.Containers {
			if old, ok := prevContainer[c.ID]; ok && c.State.rank() < old.State.rank() && (stale || !old.fromEvent) {
				t.Fatalf("seed %d step %d: container %s moved back %s -> %s", seed, step, c.ID, old.State, c.State)
			}
		}
	}
}

// TestConcurrentApplyReconcileAndView: NRI handlers apply events while the
// housekeeping loop reconciles and reads views; under -race any unguarded
// access fails the test, and no event is lost. The workers report failures
// with t.Errorf: t.Fatal (mustApply) may only be called from the test's own
// goroutine.
func TestConcurrentApplyReconcileAndView(t *testing.T) {
	s := New(time.Minute)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				uid := fmt.Sprintf("w%d-%d", w, i%50)
				for _, ev := range []Event{podEvent(RunPodSandbox, uid, uid+"-s", 0), ctrEvent(StartContainer, uid, uid+"-s", uid+"-c", 0)} {
					if err := s.Apply(ev); err != nil {
						t.Errorf("worker %d: Apply(%v): %v", w, ev.Kind, err)
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0)
			_ = s.View().Counts()
		}
	}()
	wg.Wait()
	if c := s.View().Counts(); c.Pods != 200 {
		t.Fatalf("pods = %d, want 200", c.Pods)
	}
}

// TestAListedSandboxIsNotForgottenUnderAnotherPodUID: NRI removed sandbox x
// of pod u1; longer than the retention later, a listing shows x Ready under
// pod UID u2 (malformed: a sandbox's labels never change). The listing
// brings x back to Ready in u1, its record's pod, and that pod must not then
// be forgotten as Removed with it.
func TestAListedSandboxIsNotForgottenUnderAnotherPodUID(t *testing.T) {
	s := New(time.Minute)
	mustApply(t, s, podEvent(RemovePodSandbox, "u1", "x", 0))
	now := t0.Add(2 * time.Minute)
	s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{{Pod: ident("u2"), ID: "x", Ready: true, CreatedAt: now}}}, now)
	p, ok := s.Pod("u1")
	if !ok || len(p.Sandboxes) != 1 || p.Sandboxes[0].State != SandboxReady || p.Phase != PhaseRunning {
		t.Fatalf("pod u1 after the listing: %+v (known %v), want it Running with sandbox x Ready", p, ok)
	}
}

// TestAListingCorrectsAnNRIRemovalOfARecordAnAbsenceRemoved: a listing
// lacked sandbox s1 and container c1 (Removed by absence), then NRI
// reported their removal, then a listing taken more than SettleTime after
// it still shows them. The removal is NRI's claim like any other, and the
// newer listing corrects it: the pod is Running, not torn down.
func TestAListingCorrectsAnNRIRemovalOfARecordAnAbsenceRemoved(t *testing.T) {
	s := New(time.Minute)
	mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0), ctrEvent(StartContainer, "u", "s1", "c1", 0))
	s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(10*time.Second))
	mustApply(t, s, podEvent(RemovePodSandbox, "u", "s1", 20*time.Second), ctrEvent(RemoveContainer, "u", "s1", "c1", 20*time.Second))
	now := t0.Add(30 * time.Second)
	l := Listing{StartSeq: s.Seq(),
		Sandboxes:  []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: true, CreatedAt: t0}},
		Containers: []ListedContainer{{Pod: ident("u"), ID: "c1", SandboxID: "s1", Name: "app", State: ContainerRunning, CreatedAt: t0}}}
	s.Reconcile(l, now)
	p, _ := s.Pod("u")
	if p.Phase != PhaseRunning || p.TornDown || len(s.View().Mismatches(l)) != 0 {
		t.Fatalf("pod after the listing: phase %s, torn down %v, mismatches %q; want Running as listed", p.Phase, p.TornDown, s.View().Mismatches(l))
	}
}

// TestAStopAListingShowsUndoneIsNoEvidenceOfATeardown: NRI reported sandbox
// s1 stopped (or a listing showed it NotReady), then listings SettleTime
// later show it Ready: the stop did not take. One absence after that is one
// absence, as for any sandbox last listed Ready: never a teardown, so the
// pod's dir and cgroup are not "orphaned" on it.
func TestAStopAListingShowsUndoneIsNoEvidenceOfATeardown(t *testing.T) {
	for _, tc := range []struct {
		rule string
		stop func(s *State)
	}{
		{"an NRI stop", func(s *State) {
			mustApply(t, s, podEvent(StopPodSandbox, "u", "s1", time.Second))
		}},
		{"a listing that showed it NotReady", func(s *State) {
			s.Reconcile(Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: false, CreatedAt: t0}}},
				t0.Add(time.Second))
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(2*time.Second)) // lacked once: removed by absence
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s := New(time.Hour)
			mustApply(t, s, podEvent(RunPodSandbox, "u", "s1", 0))
			tc.stop(s)
			ready := Listing{StartSeq: s.Seq(), Sandboxes: []ListedSandbox{{Pod: ident("u"), ID: "s1", Ready: true, CreatedAt: t0}}}
			s.Reconcile(ready, t0.Add(time.Minute))
			if p, _ := s.Pod("u"); p.Phase != PhaseRunning {
				t.Fatalf("after a listing showing s1 Ready: phase %s, want Running: the test proves nothing", p.Phase)
			}
			s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(2*time.Minute)) // one absence
			if p, _ := s.Pod("u"); p.TornDown {
				t.Fatalf("one absence of a sandbox last listed Ready made pod u torn down (%+v): the stop the listing undid was taken for evidence", p.Sandboxes)
			}
		})
	}
}

// TestAnEventUnderAnotherPodUIDKeepsTheRecordsPodCurrent: NRI removes
// sandbox s1 of pod u1 naming pod u2 (malformed: a sandbox's pod never
// changes). u1 has nothing left: it is Removed from then on, and forgotten
// after the retention, not kept forever with no RemovedSince.
func TestAnEventUnderAnotherPodUIDKeepsTheRecordsPodCurrent(t *testing.T) {
	s := New(time.Minute)
	mustApply(t, s, podEvent(RunPodSandbox, "u1", "s1", 0), podEvent(RemovePodSandbox, "u2", "s1", time.Second))
	if p, _ := s.Pod("u1"); p.Phase != PhaseRemoved || !p.RemovedSince.Equal(t0.Add(time.Second)) {
		t.Fatalf("pod u1: phase %s, removed since %v; want Removed since %v", p.Phase, p.RemovedSince, t0.Add(time.Second))
	}
	s.Forget(t0.Add(2 * time.Minute))
	if _, ok := s.Pod("u1"); ok {
		t.Fatal("pod u1 still known after the retention")
	}
}

// TestASynchronizeUnderAnotherPodUIDKeepsTheRecordsPodCurrent: a listing
// lacked sandbox s1 of pod u1 (Removed by absence, so u1 is Removed), then
// NRI Synchronize reports s1 under pod u2 (malformed). s1 is back Ready in
// u1, its record's pod: u1 is Running, and not forgotten after the retention
// of the removal that no longer holds.
func TestASynchronizeUnderAnotherPodUIDKeepsTheRecordsPodCurrent(t *testing.T) {
	s := New(time.Minute)
	mustApply(t, s, podEvent(RunPodSandbox, "u1", "s1", 0))
	s.Reconcile(Listing{StartSeq: s.Seq()}, t0.Add(10*time.Second))
	s.Synchronize(t0.Add(20*time.Second), []SyncedSandbox{{Pod: ident("u2"), SandboxID: "s1"}}, nil)
	if p, _ := s.Pod("u1"); p.Phase != PhaseRunning || !p.RemovedSince.IsZero() {
		t.Fatalf("pod u1: phase %s, removed since %v; want Running, not Removed", p.Phase, p.RemovedSince)
	}
	s.Forget(t0.Add(2 * time.Minute))
	if p, ok := s.Pod("u1"); !ok || p.Phase != PhaseRunning {
		t.Fatalf("pod u1 after Forget: %+v (known %v), want it Running with s1 Ready", p, ok)
	}
}
