package housekeeping

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// fakeContainerd is containerd's side of the network: its records, and a
// creation it makes right after answering a records listing.
type fakeContainerd struct {
	mu       sync.Mutex
	netnsDir string
	records  cri.Records
	// afterRecords runs once, right after Records answered: a sandbox
	// created then writes its record, then its CNI ADD writes the cache
	// entry (containerd v2.4.2 RunPodSandbox's order).
	afterRecords func()
	// recordsRead counts the Records calls.
	recordsRead int
	// cniconfig is what CRI Status reports ("": none, the conf dir is
	// read); statusErr fails it; statusRead counts the calls.
	cniconfig  string
	statusErr  error
	statusRead int
	// recordsErr fails Records, existsErr RecordExists.
	recordsErr, existsErr error
	// pidUnseen: containerd runs in a PID namespace the plugin cannot see
	// into (PeerPID answers 0); else it is this test's process.
	pidUnseen bool
}

func (f *fakeContainerd) PeerPID(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pidUnseen {
		return 0, nil
	}
	return os.Getpid(), nil
}

func (f *fakeContainerd) NetworkStatus(context.Context) (cri.NetworkStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusRead++
	if f.statusErr != nil {
		return cri.NetworkStatus{}, f.statusErr
	}
	return cri.NetworkStatus{CNIConfig: f.cniconfig, NetnsDir: f.netnsDir}, nil
}

func (f *fakeContainerd) Records(context.Context) (cri.Records, error) {
	f.mu.Lock()
	f.recordsRead++
	recs := cri.Records{Sandboxes: map[string]cri.SandboxRecord{}, Containers: map[string]string{}, Unreadable: slices.Clone(f.records.Unreadable)}
	for id, s := range f.records.Sandboxes {
		recs.Sandboxes[id] = s
	}
	hook := f.afterRecords
	f.afterRecords = nil
	err := f.recordsErr
	f.mu.Unlock()
	if err != nil {
		return cri.Records{}, err
	}
	if hook != nil {
		defer hook()
	}
	return recs, nil
}

func (f *fakeContainerd) RecordExists(_ context.Context, id string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.existsErr != nil {
		return false, f.existsErr
	}
	_, ok := f.records.Sandboxes[id]
	return ok, nil
}

// netNode is a node's CNI state in a temp dir: one host-local network
// "pods", libcni's cache dir and containerd's netns dir.
type netNode struct {
	confDir, cacheDir, dataDir, netnsDir string
}

