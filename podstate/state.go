package podstate

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// SettleTime is how long an event's claim stands against a listing that
// disagrees. containerd sends some NRI events before its CRI store reflects
// them (a container's exit; RunPodSandbox, sent before the sandbox is added
// to the store), so a listing right after the event may still show the old
// state; only a disagreement that outlives this is corrected.
const SettleTime = 5 * time.Second

// settleTime is SettleTime inside the package.
const settleTime = SettleTime

// DefaultRetention is how long Removed records and pods are kept before they
// are forgotten. Keeping them a while makes late or duplicate events about a
// removed object harmless: they find the tombstone instead of a new record.
const DefaultRetention = 10 * time.Minute

// State is the per-pod state. It is safe for concurrent use: NRI handlers
// Apply events while the housekeeping loop reconciles and reads views.
type State struct {
	retention time.Duration

	mu         sync.Mutex
	seq        uint64
	syncs      uint64 // Synchronize calls: one per NRI (re)connect
	pods       map[string]*pod
	sandboxes  map[string]*Sandbox
	containers map[string]*Container
}

type pod struct {
	id            PodIdentity
	source        Source
	firstSeen     time.Time
	lastLifeEvent time.Time
	removedSince  time.Time
	sandboxes     []*Sandbox
	containers    []*Container
}

// New returns an empty State. retention <= 0 means DefaultRetention.
func New(retention time.Duration) *State {
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &State{
		retention:  retention,
		pods:       make(map[string]*pod),
		sandboxes:  make(map[string]*Sandbox),
		containers: make(map[string]*Container),
	}
}

// Seq returns the current change sequence number. Read it before requesting a
// listing and pass it as Listing.StartSeq.
func (s *State) Seq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// Syncs returns how many times NRI synchronized: it changes with every NRI
// (re)connect, i.e. with every new NRI session.
func (s *State) Syncs() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncs
}

// Apply records one lifecycle event. It returns an error only for an event
// that cannot be recorded (missing IDs); nothing is changed then.
func (s *State) Apply(ev Event) error {
	if err := ev.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	p := s.podFor(ev.Pod, SourceEvent, ev.At)
	if (ev.Kind == RunPodSandbox || ev.Kind == StartContainer) && ev.At.After(p.lastLifeEvent) {
		// The newest, not the last applied: handlers take At before this
		// lock, so two of one pod may apply out of order, and an older
		// time would hide a start after a listing from the re-check.
		p.lastLifeEvent = ev.At
	}
	// The pod of the record the event changed: the event's own, but for
	// an event that names another pod UID for a known record (malformed:
	// a sandbox's or container's pod never changes).
	owner := p
	switch ev.Kind {
	case RunPodSandbox:
		// A new sandbox starts Ready.
		sb := s.sandboxFor(p, ev.SandboxID, SourceEvent, ev.At)
		sb.ReportedAt, sb.Synced, sb.Session = ev.At, false, s.syncs
	case StopPodSandbox:
		sb := s.sandboxFor(p, ev.SandboxID, SourceEvent, ev.At)
		sb.StopSeen = true
		s.advanceSandbox(sb, SandboxNotReady, ev.At)
		owner = s.pods[sb.PodUID]
	case RemovePodSandbox:
		// Evidence of a teardown, also for a record one absence from a
		// listing marked Removed already.
		sb := s.sandboxFor(p, ev.SandboxID, SourceEvent, ev.At)
		if sb.State == SandboxRemoved && (sb.Removal == RemovedByRollback || sb.Removal == RemovedByEvent) {
			// Said again (a replay): what it was, whatever was learned
			// of the sandbox since.
			owner = s.pods[sb.PodUID]
			break
		}
		if sb.State == SandboxRemoved {
			// Removed by an absence: the removal is NRI's claim from now on: a newer listing
			// that still shows the sandbox SettleTime later corrects
			// it, as any event's (listSandbox), rather than leaving a
			// listed sandbox Removed, and its pod torn down, for good.
			s.setSandbox(sb, SandboxRemoved, ev.At, true)
		}
		sb.Removal = RemovedByEvent
		if !s.stored(sb) {
			// Never in the runtime's store: a failed start rolled back,
			// stopped first or not, not a teardown (RemovedByRollback).
			// A start, too, which this plugin may not have been told
			// (a plugin ahead of it failed the hook): a life event.
			sb.Removal = RemovedByRollback
			if ev.At.After(p.lastLifeEvent) {
				p.lastLifeEvent = ev.At
			}
		}
		s.advanceSandbox(sb, SandboxRemoved, ev.At)
		owner = s.pods[sb.PodUID]
	default:
		// A container event does not prove its sandbox exists (it may be a late
		// event about a forgotten pod), so it creates no sandbox record.
		c := s.containerFor(p, ev.SandboxID, ev.ContainerID, ev.ContainerName, SourceEvent, ev.At)
		if ev.Kind == RemoveContainer {
			if c.State == ContainerRemoved && c.Removal != RemovedByEvent {
				// As for a sandbox: NRI's claim, which a newer listing
				// may correct.
				s.setContainer(c, ContainerRemoved, ev.At, true)
			}
			c.Removal = RemovedByEvent
		}
		s.advanceContainer(c, eventContainerState[ev.Kind], ev.At)
		owner = s.pods[c.PodUID]
	}
	s.refreshPhase(p, ev.At)
	// The record's pod too, or it would stay Removed with no RemovedSince
	// and never be forgotten.
	s.refreshPhase(owner, ev.At)
	return nil
}

