package gc

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// NetworkInput is the network side of a plan (network.enabled): the CNI
// attachments, host-local reservations and network namespaces of the
// networks containerd uses, and containerd's own records of who may own them.
type NetworkInput struct {
	// Listing was read before the CRI listing and before Records: an
	// attachment is made (CNI ADD) only after its sandbox's record is in
	// containerd's sandbox store, so an attachment whose owner no later
	// listing knows is not one being made.
	Listing podnet.Listing
	// Records are containerd's sandbox store (every namespace) and container
	// store (every namespace but CRI's), read after Listing. They are read
	// only when NetworkSuspects finds a suspect without them: a source only
	// ever makes owners known, so without suspects they change no plan.
	// Listing.Netns holds what InspectNetns read of the suspect namespaces
	// (NetworkSuspects with Records): the others are explained.
	Records cri.Records
	// NetnsDir is where this containerd mounts sandbox network namespaces.
	// An attachment that ran in a namespace elsewhere is not this
	// containerd's (CRI-O, podman or a second containerd on the same
	// network): it is never deleted, and its network's reservations are
	// never released by hand.
	NetnsDir string
	// NetnsUnseen, when not "", says why this process may not see the
	// namespaces containerd mounts (podnet.NetnsMountsUnseen): one that is
	// not mounted here is not known to be gone, and an unowned attachment
	// that ran in it is kept (its DEL would read no thread there).
	NetnsUnseen string
}

// tooYoung says why an object whose file dates from modTime is kept this
// pass, or "" when it is old enough (Policy.NetworkMinAge). containerd
// makes a sandbox's netns before its sandbox record names it, and a runtime
// this process cannot see reserves an IP before its cache entry names the
// owner: a short leak_grace (once --leak-grace 0s) would otherwise reach an
// object being set up in that moment, which a slow disk can stretch to
// seconds. A time after now (a clock set back) is too young: its age
// cannot be told.
func (p *planner) tooYoung(modTime time.Time) string {
	min := p.in.Policy.NetworkMinAge
	if modTime.IsZero() || min <= 0 { // 0: no floor, only leak_grace
		return ""
	}
	switch age := p.in.Now.Sub(modTime); {
	case age < 0:
		return fmt.Sprintf("dated %s ahead of the clock (a clock set back?): its age cannot be told, and network.min_age (%s) counts from its time",
			(-age).Round(time.Second), min)
	case age < min:
		return fmt.Sprintf("made %s ago, less than network.min_age (%s): it may be a sandbox's being set up (nothing names it yet); looked at again once older, whatever leak_grace says",
			age.Round(time.Second), min)
	}
	return ""
}

