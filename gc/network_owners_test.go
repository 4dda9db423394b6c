package gc

import (
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// networkStepKeys are a plan's network steps, due or not.
func networkStepKeys(r Result) []string {
	var keys []string
	for _, a := range append(append([]Action(nil), r.Actions...), deferredActions(r)...) {
		switch a.Kind {
		case RemoveCNIAttachment, ReleaseIPReservation, RemoveNetns:
			keys = append(keys, a.Key)
		}
	}
	return keys
}

// TestAnAttachmentInANetnsContainerdDidNotNameIsKept: with both runtimes'
// defaults, CRI-O pins a pod's namespace at /var/run/netns/<uuid>
// (namespaces_dir "/var/run", nsmgr: <dir>/netns/<uuid>) and containerd
// mounts its own at /var/run/netns/cni-<uuid>. A live CRI-O pod's
// attachment, which no containerd source knows, must not be deleted: its
// namespace is not named the way containerd names its own.
func TestAnAttachmentInANetnsContainerdDidNotNameIsKept(t *testing.T) {
	in := networkInput()
	in.Network.NetnsDir = "/var/run/netns"
	crio := attachment("crio1", "/var/run/netns/0e3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a3b")
	in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, crio)
	r := Plan(in)
	for _, k := range networkStepKeys(r) {
		if strings.HasPrefix(k, "cni-attachment/pods/crio1/") {
			t.Fatalf("CRI-O's attachment (netns %s, not named cni-<uuid>) is proposed for CNI DEL: %s", crio.NetNS, k)
		}
	}
}

// TestAnAttachmentWhoseNetnsAThreadIsInIsKept: a namespace a thread is in
// is never removed (network.netns-unused), and neither is the attachment
// that ran in it: its DEL would take the interface out of, and the IP from,
// whatever still runs in there (a pod whose record containerd lost). A
// thread in the namespace is an independent source that it is in use.
func TestAnAttachmentWhoseNetnsAThreadIsInIsKept(t *testing.T) {
	in := networkInput()
	busy := netnsDir + "/" + cniName("busy")
	in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", busy))
	in.Network.Listing.Netns = append(in.Network.Listing.Netns, podnet.Netns{Path: busy, Inode: 4026532999, InUse: true})
	r := Plan(in)
	for _, k := range networkStepKeys(r) {
		if strings.HasPrefix(k, "cni-attachment/pods/gone1/") {
			t.Fatalf("the attachment that ran in %s, which a thread is in, is proposed for CNI DEL: %s", busy, k)
		}
	}
}

// TestAReservationsGraceStartsAgainWithANewOwner: a reservation's grace
// clock is the owner's, not the IP's. When host-local gives an IP proposed
// for A to B, whom no source knows yet at the next pass (containerd 1.7
// lists a sandbox only after its ADD; another runtime's pod), B's
// reservation must wait its own leak_grace, not inherit A's clock and be
// due at once.
func TestAReservationsGraceStartsAgainWithANewOwner(t *testing.T) {
	const grace = 10 * time.Minute
	in := networkInput()
	in.Policy.LeakGrace = grace
	in.Now = now.Add(-2 * grace)
	in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gonea", "10.0.0.3"))
	first := Plan(in)
	clocks := 0
	for k := range first.EligibleSince {
		if strings.HasPrefix(k, "ip-reservation/pods/10.0.0.3") {
			clocks++
		}
	}
	if clocks != 1 {
		t.Fatalf("first plan: %d clocks for the reservation of 10.0.0.3, want 1: %v", clocks, first.EligibleSince)
	}

	in = networkInput()
	in.Policy.LeakGrace = grace
	in.EligibleSince = first.EligibleSince
	in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("newb", "10.0.0.3"))
	second := Plan(in)
	for _, a := range second.Actions {
		if a.Kind == ReleaseIPReservation && a.Reservation != nil && a.Reservation.IP == "10.0.0.3" {
			t.Fatalf("the reservation of 10.0.0.3 for newb, first seen in this plan, is due at once (eligible since %s, A's clock): it never waited leak_grace (%s)",
				a.EligibleSince.Format(time.RFC3339), grace)
		}
	}
}

// TestANetworkWithAnAttachmentInANetnsContainerdDidNotNameGetsNoReservationReleased:
// an attachment whose namespace is in containerd's netns dir but not named
// as containerd names its own (CRI-O's /var/run/netns/<uuid>) is another
// runtime's: the network is shared with it, and a reservation of that
// network whose owner no containerd source knows may be that runtime's pod
// being made (host-local has reserved, libcni has not cached yet), so none
// is released by hand (README: "a network such an attachment is on gets no
// reservation released by hand").
func TestANetworkWithAnAttachmentInANetnsContainerdDidNotNameGetsNoReservationReleased(t *testing.T) {
	in := networkInput()
	in.Network.NetnsDir = "/var/run/netns"
	// containerd's own live pod, in containerd's dir.
	live := "/var/run/netns/" + cniName("live")
	in.Network.Listing.Attachments[0].NetNS = live
	in.Network.Listing.Netns[0].Path = live
	in.Network.Records.Sandboxes["s1"] = cri.SandboxRecord{Namespace: "k8s.io", NetNSPath: live}
	crio := attachment("crio1", "/var/run/netns/0e3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a3b")
	in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, crio)
	// Another CRI-O pod, its ADD under way: reserved, not cached.
	in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("crio2", "10.0.0.9"))
	r := Plan(in)
	for _, k := range networkStepKeys(r) {
		if strings.HasPrefix(k, "ip-reservation/pods/10.0.0.9/") {
			t.Fatalf("network pods has CRI-O's attachment (netns %s, not named cni-<uuid>), yet a reservation no containerd source knows is proposed for release: %s", crio.NetNS, k)
		}
	}
}
