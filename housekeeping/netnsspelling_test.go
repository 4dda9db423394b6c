package housekeeping

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
)

// TestNetnsDirSpeltAnotherWayIsContainerdsDir: README and
// example.toml say network.netns_dir "must be the dir containerd reports,
// however spelt", and sameNetnsDir accepts /run/netns for containerd's
// /var/run/netns. But the network side then uses the configured spelling
// (network.go: n.netnsDir = n.opts.NetnsDir), while attachments and
// containerd's records name namespaces in containerd's spelling: every
// leaked attachment is kept as "another runtime's attachment" and never
// reclaimed, every reservation of its network is held, and every namespace
// is a suspect (records read every pass).
func TestNetnsDirSpeltAnotherWayIsContainerdsDir(t *testing.T) {
	n := newNetNode(t)
	alias := filepath.Join(t.TempDir(), "run-netns")
	if err := os.Symlink(n.netnsDir, alias); err != nil {
		t.Fatal(err)
	}
	const leaked = "1eaced0000000000000000000000000000000000000000000000000000000000"
	n.attach(t, leaked, "10.9.0.2")
	for _, configured := range []string{"", alias} {
		loop, _ := n.loopNetnsDir(t, &fakeContainerd{netnsDir: n.netnsDir}, configured)
		r := loop.Pass(context.Background())
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		want := "cni-attachment/pods/" + leaked + "/eth0"
		if got := networkKeys(r); strings.Join(got, ",") != want {
			why := ""
			for _, k := range r.Plan.Kept {
				if strings.Contains(k.Object, "cni attachment") || strings.Contains(k.Object, "ip reservation") {
					why += "\n  kept " + k.Object + ": " + k.Reason
				}
			}
			t.Errorf("network.netns_dir = %q (containerd reports %s, the same dir): proposed %q, want %q%s", configured, n.netnsDir, got, want, why)
		}
	}
}

// TestARecordedNetnsIsNeverCalledUnnamedWhateverTheSpelling: the
// same netns_dir spelling defeats the check right before a netns removal.
// The pass lists namespaces under the configured spelling, and
// recheckNetnsUnused compares those paths as strings with the paths in
// containerd's sandbox records (containerd's spelling): a namespace a
// sandbox record names passes as "named by no record", leaving only "no
// thread is in it" between a sandbox being created (or one whose pause
// process died) and the removal of its namespace.
func TestARecordedNetnsIsNeverCalledUnnamedWhateverTheSpelling(t *testing.T) {
	n := newNetNode(t)
	alias := filepath.Join(t.TempDir(), "run-netns")
	if err := os.Symlink(n.netnsDir, alias); err != nil {
		t.Fatal(err)
	}
	const id = "5a0d000000000000000000000000000000000000000000000000000000000000"
	recorded := n.netnsOf(id) // as containerd records it
	if err := os.WriteFile(recorded, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctrd := &fakeContainerd{netnsDir: n.netnsDir, records: cri.Records{Sandboxes: map[string]cri.SandboxRecord{id: {Namespace: "k8s.io", NetNSPath: recorded}}}}
	loop, _ := n.loopNetnsDir(t, ctrd, alias)
	listing, err := loop.listNetwork(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(listing.NetnsPaths) != 1 {
		t.Fatalf("netns listed: %v", listing.NetnsPaths)
	}
	if err := loop.recheckNetnsUnused(context.Background(), listing.NetnsPaths[0]); err == nil {
		t.Errorf("netns %s (listed under network.netns_dir %s) passes the re-check \"no sandbox record names it\", but sandbox %s's record names it as %s",
			listing.NetnsPaths[0], alias, id[:13], recorded)
	}
}
