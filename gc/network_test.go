package gc

import (
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

const netnsDir = "/run/containerd/netns"

func attachment(owner, netns string) podnet.Attachment {
	return podnet.Attachment{Network: "pods", ContainerID: owner, IfName: "eth0", NetNS: netns, CacheFile: "/var/lib/cni/results/pods-" + owner + "-eth0"}
}

func reservation(owner, ip string) podnet.Reservation {
	return podnet.Reservation{Network: "pods", IP: ip, Path: "/var/lib/cni/networks/pods/" + ip, Owner: owner, IfName: "eth0"}
}

// cniName is a name as containerd gives a netns (cni-<uuid>), made from s.
func cniName(s string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return fmt.Sprintf("cni-%08x-0000-4000-8000-%012x", h.Sum32(), len(s))
}

func netns(name string, inUse bool) podnet.Netns {
	return podnet.Netns{Path: netnsDir + "/" + name, Inode: 4026532000, InUse: inUse}
}

func records() cri.Records {
	return cri.Records{Sandboxes: map[string]cri.SandboxRecord{}, Containers: map[string]string{}}
}

// networkInput is a node where pod "a" is listed with sandbox s1, whose
// attachment, reservation and netns are live.
func networkInput() Input {
	in := Input{Now: now, Policy: policy(), Oracle: present("a"), Sandboxes: []cri.Sandbox{sb("s1", "a", true, time.Hour)}}
	recs := records()
	recs.Sandboxes["s1"] = cri.SandboxRecord{Namespace: "k8s.io", NetNSPath: netnsDir + "/" + cniName("live")}
	in.Network = &NetworkInput{Records: recs, NetnsDir: netnsDir, Listing: podnet.Listing{
		Attachments:  []podnet.Attachment{attachment("s1", netnsDir+"/"+cniName("live"))},
		Reservations: []podnet.Reservation{reservation("s1", "10.0.0.2")},
		Netns:        []podnet.Netns{netns(cniName("live"), true)},
	}}
	return in
}

// networkSteps describes the plan's network steps, due or not.
func networkSteps(r Result) []string {
	var out []string
	for _, a := range append(append([]Action(nil), r.Actions...), deferredActions(r)...) {
		switch a.Kind {
		case RemoveCNIAttachment, ReleaseIPReservation, RemoveNetns:
			out = append(out, string(a.Kind)+" "+strings.TrimPrefix(a.Path, netnsDir+"/"))
		}
	}
	sort.Strings(out)
	return out
}

func TestNetworkRules(t *testing.T) {
	gone := attachment("gone1", netnsDir+"/"+cniName("leak"))
	for _, tc := range []struct {
		name string
		edit func(in *Input)
		want []string
	}{
		{name: "a listed sandbox's attachment, reservation and netns are live", edit: func(*Input) {}},
		{name: "an attachment no source knows is deleted through the chain", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, gone)
		}, want: []string{"remove-cni-attachment " + gone.CacheFile}},
		{name: "an attachment that ran in a netns outside containerd's is another runtime's", edit: func(in *Input) {
			// A cni-<uuid> name, as containerd gives, but in another dir
			// (a second containerd, or podman's /run/netns).
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", "/run/netns/"+cniName("other")))
		}},
		{name: "an attachment that ran in a netns of a dir sharing the netns dir's prefix is another runtime's", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", netnsDir+"-other/"+cniName("other")))
		}},
		{name: "an attachment that ran in a netns nested under the netns dir is another runtime's", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", netnsDir+"/sub/"+cniName("other")))
		}},
		{name: "an attachment that ran in a netns of /proc is another runtime's", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", "/proc/4242/ns/net"))
		}},
		{name: "an attachment whose netns path is not clean is another runtime's", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", netnsDir+"/../netns/"+cniName("other")))
		}},
		{name: "an attachment that names no netns is not known to be containerd's", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", ""))
		}},
		{name: "no reservation of a network another runtime uses is released by hand", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("crio1", "/var/run/netns/abc"))
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gone2", "10.0.0.3"))
		}},
		{name: "an attachment of a NotReady sandbox is live", edit: func(in *Input) {
			in.Sandboxes = append(in.Sandboxes, sb("s2", "b", false, time.Hour))
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("s2", ""))
		}},
		{name: "an attachment of a sandbox only containerd's store has (being made) is live", edit: func(in *Input) {
			in.Network.Records.Sandboxes["s3"] = cri.SandboxRecord{Namespace: "k8s.io"}
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("s3", ""))
		}},
		// containerd 2.x lists the containers of a sandbox made by 1.x it
		// failed to recover, and not the sandbox: its network is theirs.
		{name: "the attachment, reservation and netns of a sandbox only a listed container names are live", edit: func(in *Input) {
			in.Containers = append(in.Containers, ctr("c9", "s9", "b", "app", cri.ContainerRunning, time.Hour))
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("s9", netnsDir+"/"+cniName("s9")))
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("s9", "10.0.0.9"))
			in.Network.Listing.NetnsPaths = append(in.Network.Listing.NetnsPaths, netnsDir+"/"+cniName("s9"))
		}},
		{name: "the reservation of a sandbox only an exited listed container names is live", edit: func(in *Input) {
			in.Containers = append(in.Containers, ctr("c9", "s9", "b", "app", cri.ContainerExited, time.Hour))
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("s9", "10.0.0.9"))
		}},
		{name: "an attachment of another namespace's container (nerdctl) is live", edit: func(in *Input) {
			in.Network.Records.Containers["n1"] = "default"
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("n1", ""))
		}},
		{name: "an attachment of a sandbox NRI reported is live", edit: func(in *Input) {
			in.NRI = &NRIView{Sandboxes: []podstate.NRISandbox{{ID: "s1", PodUID: "a", ReportedAt: now.Add(-time.Hour), Synced: true, Session: 1},
				{ID: "s4", PodUID: "d", ReportedAt: now.Add(-time.Second), Session: 1}}, Session: 1, Confirmed: true}
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("s4", ""))
		}},
		{name: "an attachment of an unreadable listed entry is live", edit: func(in *Input) {
			in.Unreadable = []cri.Malformed{{Kind: "sandbox", ID: "s5", Reason: "no metadata"}}
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("s5", ""))
		}},
		{name: "an unreadable listed entry naming no ID holds every network step", edit: func(in *Input) {
			in.Unreadable = []cri.Malformed{{Kind: "sandbox", Reason: "no ID"}}
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, gone)
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gone2", "10.0.0.3"))
			in.Network.Listing.Netns = append(in.Network.Listing.Netns, netns(cniName("leak"), false))
		}},
		{name: "a reservation whose owner has a cache entry goes with its DEL, not by hand", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, gone)
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gone1", "10.0.0.3"))
		}, want: []string{"remove-cni-attachment " + gone.CacheFile}},
		{name: "a cache entry on another network does not release a reservation", edit: func(in *Input) {
			lo := attachment("gone2", netnsDir+"/"+cniName("leak"))
			lo.Network, lo.IfName, lo.CacheFile = "cni-loopback", "lo", "/var/lib/cni/results/cni-loopback-gone2-lo"
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, lo)
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gone2", "10.0.0.3"))
		}, want: []string{"remove-cni-attachment /var/lib/cni/results/cni-loopback-gone2-lo", "release-ip /var/lib/cni/networks/pods/10.0.0.3"}},
		{name: "a reservation with no owner and no cache entry is released", edit: func(in *Input) {
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gone2", "10.0.0.3"))
		}, want: []string{"release-ip /var/lib/cni/networks/pods/10.0.0.3"}},
		{name: "a garbled cache entry may be any reservation's attachment", edit: func(in *Input) {
			in.Network.Listing.Unreadable = []podnet.Unreadable{{Kind: "cni-attachment", Path: "/var/lib/cni/results/garbled", Reason: "not JSON"}}
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gone2", "10.0.0.3"))
		}},
		{name: "an unreadable cache entry keeps its owner's reservation", edit: func(in *Input) {
			in.Network.Listing.Unreadable = []podnet.Unreadable{{Kind: "cni-attachment", Path: "/var/lib/cni/results/pods-gone2-eth0", Owner: "gone2", Reason: "not JSON"}}
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gone2", "10.0.0.3"))
		}},
		{name: "a netns nothing names and no process is in is removed after its attachment's DEL", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, gone)
			in.Network.Listing.Netns = append(in.Network.Listing.Netns, netns(cniName("leak"), false))
		}, want: []string{"remove-cni-attachment " + gone.CacheFile, "remove-netns " + cniName("leak")}},
		{name: "an unowned attachment that ran in a netns a sandbox record names stays", edit: func(in *Input) {
			// A stray cache entry of another ID naming s1's namespace, no
			// thread in it (s1's pause exited): its DEL would undo s1's
			// interface.
			in.Network.Listing.Netns[0].InUse = false
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", netnsDir+"/"+cniName("live")))
		}},
		{name: "an unowned attachment that ran in a live attachment's netns stays", edit: func(in *Input) {
			in.Network.Records.Sandboxes["s1"] = cri.SandboxRecord{Namespace: "k8s.io"}
			in.Network.Listing.Netns[0].InUse = false
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", netnsDir+"/"+cniName("live")))
		}},
		{name: "an unowned attachment whose netns is not mounted here stays where containerd's mounts may not be seen", edit: func(in *Input) {
			in.Network.NetnsUnseen = "this process may not see the namespaces containerd mounts"
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, gone)
		}},
		{name: "an unowned attachment whose netns is mounted here, unused, is deleted where containerd's mounts may not be seen", edit: func(in *Input) {
			in.Network.NetnsUnseen = "this process may not see the namespaces containerd mounts"
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, gone)
			in.Network.Listing.Netns = append(in.Network.Listing.Netns, netns(cniName("leak"), false))
		}, want: []string{"remove-cni-attachment " + gone.CacheFile, "remove-netns " + cniName("leak")}},
		{name: "a netns a process is in stays", edit: func(in *Input) {
			in.Network.Listing.Netns = append(in.Network.Listing.Netns, netns(cniName("busy"), true))
		}},
		{name: "a netns a sandbox record names stays, process or not", edit: func(in *Input) {
			in.Network.Listing.Netns[0].InUse = false
		}},
		{name: "a netns a live attachment names stays", edit: func(in *Input) {
			in.Network.Records.Sandboxes["s1"] = cri.SandboxRecord{Namespace: "k8s.io"}
			in.Network.Listing.Netns[0].InUse = false
		}},
		{name: "no netns is removed while a sandbox record cannot be read", edit: func(in *Input) {
			in.Network.Records.Unreadable = []string{"sandbox s9: bad metadata"}
			in.Network.Listing.Netns = append(in.Network.Listing.Netns, netns(cniName("leak"), false))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := networkInput()
			tc.edit(&in)
			r := Plan(in)
			if r.Untrusted != "" || r.NotReady != "" {
				t.Fatalf("no plan: %q %q", r.Untrusted, r.NotReady)
			}
			same(t, "network steps", networkSteps(r), tc.want)
			checkNetwork(t, in, r)
		})
	}
}

