package housekeeping

import (
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// ListingStats counts what ToListing left out.
type ListingStats struct {
	Unmanaged int // objects without kubelet's pod labels: never managed
	Malformed int // entries the runtime listed but that could not be read
}

// ToListing turns a CRI snapshot into the podstate listing of managed
// objects. startSeq is podstate's Seq() read before the snapshot was taken.
func ToListing(startSeq uint64, snap cri.Snapshot) (podstate.Listing, ListingStats) {
	l := podstate.Listing{
		StartSeq:   startSeq,
		Sandboxes:  make([]podstate.ListedSandbox, 0, len(snap.Sandboxes)),
		Containers: make([]podstate.ListedContainer, 0, len(snap.Containers)),
	}
	var st ListingStats
	for _, m := range snap.Malformed {
		st.Malformed++
		if m.ID != "" {
			l.Unreadable = append(l.Unreadable, m.ID)
		}
	}
	for _, s := range snap.Sandboxes {
		id, ok := podstate.KubeletPod(s.Labels)
		if !ok {
			st.Unmanaged++
			continue
		}
		l.Sandboxes = append(l.Sandboxes, podstate.ListedSandbox{
			Pod: id, ID: s.ID, Attempt: s.Attempt, Ready: s.Ready, CreatedAt: s.CreatedAt,
		})
	}
	for _, c := range snap.Containers {
		id, ok := podstate.KubeletPod(c.Labels)
		if !ok {
			st.Unmanaged++
			continue
		}
		l.Containers = append(l.Containers, podstate.ListedContainer{
			Pod: id, ID: c.ID, SandboxID: c.SandboxID, Name: c.Name, Attempt: c.Attempt,
			State: containerState(c.State), CreatedAt: c.CreatedAt,
		})
	}
	return l, st
}

func containerState(s cri.ContainerState) podstate.ContainerState {
	switch s {
	case cri.ContainerCreated:
		return podstate.ContainerCreated
	case cri.ContainerRunning:
		return podstate.ContainerRunning
	case cri.ContainerExited:
		return podstate.ContainerExited
	}
	return podstate.ContainerUnknown
}