// networkRules proposes the reclaim of the network's leaks. An owner (a
// container ID in a cache entry or a reservation) is valid when any source
// knows it: the CRI listing (sandboxes and containers, in any state, and the
// IDs of unreadable entries), every sandbox NRI reported that podstate still
// holds, containerd's sandbox and container stores, and an unreadable cache
// entry naming it. Only what every source lacks is a leak.
func (p *planner) networkRules() {
	n := p.in.Network
	if n == nil {
		return
	}
	valid := p.validOwners()
	// hold says why nothing of the network may be reclaimed this pass.
	hold := ""
	for _, m := range p.in.Unreadable {
		if m.ID == "" {
			// It could be any sandbox: nothing can be called unowned.
			hold = fmt.Sprintf("the runtime listed a %s that could not be read and names no ID: it may be the owner", m.Kind)
		}
	}
	// A cache entry holds its owner's reservation on its network: the DEL
	// releases it. An unreadable one holds its owner's reservations on
	// every network, and one whose owner cannot be told holds every
	// reservation. cacheOwners is keyed by network and owner, with network
	// "*" for an unreadable entry.
	type cacheOwner struct{ network, owner string }
	cacheOwners := make(map[cacheOwner]bool, len(n.Listing.Attachments))
	unknownCache := ""
	for _, u := range n.Listing.Unreadable {
		switch {
		case u.Owner != "" && u.Kind == podnet.KindAttachment:
			cacheOwners[cacheOwner{"*", u.Owner}] = true
		case u.Owner == "" && u.Kind == podnet.KindAttachment:
			unknownCache = u.Path
		}
	}
	// Another runtime on a network shows in the namespaces its
	// attachments ran in. Only a reservation no attachment explains asks,
	// so the map is made when one first does.
	var foreign map[string]string // network → a netns containerd did not make, quoted
	foreignNetns := func(network string) string {
		if foreign == nil {
			foreign = make(map[string]string)
			for _, a := range n.Listing.Attachments {
				if !containerdsNetns(a.NetNS, n.NetnsDir) {
					foreign[a.Network] = fmt.Sprintf("%q", a.NetNS)
				}
			}
		}
		return foreign[network]
	}
	// Attachments: a CNI DEL through the whole chain for each unowned one.
	netnsDeps := make(map[string][]string) // netns path → DEL keys of its unowned attachments
	netnsOwner := make(map[string]string)  // netns path → the owner of an unowned attachment that ran in it
	validNetns := make(map[string]bool)
	netnsInUse := make(map[string]bool)
	for _, ns := range n.Listing.Netns {
		if ns.InUse {
			netnsInUse[ns.Path] = true
		}
	}
	// A namespace InspectNetns could not read may have a thread in it:
	// nothing that ran there is deleted ("cannot tell" is not "unused").
	netnsUnknown := make(map[string]string)
	for _, u := range n.Listing.Unreadable {
		if u.Kind == podnet.KindNetns {
			netnsUnknown[u.Path] = u.Reason
		}
	}
	// The namespaces of known sandboxes: their records', and those their
	// owners' attachments ran in. A DEL of another attachment there would
	// undo an interface of a sandbox that still exists.
	recorded := make(map[string]bool, len(n.Records.Sandboxes))
	for _, s := range n.Records.Sandboxes {
		if s.NetNSPath != "" {
			recorded[s.NetNSPath] = true
		}
	}
	for _, a := range n.Listing.Attachments {
		if valid[a.ContainerID] && a.NetNS != "" {
			validNetns[a.NetNS] = true
		}
	}
	// The namespaces seen mounted here (InspectNetns): only another one
	// may not be seen (NetnsUnseen).
	mountedHere := make(map[string]bool, len(n.Listing.Netns))
	for _, ns := range n.Listing.Netns {
		mountedHere[ns.Path] = true
	}
	keptAttachment := make(map[string]string) // netns path → the owner of an unowned attachment kept there (too young, its address taken)
	for i := range n.Listing.Attachments {
		a := &n.Listing.Attachments[i]
		cacheOwners[cacheOwner{a.Network, a.ContainerID}] = true
		if valid[a.ContainerID] {
			continue
		}
		object := fmt.Sprintf("cni attachment %s of %s (network %s)", a.IfName, short(a.ContainerID), a.Network)
		untold, netnsUntold := netnsUnknown[a.NetNS]
		switch {
		case hold != "":
			p.keep(object, PodRef{}, "%s", hold)
			continue
		case !containerdsNetns(a.NetNS, n.NetnsDir):
			// CRI-O's default is the same dir, with names of its own.
			p.keep(object, PodRef{}, "it ran in netns %q, not one containerd makes (cni-<uuid> in %s): another runtime's attachment", a.NetNS, n.NetnsDir)
			continue
		case netnsInUse[a.NetNS]:
			p.keep(object, PodRef{}, "a thread is in its netns %s: something still runs there", a.NetNS)
			continue
		case netnsUntold:
			p.keep(object, PodRef{}, "whether a thread is in its netns %s cannot be told: %s", a.NetNS, untold)
			continue
		case recorded[a.NetNS] || validNetns[a.NetNS]:
			p.keep(object, PodRef{}, "its netns %s is that of a sandbox containerd, CRI or NRI knows: a DEL there would undo that sandbox's interface", a.NetNS)
			continue
		case a.NetNS != "" && n.NetnsUnseen != "" && !mountedHere[a.NetNS]:
			p.netnsUnseenKept++
			p.keep(object, PodRef{}, "its netns %s is not mounted as seen from here, which does not tell that it is gone: %s", a.NetNS, n.NetnsUnseen)
			continue
		case p.tooYoung(a.ModTime) != "":
			p.keep(object, PodRef{}, "its cache entry was %s", p.tooYoung(a.ModTime))
			if a.NetNS != "" {
				keptAttachment[a.NetNS] = a.ContainerID
			}
			continue
		case addressTaken(a, n.Listing.Attachments, valid) != "":
			// Its netns stays too: nothing of the sandbox is reclaimed
			// while its DEL would act on another pod's address.
			p.keep(object, PodRef{}, "%s", addressTaken(a, n.Listing.Attachments, valid))
			if a.NetNS != "" {
				keptAttachment[a.NetNS] = a.ContainerID
			}
			continue
		}
		key := fmt.Sprintf("cni-attachment/%s/%s/%s", a.Network, a.ContainerID, a.IfName)
		if a.NetNS != "" {
			netnsDeps[a.NetNS] = append(netnsDeps[a.NetNS], key)
			if o := netnsOwner[a.NetNS]; o == "" || a.ContainerID < o {
				netnsOwner[a.NetNS] = a.ContainerID
			}
		}
		p.leaks[LeakCNIAttachment]++
		p.propose(Action{Kind: RemoveCNIAttachment, Rule: RuleNetworkAttachment, Key: key, ContainerID: a.ContainerID, Path: a.CacheFile, Attachment: a,
			Reason: fmt.Sprintf("CNI attachment %s of %s on network %s, which no sandbox or container of containerd (any namespace), CRI or NRI knows",
				a.IfName, short(a.ContainerID), a.Network)})
	}
	// Reservations with no cache entry: released under host-local's lock.
	for i := range n.Listing.Reservations {
		r := &n.Listing.Reservations[i]
		switch {
		case valid[r.Owner]:
			continue
		case cacheOwners[cacheOwner{r.Network, r.Owner}], cacheOwners[cacheOwner{"*", r.Owner}]:
			continue // its attachment's DEL releases it through the IPAM plugin
		}
		object := fmt.Sprintf("ip reservation %s (network %s)", r.IP, r.Network)
		switch {
		case hold != "":
			p.keep(object, PodRef{}, "%s", hold)
			continue
		case foreignNetns(r.Network) != "":
			p.keep(object, PodRef{}, "an attachment of network %s ran in netns %s, not one containerd makes: another runtime may use the network", r.Network, foreignNetns(r.Network))
			continue
		case unknownCache != "":
			p.keep(object, PodRef{}, "CNI cache entry %s cannot be read and may be its attachment", unknownCache)
			continue
		case p.tooYoung(r.ModTime) != "":
			p.keep(object, PodRef{}, "it was %s", p.tooYoung(r.ModTime))
			continue
		}
		p.leaks[LeakIPReservation]++
		p.propose(Action{Kind: ReleaseIPReservation, Rule: RuleNetworkReservation, Key: "ip-reservation/" + r.Network + "/" + r.IP + "/" + r.Owner,
			ContainerID: r.Owner, Path: r.Path, Reservation: r,
			Reason: fmt.Sprintf("host-local reservation of %s on network %s for %s, which no sandbox or container knows and no CNI cache entry names",
				r.IP, r.Network, short(r.Owner))})
	}
	// Network namespaces containerd made that nothing uses.
	for i := range n.Listing.Netns {
		ns := &n.Listing.Netns[i]
		if ns.InUse || recorded[ns.Path] || validNetns[ns.Path] {
			continue
		}
		object := "network namespace " + ns.Path
		switch {
		case hold != "":
			p.keep(object, PodRef{}, "%s", hold)
			continue
		case len(n.Records.Unreadable) > 0:
			p.keep(object, PodRef{}, "containerd has %d sandbox record(s) whose netns cannot be read (%s)", len(n.Records.Unreadable), n.Records.Unreadable[0])
			continue
		case p.tooYoung(ns.ModTime) != "":
			p.keep(object, PodRef{}, "it was %s", p.tooYoung(ns.ModTime))
			continue
		case keptAttachment[ns.Path] != "":
			p.keep(object, PodRef{}, "the unowned CNI attachment of %s that ran in it is kept (see its reason), and its DEL must come first", short(keptAttachment[ns.Path]))
			continue
		}
		p.leaks[LeakNetns]++
		p.propose(Action{Kind: RemoveNetns, Rule: RuleNetworkNetns, Key: "netns/" + ns.Path, Path: ns.Path, Netns: ns,
			ContainerID: netnsOwner[ns.Path], DependsOn: netnsDeps[ns.Path],
			Reason: "network namespace containerd made that no sandbox record names and no process is in"})
	}
}

