package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cacheEntryJSON is a libcni cache entry (libcni's cachedInfo as it writes
// it) of id on network with ifName, made in netns cni-<netnsIndex>: every
// field has the same length whatever netnsIndex, so that two entries that
// differ only in it have the same size.
func cacheEntryJSON(t testing.TB, network, id, ifName string, netnsIndex int) string {
	t.Helper()
	netns := netnsPath("/var/run/netns", netnsIndex%1000)
	data, err := json.Marshal(map[string]any{
		"kind":           cniCacheKind,
		"containerId":    id,
		"config":         []byte(`{"cniVersion":"1.0.0","name":"` + network + `","plugins":[{"type":"bridge"}]}`),
		"ifName":         ifName,
		"networkName":    network,
		"netns":          netns,
		"cniArgs":        podArgs(id),
		"capabilityArgs": map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"a": "b"}},
		"result":         map[string]any{"cniVersion": "1.0.0", "ips": []map[string]any{{"address": "10.22.0.2/16"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// statOf is the file's identity as the Lister sees it.
func statOf(t testing.TB, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// rewriteInPlace writes content over the file at path from its start,
// keeping its inode (and its size when content is as long). When the
// kernel gave the rewrite the same mtime and ctime as the file had (a
// timestamp tick is coarse on kernels without multigrain timestamps), the
// mtime is moved on by a microsecond, which sets a new ctime too: the
// Lister's contract (fileID) is about files whose identity changed, and the
// test must not sleep. It reports whether it had to.
func rewriteInPlace(t testing.TB, path string, content []byte) (forced bool) {
	t.Helper()
	before := statOf(t, path)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(content, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	after := statOf(t, path)
	if after.Mtim != before.Mtim || after.Ctim != before.Ctim {
		return false
	}
	mtime := time.Unix(0, after.Mtim.Nano()).Add(time.Microsecond)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return true
}

// listerNode is the random test's node: libcni's results dir, two
// host-local dirs, and the configurations the test switches between.
type listerNode struct {
	root, cacheDir, results, netnsDir, tmp string
	hostLocal                              []string // ipam/pods, ipam/other
	cfgs                                   []Config
}

func newListerNode(t testing.TB) listerNode {
	root := t.TempDir()
	n := listerNode{root: root, cacheDir: filepath.Join(root, "cni"), netnsDir: filepath.Join(root, "netns"), tmp: filepath.Join(root, "tmp")}
	n.results = filepath.Join(n.cacheDir, "results")
	n.hostLocal = []string{filepath.Join(root, "ipam", "pods"), filepath.Join(root, "ipam", "other")}
	for _, dir := range append([]string{n.results, n.tmp}, n.hostLocal...) {
		mkdirAll(t, dir)
	}
	pods, other := n.hostLocal[0], n.hostLocal[1]
	net := func(name, ifName, dir string) Network { return Network{Name: name, IfName: ifName, HostLocalDir: dir} }
	n.cfgs = []Config{
		{Networks: []Network{net("pods", "eth0", pods), net("other", "eth1", other)}},
		// Another network's dir attributed to "pods", and "pods"' to
		// "other": the same files, listed for another network.
		{Networks: []Network{net("pods", "eth0", other), net("other", "eth1", pods)}},
		// A network whose name starts like "pods".
		{Networks: []Network{net("pods-extra", "eth1", ""), net("pods", "eth0", pods)}},
		// "pods" without host-local, "other" gone.
		{Networks: []Network{net("pods", "eth0", "")}},
		// No network of the cache entries at all.
		{Networks: []Network{net("weave", "eth0", other)}},
	}
	return n
}

// randomCacheEntry is content for the cache entry named name: libcni's own
// for that name most of the time, else another attachment's entry, or one
// libcni cannot read.
func randomCacheEntry(t testing.TB, rng *rand.Rand, name string) string {
	t.Helper()
	network, id, ifName := "pods", containerID(rng.IntN(4)), "eth0"
	// name is <network>-<id>-<ifName> with a 64-digit id.
	if i := strings.Index(name, "-"+strings.Repeat("0", 10)); i > 0 && len(name) > i+66 {
		network, id, ifName = name[:i], name[i+1:i+65], name[i+66:]
	}
	switch rng.IntN(10) {
	case 0:
		return cacheEntryJSON(t, network, containerID(rng.IntN(4)+10), ifName, rng.IntN(1000)) // another attachment's
	case 1:
		return "{not json"
	case 2:
		return `{"kind":"cniCacheV2","containerId":"` + id + `"}`
	case 3:
		return ""
	}
	return cacheEntryJSON(t, network, id, ifName, rng.IntN(1000))
}

// randomReservation is content for a reservation file: host-local's, in
// either format, or not.
func randomReservation(rng *rand.Rand) string {
	id := containerID(rng.IntN(4))
	switch rng.IntN(8) {
	case 0:
		return id
	case 1:
		return id + "\neth0"
	case 2:
		return ""
	case 3:
		return "garbage\r\neth0"
	}
	return id + "\r\neth" + strconv.Itoa(rng.IntN(3))
}

// TestListerListsWhatListLists checks, for many random sequences of changes
// to the cache entries and reservations (and to the configuration), that a
// Lister kept across the sequence lists after every step exactly what a
// fresh List does: every field, in the same order. The changes are the ones
// a remembered verdict could miss: files created and removed, rewritten in
// place with other content of the same size, replaced by a rename,
// truncated to garbage, touched (with a new time or the same one), turned
// into a directory or a symlink, a whole dir removed, and the configuration
// attributing a host-local dir to another network or dropping a network.
//
// Set PODNET_LISTER_SEED to replay a failing run.
func TestListerListsWhatListLists(t *testing.T) {
	const sequences, steps = 300, 40
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PODNET_LISTER_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("PODNET_LISTER_SEED=%d", seed)
	ctx := context.Background()
	var hits, reads, forced int
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(seed, uint64(seq)))
		n := newListerNode(t)
		var lister Lister
		cfg := n.cfgs[0]
		var history []string
		say := func(format string, args ...any) {
			history = append(history, fmt.Sprintf(format, args...))
		}
		// The names files get: cache entries of the networks (one that
		// is no network of any configuration), and reservations with
		// host-local's own files and a name that is not an IP.
		var cacheNames []string
		for _, network := range []string{"pods", "pods-extra", "other", "weave"} {
			for _, ifName := range []string{"eth0", "eth1"} {
				for id := range 3 {
					cacheNames = append(cacheNames, cacheFileName(network, containerID(id), ifName))
				}
			}
		}
		cacheNames = append(cacheNames, "pods-garbage")
		reservationNames := []string{"10.22.0.2", "10.22.0.3", "10.22.0.4", "fd00::5", "lock", "last_reserved_ip.0", "not-an-ip"}
		// randomPath is a path a file may get: in the results dir or a
		// host-local dir.
		randomPath := func() (path string, cacheEntry bool) {
			if rng.IntN(2) == 0 {
				return filepath.Join(n.results, cacheNames[rng.IntN(len(cacheNames))]), true
			}
			return filepath.Join(n.hostLocal[rng.IntN(2)], reservationNames[rng.IntN(len(reservationNames))]), false
		}
		randomContent := func(path string, cacheEntry bool) string {
			if cacheEntry {
				return randomCacheEntry(t, rng, filepath.Base(path))
			}
			return randomReservation(rng)
		}
		// existing returns a random regular file there is, "" if none.
		existing := func() (string, bool) {
			var files []string
			for _, dir := range append([]string{n.results}, n.hostLocal...) {
				entries, _ := os.ReadDir(dir)
				for _, e := range entries {
					if e.Type().IsRegular() {
						files = append(files, filepath.Join(dir, e.Name()))
					}
				}
			}
			if len(files) == 0 {
				return "", false
			}
			path := files[rng.IntN(len(files))]
			return path, filepath.Dir(path) == n.results
		}

		for step := range steps {
			switch op := rng.IntN(20); {
			case op < 6:
				path, cacheEntry := randomPath()
				content := randomContent(path, cacheEntry)
				if info, err := os.Lstat(path); err == nil && !info.Mode().IsRegular() {
					if err := os.RemoveAll(path); err != nil {
						t.Fatal(err)
					}
				}
				writeFile(t, path, content)
				say("write %s (%d bytes)", path, len(content))
			case op < 8:
				if path, ok := existing(); ok {
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
					say("remove %s", path)
				}
			case op < 11:
				// Other content of the same size, in place.
				path, isEntry := existing()
				if path == "" {
					break
				}
				old, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				content := []byte(nil)
				if isEntry && rng.IntN(2) == 0 {
					var e cacheEntry
					if json.Unmarshal(old, &e) == nil && e.NetworkName != "" && len(e.ContainerID) == 64 {
						c := cacheEntryJSON(t, e.NetworkName, e.ContainerID, e.IfName, rng.IntN(1000))
						if len(c) == len(old) && c != string(old) {
							content = []byte(c)
						}
					}
				}
				if content == nil && len(old) > 0 {
					const bytes = "0123456789abcdef\r\n{}\"x"
					content = append([]byte(nil), old...)
					i := rng.IntN(len(content))
					for content[i] == old[i] {
						content[i] = bytes[rng.IntN(len(bytes))]
					}
				}
				if content == nil {
					break
				}
				if rewriteInPlace(t, path, content) {
					forced++
				}
				say("rewrite %s in place: %q -> %q", path, old, content)
			case op < 13:
				// Replaced by a rename, sometimes with the same content.
				path, cacheEntry := randomPath()
				content := randomContent(path, cacheEntry)
				if old, err := os.ReadFile(path); err == nil && rng.IntN(3) == 0 {
					content = string(old)
				}
				tmp := filepath.Join(n.tmp, "new")
				writeFile(t, tmp, content)
				if info, err := os.Lstat(path); err == nil && info.IsDir() {
					if err := os.RemoveAll(path); err != nil {
						t.Fatal(err)
					}
				}
				mkdirAll(t, filepath.Dir(path))
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
				say("rename a file of %d bytes onto %s", len(content), path)
			case op < 14:
				// Truncated to garbage.
				if path, _ := existing(); path != "" {
					size := statOf(t, path).Size
					if size == 0 {
						break
					}
					to := rng.Int64N(size)
					if err := os.Truncate(path, to); err != nil {
						t.Fatal(err)
					}
					say("truncate %s from %d to %d bytes", path, size, to)
				}
			case op < 16:
				// Touched: a new time, or the one it has (which changes
				// its ctime only).
				if path, _ := existing(); path != "" {
					st := statOf(t, path)
					mtime := time.Unix(0, st.Mtim.Nano())
					if rng.IntN(2) == 0 {
						mtime = mtime.Add(time.Duration(rng.IntN(3)-1) * time.Second)
					}
					if err := os.Chtimes(path, mtime, mtime); err != nil {
						t.Fatal(err)
					}
					say("touch %s to %v", path, mtime)
				}
			case op < 17:
				// Not a regular file any more: a directory, or a symlink
				// to a file.
				path, _ := randomPath()
				if err := os.RemoveAll(path); err != nil {
					t.Fatal(err)
				}
				if target, _ := existing(); target != "" && rng.IntN(2) == 0 {
					mkdirAll(t, filepath.Dir(path))
					if err := os.Symlink(target, path); err != nil {
						t.Fatal(err)
					}
					say("symlink %s to %s", path, target)
				} else {
					mkdirAll(t, path)
					say("mkdir %s", path)
				}
			case op < 18:
				cfg = n.cfgs[rng.IntN(len(n.cfgs))]
				say("configuration %+v", cfg.Networks)
			case op < 19 && rng.IntN(4) == 0:
				// A whole dir gone, then back empty.
				dir := append([]string{n.results}, n.hostLocal...)[rng.IntN(3)]
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				say("remove dir %s", dir)
				if rng.IntN(2) == 0 {
					mkdirAll(t, dir)
					say("mkdir %s", dir)
				}
			default:
				say("nothing")
			}

			// Either may list first: nothing changes in between.
			var got, want Listing
			var gotErr, wantErr error
			if rng.IntN(2) == 0 {
				got, gotErr = lister.List(ctx, cfg, n.cacheDir, n.netnsDir)
				want, wantErr = List(ctx, cfg, n.cacheDir, n.netnsDir)
			} else {
				want, wantErr = List(ctx, cfg, n.cacheDir, n.netnsDir)
				got, gotErr = lister.List(ctx, cfg, n.cacheDir, n.netnsDir)
			}
			hits += lister.cache.hits
			reads += lister.cache.reads
			if !reflect.DeepEqual(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("PODNET_LISTER_SEED=%d sequence %d step %d: the Lister listed\n%+v (err %v)\nList listed\n%+v (err %v)\nafter:\n%s",
					seed, seq, step, got, gotErr, want, wantErr, strings.Join(history, "\n"))
			}
			// It remembers no more than the files it saw.
			remembered := len(lister.cache.attachments) + len(lister.cache.reservations)
			if seen := lister.cache.hits + lister.cache.reads; remembered > seen {
				t.Fatalf("PODNET_LISTER_SEED=%d sequence %d step %d: %d files remembered, %d seen", seed, seq, step, remembered, seen)
			}
		}
	}
	t.Logf("%d sequences of %d steps: %d files answered from memory, %d read; %d in-place rewrites needed their mtime moved", sequences, steps, hits, reads, forced)
	if hits == 0 || reads == 0 {
		t.Fatalf("%d files answered from memory, %d read: the test did not test the Lister", hits, reads)
	}
}

// TestListerReadsOnlyChangedFiles follows one Lister through a few passes:
// what it reads again, what it remembers, and that it lists what List does.
func TestListerReadsOnlyChangedFiles(t *testing.T) {
	n := newListerNode(t)
	cfg := n.cfgs[0]
	podsDir := n.hostLocal[0]
	ctx := context.Background()
	var lister Lister
	for i := range 3 {
		id := containerID(i)
		writeFile(t, filepath.Join(n.results, cacheFileName("pods", id, "eth0")), cacheEntryJSON(t, "pods", id, "eth0", i))
		writeFile(t, filepath.Join(podsDir, fmt.Sprintf("10.22.0.%d", i+2)), id+"\r\neth0")
	}
	writeFile(t, filepath.Join(podsDir, "lock"), "")
	// Unreadable entries are remembered too; one that cannot even be
	// opened (a symlink) is tried again each time.
	writeFile(t, filepath.Join(n.results, cacheFileName("pods", containerID(9), "eth0")), "{not json")
	if err := os.Symlink(filepath.Join(podsDir, "10.22.0.2"), filepath.Join(podsDir, "10.22.0.9")); err != nil {
		t.Fatal(err)
	}

	list := func(t *testing.T, cfg Config, reads, hits int) Listing {
		t.Helper()
		got, err := lister.List(ctx, cfg, n.cacheDir, n.netnsDir)
		if err != nil {
			t.Fatal(err)
		}
		want, err := List(ctx, cfg, n.cacheDir, n.netnsDir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("the Lister listed\n%+v\nList listed\n%+v", got, want)
		}
		if c := lister.cache; c.reads != reads || c.hits != hits {
			t.Fatalf("read %d files and answered %d from memory, want %d and %d", c.reads, c.hits, reads, hits)
		}
		return got
	}

	t.Run("the first listing reads every file", func(t *testing.T) {
		l := list(t, cfg, 8, 0)
		if len(l.Attachments) != 3 || len(l.Reservations) != 3 || len(l.Unreadable) != 2 {
			t.Fatalf("listing = %+v", l)
		}
	})
	t.Run("the next one reads none that did not change", func(t *testing.T) {
		list(t, cfg, 1, 7) // the symlink
	})
	t.Run("a file rewritten in place with the same size is read again", func(t *testing.T) {
		path := filepath.Join(n.results, cacheFileName("pods", containerID(1), "eth0"))
		content := cacheEntryJSON(t, "pods", containerID(1), "eth0", 500)
		if len(content) != int(statOf(t, path).Size) {
			t.Fatalf("the new content has %d bytes, the file %d", len(content), statOf(t, path).Size)
		}
		if rewriteInPlace(t, path, []byte(content)) {
			t.Log("the rewrite got the file's mtime and ctime: mtime moved on")
		}
		l := list(t, cfg, 2, 6)
		if l.Attachments[1].NetNS != netnsPath("/var/run/netns", 500) {
			t.Fatalf("attachment = %+v", l.Attachments[1])
		}
	})
	t.Run("files removed are forgotten", func(t *testing.T) {
		for _, path := range []string{filepath.Join(n.results, cacheFileName("pods", containerID(0), "eth0")), filepath.Join(podsDir, "10.22.0.2")} {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
		list(t, cfg, 1, 5) // the symlink, dangling now
		if got := len(lister.cache.attachments) + len(lister.cache.reservations); got != 5 {
			t.Fatalf("%d files remembered, want 5", got)
		}
	})
	t.Run("a host-local dir listed for another network is read again for it", func(t *testing.T) {
		other := Config{Networks: []Network{{Name: "other", IfName: "eth1", HostLocalDir: podsDir}}}
		l := list(t, other, 3, 0)
		if len(l.Attachments) != 0 || len(l.Reservations) != 2 || l.Reservations[0].Network != "other" {
			t.Fatalf("listing = %+v", l)
		}
		if got := len(lister.cache.attachments) + len(lister.cache.reservations); got != 2 {
			t.Fatalf("%d files remembered, want the 2 reservations", got)
		}
		// The cache entries were forgotten with "pods".
		list(t, cfg, 6, 0)
		list(t, cfg, 1, 5)
	})
}

// TestListerConcurrentListings checks that listings from several goroutines
// at once (the loop's pass and a report command's) are each what List
// returns.
func TestListerConcurrentListings(t *testing.T) {
	n := newListerNode(t)
	cfg := n.cfgs[0]
	for i := range 20 {
		id := containerID(i)
		writeFile(t, filepath.Join(n.results, cacheFileName("pods", id, "eth0")), cacheEntryJSON(t, "pods", id, "eth0", i))
		writeFile(t, filepath.Join(n.hostLocal[0], fmt.Sprintf("10.22.0.%d", i+2)), id+"\r\neth0")
	}
	ctx := context.Background()
	want, err := List(ctx, cfg, n.cacheDir, n.netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	var lister Lister
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for range 10 {
				got, err := lister.List(ctx, cfg, n.cacheDir, n.netnsDir)
				if err == nil && !reflect.DeepEqual(got, want) {
					err = errors.New("a listing differs from List's")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestListerErrors checks that a failed listing fails as List does and
// leaves the Lister usable.
func TestListerErrors(t *testing.T) {
	n := newListerNode(t)
	cfg := n.cfgs[0]
	id := containerID(1)
	writeFile(t, filepath.Join(n.results, cacheFileName("pods", id, "eth0")), cacheEntryJSON(t, "pods", id, "eth0", 1))
	var lister Lister
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lister.List(ctx, cfg, n.cacheDir, n.netnsDir); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if err := os.RemoveAll(n.hostLocal[0]); err != nil {
		t.Fatal(err)
	}
	writeFile(t, n.hostLocal[0], "")
	_, err := lister.List(context.Background(), cfg, n.cacheDir, n.netnsDir)
	if _, want := List(context.Background(), cfg, n.cacheDir, n.netnsDir); err == nil || err.Error() != want.Error() {
		t.Fatalf("err = %v, want List's %v", err, want)
	}
	if err := os.Remove(n.hostLocal[0]); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	l, err := lister.List(context.Background(), cfg, n.cacheDir, n.netnsDir)
	if err != nil || len(l.Attachments) != 1 {
		t.Fatalf("List = %+v, %v", l, err)
	}
}

// TestJoinPrefix checks that joinPrefix(dir)+name is filepath.Join(dir,
// name) for the names directory entries have.
func TestJoinPrefix(t *testing.T) {
	dirs := []string{"/var/lib/cni/results", "/var/lib/cni/results/", "/var//lib/./cni/../cni/results", "/", "//", ".", "./", "",
		"a", "a/..", "a/../..", "../x", "..", "results/", "/..", "/a/b/../../.."}
	names := []string{"pods-" + containerID(1) + "-eth0", "10.22.0.2", "fd00::5", "...", ".x", "x..", "lock", " "}
	for _, dir := range dirs {
		for _, name := range names {
			if got, want := joinPrefix(dir)+name, filepath.Join(dir, name); got != want {
				t.Errorf("joinPrefix(%q)+%q = %q, want filepath.Join's %q", dir, name, got, want)
			}
		}
	}
}