func TestNetworkStepsWaitForLeakGraceAndTheBudget(t *testing.T) {
	in := networkInput()
	in.Policy.LeakGrace = 5 * time.Minute
	for _, id := range []string{"g1", "g2", "g3", "g4", "g5"} {
		in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment(id, netnsDir+"/"+cniName(id)))
	}
	r := Plan(in)
	if len(r.Actions) != 0 || len(r.Deferred) != 5 || r.Leaks[LeakCNIAttachment] != 5 {
		t.Fatalf("first sight: %d due, %d deferred, leaks %v; want 0 due, 5 waiting for grace", len(r.Actions), len(r.Deferred), r.Leaks)
	}
	in.EligibleSince = r.EligibleSince
	in.Now = now.Add(5 * time.Minute)
	r = Plan(in)
	// budget: max(1, min(3, ⌊1 × 1 Ready⌋)) = 1 unit a pass.
	if len(r.Actions) != 1 || r.Actions[0].Kind != RemoveCNIAttachment {
		t.Fatalf("after grace: due %v, want one CNI DEL (the budget's one a pass)", due(r))
	}
	for _, d := range r.Deferred {
		if d.Budget != ClassNetwork || !d.Throttled {
			t.Fatalf("%s deferred for %q, want throttled by the network budget", d.Key, d.Why())
		}
	}
}

