// Package podstate keeps the plugin's own picture of every kubelet-managed pod,
// sandbox and container on the node. It does no I/O.
//
// Records are derived, not stored phases: a sandbox moves Ready → NotReady →
// Removed, a container Created → Running → Exited → Removed, and a pod's phase
// is computed from its records every time it is read. NRI events are fast
// hints; a CRI listing is the truth. Stale data never moves a record back: an
// event never does, and a listing only corrects what an event claimed when
// the listing started after that event (see Reconcile).
package podstate

import "time"

// SandboxState is the lifecycle of a pod sandbox.
type SandboxState uint8

const (
	SandboxReady SandboxState = iota
	SandboxNotReady
	SandboxRemoved
)

func (s SandboxState) String() string {
	switch s {
	case SandboxReady:
		return "Ready"
	case SandboxNotReady:
		return "NotReady"
	case SandboxRemoved:
		return "Removed"
	}
	return "Invalid"
}

// ContainerState is the lifecycle of a container.
type ContainerState uint8

const (
	ContainerCreated ContainerState = iota
	ContainerRunning
	// ContainerUnknown is what the runtime reports when it cannot tell, e.g.
	// for a container whose task could not be loaded after a restart. It may
	// still have processes, so it counts as running for the pod's phase.
	ContainerUnknown
	ContainerExited
	ContainerRemoved
)

func (s ContainerState) String() string {
	switch s {
	case ContainerCreated:
		return "Created"
	case ContainerRunning:
		return "Running"
	case ContainerUnknown:
		return "Unknown"
	case ContainerExited:
		return "Exited"
	case ContainerRemoved:
		return "Removed"
	}
	return "Invalid"
}

// rank orders container states; Running and Unknown share a rank so the
// runtime may move a container between them.
func (s ContainerState) rank() int {
	switch s {
	case ContainerCreated:
		return 0
	case ContainerRunning, ContainerUnknown:
		return 1
	case ContainerExited:
		return 2
	default:
		return 3
	}
}

// mayHaveProcesses reports whether a container in this state can still run.
func (s ContainerState) mayHaveProcesses() bool {
	return s == ContainerRunning || s == ContainerUnknown
}

// Phase is a pod's phase, derived from its sandboxes and containers.
type Phase uint8

const (
	// PhaseRunning: a sandbox is Ready.
	PhaseRunning Phase = iota
	// PhaseTerminating: no Ready sandbox, but a container may still run.
	PhaseTerminating
	// PhaseTerminated: nothing runs, but a sandbox or container is left.
	PhaseTerminated
	// PhaseRemoved: nothing is left; the pod is forgotten after the retention.
	PhaseRemoved
)

// Phases lists every phase, for callers that report counts per phase.
var Phases = [...]Phase{PhaseRunning, PhaseTerminating, PhaseTerminated, PhaseRemoved}

func (p Phase) String() string {
	switch p {
	case PhaseRunning:
		return "Running"
	case PhaseTerminating:
		return "Terminating"
	case PhaseTerminated:
		return "Terminated"
	case PhaseRemoved:
		return "Removed"
	}
	return "Invalid"
}

// Source says how a record was first learned.
type Source uint8

const (
	// SourceEvent: from a lifecycle event (RunPodSandbox, PostCreateContainer, ...).
	SourceEvent Source = iota
	// SourceSync: from NRI Synchronize after a (re)connect.
	SourceSync
	// SourceListing: from a CRI listing only. Such records are orphans: the
	// runtime has them, but no NRI message ever told us about them.
	SourceListing
)

func (s Source) String() string {
	switch s {
	case SourceEvent:
		return "event"
	case SourceSync:
		return "sync"
	case SourceListing:
		return "listing"
	}
	return "invalid"
}

// Removal is the evidence behind a Removed record.
type Removal uint8

const (
	// RemovedByAbsence: missing from a listing, nothing more. No evidence
	// of a teardown (containerd lists a sandbox only after NRI's
	// RunPodSandbox, and drops NRI events after it restarts): a later
	// listing or Synchronize that shows the object brings the record back.
	RemovedByAbsence Removal = iota
	// RemovedByEvent: NRI reported the removal (RemovePodSandbox,
	// RemoveContainer).
	RemovedByEvent
	// RemovedAfterStop: seen stopped (an NRI StopPodSandbox, or a listing
	// that showed the sandbox NotReady), then missing from a later listing:
	// a teardown seen across listings.
	RemovedAfterStop
	// RemovedByRollback: an NRI RemovePodSandbox of a sandbox never seen in
	// containerd's store (never listed, never synchronized, no container
	// made in it): most likely containerd's rollback of a RunPodSandbox
	// that failed, which kubelet retries. containerd (v2.4.2) rolls back
	// with a RemovePodSandbox alone when the start fails after NRI's hook
	// (sandbox_run.go), and with a StopPodSandbox then a RemovePodSandbox
	// when a plugin failed the hook (internal/cri/nri RunPodSandbox): a
	// stop seen proves nothing either. The sandbox never reached the
	// store, so no listing, Synchronize or container ever shows it. No
	// evidence; the cost is that a sandbox started and removed between two
	// listings with no container made is no teardown either.
	RemovedByRollback
)