// addressTaken says why a's DEL would act on another pod's address ("" when
// it would not): an attachment of a known sandbox (valid), or a newer one
// of another, has an address of a's cached result, which the DEL passes on
// as prevResult (the firewall plugin removes the rules of every address in
// it). An IPAM that freed the address gave it to that pod after a's ADD; a
// pod with a fixed IP gets it again in each new sandbox. Of two stale
// attachments sharing an address, the newer is reclaimed first
// (podnet.Newer), then the older: a stale owner never comes back (container
// IDs are never reused), and the DEL's own check refuses a newer one made
// since.
func addressTaken(a *podnet.Attachment, all []podnet.Attachment, valid map[string]bool) string {
	for i := range all {
		b := &all[i]
		if b.ContainerID == a.ContainerID || !valid[b.ContainerID] && !podnet.Newer(*b, *a) {
			continue
		}
		if ip := podnet.SharedAddress(*a, *b); ip != "" {
			whose := "newer attachment of " + short(b.ContainerID)
			if valid[b.ContainerID] {
				whose = "attachment of " + short(b.ContainerID) + ", a sandbox containerd, CRI or NRI knows,"
			}
			return fmt.Sprintf("%s, an address of its cached result, is in the result of the %s on network %s: its DEL would pass it on and act on that pod's address",
				ip, whose, b.Network)
		}
	}
	return ""
}