var eventContainerState = map[EventKind]ContainerState{
	CreateContainer: ContainerCreated,
	StartContainer:  ContainerRunning,
	StopContainer:   ContainerExited,
	RemoveContainer: ContainerRemoved,
}

func (ev Event) validate() error {
	switch {
	case ev.Kind < RunPodSandbox || ev.Kind > RemoveContainer:
		return fmt.Errorf("event kind %d is not a lifecycle event", ev.Kind)
	case ev.Pod.UID == "":
		return fmt.Errorf("%s event for sandbox %q has no pod UID", ev.Kind, ev.SandboxID)
	case ev.SandboxID == "":
		return fmt.Errorf("%s event for pod %s has no sandbox ID", ev.Kind, ev.Pod.UID)
	case ev.Kind.IsContainerEvent() && ev.ContainerID == "":
		return fmt.Errorf("%s event for pod %s has no container ID", ev.Kind, ev.Pod.UID)
	}
	return nil
}

// stored reports whether sb was ever seen in containerd's store: listed,
// synchronized, or a container made in it (containerd creates a container
// only in a sandbox its store has). Called with s.mu held.
func (s *State) stored(sb *Sandbox) bool {
	if sb.Stored {
		return true
	}
	if p := s.pods[sb.PodUID]; p != nil {
		for _, c := range p.containers {
			if c.SandboxID == sb.ID {
				sb.Stored = true // latched: the container may be forgotten first (pruneContainers latches too)
				return true
			}
		}
	}
	return false
}

// SyncResult counts what a Synchronize changed.
type SyncResult struct {
	Added   int // records new to the state
	Skipped int // entries without the IDs needed to record them
}

// Synchronize records what NRI Synchronize reported after a (re)connect.
// Absence from it means nothing: it omits exited containers and Unknown
// sandboxes, so only a CRI listing may mark records Removed. Presence in it
// means the object exists: a record that an absence from a listing marked
// Removed (after a stop seen or not) comes back; one NRI removed does not.
func (s *State) Synchronize(at time.Time, sandboxes []SyncedSandbox, containers []SyncedContainer) SyncResult {
	var r SyncResult
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.syncs++
	touched := make(map[*pod]struct{})
	for _, in := range sandboxes {
		if in.Pod.UID == "" || in.SandboxID == "" {
			r.Skipped++
			continue
		}
		if _, ok := s.sandboxes[in.SandboxID]; !ok {
			r.Added++
		}
		p := s.podFor(in.Pod, SourceSync, at)
		sb := s.sandboxFor(p, in.SandboxID, SourceSync, at)
		sb.ReportedAt, sb.Synced, sb.Session = at, true, s.syncs
		sb.Stored = true
		if sb.State == SandboxRemoved && sb.Removal != RemovedByEvent {
			// Absent from a listing, stopped before or not: containerd
			// has it now (as a listing that shows it again brings it
			// back, listSandbox).
			to := SandboxReady
			if sb.StopSeen {
				to = SandboxNotReady
			}
			s.setSandbox(sb, to, at, true)
		}
		touched[p] = struct{}{}
		// The record's pod too: a report that names another pod UID
		// for a known sandbox (malformed) must not leave the pod the
		// sandbox came back in Removed since before, or it would be
		// forgotten with a live sandbox.
		touched[s.pods[sb.PodUID]] = struct{}{}
	}
	for _, in := range containers {
		if in.Pod.UID == "" || in.SandboxID == "" || in.ID == "" {
			r.Skipped++
			continue
		}
		if _, ok := s.containers[in.ID]; !ok {
			r.Added++
		}
		p := s.podFor(in.Pod, SourceSync, at)
		s.sandboxFor(p, in.SandboxID, SourceSync, at)
		c := s.containerFor(p, in.SandboxID, in.ID, in.Name, SourceSync, at)
		if c.State == ContainerRemoved && c.Removal == RemovedByAbsence {
			s.setContainer(c, in.State, at, true)
		}
		if in.State.mayHaveProcesses() {
			s.advanceContainer(c, in.State, at)
		}
		touched[p] = struct{}{}
		// The container's pod too, as for a sandbox above.
		touched[s.pods[c.PodUID]] = struct{}{}
	}
	for p := range touched {
		s.refreshPhase(p, at)
	}
	return r
}