func TestALeakedSandboxIsOneUnitOfTheNetworkBudget(t *testing.T) {
	in := networkInput()
	for _, id := range []string{"g1", "g2"} {
		ns := netnsDir + "/" + cniName(id)
		lo := attachment(id, ns)
		lo.Network, lo.IfName, lo.CacheFile = "cni-loopback", "lo", "/var/lib/cni/results/cni-loopback-"+id+"-lo"
		in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment(id, ns), lo)
		in.Network.Listing.Netns = append(in.Network.Listing.Netns, netns(cniName(id), false))
	}
	r := Plan(in) // grace 0, budget one unit a pass (1 Ready sandbox)
	same(t, "due", networkSteps(Result{Actions: r.Actions}), []string{
		"remove-cni-attachment /var/lib/cni/results/cni-loopback-g1-lo", "remove-cni-attachment /var/lib/cni/results/pods-g1-eth0", "remove-netns " + cniName("g1")})
	for _, d := range r.Deferred {
		if d.ContainerID != "g2" || !d.Throttled {
			t.Fatalf("deferred %s (%s), want only g2's steps, throttled", d.Key, d.Why())
		}
	}
}

// suspectsOnly is in as a pass reads it (housekeeping's networkInput): the
// netns dir's names, containerd's records only when NetworkSuspects finds
// a suspect without them, and the namespaces' details only for the
// suspects with them.
func suspectsOnly(in Input) (lazy Input, readRecords bool, inspected int) {
	full := in.Network
	n := &NetworkInput{Listing: full.Listing, NetnsDir: full.NetnsDir,
		Records: cri.Records{Sandboxes: map[string]cri.SandboxRecord{}, Containers: map[string]string{}}}
	n.Listing.NetnsPaths = nil
	for _, ns := range full.Listing.Netns {
		n.Listing.NetnsPaths = append(n.Listing.NetnsPaths, ns.Path)
	}
	n.Listing.Netns = nil
	lazy = in
	lazy.Network = n
	owners, netns := NetworkSuspects(lazy)
	if owners || len(netns) > 0 {
		n.Records, readRecords = full.Records, true
		_, netns = NetworkSuspects(lazy)
	}
	if owners {
		n.NetnsUnseen = full.NetnsUnseen
	}
	for _, ns := range full.Listing.Netns {
		if slices.Contains(netns, ns.Path) {
			n.Listing.Netns = append(n.Listing.Netns, ns)
		}
	}
	return lazy, readRecords, len(n.Listing.Netns)
}

