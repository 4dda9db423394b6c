package podnet

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
)

func unreadableByPath(l Listing) map[string]Unreadable {
	m := map[string]Unreadable{}
	for _, u := range l.Unreadable {
		m[u.Path] = u
	}
	return m
}

// mustList lists n and inspects every namespace mount it names.
func mustList(t *testing.T, cfg Config, n node) Listing {
	t.Helper()
	return mustInspect(t, n.netnsDir, mustListNames(t, cfg, n.cacheDir, n.netnsDir))
}

func mustListNames(t *testing.T, cfg Config, cacheDir, netnsDir string) Listing {
	t.Helper()
	l, err := List(context.Background(), cfg, cacheDir, netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mustInspect adds to l what InspectNetns reads of all its NetnsPaths.
func mustInspect(t *testing.T, netnsDir string, l Listing) Listing {
	t.Helper()
	netns, unreadable, err := InspectNetns(context.Background(), netnsDir, l.NetnsPaths)
	if err != nil {
		t.Fatal(err)
	}
	l.Netns = netns
	l.Unreadable = append(l.Unreadable, unreadable...)
	return l
}

func TestListAttachments(t *testing.T) {
	idA, idB, idC := containerID(1), containerID(2), containerID(3)
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	// "pods-extra" starts like "pods-": its entries must not be taken
	// for entries of "pods".
	other := n.config(t, map[string]string{"20-other.conflist": n.netConfList("other", nil), "30-pods-extra.conflist": n.netConfList("pods-extra", nil)})
	before := time.Now().Add(-time.Second)
	n.add(t, cfg, "pods", idA, "/var/run/netns/cni-a")
	n.add(t, cfg, "pods", idB, "/var/run/netns/cni-b")
	n.add(t, other, "other", idC, "/var/run/netns/cni-c")
	n.add(t, other, "pods-extra", idC, "/var/run/netns/cni-c")
	results := filepath.Join(n.cacheDir, "results")
	entryA := filepath.Join(results, "pods-"+idA+"-eth0")
	valid, err := os.ReadFile(entryA)
	if err != nil {
		t.Fatal(err)
	}

	bad := map[string]struct {
		content string
		owner   string
		reason  string
	}{
		// libcni's GetCachedAttachments silently skips all of these.
		"pods-" + containerID(10) + "-eth0": {"{not json", containerID(10), "cannot decode"},
		"pods-" + containerID(11) + "-eth0": {`{"kind":"cniCacheV2","containerId":"x"}`, containerID(11), "not libcni's"},
		"pods-" + containerID(12) + "-eth0": {`{"kind":"cniCacheV1","containerId":"` + containerID(12) + `","networkName":"pods"}`, containerID(12), "no network or interface name"},
		"pods-" + containerID(13) + "-eth0": {`{"kind":"cniCacheV1","config":"%%%","ifName":"eth0","networkName":"pods"}`, containerID(13), "cannot decode"},
		// Owner from the name even when the interface is not the
		// network's own.
		"pods-" + containerID(14) + "-net7": {"", containerID(14), "cannot decode"},
		// A valid entry under another attachment's name: libcni's DEL
		// would never read or remove it.
		"pods-" + containerID(15) + "-eth0": {string(valid), containerID(15), "holds the attachment of " + idA},
		"pods-garbage":                      {"{}", "", "not libcni's"},
	}
	for name, b := range bad {
		writeFile(t, filepath.Join(results, name), b.content)
	}
	mkdirAll(t, filepath.Join(results, "pods-"+containerID(16)+"-eth0"))
	if err := os.Symlink(entryA, filepath.Join(results, "pods-"+containerID(17)+"-eth0")); err != nil {
		t.Fatal(err)
	}
	// Not of containerd's networks: ignored however broken.
	writeFile(t, filepath.Join(results, "weave-"+containerID(20)+"-eth0"), "{not json")
	writeFile(t, filepath.Join(results, "README"), "")

	l := mustList(t, cfg, n)

	t.Run("the entries of containerd's networks are listed with what libcni cached", func(t *testing.T) {
		if len(l.Attachments) != 2 {
			t.Fatalf("attachments = %+v, want those of %s and %s", l.Attachments, idA, idB)
		}
		a := l.Attachments[0]
		if a.Network != "pods" || a.ContainerID != idA || a.IfName != "eth0" || a.NetNS != "/var/run/netns/cni-a" || a.CacheFile != entryA {
			t.Errorf("attachment = %+v", a)
		}
		if !slices.Equal(a.CniArgs, podArgs(idA)) || a.Arg("K8S_POD_INFRA_CONTAINER_ID") != idA || a.Arg("nope") != "" {
			t.Errorf("CniArgs = %v, want %v", a.CniArgs, podArgs(idA))
		}
		caps, _ := json.Marshal(a.CapabilityArgs)
		want, _ := json.Marshal(podCaps())
		if string(caps) != string(want) {
			t.Errorf("CapabilityArgs = %s, want %s", caps, want)
		}
		if a.ModTime.Before(before) || a.ModTime.After(time.Now()) {
			t.Errorf("ModTime = %v", a.ModTime)
		}
		if l.Attachments[1].ContainerID != idB {
			t.Errorf("second attachment = %+v", l.Attachments[1])
		}
	})

	t.Run("entries of other networks are ignored, even those whose name starts like ours", func(t *testing.T) {
		for _, a := range l.Attachments {
			if a.ContainerID == idC {
				t.Errorf("listed %+v", a)
			}
		}
		for _, u := range l.Unreadable {
			if strings.Contains(u.Path, idC) || strings.Contains(u.Path, "weave-") || strings.HasSuffix(u.Path, "README") {
				t.Errorf("unreadable %+v", u)
			}
		}
	})

	t.Run("an entry libcni cannot use is unreadable with the owner its name gives", func(t *testing.T) {
		got := unreadableByPath(l)
		for name, b := range bad {
			u, ok := got[filepath.Join(results, name)]
			if !ok {
				t.Errorf("%s is not unreadable", name)
				continue
			}
			if u.Kind != KindAttachment || u.Owner != b.owner || !strings.Contains(u.Reason, b.reason) {
				t.Errorf("%s: %+v, want owner %q and a reason saying %q", name, u, b.owner, b.reason)
			}
		}
		for _, name := range []string{"pods-" + containerID(16) + "-eth0", "pods-" + containerID(17) + "-eth0"} {
			if u := got[filepath.Join(results, name)]; !strings.Contains(u.Reason, "not a regular file") || u.Owner == "" {
				t.Errorf("%s: %+v, want it unreadable as not a regular file, with its owner", name, u)
			}
		}
		if len(l.Unreadable) != len(bad)+2 {
			t.Errorf("%d unreadable, want %d: %+v", len(l.Unreadable), len(bad)+2, l.Unreadable)
		}
	})

	t.Run("owners are everyone an attachment, reservation or unreadable entry names", func(t *testing.T) {
		owners := l.Owners()
		for _, id := range []string{idA, idB, containerID(10), containerID(15), containerID(16)} {
			if !owners[id] {
				t.Errorf("%s is not an owner", id)
			}
		}
		if owners[idC] || owners[""] {
			t.Errorf("owners = %v", owners)
		}
		if got := l.ByNetns()["/var/run/netns/cni-b"]; len(got) != 1 || got[0].ContainerID != idB {
			t.Errorf("ByNetns = %v", l.ByNetns())
		}
	})
}

func TestListDirs(t *testing.T) {
	tests := []struct {
		rule    string
		setup   func(t *testing.T, n node)
		wantErr string // "" for an empty listing
	}{
		{"missing cache, host-local and netns dirs are an empty listing", func(t *testing.T, n node) {}, ""},
		{"a results path that is not a directory is an error naming it", func(t *testing.T, n node) {
			writeFile(t, filepath.Join(n.cacheDir, "results"), "")
		}, "results"},
		{"a host-local path that is not a directory is an error naming it", func(t *testing.T, n node) {
			writeFile(t, filepath.Join(n.dataDir, "pods"), "")
		}, filepath.Join("ipam", "pods")},
		{"a netns path that is not a directory is an error naming it", func(t *testing.T, n node) {
			writeFile(t, n.netnsDir, "")
		}, "netns"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			n := newNode(t)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			tt.setup(t, n)
			l, err := List(context.Background(), cfg, n.cacheDir, n.netnsDir)
			if tt.wantErr == "" {
				if err != nil || len(l.Attachments)+len(l.Reservations)+len(l.NetnsPaths)+len(l.Unreadable) != 0 {
					t.Fatalf("List = %+v, %v; want an empty listing", l, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
			}
			t.Logf("error as wanted: %v", err)
		})
	}

	t.Run("a cancelled context is an error", func(t *testing.T) {
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		n.add(t, cfg, "pods", containerID(1), "/var/run/netns/cni-a")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := List(ctx, cfg, n.cacheDir, n.netnsDir); err == nil || !strings.Contains(err.Error(), "context canceled") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestCacheDecodingAgreesWithLibcni checks that readCacheEntry accepts a
// file exactly when libcni's GetCachedAttachments does, with the same
// values: List's attachments are the ones libcni's GC would see.
func TestCacheDecodingAgreesWithLibcni(t *testing.T) {
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	id := containerID(1)
	n.add(t, cfg, "pods", id, "/var/run/netns/cni-a")
	results := filepath.Join(n.cacheDir, "results")
	name := "pods-" + id + "-eth0"
	valid, err := os.ReadFile(filepath.Join(results, name))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(valid, &fields); err != nil {
		t.Fatal(err)
	}
	with := func(key string, value any) string {
		m := map[string]any{}
		for k, v := range fields {
			m[k] = v
		}
		if value == nil {
			delete(m, key)
		} else {
			m[key] = value
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		rule    string
		content string
	}{
		{"libcni's own entry is read by both", string(valid)},
		{"an entry without netns, args and capabilities is read by both", with("netns", nil)},
		{"an entry without a result is read by both", with("result", nil)},
		{"an entry with a null result is read by both", with("result", json.RawMessage("null"))},
		{"an entry with unknown fields is read by both", with("extra", 1)},
		{"a config that is not base64 is refused by both", with("config", "%%%")},
		{"a result that is not an object is refused by both", with("result", []int{1})},
		{"a netns that is not a string is refused by both", with("netns", 5)},
		{"CNI_ARGS with extra elements are read by both (encoding/json drops them)", with("cniArgs", [][]string{{"a", "b", "c"}})},
		{"capability args that are not an object are refused by both", with("capabilityArgs", "x")},
		{"another kind is refused by both", with("kind", "cniCacheV2")},
		{"an entry without an interface is refused by both", with("ifName", nil)},
		{"an entry without a network name is refused by both", with("networkName", nil)},
		{"a result object after spaces is read by both", strings.Replace(with("result", nil), "{", `{"result":   {"cniVersion":"1.0.0"} ,`, 1)},
		{"a result array after spaces is refused by both", strings.Replace(with("result", nil), "{", `{"result":   [1] ,`, 1)},
		{"a result string is refused by both", with("result", "x")},
		{"an empty file is refused by both", ""},
		{"a JSON array is refused by both", "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			writeFile(t, filepath.Join(results, name), tt.content)
			lib, err := libcni.NewCNIConfigWithCacheDir(nil, n.cacheDir, nil).GetCachedAttachments("")
			if err != nil {
				t.Fatal(err)
			}
			ours, reason, err := readCacheEntry(filepath.Join(results, name), name)
			if err != nil {
				t.Fatal(err)
			}
			if (len(lib) == 1) != (reason == "") {
				t.Fatalf("libcni reads %d entries, readCacheEntry says %q", len(lib), reason)
			}
			if len(lib) == 0 {
				t.Logf("refused by both: %s", reason)
				return
			}
			a := lib[0]
			if a.ContainerID != ours.ContainerID || a.Network != ours.Network || a.IfName != ours.IfName || a.NetNS != ours.NetNS ||
				!reflect.DeepEqual(a.CniArgs, ours.CniArgs) || !reflect.DeepEqual(a.CapabilityArgs, ours.CapabilityArgs) {
				t.Fatalf("libcni reads %+v, readCacheEntry %+v", *a, ours)
			}
		})
	}
}

func TestListReservations(t *testing.T) {
	idA, idB := containerID(1), containerID(2)
	n := newNode(t)
	cfg := n.config(t, map[string]string{
		"10-pods.conflist": n.netConfList("pods", nil),
		// No host-local: its dir under the same dataDir is not read.
		"20-dhcp.conflist": `{"cniVersion":"1.0.0","name":"dhcp","plugins":[{"type":"bridge","ipam":{"type":"dhcp"}}]}`,
	})
	dir := filepath.Join(n.dataDir, "pods")
	files := map[string]string{
		"10.22.0.2":          idA + "\r\neth0",
		"10.22.0.3":          idB, // before plugins v0.7
		"10.22.0.4":          "  " + idA + "\r\nnet1\n",
		"fd00::5":            idB + "\r\neth0",
		"lock":               "",
		"last_reserved_ip.0": "10.22.0.4",
		"last_reserved_ip.1": "fd00::5",
		"not-an-ip":          idA + "\r\neth0",
		"10.022.0.9":         idA + "\r\neth0",
		"10.22.0.10":         idA + "\neth0",
		"10.22.0.11":         "",
		"10.22.0.12":         idA + "\r\neth0\r\nmore",
		"10.22.0.13":         strings.Repeat("x", maxReservationSize+1),
		"::ffff:10.22.0.14":  idA + "\r\neth0",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	mkdirAll(t, filepath.Join(dir, "10.22.0.20"))
	if err := os.Symlink(filepath.Join(dir, "10.22.0.2"), filepath.Join(dir, "10.22.0.21")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(n.dataDir, "dhcp", "10.1.0.2"), idA)
	writeFile(t, filepath.Join(n.dataDir, "other", "10.1.0.2"), idA)

	l := mustList(t, cfg, n)

	t.Run("reservation files are parsed in both formats", func(t *testing.T) {
		want := []Reservation{
			{Network: "pods", IP: "10.22.0.2", Owner: idA, IfName: "eth0"},
			{Network: "pods", IP: "10.22.0.3", Owner: idB},
			{Network: "pods", IP: "10.22.0.4", Owner: idA, IfName: "net1"},
			{Network: "pods", IP: "fd00::5", Owner: idB, IfName: "eth0"},
		}
		if len(l.Reservations) != len(want) {
			t.Fatalf("reservations = %+v, want %+v", l.Reservations, want)
		}
		for i, w := range want {
			g := l.Reservations[i]
			w.Path = filepath.Join(dir, w.IP)
			w.ModTime = g.ModTime
			if g != w || g.ModTime.IsZero() {
				t.Errorf("reservation %d = %+v, want %+v", i, g, w)
			}
		}
	})

	t.Run("odd names and contents are unreadable, keeping the owner the content names", func(t *testing.T) {
		want := map[string]struct{ owner, reason string }{
			"not-an-ip":         {idA, "not an IP address"},
			"10.022.0.9":        {idA, "not an IP address"},
			"::ffff:10.22.0.14": {idA, "not an IP address"},
			"10.22.0.10":        {idA, "not host-local's"},
			"10.22.0.11":        {"", "not host-local's"},
			"10.22.0.12":        {idA, "not host-local's"},
			"10.22.0.13":        {"", "more than"},
			"10.22.0.20":        {"", "not a regular file"},
			"10.22.0.21":        {"", "symlink"},
		}
		got := unreadableByPath(l)
		for name, w := range want {
			u, ok := got[filepath.Join(dir, name)]
			if !ok || u.Kind != KindReservation || u.Owner != w.owner || !strings.Contains(u.Reason, w.reason) {
				t.Errorf("%s: %+v, want unreadable with owner %q saying %q", name, u, w.owner, w.reason)
			}
		}
		if len(l.Unreadable) != len(want) {
			t.Errorf("%d unreadable, want %d (lock and last_reserved_ip are host-local's own, other dirs are not read): %+v", len(l.Unreadable), len(want), l.Unreadable)
		}
	})
}

func TestListNetns(t *testing.T) {
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	before := time.Now().Add(-time.Second) // nsfs times are in jiffies
	idle := newNetns(t, netnsPath(n.netnsDir, 1), false)
	thread := newNetns(t, netnsPath(n.netnsDir, 2), true)
	process := newNetns(t, netnsPath(n.netnsDir, 3), false)
	enterNetns(t, process.Path)
	// Left out: a file with containerd's name but no mount, a namespace
	// mount with another name, a plain bind mount with containerd's name,
	// and a namespace mount in a subdirectory.
	writeFile(t, netnsPath(n.netnsDir, 4), "")
	newNetns(t, filepath.Join(n.netnsDir, "test-ns"), false)
	writeFile(t, filepath.Join(n.root, "plain"), "")
	bindMount(t, filepath.Join(n.root, "plain"), netnsPath(n.netnsDir, 5))
	newNetns(t, netnsPath(filepath.Join(n.netnsDir, "sub"), 6), false)

	l := mustList(t, cfg, n)
	for i, ns := range l.Netns {
		if ns.ModTime.Before(before) || ns.ModTime.After(time.Now()) {
			t.Errorf("%s: ModTime %v, want the time it was mounted", ns.Path, ns.ModTime)
		}
		l.Netns[i].ModTime = time.Time{}
	}
	want := []Netns{
		{Path: idle.Path, Inode: idle.Inode},
		{Path: thread.Path, Inode: thread.Inode, InUse: true},
		{Path: process.Path, Inode: process.Inode, InUse: true},
	}
	if !reflect.DeepEqual(l.Netns, want) {
		t.Fatalf("netns = %+v, want %+v", l.Netns, want)
	}
	if len(l.Unreadable) != 0 {
		t.Errorf("unreadable = %+v", l.Unreadable)
	}

	t.Run("a namespace no thread is in any more is not in use", func(t *testing.T) {
		thread.leave()
		l := mustList(t, cfg, n)
		if len(l.Netns) != 3 || l.Netns[1].Path != thread.Path || l.Netns[1].InUse {
			t.Fatalf("netns = %+v, want %s not in use", l.Netns, thread.Path)
		}
	})

	t.Run("a symlinked netns dir lists the mounts under the configured path", func(t *testing.T) {
		link := filepath.Join(n.root, "var-run-netns")
		if err := os.Symlink(n.netnsDir, link); err != nil {
			t.Fatal(err)
		}
		l := mustInspect(t, link, mustListNames(t, cfg, n.cacheDir, link))
		if len(l.Netns) != 3 || l.Netns[0].Path != filepath.Join(link, filepath.Base(idle.Path)) || l.Netns[0].Inode != idle.Inode {
			t.Fatalf("netns = %+v", l.Netns)
		}
	})

	t.Run("stacked mounts are unreadable", func(t *testing.T) {
		stacked := newNetns(t, netnsPath(n.netnsDir, 7), false)
		bindMount(t, idle.Path, stacked.Path)
		l := mustList(t, cfg, n)
		got := unreadableByPath(l)
		if u := got[stacked.Path]; u.Kind != KindNetns || !strings.Contains(u.Reason, "stacked") {
			t.Fatalf("unreadable = %+v", l.Unreadable)
		}
	})
}