// ReconcileResult counts what a Reconcile changed.
type ReconcileResult struct {
	Added     int // listed objects new to the state (orphans)
	Updated   int // records whose state the listing advanced or corrected
	Corrected int // of Updated: an event's claim the newer listing contradicted
	Removed   int // records absent from the listing, marked Removed
	Forgotten int // pods dropped after the retention
}

// Reconcile makes the state match a fresh, complete CRI listing taken at now:
// records absent from it become Removed, unknown entries are added as
// orphans, states advance to what the runtime reports. A record changed by an
// event after the listing started (seq > StartSeq) is newer than the listing
// and is left alone. Pods Removed for longer than the retention are forgotten.
func (s *State) Reconcile(l Listing, now time.Time) ReconcileResult {
	var r ReconcileResult
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	seenSandboxes := make(map[string]struct{}, len(l.Sandboxes)+len(l.Unreadable))
	seenContainers := make(map[string]struct{}, len(l.Containers)+len(l.Unreadable))
	for _, id := range l.Unreadable {
		seenSandboxes[id], seenContainers[id] = struct{}{}, struct{}{}
	}
	touched := make(map[*pod]struct{})

	for _, in := range l.Sandboxes {
		seenSandboxes[in.ID] = struct{}{}
		sb, known := s.sandboxes[in.ID]
		p := s.podFor(in.Pod, SourceListing, now)
		if !known {
			r.Added++
			sb = s.sandboxFor(p, in.ID, SourceListing, now)
		}
		if sb.CreatedAt.IsZero() {
			sb.CreatedAt, sb.Attempt = in.CreatedAt, in.Attempt
		}
		sb.Stored = true
		want := SandboxReady
		if !in.Ready {
			want = SandboxNotReady
		}
		s.listSandbox(sb, want, l.StartSeq, now, &r)
		touched[p] = struct{}{}
		// The record's own pod too: a listing that names another pod UID
		// for a known sandbox must not leave that pod's phase stale, or
		// a pod Removed for the retention is forgotten with the sandbox
		// this listing has just seen.
		touched[s.pods[sb.PodUID]] = struct{}{}
	}
	for _, in := range l.Containers {
		seenContainers[in.ID] = struct{}{}
		c, known := s.containers[in.ID]
		if !known {
			p := s.podFor(in.Pod, SourceListing, now)
			r.Added++
			c = s.containerFor(p, in.SandboxID, in.ID, in.Name, SourceListing, now)
		}
		if c.CreatedAt.IsZero() {
			c.CreatedAt, c.Attempt = in.CreatedAt, in.Attempt
		}
		s.listContainer(c, in.State, l.StartSeq, now, &r)
		touched[s.pods[c.PodUID]] = struct{}{}
	}
	for id, sb := range s.sandboxes {
		if _, ok := seenSandboxes[id]; ok || sb.State == SandboxRemoved || sb.seq > l.StartSeq {
			continue
		}
		// containerd reports RunPodSandbox over NRI before it adds the
		// sandbox to its store: a listing taken in between lacks it.
		if !sb.ReportedAt.IsZero() && !sb.Synced && sb.State == SandboxReady && !sb.StopSeen && now.Sub(sb.ReportedAt) < settleTime {
			continue
		}
		sb.Removal = RemovedByAbsence
		if sb.StopSeen && s.stored(sb) {
			// A stop of a sandbox never stored is a rolled-back start's
			// (its removal's event lost): no teardown.
			sb.Removal = RemovedAfterStop
		}
		s.setSandbox(sb, SandboxRemoved, now, false)
		r.Removed++
		touched[s.pods[sb.PodUID]] = struct{}{}
	}
	for id, c := range s.containers {
		if _, ok := seenContainers[id]; ok || c.State == ContainerRemoved || c.seq > l.StartSeq {
			continue
		}
		c.Removal = RemovedByAbsence
		s.setContainer(c, ContainerRemoved, now, false)
		r.Removed++
		touched[s.pods[c.PodUID]] = struct{}{}
	}
	for p := range touched {
		s.refreshPhase(p, now)
	}
	r.Forgotten = s.forget(now)
	return r
}