// TestReadingOnlyForSuspectsChangesNoPlan: a pass reads containerd's
// records and the namespaces' details only for what NetworkSuspects
// names; the plan must be the one made from everything read.
func TestReadingOnlyForSuspectsChangesNoPlan(t *testing.T) {
	skippedRecords, skippedNetns := 0, 0
	for seed := int64(1); seed <= 3000; seed++ {
		in := randomInput(seed, 1+int(seed%40))
		if in.Network == nil {
			continue
		}
		if seed%2 == 0 {
			// Half the nodes without the objects of owners only records
			// or nobody know: records are then often not needed.
			known := func(owner string) bool {
				return !strings.HasPrefix(owner, "gone") && !strings.HasPrefix(owner, "unlisted") &&
					!strings.HasPrefix(owner, "record") && !strings.HasPrefix(owner, "nerdctl")
			}
			n := *in.Network
			n.Listing.Attachments = slices.DeleteFunc(slices.Clone(n.Listing.Attachments), func(a podnet.Attachment) bool { return !known(a.ContainerID) })
			n.Listing.Reservations = slices.DeleteFunc(slices.Clone(n.Listing.Reservations), func(r podnet.Reservation) bool {
				// Some keep the reservations of owners only records know.
				onlyRecorded := strings.HasPrefix(r.Owner, "record") || strings.HasPrefix(r.Owner, "nerdctl")
				return !known(r.Owner) && !(onlyRecorded && seed%8 == 4)
			})
			if seed%4 == 0 {
				// And a quarter without namespaces no attachment names.
				named := map[string]bool{}
				for _, a := range n.Listing.Attachments {
					named[a.NetNS] = true
				}
				n.Listing.Netns = slices.DeleteFunc(slices.Clone(n.Listing.Netns), func(ns podnet.Netns) bool { return !named[ns.Path] })
			}
			in.Network = &n
		}
		lazy, readRecords, inspected := suspectsOnly(in)
		if !readRecords {
			skippedRecords++
		}
		skippedNetns += len(in.Network.Listing.Netns) - inspected
		if got, want := Plan(lazy), Plan(in); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: reading only for suspects changed the plan:\n got steps %v, kept %v\nwant steps %v, kept %v",
				seed, networkSteps(got), got.Kept, networkSteps(want), want.Kept)
		}
	}
	t.Logf("records not read on %d nodes, %d namespaces not inspected", skippedRecords, skippedNetns)
	if skippedNetns == 0 || skippedRecords == 0 {
		t.Fatal("records were always read, or every namespace inspected: the test does not exercise the suspects")
	}
}