func newNetNode(t *testing.T) netNode {
	dir := t.TempDir()
	n := netNode{confDir: filepath.Join(dir, "net.d"), cacheDir: filepath.Join(dir, "cni"), dataDir: filepath.Join(dir, "networks"),
		netnsDir: filepath.Join(dir, "netns")}
	for _, d := range []string{n.confDir, filepath.Join(n.cacheDir, "results"), filepath.Join(n.dataDir, "pods"), n.netnsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","ipam":{"type":"host-local","dataDir":"` + n.dataDir + `","subnet":"10.9.0.0/24"}}]}`
	if err := os.WriteFile(filepath.Join(n.confDir, "10-pods.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// attach writes what a CNI ADD of sandbox id leaves: libcni's cache entry
// and host-local's reservation.
func (n netNode) attach(t *testing.T, id, ip string) {
	t.Helper()
	entry, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": id, "config": []byte(`{}`), "ifName": "eth0",
		"networkName": "pods", "netns": n.netnsOf(id), "result": map[string]any{"cniVersion": "1.0.0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.cacheDir, "results", "pods-"+id+"-eth0"), entry, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dataDir, "pods", ip), []byte(id+"\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cniconfig is what containerd's CRI Status reports of the node's network
// (go-cni's ConfigResult), and of a second network when more is set.
func (n netNode) cniconfig(t *testing.T, more bool) string {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join(n.confDir, "10-pods.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	type network struct {
		Config map[string]any
		IFName string
	}
	network1 := func(source, name string) network {
		var list struct{ Plugins []json.RawMessage }
		if err := json.Unmarshal([]byte(source), &list); err != nil {
			t.Fatal(err)
		}
		var plugins []map[string]string
		for _, p := range list.Plugins {
			plugins = append(plugins, map[string]string{"Source": string(p)})
		}
		return network{map[string]any{"Name": name, "CNIVersion": "1.0.0", "Plugins": plugins, "Source": source}, "eth0"}
	}
	nets := []network{network1(string(conf), "pods")}
	if more {
		other := `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge","ipam":{"type":"host-local","dataDir":"` + n.dataDir + `","subnet":"10.8.0.0/24"}}]}`
		nets = append(nets, network1(other, "other"))
		nets[1].IFName = "net1"
	}
	b, err := json.Marshal(map[string]any{"PluginDirs": []string{"/opt/cni/bin"}, "PluginConfDir": n.confDir, "PluginMaxConfNum": 1, "Prefix": "eth", "Networks": nets})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// netnsOf is the path of sandbox id's network namespace: containerd names
// it cni-<uuid>.
func (n netNode) netnsOf(id string) string {
	return filepath.Join(n.netnsDir, "cni-"+id[:8]+"-0000-4000-8000-000000000000")
}

// loop is a loop on the node, with containerd's side ctrd, whose CRI
// listing has a live kubelet pod u<i> for each sandbox ID in live
// (leak_grace an hour), and its log.
func (n netNode) loop(t *testing.T, ctrd *fakeContainerd, live ...string) (*Loop, *bytes.Buffer) {
	t.Helper()
	return n.loopNetnsDir(t, ctrd, "", live...)
}

// loopNetnsDir is loop with network.netns_dir set to netnsDir ("": the
// dir containerd reports).
func (n netNode) loopNetnsDir(t *testing.T, ctrd *fakeContainerd, netnsDir string, live ...string) (*Loop, *bytes.Buffer) {
	t.Helper()
	kubeletRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(kubeletRoot, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	snap := cri.Snapshot{TakenAt: now}
	for i, id := range live {
		uid := fmt.Sprintf("u%d", i+1)
		if err := os.MkdirAll(filepath.Join(kubeletRoot, "pods", uid), 0o755); err != nil {
			t.Fatal(err)
		}
		snap.Sandboxes = append(snap.Sandboxes, cri.Sandbox{ID: id, UID: uid, Ready: true, CreatedAt: now.Add(-time.Hour), Labels: kubeletLabels(uid)})
	}
	rt := &fakeRuntime{}
	rt.set(snap, nil)
	log, buf := testLogger()
	return New(podstate.New(0), rt, Options{Period: time.Hour, KubeletRoot: kubeletRoot,
		Policy:  gc.Policy{LeakGrace: time.Hour, Budget: gc.Budget{MaxPerPass: 10, MinPerPass: 10, MaxFraction: 1, MaxPerHour: 100}},
		Network: NewNetwork(ctrd, NetworkOptions{CacheDir: n.cacheDir, ConfDir: n.confDir, BinDir: "/nonexistent", NetnsDir: netnsDir})}, log), buf
}

// passProposing runs a pass of loop that must list and plan, and checks
// the network steps it proposed, due or not.
func passProposing(t *testing.T, loop *Loop, what string, wantKeys ...string) {
	t.Helper()
	r := loop.Pass(context.Background())
	if r.Err != nil || r.Untrusted != "" {
		t.Fatalf("%s: pass failed: %v %q", what, r.Err, r.Untrusted)
	}
	if got := networkKeys(r); strings.Join(got, ",") != strings.Join(wantKeys, ",") {
		t.Errorf("%s: proposed %q, want %q", what, got, wantKeys)
	}
}

// networkKeys are the network steps a pass proposed, due or not.
func networkKeys(r PassResult) []string {
	actions := append([]gc.Action(nil), r.Plan.Actions...)
	for _, d := range r.Plan.Deferred {
		actions = append(actions, d.Action)
	}
	var keys []string
	for _, a := range actions {
		if strings.HasPrefix(a.Key, "cni-attachment/") || strings.HasPrefix(a.Key, "ip-reservation/") {
			keys = append(keys, a.Key)
		}
	}
	return keys
}

// TestTheNetworkIsReadBeforeTheRecordsThatOwnIt: a sandbox whose creation
// starts right after containerd's records were listed has no record in
// that listing, but its CNI ADD may run before the pass ends. The pass reads
// the cache entries and reservations before the records, so it cannot see
// the attachment without its owner: nothing of it is proposed, not even
// for later.
func TestTheNetworkIsReadBeforeTheRecordsThatOwnIt(t *testing.T) {
	n := newNetNode(t)
	const leaked, created = "1eaced0000000000000000000000000000000000000000000000000000000000", "c0ffee0000000000000000000000000000000000000000000000000000000000"
	n.attach(t, leaked, "10.9.0.2")
	ctrd := &fakeContainerd{netnsDir: n.netnsDir}
	ctrd.afterRecords = func() {
		ctrd.mu.Lock()
		ctrd.records.Sandboxes = map[string]cri.SandboxRecord{created: {Namespace: "k8s.io"}}
		ctrd.mu.Unlock()
		n.attach(t, created, "10.9.0.3")
	}
	kubeletRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(kubeletRoot, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	log, _ := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Hour, KubeletRoot: kubeletRoot,
		Policy:  gc.Policy{LeakGrace: 0, Budget: gc.Budget{MaxPerPass: 10, MinPerPass: 10, MaxFraction: 1, MaxPerHour: 100}},
		Network: NewNetwork(ctrd, NetworkOptions{CacheDir: n.cacheDir, ConfDir: n.confDir, BinDir: "/nonexistent"})}, log)
	r := loop.Pass(context.Background())
	if got, want := networkKeys(r), []string{"cni-attachment/pods/" + leaked + "/eth0"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("first pass proposes %q, want only the leak %q: the sandbox created after the records were listed must not be seen without its record", got, want)
	}
	r = loop.Pass(context.Background())
	for _, k := range networkKeys(r) {
		if strings.Contains(k, created) {
			t.Fatalf("second pass proposes %s of a sandbox containerd has a record of", k)
		}
	}
}

// TestAPassReadsContainerdsRecordsOnlyForSuspects: on a node whose every
// attachment, reservation and namespace belongs to a listed sandbox, a pass
// reads neither containerd's records (the sandbox store's full records,
// every namespace) nor what the namespaces are (the mount table and every
// thread on the node): costs that grow with the node, not with its leaks.
// A leaked attachment, or a namespace no attachment of a listed sandbox
// names, makes the pass read the records.
func TestAPassReadsContainerdsRecordsOnlyForSuspects(t *testing.T) {
	n := newNetNode(t)
	const live1, live2, leaked = "11ae000000000000000000000000000000000000000000000000000000000000",
		"22ae000000000000000000000000000000000000000000000000000000000000", "1eaced0000000000000000000000000000000000000000000000000000000000"
	n.attach(t, live1, "10.9.0.2")
	n.attach(t, live2, "10.9.0.3")
	for _, id := range []string{live1, live2} {
		// Named as attach names them; plain files, as the names are all a
		// pass reads of a namespace nobody suspects.
		if err := os.WriteFile(n.netnsOf(id), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctrd := &fakeContainerd{netnsDir: n.netnsDir}
	loop, _ := n.loop(t, ctrd, live1, live2)
	pass := func(what string, wantRecords int, wantKeys ...string) {
		t.Helper()
		before := ctrd.recordsRead
		passProposing(t, loop, what, wantKeys...)
		if got := ctrd.recordsRead - before; got != wantRecords {
			t.Errorf("%s: containerd's records read %d times, want %d", what, got, wantRecords)
		}
	}
	pass("a node with no leak", 0)
	n.attach(t, leaked, "10.9.0.4")
	pass("a leaked attachment", 1, "cni-attachment/pods/"+leaked+"/eth0")
	if err := os.Remove(filepath.Join(n.cacheDir, "results", "pods-"+leaked+"-eth0")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n.dataDir, "pods", "10.9.0.4")); err != nil {
		t.Fatal(err)
	}
	pass("the leak gone", 0)
	if err := os.WriteFile(n.netnsOf("33ae0000"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pass("a namespace no listed sandbox's attachment names", 1)
}

// A node without CNI (host-network pods only) is nothing wrong: said once,
// at info. A CNI configuration the plugin cannot use is: said as an error.
func TestABrokenCNIConfigIsAnErrorNoCNIIsNot(t *testing.T) {
	for _, tc := range []struct {
		rule, conf  string // conf: the conf dir's one file ("": none)
		level, says string
	}{
		{"no network config at all: info", "", "info", "containerd has no CNI network"},
		{"a config that does not parse: error", `{"cniVersion":"1.0.0","name":`, "error", "network leaks are not looked for this pass"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			confDir := t.TempDir()
			if tc.conf != "" {
				if err := os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(tc.conf), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			obs := &partsObserver{}
			loop, buf := confDirLoop(t, confDir, obs)
			loop.Pass(context.Background())
			r := loop.Pass(context.Background())
			// once and report say a failure too (NOT LOOKED FOR; once exits 1).
			if notLooked := slices.ContainsFunc(r.NotLookedFor, func(s string) bool { return strings.HasPrefix(s, "network (") }); notLooked != (tc.level == "error") {
				t.Fatalf("NotLookedFor %q, want the network in it: %v", r.NotLookedFor, tc.level == "error")
			}
			var lines []string
			for _, l := range strings.Split(buf.String(), "\n") {
				if strings.Contains(l, "network leaks are not looked for") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "level="+tc.level) || !strings.Contains(lines[0], tc.says) {
				t.Fatalf("two passes logged %q; want one line at %s saying %q", lines, tc.level, tc.says)
			}
			// Only a failure degrades the network side; a node without CNI
			// has nothing wrong with it.
			if degraded, told := obs.told(PartNetwork); degraded != (tc.level == "error") || !told {
				t.Fatalf("the network part is degraded=%v (told: %v), want %v", degraded, told, tc.level == "error")
			}
		})
	}
}

// TestContainerdsCNIConfigIsReadAgainWhenDueOrSomethingIsSuspect: a pass
// with nothing suspect on the network uses containerd's CNI configuration
// as read up to StatusEvery before; a pass with a suspect asks containerd
// again before it plans, and when the configuration changed, leaves the
// network out of that plan (it was listed with the old one) and lists it
// with the new one next pass. A failed or a conf-dir configuration is
// never used again.
func TestContainerdsCNIConfigIsReadAgainWhenDueOrSomethingIsSuspect(t *testing.T) {
	n := newNetNode(t)
	const live, leaked = "11ae000000000000000000000000000000000000000000000000000000000000", "1eaced0000000000000000000000000000000000000000000000000000000000"
	n.attach(t, live, "10.9.0.2")
	ctrd := &fakeContainerd{netnsDir: n.netnsDir, cniconfig: n.cniconfig(t, false)}
	loop, buf := n.loop(t, ctrd, live)
	clock := now
	loop.now = func() time.Time { return clock }
	pass := func(what string, after time.Duration, wantReads int, wantKeys ...string) {
		t.Helper()
		clock = clock.Add(after)
		before := ctrd.statusRead
		passProposing(t, loop, what, wantKeys...)
		if got := ctrd.statusRead - before; got != wantReads {
			t.Errorf("%s: CRI Status asked %d times, want %d", what, got, wantReads)
		}
	}
	leak := "cni-attachment/pods/" + leaked + "/eth0"
	pass("the first pass", 0, 1)
	pass("nothing suspect, a minute later", time.Minute, 0)
	pass("nothing suspect, StatusEvery after the last read", StatusEvery-time.Minute, 1)
	n.attach(t, leaked, "10.9.0.4")
	pass("a suspect", time.Minute, 1, leak)
	pass("the suspect still there", time.Minute, 1, leak)

	ctrd.cniconfig = n.cniconfig(t, true)
	buf.Reset()
	pass("a suspect, and the configuration changed", time.Minute, 1)
	if !strings.Contains(buf.String(), "containerd's CNI configuration changed") {
		t.Errorf("the pass that left the network out did not say why: %s", buf.String())
	}
	pass("the next pass lists with the new configuration", time.Minute, 1, leak)

	ctrd.statusErr = errors.New("CRI Status on test: unavailable")
	pass("CRI Status fails", time.Minute, 1)
	ctrd.statusErr = nil
	if err := os.Remove(filepath.Join(n.cacheDir, "results", "pods-"+leaked+"-eth0")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n.dataDir, "pods", "10.9.0.4")); err != nil {
		t.Fatal(err)
	}
	pass("after a failure it is read again", time.Minute, 1)
	pass("and then used again", time.Minute, 0)

	ctrd.cniconfig = "" // containerd reports none: the conf dir is read every pass
	pass("a conf-dir configuration", StatusEvery, 1)
	pass("a conf-dir configuration is not used again", time.Minute, 1)
}

// TestANetnsDirThatIsNotContainerdsLeavesTheNetworkOut: network.netns_dir
// set to another dir than the one containerd reports would make
// containerd's records name no namespace listed: the network side is left
// out of the plan, and the reason names the key. The same dir by another
// path (a symlink, as /var/run to /run) is containerd's.
func TestANetnsDirThatIsNotContainerdsLeavesTheNetworkOut(t *testing.T) {
	reported := t.TempDir()
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.Symlink(reported, alias); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		configured string
		wantErr    bool
	}{{"", false}, {reported, false}, {alias, false}, {t.TempDir(), true}} {
		n := NewNetwork(&fakeContainerd{netnsDir: reported}, NetworkOptions{CacheDir: t.TempDir(), ConfDir: newNetNode(t).confDir,
			BinDir: "/nonexistent", NetnsDir: tc.configured})
		_, err := n.list(context.Background(), now)
		if (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), "network.netns_dir")) {
			t.Errorf("network.netns_dir %q, containerd's %s: %v; want an error naming the key: %v", tc.configured, reported, err, tc.wantErr)
		}
	}
}

// TestAConfirmThatCannotUseContainerdsNewCNIConfigLeavesTheNetworkOut: a
// pass that listed the network with containerd's earlier answer and found
// a suspect asks containerd again before it plans. When the answer changed
// to one the plugin cannot use (a configuration that does not parse, a
// netns dir that is not network.netns_dir), the listing was made with a
// configuration containerd no longer uses: no step is planned on it.
func TestAConfirmThatCannotUseContainerdsNewCNIConfigLeavesTheNetworkOut(t *testing.T) {
	const live, leaked = "11ae000000000000000000000000000000000000000000000000000000000000", "1eaced0000000000000000000000000000000000000000000000000000000000"
	for _, tc := range []struct {
		name   string
		change func(ctrd *fakeContainerd)
		says   string
	}{
		{"a CNI configuration that does not parse", func(ctrd *fakeContainerd) { ctrd.cniconfig = "{" }, "parsing the CNI configuration"},
		{"a netns dir that is not network.netns_dir", func(ctrd *fakeContainerd) { ctrd.netnsDir = t.TempDir() }, "network.netns_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNetNode(t)
			n.attach(t, live, "10.9.0.2")
			n.attach(t, leaked, "10.9.0.4")
			ctrd := &fakeContainerd{netnsDir: n.netnsDir, cniconfig: n.cniconfig(t, false)}
			loop, buf := n.loopNetnsDir(t, ctrd, n.netnsDir, live)
			clock := now
			loop.now = func() time.Time { return clock }
			passProposing(t, loop, "the first pass", "cni-attachment/pods/"+leaked+"/eth0")
			ctrd.mu.Lock()
			tc.change(ctrd)
			ctrd.mu.Unlock()
			clock = clock.Add(time.Minute)
			buf.Reset()
			passProposing(t, loop, "a pass whose confirm gets the new answer")
			if !strings.Contains(buf.String(), "network leaks are not looked for this pass") || !strings.Contains(buf.String(), tc.says) {
				t.Errorf("the pass that left the network out did not say why (%q): %s", tc.says, buf.String())
			}
		})
	}
}

// TestContainerdsRecordsThatCannotBeReadLeaveTheNetworkOut: containerd's
// records are a source of owners (its sandbox store in every namespace, its
// container store) and the only source of the namespaces sandboxes use. A
// pass with a suspect that cannot read them plans no network step (README:
// "it looks for nothing that pass"): an error is not an empty store.
func TestContainerdsRecordsThatCannotBeReadLeaveTheNetworkOut(t *testing.T) {
	n := newNetNode(t)
	const made = "ade0000000000000000000000000000000000000000000000000000000000000"
	n.attach(t, made, "10.9.0.2") // a sandbox only containerd's sandbox store knows (being made)
	ctrd := &fakeContainerd{netnsDir: n.netnsDir, records: cri.Records{Sandboxes: map[string]cri.SandboxRecord{made: {Namespace: "k8s.io"}}},
		recordsErr: errors.New("containerd sandbox store List: unavailable")}
	loop, buf := n.loop(t, ctrd)
	passProposing(t, loop, "a pass that cannot read containerd's records")
	if ctrd.recordsRead != 1 {
		t.Fatalf("containerd's records read %d times, want 1: the test proves nothing", ctrd.recordsRead)
	}
	if !strings.Contains(buf.String(), "network leaks are not looked for this pass") || !strings.Contains(buf.String(), "unavailable") {
		t.Errorf("the pass that left the network out did not say why: %s", buf.String())
	}
}

// TestANetworkStepThatNamesNoOwnerFailsItsRecheck: the check right before
// a CNI DEL or a release asks every source whether it knows the step's
// owner; a step that names none cannot be asked about, and is not unowned.
func TestANetworkStepThatNamesNoOwnerFailsItsRecheck(t *testing.T) {
	n := newNetNode(t)
	loop, _ := n.loop(t, &fakeContainerd{netnsDir: n.netnsDir})
	if err := loop.recheckUnowned(context.Background(), ""); err == nil {
		t.Fatal("a step naming no owner passed the check that no source knows its owner")
	}
}

// TestAConfDirConfigurationIsReadAgainEveryPass: when containerd reports
// no CNI configuration, the conf dir says what the networks are, and it
// may change while containerd's answer does not. A network dropped from
// the conf dir is no longer one the plugin may touch: its leak is not
// proposed on the configuration read before.
func TestAConfDirConfigurationIsReadAgainEveryPass(t *testing.T) {
	n := newNetNode(t)
	const leaked = "1eaced0000000000000000000000000000000000000000000000000000000000"
	n.attach(t, leaked, "10.9.0.4")
	ctrd := &fakeContainerd{netnsDir: n.netnsDir} // no cniconfig: the conf dir is read
	loop, _ := n.loop(t, ctrd)
	passProposing(t, loop, "the conf dir names network pods", "cni-attachment/pods/"+leaked+"/eth0")
	conf := `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge","ipam":{"type":"host-local","dataDir":"` + n.dataDir + `","subnet":"10.8.0.0/24"}}]}`
	if err := os.WriteFile(filepath.Join(n.confDir, "10-pods.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	passProposing(t, loop, "the conf dir names network other only")
}

// TestANetworkThatSetsDisableGCIsNotLookedAt: CNI 1.1's disableGC asks
// runtimes not to garbage-collect a network (its configuration may be
// shared with another runtime, whose attachments look stale here): none of
// its attachments or reservations is proposed, not even for later.
func TestANetworkThatSetsDisableGCIsNotLookedAt(t *testing.T) {
	n := newNetNode(t)
	conf := `{"cniVersion":"1.1.0","name":"pods","disableGC":true,"plugins":[{"type":"bridge","ipam":{"type":"host-local","dataDir":"` + n.dataDir + `","subnet":"10.9.0.0/24"}}]}`
	if err := os.WriteFile(filepath.Join(n.confDir, "10-pods.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	const leaked, lost = "1eaced0000000000000000000000000000000000000000000000000000000000", "10570000000000000000000000000000000000000000000000000000000000ff"
	n.attach(t, leaked, "10.9.0.4")
	if err := os.WriteFile(filepath.Join(n.dataDir, "pods", "10.9.0.5"), []byte(lost+"\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cniconfig := range []string{"", n.cniconfig(t, false)} {
		loop, _ := n.loop(t, &fakeContainerd{netnsDir: n.netnsDir, cniconfig: cniconfig})
		passProposing(t, loop, fmt.Sprintf("containerd's cniconfig %.40q", cniconfig))
	}
}

// TestWhatASuspectNamespaceIsReachesThePlan: a pass reads what the
// namespace of a leaked attachment is (podnet.InspectNetns: whether it is
// mounted, whether a thread is in it) and plans on that answer. A thread
// in it keeps the attachment; a namespace whose threads cannot be told
// keeps it too ("cannot tell" is not "unused"); a failure to read the
// namespaces leaves the network out of the pass. Only an answer that
// nothing is in it lets the DEL and the removal be planned.
func TestWhatASuspectNamespaceIsReachesThePlan(t *testing.T) {
	const leaked = "1eaced0000000000000000000000000000000000000000000000000000000000"
	for _, tc := range []struct {
		name    string
		inspect func(path string) ([]podnet.Netns, []podnet.Unreadable, error)
		want    func(path string) []string
	}{
		{"nothing is in it: the DEL and the removal are planned", func(path string) ([]podnet.Netns, []podnet.Unreadable, error) {
			return []podnet.Netns{{Path: path, Inode: 4026532001}}, nil, nil
		}, func(path string) []string {
			return []string{"cni-attachment/pods/" + leaked + "/eth0", "netns/" + path}
		}},
		{"a thread is in it: the attachment stays", func(path string) ([]podnet.Netns, []podnet.Unreadable, error) {
			return []podnet.Netns{{Path: path, Inode: 4026532001, InUse: true}}, nil, nil
		}, nil},
		{"whether a thread is in it cannot be told: the attachment stays", func(path string) ([]podnet.Netns, []podnet.Unreadable, error) {
			return nil, []podnet.Unreadable{{Kind: podnet.KindNetns, Path: path, Reason: "this process is not in the node's PID namespace"}}, nil
		}, nil},
		{"the namespaces cannot be read: the network is left out", func(string) ([]podnet.Netns, []podnet.Unreadable, error) {
			return nil, nil, errors.New("reading the mount table: permission denied")
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNetNode(t)
			n.attach(t, leaked, "10.9.0.4")
			path := n.netnsOf(leaked)
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			loop, _ := n.loop(t, &fakeContainerd{netnsDir: n.netnsDir})
			var asked []string
			loop.opts.Network.inspect = func(_ context.Context, _ string, paths []string) ([]podnet.Netns, []podnet.Unreadable, error) {
				asked = append(asked, paths...)
				return tc.inspect(path)
			}
			r := loop.Pass(context.Background())
			if r.Err != nil || r.Untrusted != "" {
				t.Fatalf("pass failed: %v %q", r.Err, r.Untrusted)
			}
			var got []string
			for _, a := range append(slices.Clone(r.Plan.Actions), deferred(r.Plan)...) {
				switch a.Kind {
				case gc.RemoveCNIAttachment, gc.ReleaseIPReservation, gc.RemoveNetns:
					got = append(got, a.Key)
				}
			}
			var want []string
			if tc.want != nil {
				want = tc.want(path)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("proposed %q, want %q", got, want)
			}
			if !slices.Equal(asked, []string{path}) {
				t.Errorf("the pass asked what %q are, want only the leaked attachment's namespace %s", asked, path)
			}
		})
	}
}

// deferred are the actions a plan holds for later.
func deferred(r gc.Result) []gc.Action {
	var out []gc.Action
	for _, d := range r.Deferred {
		out = append(out, d.Action)
	}
	return out
}

// TestAnAttachmentInANetnsThisProcessMayNotSeeIsKeptAndSaid: where the
// plugin may not see what containerd mounts (containerd's process out of
// sight and the netns dir's mount private here), a namespace not mounted
// here is not known to be gone: the unowned attachment that ran in it is
// kept, and the log says why once. In containerd's mount namespace it is
// proposed, and nothing is said.
func TestAnAttachmentInANetnsThisProcessMayNotSeeIsKeptAndSaid(t *testing.T) {
	const leaked = "1eaced0000000000000000000000000000000000000000000000000000000000"
	const said = "unowned CNI attachments whose netns is not mounted here are kept"
	for _, tc := range []struct {
		name      string
		pidUnseen bool
		// reservationOnly: the leak is a reservation, no attachment:
		// nothing is kept for the netns, and nothing said.
		reservationOnly bool
		want            []string
		said            int
	}{
		{"containerd out of sight, the dir private here: kept", true, false, nil, 1},
		{"in containerd's mount namespace: proposed", false, false, []string{"cni-attachment/pods/" + leaked + "/eth0"}, 0},
		{"containerd out of sight, only a reservation unowned: released, nothing said", true, true, []string{"ip-reservation/pods/10.9.0.4/" + leaked}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNetNode(t)
			if err := unix.Mount(n.netnsDir, n.netnsDir, "none", unix.MS_BIND, ""); err != nil {
				t.Skipf("mounting not permitted: %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(n.netnsDir, unix.MNT_DETACH) })
			if err := unix.Mount("none", n.netnsDir, "", unix.MS_PRIVATE, ""); err != nil {
				t.Fatal(err)
			}
			n.attach(t, leaked, "10.9.0.4")
			if tc.reservationOnly {
				if err := os.Remove(filepath.Join(n.cacheDir, "results", "pods-"+leaked+"-eth0")); err != nil {
					t.Fatal(err)
				}
			}
			// containerd's mount point, with nothing mounted on it here.
			if err := os.WriteFile(n.netnsOf(leaked), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			loop, logs := n.loop(t, &fakeContainerd{netnsDir: n.netnsDir, pidUnseen: tc.pidUnseen})
			for range 2 {
				passProposing(t, loop, tc.name, tc.want...)
			}
			if got := strings.Count(logs.String(), said); got != tc.said {
				t.Errorf("%q said %d times in two passes, want %d:\n%s", said, got, tc.said, logs)
			}
			if tc.said > 0 && !strings.Contains(logs.String(), "HostToContainer") {
				t.Errorf("the log does not say what to change:\n%s", logs)
			}
		})
	}
}

// TestANetworkWhoseIPAMIsNotInItsConflistIsSaidOnce: flannel's conflist
// (k3s' default) has no "ipam" section (flannel hands host-local its
// delegate's configuration of its own), so its reservations without a
// cache entry are never listed. That is said, at info, once while it
// lasts, naming the network and what is not done; a network whose
// conflist has host-local, and containerd's loopback network, are not
// named.
func TestANetworkWhoseIPAMIsNotInItsConflistIsSaidOnce(t *testing.T) {
	for _, tc := range []struct {
		rule, conf string
		said       bool
	}{
		{"flannel's network is said", `{"name":"cbr0","cniVersion":"1.0.0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"forceAddress":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`, true},
		{"a network with host-local is not", `{"name":"cbr0","cniVersion":"1.0.0","plugins":[{"type":"bridge","ipam":{"type":"host-local","subnet":"10.9.0.0/24"}}]}`, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			confDir := t.TempDir()
			if err := os.WriteFile(filepath.Join(confDir, "10-flannel.conflist"), []byte(tc.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			loop, buf := confDirLoop(t, confDir, nil)
			for range 3 {
				r := loop.Pass(context.Background())
				if slices.ContainsFunc(r.NotLookedFor, func(s string) bool { return strings.HasPrefix(s, "network (") }) {
					t.Fatalf("the network was not looked for: %q", r.NotLookedFor)
				}
			}
			var lines []string
			for _, l := range strings.Split(buf.String(), "\n") {
				if strings.Contains(l, "reservations without a cache entry are not looked at") {
					lines = append(lines, l)
				}
			}
			if !tc.said {
				if len(lines) > 0 {
					t.Fatalf("three passes logged %q; want nothing", lines)
				}
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "level=info") || !strings.Contains(lines[0], "network=cbr0") ||
				!strings.Contains(lines[0], "its IPAM is not a host-local ipam section of the conflist (a meta plugin such as flannel delegates it)") {
				t.Fatalf("three passes logged %q; want one line at info naming cbr0 and what is not done", lines)
			}
			if strings.Contains(buf.String(), "network=cni-loopback") {
				t.Fatalf("containerd's loopback network was named:\n%s", buf.String())
			}
		})
	}
}

// confDirLoop is a loop, with the network side on containerd's CNI
// configuration in confDir, on an empty node; it logs to the buffer.
func confDirLoop(t *testing.T, confDir string, obs Observer) (*Loop, *bytes.Buffer) {
	t.Helper()
	kubeletRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(kubeletRoot, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	rt.set(cri.Snapshot{TakenAt: now}, nil)
	log, buf := testLogger()
	loop := New(podstate.New(0), rt, Options{Period: time.Hour, KubeletRoot: kubeletRoot, Observer: obs,
		Policy:  gc.Policy{Budget: gc.Budget{MaxPerPass: 10, MinPerPass: 10, MaxFraction: 1, MaxPerHour: 100}},
		Network: NewNetwork(&fakeContainerd{netnsDir: t.TempDir()}, NetworkOptions{CacheDir: t.TempDir(), ConfDir: confDir, BinDir: "/nonexistent"})}, log)
	return loop, buf
}