// listSandbox applies a listed state. Forward moves always apply; a backward
// move only corrects an event's claim, only from a listing newer than it, and
// only once the claim has had settleTime to show up in the runtime's listing.
func (s *State) listSandbox(sb *Sandbox, want SandboxState, startSeq uint64, now time.Time, r *ReconcileResult) {
	if want == SandboxNotReady {
		sb.StopSeen = true
	}
	switch {
	case sb.State == SandboxRemoved && sb.Removal != RemovedByEvent && sb.seq <= startSeq:
		// Removed because a listing lacked it; this newer listing has it.
		s.correctSandbox(sb, want, now, r)
	case want == sb.State:
		sb.fromEvent = false
	case want > sb.State:
		s.setSandbox(sb, want, now, false)
		r.Updated++
	case sb.fromEvent && sb.seq <= startSeq && now.Sub(sb.StateSince) >= settleTime:
		s.correctSandbox(sb, want, now, r)
	case !sb.fromEvent && sb.seq <= startSeq && want == SandboxReady && sb.State == SandboxNotReady:
		// An earlier listing's NotReady that this newer one says Ready
		// (a status containerd could not load, then could): no stop,
		// so one absence later is no teardown.
		s.correctSandbox(sb, want, now, r)
	}
}

// correctSandbox sets sb back to want, what a listing shows against an
// earlier claim. Shown Ready again, a stop seen before is void: the
// runtime never makes a stopped sandbox Ready, so the stop did not take
// (or the data that said so was wrong), and a later absence of a sandbox
// last listed Ready is one absence, no evidence of a teardown.
func (s *State) correctSandbox(sb *Sandbox, want SandboxState, now time.Time, r *ReconcileResult) {
	s.setSandbox(sb, want, now, false)
	if want == SandboxReady {
		sb.StopSeen = false
	}
	r.Updated++
	r.Corrected++
}

func (s *State) listContainer(c *Container, want ContainerState, startSeq uint64, now time.Time, r *ReconcileResult) {
	switch {
	case c.State == ContainerRemoved && c.Removal == RemovedByAbsence && c.seq <= startSeq:
		// Removed because a listing lacked it; this newer listing has it.
		s.setContainer(c, want, now, false)
		r.Updated++
		r.Corrected++
	case want == c.State:
		c.fromEvent = false
	case want.rank() >= c.State.rank():
		// Forward, or Running <-> Unknown which the runtime may report either way.
		s.setContainer(c, want, now, false)
		r.Updated++
	case c.fromEvent && c.seq <= startSeq && now.Sub(c.StateSince) >= settleTime:
		s.setContainer(c, want, now, false)
		r.Updated++
		r.Corrected++
	}
}

// advanceSandbox and advanceContainer apply an event's hint: forward only.
func (s *State) advanceSandbox(sb *Sandbox, to SandboxState, at time.Time) {
	if to > sb.State {
		s.setSandbox(sb, to, at, true)
	}
}

func (s *State) advanceContainer(c *Container, to ContainerState, at time.Time) {
	if to.rank() > c.State.rank() {
		s.setContainer(c, to, at, true)
	}
}

func (s *State) setSandbox(sb *Sandbox, to SandboxState, at time.Time, fromEvent bool) {
	sb.State, sb.StateSince, sb.seq, sb.fromEvent = to, at, s.seq, fromEvent
	sb.StoppedAt = stoppedAt(to, sb.StoppedAt, at)
}