func (r Removal) String() string {
	switch r {
	case RemovedByAbsence:
		return "absent from a listing"
	case RemovedByEvent:
		return "removed (NRI event)"
	case RemovedAfterStop:
		return "stopped, then absent from a listing"
	case RemovedByRollback:
		return "removed (NRI event), never seen in the runtime's store: a RunPodSandbox that failed and was rolled back"
	}
	return "invalid"
}

// Evidence reports whether the removal is evidence of a teardown: an NRI
// removal, or a stop then a removal seen across listings. One absence never
// is.
func (r Removal) Evidence() bool { return r == RemovedByEvent || r == RemovedAfterStop }

// Sandbox is the record of one pod sandbox.
type Sandbox struct {
	ID     string
	PodUID string
	// Attempt is the CRI metadata attempt; 0 until a listing reports it.
	Attempt uint32
	State   SandboxState
	Source  Source
	// CreatedAt is the runtime's creation time; zero until a listing reports it.
	CreatedAt time.Time
	FirstSeen time.Time
	// StateSince is when State was first observed.
	StateSince time.Time
	// StoppedAt is when the sandbox was seen to leave Ready, kept once it
	// is Removed (a Removed sandbox's StateSince is its removal); its
	// removal when it was never seen NotReady, zero while it is Ready.
	StoppedAt time.Time
	// ReportedAt is when NRI last reported the sandbox (RunPodSandbox or
	// Synchronize); zero if NRI never did (learned from a listing only).
	ReportedAt time.Time
	// Synced: the last report was a Synchronize, which lists what
	// containerd has stored; a RunPodSandbox comes before the store has it.
	Synced bool
	// Session is the NRI session (State.Syncs) of the last report.
	Session uint64
	// Stored: a listing or a Synchronize showed the sandbox, both of which
	// read containerd's sandbox store. A sandbox that a start rolled back
	// never reaches it (RemovedByRollback); one a container was made in
	// did (State.stored).
	Stored bool
	// StopSeen: an NRI StopPodSandbox arrived, or a listing showed the
	// sandbox NotReady; until a listing corrects the sandbox back to Ready
	// (see Reconcile).
	StopSeen bool
	// Removal is the evidence of the removal; meaningful when State is
	// SandboxRemoved.
	Removal Removal

	seq       uint64 // Seq of the last change, to tell stale listings apart
	fromEvent bool   // State was last set by an event (a hint a listing may correct)
}

// Container is the record of one container.
type Container struct {
	ID        string
	SandboxID string
	PodUID    string
	Name      string
	Attempt   uint32
	State     ContainerState
	Source    Source
	CreatedAt time.Time
	FirstSeen time.Time
	// StateSince is when State was first observed.
	StateSince time.Time
	// Removal is the evidence of the removal; meaningful when State is
	// ContainerRemoved.
	Removal Removal

	seq       uint64
	fromEvent bool
}

// PodView is a read-only copy of one pod with its derived phase.
type PodView struct {
	UID       string
	Namespace string
	Name      string
	Phase     Phase
	// Orphan: the pod was first learned from a CRI listing, not from NRI.
	Orphan    bool
	FirstSeen time.Time
	// LastLifeEvent is the last RunPodSandbox or PostStartContainer seen, or
	// the removal of a start rolled back (RemovedByRollback: a start too).
	LastLifeEvent time.Time
	// RemovedSince is when the phase became Removed (zero otherwise).
	RemovedSince time.Time
	// TornDown: the phase is Removed and every sandbox of the pod was
	// removed with evidence of a teardown (Removal.Evidence), never by one
	// absence from a listing; but for a start rolled back before a sandbox
	// removed with evidence was first seen (an attempt kubelet retried).
	TornDown   bool
	Sandboxes  []Sandbox
	Containers []Container
}

// View is a consistent copy of the whole state, safe to read without locks.
type View struct {
	Seq  uint64
	Pods []PodView // sorted by namespace, name, UID
}

// NRISandbox is a sandbox as NRI told of it, for checking a listing against
// what NRI says (see State.NRISandboxes).
type NRISandbox struct {
	ID     string
	PodUID string
	// ReportedAt is when NRI last reported it (RunPodSandbox, Synchronize).
	ReportedAt time.Time
	// Synced: reported by Synchronize, from containerd's store; a sandbox
	// reported by RunPodSandbox may not be stored yet for a little while.
	Synced bool
	// Session is the NRI session (State.Syncs) that last reported it: only
	// the current session's reports say what the runtime NRI talks to has.
	Session uint64
	// Live: reported Ready, with no NRI stop or removal since and no
	// listing that showed it NotReady: the runtime must list it.
	Live bool
}

// Counts summarises a View.
type Counts struct {
	Pods       int
	ByPhase    [len(Phases)]int
	Orphans    int
	Sandboxes  int // not Removed
	Containers int // not Removed
}

// Counts returns the number of pods per phase and of live records.
func (v View) Counts() Counts {
	var c Counts
	for _, p := range v.Pods {
		c.Pods++
		c.ByPhase[p.Phase]++
		if p.Orphan {
			c.Orphans++
		}
		for _, s := range p.Sandboxes {
			if s.State != SandboxRemoved {
				c.Sandboxes++
			}
		}
		for _, ct := range p.Containers {
			if ct.State != ContainerRemoved {
				c.Containers++
			}
		}
	}
	return c
}