// TestAHealthyNodesNetworkNeedsNoRecordsAndNoNamespaceDetails: a node
// whose every attachment and reservation belongs to a listed sandbox, and
// every namespace to one of those attachments, has no suspect; one leak
// makes its owner (or its namespace) a suspect.
func TestAHealthyNodesNetworkNeedsNoRecordsAndNoNamespaceDetails(t *testing.T) {
	for _, tc := range []struct {
		name        string
		edit        func(in *Input)
		owners      bool
		netns       []string
		recordsRead bool
	}{
		{name: "a listed sandbox's attachment, reservation and netns explain themselves", edit: func(*Input) {}},
		{name: "an attachment no listing knows makes its owner a suspect", edit: func(in *Input) {
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", netnsDir+"/"+cniName("leak")))
		}, owners: true},
		{name: "a reservation no listing knows makes its owner a suspect", edit: func(in *Input) {
			in.Network.Listing.Reservations = append(in.Network.Listing.Reservations, reservation("gone2", "10.0.0.3"))
		}, owners: true},
		{name: "a netns no attachment of a known owner names is a suspect", edit: func(in *Input) {
			in.Network.Listing.NetnsPaths = append(in.Network.Listing.NetnsPaths, netnsDir+"/"+cniName("leak"))
		}, netns: []string{netnsDir + "/" + cniName("leak")}},
		{name: "a netns only a sandbox record names is explained once records are read", edit: func(in *Input) {
			in.Network.Listing.Attachments = nil
			in.Network.Listing.Reservations = nil
		}, netns: []string{netnsDir + "/" + cniName("live")}, recordsRead: true},
		{name: "an attachment of an unreadable listed entry is no suspect", edit: func(in *Input) {
			in.Unreadable = []cri.Malformed{{Kind: "sandbox", ID: "s5", Reason: "no metadata"}}
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("s5", netnsDir+"/"+cniName("s5")))
			in.Network.Listing.NetnsPaths = append(in.Network.Listing.NetnsPaths, netnsDir+"/"+cniName("s5"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := networkInput()
			in.Network.Listing.NetnsPaths = []string{netnsDir + "/" + cniName("live")}
			tc.edit(&in)
			records := in.Network.Records
			in.Network.Records = cri.Records{}
			owners, netns := NetworkSuspects(in)
			if owners != tc.owners || !slices.Equal(netns, tc.netns) {
				t.Fatalf("without records: suspects = %v, %v; want %v, %v", owners, netns, tc.owners, tc.netns)
			}
			if tc.recordsRead {
				in.Network.Records = records
				if _, netns := NetworkSuspects(in); len(netns) != 0 {
					t.Fatalf("with records: netns suspects %v, want none", netns)
				}
			}
		})
	}
}

// TestAnAttachmentWhoseNetnsNoOneCanTellIsUnusedStays: an attachment is
// deleted only when no thread on the node is in the namespace it ran in.
// When that cannot be told (podnet.InspectNetns returns the namespace as
// unreadable: this process does not see every thread, a thread's namespace
// cannot be read, the mount changed while read), the attachment is kept
// with that reason, as the namespace's own removal is; nothing but this
// check looks at the threads before the DEL.
func TestAnAttachmentWhoseNetnsNoOneCanTellIsUnusedStays(t *testing.T) {
	for _, reason := range []string{
		"cannot tell whether a thread is in it: this process is not in the node's PID namespace",
		"the mount table says net:[4026532001], a stat says otherwise (nsfs true, inode 4026532002): changed while being read",
	} {
		t.Run(reason, func(t *testing.T) {
			in := networkInput()
			ns := netnsDir + "/" + cniName("leak")
			in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", ns))
			in.Network.Listing.Unreadable = []podnet.Unreadable{{Kind: podnet.KindNetns, Path: ns, Reason: reason}}
			r := Plan(in)
			same(t, "network steps", networkSteps(r), nil)
			if got := keptReason(r, "cni attachment eth0 of gone1"); !strings.Contains(got, reason) {
				t.Fatalf("attachment kept for %q, want the namespace's reason %q", got, reason)
			}
		})
	}
}

// TestANetnsRemovalDependsOnTheDELOfEveryUnownedAttachmentThatRanInIt: a
// leaked sandbox's namespace has two cache entries, its network's and
// containerd's loopback. Its removal depends on both DELs, so that the
// executor skips it while one fails (README: "after the DEL of every
// unowned attachment that ran in it"): a DEL run after the removal gets no
// namespace, and its plugins cannot clean what is inside.
func TestANetnsRemovalDependsOnTheDELOfEveryUnownedAttachmentThatRanInIt(t *testing.T) {
	in := networkInput()
	leak := netnsDir + "/" + cniName("leak")
	lo := attachment("gone1", leak)
	lo.Network, lo.IfName, lo.CacheFile = "cni-loopback", "lo", "/var/lib/cni/results/cni-loopback-gone1-lo"
	in.Network.Listing.Attachments = append(in.Network.Listing.Attachments, attachment("gone1", leak), lo,
		attachment("gone2", netnsDir+"/"+cniName("other")))
	in.Network.Listing.Netns = append(in.Network.Listing.Netns, netns(cniName("leak"), false))
	r := Plan(in)
	var dels []string
	var removal *Action
	for _, a := range append(append([]Action(nil), r.Actions...), deferredActions(r)...) {
		switch {
		case a.Kind == RemoveCNIAttachment && a.Attachment.NetNS == leak:
			dels = append(dels, a.Key)
		case a.Kind == RemoveNetns && a.Path == leak:
			removal = &a
		}
	}
	if removal == nil || len(dels) != 2 {
		t.Fatalf("planned %v: want the removal of %s and the DELs of its two attachments", networkSteps(r), leak)
	}
	got := slices.Clone(removal.DependsOn)
	sort.Strings(got)
	same(t, "the removal of "+leak+" depends on", got, dels)
}

// TestANetworkObjectYoungerThanTheMinimumAgeIsKept: with no grace at all
// (once --leak-grace 0s), a netns, a reservation or a cache entry made less
// than network.min_age ago is kept: containerd makes a netns before its
// sandbox record names it, and a runtime this process cannot see reserves
// an IP before a cache entry names the owner. Old enough, each is due; a
// time ahead of the clock is no age; a netns an attachment too young to
// tell ran in stays with it.
func TestANetworkObjectYoungerThanTheMinimumAgeIsKept(t *testing.T) {
	young, old, ahead := now.Add(-10*time.Second), now.Add(-2*time.Minute), now.Add(time.Hour)
	// An unused netns of g, and g's reservation with no cache entry, made at.
	netnsMadeAt := func(at time.Time) func(l *podnet.Listing) {
		return func(l *podnet.Listing) {
			ns := netns(cniName("g"), false)
			ns.ModTime = at
			l.Netns = append(l.Netns, ns)
		}
	}
	// g's attachment, made at, and the unused netns it ran in, made at nsAt.
	attachedAt := func(at, nsAt time.Time) func(l *podnet.Listing) {
		return func(l *podnet.Listing) {
			a := attachment("g", netnsDir+"/"+cniName("g"))
			a.ModTime = at
			netnsMadeAt(nsAt)(l)
			l.Attachments = append(l.Attachments, a)
		}
	}
	reservedAt := func(at time.Time) func(l *podnet.Listing) {
		return func(l *podnet.Listing) {
			r := reservation("g", "10.0.0.9")
			r.ModTime = at
			l.Reservations = append(l.Reservations, r)
		}
	}
	for _, tc := range []struct {
		rule string
		add  func(l *podnet.Listing)
		want []string // network steps proposed
		kept string   // a kept reason's words, when none is
	}{
		{"a young netns is kept", netnsMadeAt(young), nil, "made 10s ago, less than network.min_age (2m0s)"},
		{"an old netns is removed", netnsMadeAt(old), []string{"remove-netns " + cniName("g")}, ""},
		{"a netns dated ahead of the clock is kept", netnsMadeAt(ahead), nil, "dated 1h0m0s ahead of the clock"},
		{"a young reservation is kept", reservedAt(young), nil, "made 10s ago"},
		{"an old reservation is released", reservedAt(old), []string{"release-ip /var/lib/cni/networks/pods/10.0.0.9"}, ""},
		{"a young attachment and the old netns it ran in are kept", attachedAt(young, old), nil, "its DEL must come first"},
		{"an old attachment and its netns are reclaimed", attachedAt(old, old),
			[]string{"remove-cni-attachment /var/lib/cni/results/pods-g-eth0", "remove-netns " + cniName("g")}, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			in := networkInput()
			in.Policy.LeakGrace, in.Policy.NetworkMinAge = 0, 2*time.Minute
			tc.add(&in.Network.Listing)
			r := Plan(in)
			if got := networkSteps(r); !slices.Equal(got, tc.want) {
				t.Fatalf("network steps %q, want %q (kept %+v)", got, tc.want, r.Kept)
			}
			if tc.kept != "" && !slices.ContainsFunc(r.Kept, func(k Kept) bool { return strings.Contains(k.Reason, tc.kept) }) {
				t.Fatalf("no kept object says %q: %+v", tc.kept, r.Kept)
			}
		})
	}
}