// stoppedAt is what a sandbox's StoppedAt becomes when it moves to state
// to at time at, had being what it was.
func stoppedAt(to SandboxState, had, at time.Time) time.Time {
	switch {
	case to == SandboxReady:
		return time.Time{}
	case to == SandboxNotReady, had.IsZero():
		return at
	}
	return had
}

func (s *State) setContainer(c *Container, to ContainerState, at time.Time, fromEvent bool) {
	c.State, c.StateSince, c.seq, c.fromEvent = to, at, s.seq, fromEvent
}

// podFor returns the pod record for id, creating it. A pod known only by UID
// (e.g. from a container) gets its namespace and name filled in later.
func (s *State) podFor(id PodIdentity, src Source, at time.Time) *pod {
	p, ok := s.pods[id.UID]
	if !ok {
		p = &pod{id: id, source: src, firstSeen: at}
		s.pods[id.UID] = p
		return p
	}
	if p.source == SourceListing && src != SourceListing {
		p.source = src // NRI knows it now (a pass ran before Synchronize): no orphan
	}
	if p.id.Namespace == "" {
		p.id.Namespace = id.Namespace
	}
	if p.id.Name == "" {
		p.id.Name = id.Name
	}
	return p
}

func (s *State) sandboxFor(p *pod, id string, src Source, at time.Time) *Sandbox {
	if sb, ok := s.sandboxes[id]; ok {
		return sb
	}
	sb := &Sandbox{ID: id, PodUID: p.id.UID, State: SandboxReady, Source: src,
		FirstSeen: at, StateSince: at, seq: s.seq, fromEvent: src != SourceListing}
	s.sandboxes[id] = sb
	p.sandboxes = append(p.sandboxes, sb)
	return sb
}

func (s *State) containerFor(p *pod, sandboxID, id, name string, src Source, at time.Time) *Container {
	if c, ok := s.containers[id]; ok {
		if c.Name == "" {
			c.Name = name
		}
		return c
	}
	c := &Container{ID: id, SandboxID: sandboxID, PodUID: p.id.UID, Name: name, State: ContainerCreated,
		Source: src, FirstSeen: at, StateSince: at, seq: s.seq, fromEvent: src != SourceListing}
	s.containers[id] = c
	p.containers = append(p.containers, c)
	return c
}

// refreshPhase keeps removedSince current for the retention clock.
func (s *State) refreshPhase(p *pod, at time.Time) {
	if p == nil {
		return
	}
	if p.phase() == PhaseRemoved {
		if p.removedSince.IsZero() {
			p.removedSince = at
		}
	} else {
		p.removedSince = time.Time{}
	}
}

// forget drops pods Removed for longer than the retention, and Removed
// records of live pods after the same time, so memory stays bounded even for
// a pod whose container restarts for months.
func (s *State) forget(now time.Time) int {
	n := 0
	for uid, p := range s.pods {
		if !p.removedSince.IsZero() && now.Sub(p.removedSince) >= s.retention {
			for _, sb := range p.sandboxes {
				delete(s.sandboxes, sb.ID)
			}
			for _, c := range p.containers {
				delete(s.containers, c.ID)
			}
			delete(s.pods, uid)
			n++
			continue
		}
		p.sandboxes = s.pruneSandboxes(p.sandboxes, now)
		p.containers = s.pruneContainers(p.containers, now)
	}
	return n
}

func (s *State) pruneSandboxes(in []*Sandbox, now time.Time) []*Sandbox {
	out := in[:0]
	for _, sb := range in {
		if sb.State == SandboxRemoved && now.Sub(sb.StateSince) >= s.retention {
			delete(s.sandboxes, sb.ID)
			continue
		}
		out = append(out, sb)
	}
	return out
}

func (s *State) pruneContainers(in []*Container, now time.Time) []*Container {
	out := in[:0]
	for _, c := range in {
		if c.State == ContainerRemoved && now.Sub(c.StateSince) >= s.retention {
			if sb := s.sandboxes[c.SandboxID]; sb != nil && sb.PodUID == c.PodUID {
				sb.Stored = true // what the container showed outlives it (stored)
			}
			delete(s.containers, c.ID)
			continue
		}
		out = append(out, c)
	}
	return out
}