// containerdsNetns reports whether path is a namespace as containerd makes
// them: named cni-<uuid>, directly in its netns dir. An attachment that ran
// anywhere else is another runtime's (CRI-O pins /var/run/netns/<uuid>, the
// same dir without the "cni-"), and so is its network.
func containerdsNetns(path, netnsDir string) bool {
	return directlyIn(path, netnsDir) && podnet.IsNetnsName(filepath.Base(path))
}

// NetworkSuspects returns what of in.Network may be a leak, given the
// sources in hand (in.Network.Records as read, possibly none): owners is
// true when some attachment or reservation names an owner no source knows,
// and netns lists the NetnsPaths that neither a sandbox record nor an
// attachment of a known owner names, and those an attachment of an unknown
// owner ran in, in Listing order. Only those are worth
// reading more about: containerd's records (the sandbox store's full
// records), and for a namespace whether it is mounted and whether a thread
// is in it (the mount table and every thread on the node). The rules then
// judge exactly as if everything had been read: more sources only make more
// owners known, and a namespace outside netns is explained without its
// details. It is a superset of what networkRules may propose.
func NetworkSuspects(in Input) (owners bool, netns []string) {
	n := in.Network
	if n == nil {
		return false, nil
	}
	p := &planner{in: in}
	valid := p.validOwners()
	explained := make(map[string]bool, len(n.Listing.Attachments)+len(n.Records.Sandboxes))
	// The namespace of an attachment no source knows: a thread in it
	// keeps the attachment, whoever else names the namespace.
	unowned := make(map[string]bool)
	for _, a := range n.Listing.Attachments {
		switch {
		case !valid[a.ContainerID]:
			owners = true
			if a.NetNS != "" {
				unowned[a.NetNS] = true
			}
		case a.NetNS != "":
			explained[a.NetNS] = true
		}
	}
	for _, r := range n.Listing.Reservations {
		if !valid[r.Owner] {
			owners = true
		}
	}
	for _, s := range n.Records.Sandboxes {
		if s.NetNSPath != "" {
			explained[s.NetNSPath] = true
		}
	}
	for _, path := range n.Listing.NetnsPaths {
		if !explained[path] || unowned[path] {
			netns = append(netns, path)
		}
	}
	return owners, netns
}

// validOwners are the IDs any source knows (see networkRules), the owners
// unreadable network objects name among them.
func (p *planner) validOwners() map[string]bool {
	n := p.in.Network
	valid := make(map[string]bool, len(p.in.Sandboxes)+len(n.Records.Sandboxes))
	for _, s := range p.in.Sandboxes {
		valid[s.ID] = true
	}
	for _, c := range p.in.Containers {
		valid[c.ID] = true
		// A container names its sandbox even when the sandbox is not
		// listed (containerd 2.x did not recover one made by 1.x): the
		// sandbox lives while its container is listed.
		if c.SandboxID != "" {
			valid[c.SandboxID] = true
		}
	}
	for _, m := range p.in.Unreadable {
		if m.ID != "" {
			valid[m.ID] = true
		}
		if m.SandboxID != "" {
			valid[m.SandboxID] = true
		}
	}
	if p.in.NRI != nil {
		for _, s := range p.in.NRI.Sandboxes {
			valid[s.ID] = true
		}
	}
	for id := range n.Records.Sandboxes {
		valid[id] = true
	}
	for id := range n.Records.Containers {
		valid[id] = true
	}
	for _, u := range n.Listing.Unreadable {
		if u.Owner != "" {
			valid[u.Owner] = true
		}
	}
	return valid
}