// TestAnAttachmentWhoseAddressANewerOneHasIsKept: an unowned attachment
// whose cached result has an address that another sandbox's newer
// attachment has (its IPAM freed the address and gave it to that pod, or
// the pod gets the same fixed IP in each sandbox) is kept with its netns:
// its DEL would pass the address on as prevResult, and the firewall plugin
// would remove the new pod's rules. Of two stale attachments sharing an
// address, the newer is reclaimed first; loopback addresses are no one's.
func TestAnAttachmentWhoseAddressANewerOneHasIsKept(t *testing.T) {
	at := func(owner string, age time.Duration, ips ...string) podnet.Attachment {
		a := attachment(owner, netnsDir+"/"+cniName(owner))
		a.ModTime, a.IPs = now.Add(-age), ips
		return a
	}
	for _, tc := range []struct {
		rule        string
		attachments []podnet.Attachment
		want        []string // network steps proposed
	}{
		{"a live pod's newer attachment has the stale one's address: kept", []podnet.Attachment{
			at("g", time.Hour, "10.0.0.7"), at("s1", time.Minute*10, "10.0.0.7")}, nil},
		{"a live pod's older attachment has it: kept", []podnet.Attachment{
			at("g", time.Minute*10, "10.0.0.7"), at("s1", time.Hour, "10.0.0.7")}, nil},
		{"two stale ones share an address: the newer first", []podnet.Attachment{
			at("g1", time.Hour, "10.0.0.7"), at("g2", time.Minute*10, "10.0.0.7")},
			[]string{"remove-cni-attachment /var/lib/cni/results/pods-g2-eth0", "remove-netns " + cniName("g2")}},
		{"both have loopback addresses only: reclaimed", []podnet.Attachment{
			at("g", time.Hour, "127.0.0.1", "::1"), at("s1", time.Minute*10, "127.0.0.1", "::1")},
			[]string{"remove-cni-attachment /var/lib/cni/results/pods-g-eth0", "remove-netns " + cniName("g")}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			in := networkInput()
			in.Policy.LeakGrace = 0
			in.Network.Listing.Attachments = tc.attachments
			in.Network.Listing.Reservations = nil
			in.Network.Listing.Netns = nil
			for _, a := range tc.attachments {
				if a.ContainerID != "s1" {
					in.Network.Listing.Netns = append(in.Network.Listing.Netns, netns(cniName(a.ContainerID), false))
				}
			}
			in.Network.Records.Sandboxes["s1"] = cri.SandboxRecord{Namespace: "k8s.io", NetNSPath: netnsDir + "/" + cniName("s1")}
			r := Plan(in)
			if got := networkSteps(r); !slices.Equal(got, tc.want) {
				t.Fatalf("network steps %q, want %q (kept %+v)", got, tc.want, r.Kept)
			}
			if tc.want == nil && !slices.ContainsFunc(r.Kept, func(k Kept) bool { return strings.Contains(k.Reason, "act on that pod's address") }) {
				t.Fatalf("no kept object says why: %+v", r.Kept)
			}
		})
	}
}