func (p *pod) phase() Phase {
	left, running := false, false
	for _, sb := range p.sandboxes {
		if sb.State == SandboxReady {
			return PhaseRunning
		}
		left = left || sb.State != SandboxRemoved
	}
	for _, c := range p.containers {
		running = running || c.State.mayHaveProcesses()
		left = left || c.State != ContainerRemoved
	}
	switch {
	case running:
		return PhaseTerminating
	case left:
		return PhaseTerminated
	}
	return PhaseRemoved
}

// View returns a consistent copy of the state.
func (s *State) View() View {
	s.mu.Lock()
	v := View{Seq: s.seq, Pods: make([]PodView, 0, len(s.pods))}
	for _, p := range s.pods {
		v.Pods = append(v.Pods, p.view())
	}
	s.mu.Unlock()
	sort.Slice(v.Pods, func(i, j int) bool {
		a, b := v.Pods[i], v.Pods[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.UID < b.UID
	})
	return v
}

// NRISandboxes returns every sandbox NRI reported (RunPodSandbox,
// Synchronize) that is not Removed, with whether NRI holds it live and the
// session that reported it: what a listing of the same runtime must agree
// with.
func (s *State) NRISandboxes() []NRISandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []NRISandbox
	for _, sb := range s.sandboxes {
		if sb.ReportedAt.IsZero() || sb.State == SandboxRemoved {
			continue
		}
		out = append(out, NRISandbox{ID: sb.ID, PodUID: sb.PodUID, ReportedAt: sb.ReportedAt, Synced: sb.Synced,
			Session: sb.Session, Live: sb.State == SandboxReady && !sb.StopSeen})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// MarkGone records that the runtime, asked by ID, does not know these
// sandboxes: containerd dropped their NRI stop and removal (it does for the
// pods it had before a restart). They are Removed without evidence of a
// teardown, as by an absence from a listing.
func (s *State) MarkGone(ids []string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	for _, id := range ids {
		sb, ok := s.sandboxes[id]
		if !ok || sb.State == SandboxRemoved {
			continue
		}
		sb.Removal = RemovedByAbsence
		s.setSandbox(sb, SandboxRemoved, at, false)
		s.refreshPhase(s.pods[sb.PodUID], at)
	}
}

// Forget drops the pods Removed for longer than the retention, as a
// Reconcile does. A pass whose listing failed or is not trusted reconciles
// nothing, and must still forget, or the state would grow for as long as
// that lasts.
func (s *State) Forget(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forget(now)
}

// Pod returns a copy of one pod, if known.
func (s *State) Pod(uid string) (PodView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[uid]
	if !ok {
		return PodView{}, false
	}
	return p.view(), true
}

// tornDown reports whether sandboxes, all Removed, show a teardown: at least
// one removed with evidence, and every other one too, but for a start rolled
// back before a sandbox with evidence was first seen (an earlier attempt
// kubelet retried). A rollback after that is kubelet setting the pod up
// again: no teardown.
func tornDown(sandboxes []*Sandbox) bool {
	var firstEvidenced time.Time // the latest first sight of a sandbox removed with evidence
	for _, sb := range sandboxes {
		if sb.Removal.Evidence() && sb.FirstSeen.After(firstEvidenced) {
			firstEvidenced = sb.FirstSeen
		}
	}
	if firstEvidenced.IsZero() {
		return false
	}
	for _, sb := range sandboxes {
		switch {
		case sb.Removal.Evidence():
		case sb.Removal == RemovedByRollback && sb.StateSince.Before(firstEvidenced):
		default:
			return false
		}
	}
	return true
}

func (p *pod) view() PodView {
	pv := PodView{
		UID: p.id.UID, Namespace: p.id.Namespace, Name: p.id.Name,
		Phase: p.phase(), Orphan: p.source == SourceListing,
		FirstSeen: p.firstSeen, LastLifeEvent: p.lastLifeEvent, RemovedSince: p.removedSince,
		Sandboxes:  make([]Sandbox, len(p.sandboxes)),
		Containers: make([]Container, len(p.containers)),
	}
	for i, sb := range p.sandboxes {
		pv.Sandboxes[i] = *sb
	}
	pv.TornDown = pv.Phase == PhaseRemoved && tornDown(p.sandboxes)

	for i, c := range p.containers {
		pv.Containers[i] = *c
	}
	return pv
}
